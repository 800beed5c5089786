//! `RATELIMIT`: the key's requests and tokens per minute (`PATCH /v1/keys/{id}/limits`).
//!
//! In one process the windows are the key's own (`ratelimit`); with `cluster.redis_url` they
//! live in Redis and the check asks for its admission ([`Verdict::Ask`]), then replays the
//! store's arithmetic for the headers ([`rate_limit::admit`] on the counts it saw).

use std::sync::Arc;

use crate::checks::pipeline::shared::{Answer, Ask, RateCounts};
use crate::checks::pipeline::{Check, Ctx, Exchange, Outcome, Verdict};
use crate::checks::rate_limit::{self, Limited, TokenAsk};
use crate::checks::shared::Cluster;
use crate::error::{ApiError, ErrorKind};
use crate::receipts::{CheckName, CheckResult};

#[derive(Default)]
pub struct RateLimit {
    shared: Option<Arc<Cluster>>,
}

impl RateLimit {
    pub fn new(shared: Option<Arc<Cluster>>) -> Self {
        RateLimit { shared }
    }
}

/// The key's limits and what this request asks to hold; `None` without limits.
fn limits(ex: &Exchange) -> Option<(Option<u64>, Option<u64>, TokenAsk)> {
    let rec = &ex.key.record;
    let rpm = rec.rpm_limit.map(|n| n.max(0) as u64);
    let tpm = rec.tpm_limit.map(|n| n.max(0) as u64);
    if rpm.is_none() && tpm.is_none() {
        return None;
    }
    let cap = ex.completion_tokens_cap();
    Some((rpm, tpm, TokenAsk::new(ex.prompt_tokens_est, ex.max_tokens.map(|_| cap), cap)))
}

fn refused(limited: Limited) -> Verdict {
    Verdict::Block(
        CheckResult::Block,
        ApiError::new(ErrorKind::RateLimited, limited.message).with_headers(limited.headers),
    )
}

impl RateLimit {
    /// In this process's own windows.
    fn local(&self, ex: &Exchange, cx: &mut Ctx, (rpm, tpm, ask): (Option<u64>, Option<u64>, TokenAsk)) -> Verdict {
        match rate_limit::acquire(&ex.key.state.rate, rpm, tpm, ask, ex.now.timestamp_millis(), &mut cx.headers) {
            Ok(reservation) => {
                cx.keep(reservation);
                Verdict::Pass(CheckResult::Pass)
            }
            Err(limited) => refused(limited),
        }
    }

    /// Redis does not answer: `cluster.on_redis_down` decides.
    fn without_store(&self, c: &Cluster, ex: &Exchange, cx: &mut Ctx, why: &str) -> Verdict {
        c.fell_back("RATELIMIT");
        if c.fail_open() {
            return self.local(ex, cx, limits(ex).expect("asked only with limits"));
        }
        Verdict::Block(
            CheckResult::Block,
            ApiError::new(
                ErrorKind::Unavailable,
                format!("rate limits are shared across gateway instances and the shared state is unreachable ({why}); retry shortly"),
            )
            .with_headers(vec![("retry-after", "1".into())]),
        )
    }

    /// The store's decision, with the headers the same arithmetic gives on the counts it saw.
    fn decided(&self, ex: &Exchange, cx: &mut Ctx, counts: RateCounts) -> Verdict {
        let (rpm, tpm, ask) = limits(ex).expect("asked only with limits");
        let mut state = counts.before;
        let mut headers = Vec::new();
        let replay = rate_limit::admit(&mut state, rpm, tpm, ask, counts.now_ms, &mut headers);
        match (counts.admitted, replay) {
            (true, replayed) => {
                // The store is the authority; the replay agrees (tests/cluster_redis.rs pins it).
                debug_assert!(replayed.is_ok(), "the shared limiter admitted what the replay refuses");
                cx.headers.extend(headers);
                cx.keep(rate_limit::Reservation::shared(ex.key.id.clone(), counts.tokens, state.start_ms));
                Verdict::Pass(CheckResult::Pass)
            }
            (false, Err(limited)) => refused(limited),
            (false, Ok(_)) => refused(Limited {
                what: "requests",
                message: "rate limit reached for this key; retry in 1 s".into(),
                retry_after_ms: 1000,
                headers: vec![("retry-after", "1".into())],
            }),
        }
    }
}

impl Check for RateLimit {
    fn name(&self) -> CheckName {
        CheckName::RateLimit
    }

    /// Applies when the key has an rpm or tpm limit. Reserves one request and the tokens the
    /// request may use (its prompt estimate plus its own answer cap, or as much of the default
    /// answer reservation as fits: [`rate_limit::TokenAsk`]); refuses with 429 and the headers
    /// the official SDKs back off on.
    fn on_request(&self, ex: &mut Exchange, cx: &mut Ctx) -> Verdict {
        let Some((rpm, tpm, ask)) = limits(ex) else { return Verdict::Skip };
        match &self.shared {
            None => self.local(ex, cx, (rpm, tpm, ask)),
            Some(c) if c.is_up() => Verdict::Ask(Ask::Rate { key_id: ex.key.id.clone(), rpm, tpm, ask }),
            Some(c) => self.without_store(c, ex, cx, &c.reason()),
        }
    }

    fn joins_asks(&self) -> bool {
        true
    }

    fn on_answer(&self, ex: &mut Exchange, cx: &mut Ctx, answer: Answer) -> Verdict {
        match (answer, &self.shared) {
            (Answer::NotAsked, _) => Verdict::Skip,
            (Answer::Rate(counts), _) => self.decided(ex, cx, counts),
            (Answer::Unavailable(why), Some(c)) => self.without_store(c, ex, cx, &why),
            _ => self.local(ex, cx, limits(ex).expect("asked only with limits")),
        }
    }

    /// Corrects the token reservation to what the answer really used (0 when nothing was).
    fn on_complete(&self, done: &Outcome, cx: &mut Ctx) {
        if let Some(r) = cx.take::<rate_limit::Reservation>() {
            // Cache reads and writes are inside `prompt_tokens`: a cached prompt still counts whole.
            let used = done.usage.map(|u| u.total()).unwrap_or(0);
            match (r.shared_key(), &self.shared) {
                (Some((key_id, start_ms)), Some(c)) => c.settle_rate(key_id, start_ms, used as i64 - r.tokens() as i64),
                _ => rate_limit::settle(r, used, chrono::Utc::now().timestamp_millis()),
            }
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
        assert!(matches!(RateLimit::default().on_request(&mut ex, &mut cx), Verdict::Skip));

        let mut rec = ex.key.record.clone();
        rec.rpm_limit = Some(1);
        ex.key = std::sync::Arc::new(crate::snapshot::KeyEntry::new(rec, Default::default()));
        assert!(matches!(RateLimit::default().on_request(&mut ex, &mut cx), Verdict::Pass(CheckResult::Pass)));
        assert!(cx.headers.iter().any(|(k, v)| *k == "x-ratelimit-remaining-requests" && v == "0"));
        match RateLimit::default().on_request(&mut ex, &mut Ctx::default()) {
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
        assert!(matches!(RateLimit::default().on_request(&mut ex, &mut cx), Verdict::Pass(CheckResult::Pass)));
        assert_eq!(cx.own::<rate_limit::Reservation>().map(|r| r.tokens()), Some(1000));
        assert!(cx.headers.iter().any(|(k, v)| *k == "x-ratelimit-limit-tokens" && v == "1000"));

        let header = |e: &ApiError, name: &str| e.headers.iter().find(|(k, _)| *k == name).map(|(_, v)| v.clone());
        // The window is full for now: wait and retry.
        ex.max_tokens = Some(100);
        match RateLimit::default().on_request(&mut ex, &mut Ctx::default()) {
            Verdict::Block(_, e) => assert_eq!(header(&e, "x-should-retry"), None, "{}", e.message),
            other => panic!("expected a block, got {other:?}"),
        }
        // Its own cap alone is over the limit: never.
        ex.max_tokens = Some(2000);
        match RateLimit::default().on_request(&mut ex, &mut Ctx::default()) {
            Verdict::Block(_, e) => {
                assert!(e.message.contains("max_tokens"), "{}", e.message);
                assert_eq!(header(&e, "x-should-retry").as_deref(), Some("false"));
            }
            other => panic!("expected a block, got {other:?}"),
        }
    }
}
