//! Witnesses (log.md §5): every published checkpoint of every tenant is sent to each configured
//! witness with the C2SP `tlog-witness` protocol, and the cosignatures that come back are
//! verified and kept, to be served with the checkpoint.
//!
//! A background loop ([`Witnesses::run`]) looks every second for checkpoints a witness has not
//! cosigned, so neither publishing nor any request ever waits for a witness. Per witness:
//! `5xx`, timeouts and connection errors back off exponentially (1 s doubling to 5 min); `404`
//! (origin unknown), `403` (log key not trusted) and `422` (proof refused) are configuration or
//! integrity errors, logged and counted, and that tenant is tried again only at its next
//! checkpoint; `409` carries the witness's own size, and the checkpoint is sent again from there.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use bytes::Bytes;

use super::cosignature::CosignatureKey;
use super::tree;
use crate::config::tenant_log::{LogSection, WitnessConfig};
use crate::metrics::METRICS;
use crate::store::checkpoints::{self, CheckpointRow};
use crate::store::Store;
use crate::upstream::{BaseUrl, UpstreamClient};

const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// The configured witnesses and what each has done.
pub struct Witnesses {
    list: Vec<Witness>,
    stale: Duration,
    started: Instant,
}

struct Witness {
    name: String,
    base: BaseUrl,
    key: CosignatureKey,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    last_cosigned: Option<Instant>,
    backoff: Duration,
    next_try: Option<Instant>,
    /// Per tenant, the checkpoint size refused with 404/403/422: not sent again.
    refused: HashMap<String, u64>,
    last_error: Option<String>,
}

/// Why one exchange did not end in a kept cosignature.
#[derive(Debug)]
enum Failure {
    /// Retried with backoff.
    Retry(&'static str, String),
    /// Not sent again for this checkpoint.
    Refused(&'static str, String),
}

impl Witnesses {
    /// The witnesses of `log.witnesses`; None when there are none. Errors name the field.
    pub fn from_config(cfg: &LogSection) -> Result<Option<Arc<Witnesses>>, String> {
        if cfg.witnesses.is_empty() {
            return Ok(None);
        }
        let list = cfg.witnesses.iter().enumerate().map(|(i, w)| witness(i, w)).collect::<Result<Vec<_>, _>>()?;
        let stale = Duration::from_secs(cfg.witness_stale_seconds.max(1));
        Ok(Some(Arc::new(Witnesses { list, stale, started: Instant::now() })))
    }

    /// `operational`, or `degraded` while a witness has not cosigned for the stale period, and
    /// a detail line.
    pub fn status(&self) -> (&'static str, String) {
        let now = Instant::now();
        let mut stale = Vec::new();
        for w in &self.list {
            let s = w.state.lock().unwrap_or_else(|e| e.into_inner());
            let since = s.last_cosigned.unwrap_or(self.started);
            if now.duration_since(since) > self.stale {
                let why = s.last_error.clone().unwrap_or_else(|| "no cosignature yet".into());
                stale.push(format!("{}: {why}", w.name));
            }
        }
        match stale.is_empty() {
            true => ("operational", format!("{} witness(es) cosigning", self.list.len())),
            false => ("degraded", format!("not cosigned for {} s: {}", self.stale.as_secs(), stale.join("; "))),
        }
    }

    /// Sends every checkpoint not yet cosigned, every second, until shutdown.
    pub async fn run(&self, store: &Store, client: &UpstreamClient, mut shutdown: impl FnMut() -> bool) {
        loop {
            if shutdown() {
                return;
            }
            if let Err(e) = self.round(store, client).await {
                log::warn!("witnesses: reading checkpoints failed (retried in a second): {e}");
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// One pass: each tenant's newest checkpoint to each witness that is due and has not
    /// cosigned it.
    async fn round(&self, store: &Store, client: &UpstreamClient) -> Result<(), crate::store::StoreError> {
        let newest = checkpoints::newest_per_tenant(store).await?;
        for w in &self.list {
            for (tenant, cp) in &newest {
                if !w.due(tenant, cp.size) || checkpoints::witnessed_size(store, tenant, &w.name).await? >= cp.size {
                    continue;
                }
                let outcome = w.exchange(store, client, tenant, cp).await;
                w.record(tenant, cp.size, outcome);
            }
        }
        Ok(())
    }
}

fn witness(i: usize, w: &WitnessConfig) -> Result<Witness, String> {
    let field = |f: &str| format!("field `log.witnesses[{i}].{f}`");
    let base = BaseUrl::parse(&w.url).map_err(|e| format!("{}: {e}", field("url")))?;
    let key = CosignatureKey::parse(&w.verifier_key).map_err(|e| format!("{}: {e}", field("verifier_key")))?;
    if key.name != w.name {
        return Err(format!("{}: the verifier key names `{}`", field("name"), key.name));
    }
    Ok(Witness { name: w.name.clone(), base, key, state: Mutex::new(State::default()) })
}

impl Witness {
    fn due(&self, tenant: &str, size: u64) -> bool {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.next_try.is_none_or(|t| Instant::now() >= t) && s.refused.get(tenant).is_none_or(|&r| size > r)
    }

    /// add-checkpoint from the size this witness last cosigned; once more from the size a
    /// `409` names.
    async fn exchange(
        &self,
        store: &Store,
        client: &UpstreamClient,
        tenant: &str,
        cp: &CheckpointRow,
    ) -> Result<(), Failure> {
        let mut old = checkpoints::witnessed_size(store, tenant, &self.name).await.map_err(retry("database"))?;
        for _ in 0..2 {
            match self.add_checkpoint(store, client, tenant, cp, old).await? {
                Sent::Cosigned(lines) => return self.keep(store, tenant, cp, &lines).await,
                Sent::Conflict(size) if size < cp.size && size != old => old = size,
                Sent::Conflict(size) => {
                    return Err(Failure::Refused(
                        "conflict",
                        format!("the witness is at size {size}, this checkpoint {}", cp.size),
                    ))
                }
            }
        }
        Err(Failure::Retry("conflict", "the witness changed its size twice".into()))
    }

    async fn add_checkpoint(
        &self,
        store: &Store,
        client: &UpstreamClient,
        tenant: &str,
        cp: &CheckpointRow,
        old: u64,
    ) -> Result<Sent, Failure> {
        let proof =
            tree::consistency(store, tenant, old.min(cp.size), cp.size).await.map_err(|e| retry("proof")(e.message))?;
        let mut body = format!("old {old}\n");
        for h in &proof.path {
            body.push_str(&B64.encode(h));
            body.push('\n');
        }
        body.push('\n');
        body.push_str(&cp.note);
        let headers = [("content-type", "text/plain; charset=utf-8".to_string())];
        let send = client.send(&self.base, "POST", "/add-checkpoint", &headers, Bytes::from(body));
        let mut resp = tokio::time::timeout(Duration::from_secs(10), send)
            .await
            .map_err(|_| Failure::Retry("timeout", "no answer in 10 s".into()))?
            .map_err(|e| Failure::Retry("unreachable", e.to_string()))?;
        let status = resp.header().status.as_u16();
        let text = resp.read_all(64 << 10).await.map_err(|e| Failure::Retry("unreachable", e.to_string()))?;
        resp.release().await;
        answer(status, &String::from_utf8_lossy(&text))
    }

    /// Verifies the cosignature lines against this witness's key and keeps the valid one.
    async fn keep(&self, store: &Store, tenant: &str, cp: &CheckpointRow, lines: &[String]) -> Result<(), Failure> {
        let body = cp.note.split_once("\n\n").map_or(cp.note.as_str(), |(b, _)| b).to_string() + "\n";
        let Some(line) = lines.iter().find(|l| self.key.verify(body.as_bytes(), l).is_some()) else {
            return Err(Failure::Refused("bad_cosignature", "no line verifies with the configured key".into()));
        };
        checkpoints::add_cosignature(store, tenant, cp.size, &self.name, line).await.map_err(retry("database"))
    }

    fn record(&self, tenant: &str, size: u64, outcome: Result<(), Failure>) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match outcome {
            Ok(()) => {
                (s.last_cosigned, s.backoff, s.next_try, s.last_error) =
                    (Some(Instant::now()), Duration::ZERO, None, None);
            }
            Err(Failure::Retry(reason, why)) => {
                s.backoff = (s.backoff * 2).clamp(Duration::from_secs(1), MAX_BACKOFF);
                s.next_try = Some(Instant::now() + s.backoff);
                let why = format!("{why} (retry in {} s)", s.backoff.as_secs());
                self.failed(&mut s, reason, why);
            }
            Err(Failure::Refused(reason, why)) => {
                s.refused.insert(tenant.to_string(), size);
                self.failed(&mut s, reason, format!("{why} (checkpoint {size} of {tenant} not sent again)"));
            }
        }
    }

    fn failed(&self, s: &mut State, reason: &'static str, why: String) {
        METRICS.witness_failures.with_label_values(&[&self.name, reason]).inc();
        if s.last_error.is_none() {
            log::warn!("witness {}: {reason}: {why}", self.name);
        }
        s.last_error = Some(format!("{reason}: {why}"));
    }
}

enum Sent {
    Cosigned(Vec<String>),
    Conflict(u64),
}

/// What an add-checkpoint answer means (C2SP tlog-witness).
fn answer(status: u16, text: &str) -> Result<Sent, Failure> {
    match status {
        200 => Ok(Sent::Cosigned(text.lines().filter(|l| !l.is_empty()).map(str::to_string).collect())),
        409 => text
            .trim()
            .parse()
            .map(Sent::Conflict)
            .map_err(|_| Failure::Retry("bad_response", format!("409 without a size: {text:.80}"))),
        404 => Err(Failure::Refused("unknown_origin", "404: the witness does not know this log's origin".into())),
        403 => Err(Failure::Refused("untrusted_key", "403: the witness does not trust this log's key".into())),
        422 => Err(Failure::Refused("bad_proof", "422: the witness refused the consistency proof".into())),
        s if s >= 500 => Err(Failure::Retry("server_error", format!("{s}: {text:.80}"))),
        s => Err(Failure::Refused("bad_response", format!("{s}: {text:.80}"))),
    }
}

fn retry<E: std::fmt::Display>(reason: &'static str) -> impl Fn(E) -> Failure {
    move |e| Failure::Retry(reason, e.to_string())
}
