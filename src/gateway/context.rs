//! What one request carries through its stages, read again when it ends: its ids, key, route,
//! the checks' state, what the upstream said, and the receipt drafted from all of it.

use std::sync::Arc;
use std::time::Instant;

use crate::checks::pipeline::{self, Cached, Exchange};
use crate::error::ErrorKind;
use crate::providers::ProviderName;
use crate::providers::Usage;
use crate::receipts::writer::InFlight;
use crate::receipts::{self, CacheSide, Check, CheckName, Draft, Kind};
use crate::snapshot::{KeyEntry, Snapshot};

use super::aside::Aside;
use super::relay::UpstreamOutcome;
use super::span::RequestSpan;
use crate::providers::Route;

/// Everything one request learns on its way through, read again in `logging`.
pub struct Ctx {
    /// When the request reached the gateway: its metrics duration and its receipt's latency.
    pub(super) started: Instant,
    pub(super) snap: Arc<Snapshot>,
    pub(super) request_id: String,
    pub(super) receipt_id: String,
    pub(super) end_user: Option<String>,
    /// This request's span when tracing is on. Before `_in_flight`: a span never finished still
    /// ends (on drop) before shutdown can see the request as done and flush the exporter.
    pub(super) trace: Option<RequestSpan>,
    /// Keeps the receipt writer from finishing its shutdown drain while this request runs.
    pub(super) _in_flight: InFlight,
    pub(super) route: Option<Route>,
    /// A route that is not a model call (then `route` is None).
    pub(super) aside: Option<Aside>,
    pub(super) key: Option<Arc<KeyEntry>>,
    pub(super) provider: Option<ProviderName>,
    pub(super) model: String,
    pub(super) status: u16,
    pub(super) error: Option<ErrorKind>,
    pub(super) usage: Option<Usage>,
    pub(super) cost_usd: f64,
    pub(super) upstream: UpstreamOutcome,
    /// The request as the checks saw it (None until it was parsed and routed).
    pub(super) exchange: Option<Exchange>,
    /// A check changed the request body (redaction).
    pub(super) body_changed: bool,
    /// The checks' per-request state and results.
    pub(super) cx: pipeline::Ctx,
    /// The answer as the client got it, for the cache.
    pub(super) captured: Option<Cached>,
    /// The tool server of a `tools/call` (then the receipt is a `tool_call`).
    pub(super) tool: Option<Arc<crate::tool_servers::ToolServer>>,
    /// The tool answered with `isError: true` (a result, not a JSON-RPC error).
    pub(super) tool_error: bool,
    /// A routed request's upstream attempts (empty, unallocated, without a route).
    pub(super) attempts: Vec<receipts::Attempt>,
}

impl Ctx {
    /// Identifiers every gateway answer carries; the receipt id only when a receipt will exist.
    pub(super) fn answer_headers(&self) -> Vec<(&'static str, String)> {
        let mut h = Vec::with_capacity(2 + self.cx.headers.len());
        h.push(("x-request-id", self.request_id.clone()));
        if self.key.is_some() {
            h.push(("x-tollgate-receipt-id", self.receipt_id.clone()));
        }
        h.extend(self.cx.headers.iter().cloned());
        if !self.attempts.is_empty() {
            h.push(("x-tollgate-attempts", self.attempts.len().to_string()));
        }
        h
    }

    /// The receipt of this request; None when no valid key was presented. Runs last: it moves
    /// the request's ids, model and checks into the receipt instead of copying them.
    pub(super) fn take_draft(&mut self) -> Option<Draft> {
        let key = self.key.clone()?;
        let actor = match &self.end_user {
            Some(u) => format!("{}/{u}", key.id).into(),
            None => key.id.clone(),
        };
        let status = self.upstream.status();
        let usage = self.usage.unwrap_or_default();
        let mut checks = std::mem::take(&mut self.cx.checks);
        let cache_result = checks.iter().find(|c| c.name == CheckName::Cache).and_then(|c| c.result.known());
        checks.push(Check::new(CheckName::Upstream, status.check_result()));
        checks.append(&mut self.cx.response_checks);
        let saved = self.cx.saved.unwrap_or_default();
        Some(Draft {
            tenant_id: key.tenant.clone(),
            receipt_id: std::mem::take(&mut self.receipt_id),
            request_id: std::mem::take(&mut self.request_id),
            actor,
            provider: match &self.tool {
                Some(server) => server.name.clone().into(),
                None => self.provider.map(|p| p.as_str()).unwrap_or_default().into(),
            },
            model: std::mem::take(&mut self.model),
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            cost_usd: self.cost_usd,
            checks,
            upstream_status: status,
            ts: receipts::receipt_ts(chrono::Utc::now()),
            kind: match self.tool {
                Some(_) => Kind::ToolCall,
                None => self.exchange.as_ref().map(|e| e.kind).unwrap_or(Kind::ModelCall),
            },
            pack_version: if self.snap.config.compliance.stamp_pack_version {
                self.snap.packs(key.tenant_id()).version.clone()
            } else {
                String::new()
            },
            cache: CacheSide {
                result: cache_result.map_or("", |r| r.as_str()),
                saved_tokens: saved.tokens,
                saved_usd: saved.usd,
            },
            events: std::mem::take(&mut self.cx.events),
            key_id: key.id.clone(),
            outbox: Vec::new(),
            attempts: std::mem::take(&mut self.attempts),
            subject: None,
            // Drafted once the answer is complete but for its ending, which waits for this
            // receipt's commit: the request's own time, not the receipt writer's. The clock
            // read at request start is reused; this is the one more read.
            latency_us: Some(self.started.elapsed().as_micros().min(u128::from(u64::MAX)) as u64),
        })
    }
}

/// A fresh UUIDv7 in its hyphenated lower-case form, written straight into an exact-size
/// string (`to_string` goes through the formatter and grows its buffer).
pub(super) fn new_id() -> String {
    let mut buf = [0u8; uuid::fmt::Hyphenated::LENGTH];
    uuid::Uuid::now_v7().hyphenated().encode_lower(&mut buf).to_owned()
}

#[cfg(test)]
mod tests {
    #[test]
    pub(super) fn new_ids_are_lower_case_hyphenated_uuid_v7s() {
        let (a, b) = (super::new_id(), super::new_id());
        for id in [&a, &b] {
            let parsed = uuid::Uuid::parse_str(id).unwrap();
            assert_eq!(parsed.get_version_num(), 7);
            assert_eq!(*id, parsed.hyphenated().to_string());
        }
        assert_ne!(a, b);
    }
}
