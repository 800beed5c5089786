//! What the request path hands the receipt writer: a receipt's members but the chain fields,
//! its unsigned side channels and what it causes beside it (guardrail events, webhook events).

use std::borrow::Cow;
use std::sync::Arc;

use super::canonical;
use super::vocabulary::{Check, UpstreamStatus};

/// What the request path hands to the writer: everything but the chain fields.
#[derive(Debug, Clone)]
pub struct Draft {
    pub tenant_id: Arc<str>,
    pub receipt_id: String,
    pub request_id: String,
    pub actor: Arc<str>,
    pub provider: Cow<'static, str>,
    pub model: String,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cost_usd: f64,
    pub checks: Vec<Check>,
    pub upstream_status: UpstreamStatus,
    pub ts: String,
    /// Unsigned side channels.
    pub kind: Kind,
    pub pack_version: String,
    /// What the exact-match cache did and saved.
    pub cache: CacheSide,
    /// Guardrail redactions and blocks (stored beside the receipt, never any text).
    pub events: Vec<GuardEvent>,
    /// The key whose spend this request's cost adds to.
    pub key_id: Arc<str>,
    /// Webhook events this request caused (a guardrail block, a budget threshold crossed),
    /// written to the outbox in the receipt's own transaction.
    pub outbox: Vec<crate::store::webhooks::Event>,
    /// A routed request's upstream attempts, stored beside the receipt in its transaction (not
    /// signed; docs/decisions/routes.md). Empty without a route.
    pub attempts: Vec<Attempt>,
    /// The signed `subject` of an `admin` receipt (docs/log.md §8); None on every other kind.
    pub subject: Option<String>,
    /// Microseconds from the request reaching the gateway to the end of its answer, stored
    /// beside the receipt (not signed; docs/decisions/receipts.md). None where there is no
    /// request to time (`admin` receipts).
    pub latency_us: Option<u64>,
}

/// One upstream try of a routed request.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    pub provider: &'static str,
    pub credential: Arc<str>,
    pub model: Arc<str>,
    /// The upstream's HTTP status; 0 when it gave none (connect error, timeout).
    pub status: u16,
    /// `ok`, `retry` (moved on), `failed` (the last, failing), `refused` (a 4xx relayed).
    pub outcome: &'static str,
    pub ms: u64,
}

/// The cache's unsigned side channel: `result` is `HIT`, `MISS`, `BYPASS` or empty (no cache).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CacheSide {
    pub result: &'static str,
    pub saved_tokens: u64,
    pub saved_usd: f64,
}

/// One guardrail finding that changed or stopped a request (categories only, never text).
#[derive(Debug, Clone, PartialEq)]
pub struct GuardEvent {
    pub category: String,
    /// `REDACT`, `BLOCK` or `FLAG`.
    pub result: &'static str,
    /// `request` or `response`.
    pub direction: &'static str,
}

impl Draft {
    /// The signed members this draft gets as receipt `seq` after `prev_hash`.
    pub fn view<'a>(&'a self, seq: u64, prev_hash: &'a str) -> canonical::ReceiptView<'a> {
        canonical::ReceiptView {
            v: 1,
            tenant_id: &self.tenant_id,
            seq,
            receipt_id: &self.receipt_id,
            request_id: &self.request_id,
            actor: &self.actor,
            provider: &self.provider,
            model: &self.model,
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
            cost_usd: self.cost_usd,
            checks: &self.checks,
            upstream_status: self.upstream_status.as_str(),
            ts: &self.ts,
            prev_hash,
            subject: self.subject.as_deref(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    ModelCall,
    ToolCall,
    /// A management write or evidence read (docs/log.md §8).
    Admin,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::ModelCall => "model_call",
            Kind::ToolCall => "tool_call",
            Kind::Admin => "admin",
        }
    }
}

/// Receipt timestamps: UTC `YYYY-MM-DD HH:MM:SS.mmm`.
///
/// Written digit by digit: this runs for every request, and chrono's `format` re-parses the
/// pattern each time (about 2 µs under load). A test holds it equal to that format.
pub fn receipt_ts(t: chrono::DateTime<chrono::Utc>) -> String {
    use chrono::{Datelike, Timelike};
    fn digits(out: &mut String, n: u32, width: u32) {
        for p in (0..width).rev() {
            out.push(char::from(b'0' + (n / 10u32.pow(p) % 10) as u8));
        }
    }
    let year = t.year();
    if !(0..=9999).contains(&year) {
        return t.format("%Y-%m-%d %H:%M:%S%.3f").to_string();
    }
    // chrono keeps a leap second as nanoseconds past 1e9 within second 59.
    let nanos = t.nanosecond();
    let (second, nanos) = if nanos >= 1_000_000_000 { (60, nanos - 1_000_000_000) } else { (t.second(), nanos) };
    let mut out = String::with_capacity(23);
    digits(&mut out, year as u32, 4);
    out.push('-');
    digits(&mut out, t.month(), 2);
    out.push('-');
    digits(&mut out, t.day(), 2);
    out.push(' ');
    digits(&mut out, t.hour(), 2);
    out.push(':');
    digits(&mut out, t.minute(), 2);
    out.push(':');
    digits(&mut out, second, 2);
    out.push('.');
    digits(&mut out, nanos / 1_000_000, 3);
    out
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};

    #[test]
    fn receipt_ts_is_the_documented_format() {
        // Instants spread over years 1970..9955, every field and millisecond width.
        for step in 0..5000i64 {
            let t = Utc.timestamp_millis_opt(step * 50_331_904_007 % 252_000_000_000_000).unwrap();
            assert_eq!(super::receipt_ts(t), t.format("%Y-%m-%d %H:%M:%S%.3f").to_string());
        }
        let t = Utc.with_ymd_and_hms(2026, 11, 22, 19, 42, 57).unwrap() + chrono::Duration::milliseconds(49);
        assert_eq!(super::receipt_ts(t), "2026-11-22 19:42:57.049");
    }
}
