//! `RATELIMIT`: requests and tokens per minute of a [`Lane`]: a key's own (`rpmLimit` /
//! `tpmLimit`, `PATCH /v1/keys/{id}/limits`, [`KeyLane`]) or each end user's of a key
//! (`endUserRpmLimit` / `endUserTpmLimit`, [`super::end_user`]). One limiter for both: the
//! lanes differ only in where their windows are, what the 429 says and whether the client gets
//! their headers.
//!
//! In one process the windows are the lane's own ([`Lane::windows`]); with `cluster.redis_url`
//! they live in Redis under [`Lane::shared_id`] and the check asks for its admission
//! ([`Verdict::Ask`]), then replays the store's arithmetic for the headers
//! ([`rate_limit::admit`] on the counts it saw).

use std::marker::PhantomData;
use std::sync::Arc;

use crate::checks::pipeline::shared::{Answer, Ask, RateCounts};
use crate::checks::pipeline::{Check, Ctx, Exchange, Outcome, Verdict};
use crate::checks::rate_limit::{self, Limited, Reservation, TokenAsk, Windows};
use crate::checks::shared::Cluster;
use crate::error::{ApiError, ErrorKind};
use crate::receipts::{CheckName, CheckResult};

/// The limits of one lane and what this request asks to hold.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub rpm: Option<u64>,
    pub tpm: Option<u64>,
    pub ask: TokenAsk,
}

impl Limits {
    /// `rpm` / `tpm` as a record holds them, with what the request asks to hold (its prompt
    /// estimate plus its own answer cap, or as much of the default answer reservation as fits:
    /// [`TokenAsk`]); None when neither is set.
    pub fn of(ex: &Exchange, rpm: Option<i64>, tpm: Option<i64>) -> Option<Limits> {
        let (rpm, tpm) = (rpm.map(|n| n.max(0) as u64), tpm.map(|n| n.max(0) as u64));
        if rpm.is_none() && tpm.is_none() {
            return None;
        }
        let cap = ex.completion_tokens_cap();
        Some(Limits { rpm, tpm, ask: TokenAsk::new(ex.prompt_tokens_est, ex.max_tokens.map(|_| cap), cap) })
    }
}

/// Whose windows a limiter counts a request in.
pub trait Lane: Send + Sync + 'static {
    /// What the 503 says is shared when Redis does not answer.
    const SHARED: &'static str;
    /// The limits that apply to this request; None when none does (the check skips).
    fn limits(ex: &Exchange) -> Option<Limits>;
    /// The windows in this process.
    fn windows(ex: &Exchange, now_ms: i64) -> Arc<Windows>;
    /// The shared store's name for the windows.
    fn shared_id(ex: &Exchange) -> Arc<str>;
    /// Whether the client gets these limits' `x-ratelimit-*` headers on success.
    fn shows_headers(ex: &Exchange) -> bool;
    /// The 429 for `limited`.
    fn refused(ex: &Exchange, limited: Limited) -> Verdict;
}

/// The key's own limits.
pub struct KeyLane;

impl Lane for KeyLane {
    const SHARED: &'static str = "rate limits";

    fn limits(ex: &Exchange) -> Option<Limits> {
        Limits::of(ex, ex.key.record.rpm_limit, ex.key.record.tpm_limit)
    }

    fn windows(ex: &Exchange, _now_ms: i64) -> Arc<Windows> {
        ex.key.state.rate.clone()
    }

    fn shared_id(ex: &Exchange) -> Arc<str> {
        ex.key.id.clone()
    }

    fn shows_headers(_ex: &Exchange) -> bool {
        true
    }

    fn refused(_ex: &Exchange, limited: Limited) -> Verdict {
        Verdict::Block(
            CheckResult::Block,
            ApiError::new(ErrorKind::RateLimited, limited.message).with_headers(limited.headers),
        )
    }
}

/// `RATELIMIT` over the windows of lane `L`.
pub struct Limiter<L: Lane> {
    shared: Option<Arc<Cluster>>,
    lane: PhantomData<L>,
}

/// The key's own limits.
pub type RateLimit = Limiter<KeyLane>;

/// What a lane's request holds until it settles (one type per lane: a request holds one of each).
struct Held<L>(Reservation, PhantomData<L>);

impl<L: Lane> Default for Limiter<L> {
    fn default() -> Self {
        Limiter { shared: None, lane: PhantomData }
    }
}

impl<L: Lane> Limiter<L> {
    pub fn new(shared: Option<Arc<Cluster>>) -> Self {
        Limiter { shared, lane: PhantomData }
    }

    /// In this process's own windows.
    fn local(&self, ex: &Exchange, cx: &mut Ctx, l: Limits) -> Verdict {
        let now = ex.now.timestamp_millis();
        let windows = L::windows(ex, now);
        let acquired = match L::shows_headers(ex) {
            true => rate_limit::acquire(&windows, l.rpm, l.tpm, l.ask, now, &mut cx.headers),
            false => rate_limit::acquire(&windows, l.rpm, l.tpm, l.ask, now, &mut Vec::new()),
        };
        match acquired {
            Ok(reservation) => {
                cx.keep(Held::<L>(reservation, PhantomData));
                Verdict::Pass(CheckResult::Pass)
            }
            Err(limited) => L::refused(ex, limited),
        }
    }

    /// Redis does not answer: `cluster.on_redis_down` decides.
    fn without_store(&self, c: &Cluster, ex: &Exchange, cx: &mut Ctx, why: &str) -> Verdict {
        c.fell_back("RATELIMIT");
        if c.fail_open() {
            return self.local(ex, cx, L::limits(ex).expect("asked only with limits"));
        }
        let message = format!(
            "{} are shared across gateway instances and the shared state is unreachable ({why}); retry shortly",
            L::SHARED
        );
        Verdict::Block(
            CheckResult::Block,
            ApiError::new(ErrorKind::Unavailable, message).with_headers(vec![("retry-after", "1".into())]),
        )
    }

    /// The store's decision, with the headers the same arithmetic gives on the counts it saw.
    fn decided(&self, ex: &Exchange, cx: &mut Ctx, counts: RateCounts) -> Verdict {
        let l = L::limits(ex).expect("asked only with limits");
        let mut state = counts.before;
        let mut headers = Vec::new();
        let replay = rate_limit::admit(&mut state, l.rpm, l.tpm, l.ask, counts.now_ms, &mut headers);
        match (counts.admitted, replay) {
            (true, _) => {
                if L::shows_headers(ex) {
                    cx.headers.extend(headers);
                }
                let r = Reservation::shared(L::shared_id(ex), counts.tokens, state.start_ms);
                cx.keep(Held::<L>(r, PhantomData));
                Verdict::Pass(CheckResult::Pass)
            }
            (false, Err(limited)) => L::refused(ex, limited),
            // The store is the authority; its refusal with the replay's counts admitting.
            (false, Ok(_)) => L::refused(
                ex,
                Limited {
                    what: "requests",
                    message: "rate limit reached for this key; retry in 1 s".into(),
                    retry_after_ms: 1000,
                    headers: vec![("retry-after", "1".into())],
                },
            ),
        }
    }
}

impl<L: Lane> Check for Limiter<L> {
    fn name(&self) -> CheckName {
        CheckName::RateLimit
    }

    /// Applies when the lane has limits for this request. Reserves one request and the tokens
    /// the request may use; refuses with 429 and the headers the official SDKs back off on.
    fn on_request(&self, ex: &mut Exchange, cx: &mut Ctx) -> Verdict {
        let Some(l) = L::limits(ex) else { return Verdict::Skip };
        match &self.shared {
            None => self.local(ex, cx, l),
            Some(c) if c.is_up() => {
                Verdict::Ask(Ask::Rate { key_id: L::shared_id(ex), rpm: l.rpm, tpm: l.tpm, ask: l.ask })
            }
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
            _ => self.local(ex, cx, L::limits(ex).expect("asked only with limits")),
        }
    }

    /// Corrects the token reservation to what the answer really used (0 when nothing was).
    fn on_complete(&self, done: &Outcome, cx: &mut Ctx) {
        if let Some(Held(r, _)) = cx.take::<Held<L>>() {
            // Cache reads and writes are inside `prompt_tokens`: a cached prompt still counts whole.
            let used = done.usage.map(|u| u.total()).unwrap_or(0);
            match (r.shared_key(), &self.shared) {
                (Some((id, start_ms)), Some(c)) => c.settle_rate(id, start_ms, used as i64 - r.tokens() as i64),
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
        assert_eq!(cx.own::<Held<KeyLane>>().map(|h| h.0.tokens()), Some(1000));
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
