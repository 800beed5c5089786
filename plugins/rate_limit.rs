//! `RATELIMIT`: the key's requests and tokens per minute (`PATCH /v1/keys/{id}/limits`).

use crate::error::{ApiError, ErrorKind};
use crate::pipeline::{Check, Ctx, Exchange, Outcome, Verdict};
use crate::ratelimit;
use crate::receipts::{CheckName, CheckResult};

pub struct RateLimit;

impl Check for RateLimit {
    fn name(&self) -> CheckName {
        CheckName::RateLimit
    }

    /// Applies when the key has an rpm or tpm limit. Reserves one request and the tokens the
    /// request may use (its prompt estimate plus its own answer cap, or as much of the default
    /// answer reservation as fits: [`ratelimit::TokenAsk`]); refuses with 429 and the headers
    /// the official SDKs back off on.
    fn on_request(&self, ex: &mut Exchange, cx: &mut Ctx) -> Verdict {
        let rec = &ex.key.record;
        let rpm = rec.rpm_limit.map(|n| n.max(0) as u64);
        let tpm = rec.tpm_limit.map(|n| n.max(0) as u64);
        if rpm.is_none() && tpm.is_none() {
            return Verdict::Skip;
        }
        let cap = ex.completion_tokens_cap();
        let ask = ratelimit::TokenAsk::new(ex.prompt_tokens_est, ex.max_tokens.map(|_| cap), cap);
        match ratelimit::acquire(&ex.key.state.rate, rpm, tpm, ask, ex.now.timestamp_millis(), &mut cx.headers) {
            Ok(reservation) => {
                cx.rate = Some(reservation);
                Verdict::Pass(CheckResult::Pass)
            }
            Err(limited) => Verdict::Block(
                CheckResult::Block,
                ApiError::new(ErrorKind::RateLimited, limited.message).with_headers(limited.headers),
            ),
        }
    }

    /// Corrects the token reservation to what the answer really used (0 when nothing was).
    fn on_complete(&self, done: &Outcome, cx: &mut Ctx) {
        if let Some(r) = cx.rate.take() {
            // Cache reads and writes are inside `prompt_tokens`: a cached prompt still counts whole.
            let used = done.usage.map(|u| u.total()).unwrap_or(0);
            ratelimit::settle(r, used, chrono::Utc::now().timestamp_millis());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn no_limits_no_check_and_a_limit_blocks_with_headers() {
        let mut ex = Exchange::fixture(json!({"model": "gpt-4o-mini", "messages": []}));
        let mut cx = Ctx::default();
        assert!(matches!(RateLimit.on_request(&mut ex, &mut cx), Verdict::Skip));

        let mut rec = ex.key.record.clone();
        rec.rpm_limit = Some(1);
        ex.key = std::sync::Arc::new(crate::snapshot::KeyEntry::new(rec, Default::default()));
        assert!(matches!(RateLimit.on_request(&mut ex, &mut cx), Verdict::Pass(CheckResult::Pass)));
        assert!(cx.headers.iter().any(|(k, v)| *k == "x-ratelimit-remaining-requests" && v == "0"));
        match RateLimit.on_request(&mut ex, &mut Ctx::default()) {
            Verdict::Block(CheckResult::Block, e) => {
                assert_eq!(e.status(), 429);
                assert!(e.headers.iter().any(|(k, _)| *k == "retry-after"));
            }
            other => panic!("expected a block, got {other:?}"),
        }
    }

    /// Issue 16: a `tpmLimit` under the default answer reservation takes a request without
    /// `max_tokens`, holding what fits; only a request's own cap over the limit is refused
    /// outright.
    #[test]
    fn a_small_token_limit_holds_what_fits() {
        let mut ex =
            Exchange::fixture(json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}));
        let mut rec = ex.key.record.clone();
        rec.tpm_limit = Some(1000);
        ex.key = std::sync::Arc::new(crate::snapshot::KeyEntry::new(rec, Default::default()));
        let mut cx = Ctx::default();
        assert!(matches!(RateLimit.on_request(&mut ex, &mut cx), Verdict::Pass(CheckResult::Pass)));
        assert_eq!(cx.rate.as_ref().map(|r| r.tokens()), Some(1000));
        assert!(cx.headers.iter().any(|(k, v)| *k == "x-ratelimit-limit-tokens" && v == "1000"));

        let header = |e: &ApiError, name: &str| e.headers.iter().find(|(k, _)| *k == name).map(|(_, v)| v.clone());
        // The window is full for now: wait and retry.
        ex.max_tokens = Some(100);
        match RateLimit.on_request(&mut ex, &mut Ctx::default()) {
            Verdict::Block(_, e) => assert_eq!(header(&e, "x-should-retry"), None, "{}", e.message),
            other => panic!("expected a block, got {other:?}"),
        }
        // Its own cap alone is over the limit: never.
        ex.max_tokens = Some(2000);
        match RateLimit.on_request(&mut ex, &mut Ctx::default()) {
            Verdict::Block(_, e) => {
                assert!(e.message.contains("max_tokens"), "{}", e.message);
                assert_eq!(header(&e, "x-should-retry").as_deref(), Some("false"));
            }
            other => panic!("expected a block, got {other:?}"),
        }
    }
}
