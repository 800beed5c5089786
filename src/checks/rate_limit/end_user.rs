//! `RATELIMIT` per end user: each end user of a key has its own requests and tokens per minute
//! (`endUserRpmLimit` / `endUserTpmLimit`, `PATCH /v1/keys/{id}/limits`).
//!
//! The same windows, arithmetic and shared store as the key's own limits ([`super::plugin`]):
//! in one process the windows are the key's per-end-user ones (`KeyState::end_users`); with
//! `cluster.redis_url` they are a rate hash in Redis named `<keyId>/<endUser>` (the receipt's
//! actor), decided in the same atomic admission call as the key's limits and budgets.
//! It runs just before the key's limits and records under the same name (the pipeline keeps
//! one `RATELIMIT` entry, the strongest).

use std::sync::Arc;

use crate::checks::pipeline::shared::{Answer, Ask, RateCounts};
use crate::checks::pipeline::{Check, Ctx, Exchange, Outcome, Verdict};
use crate::checks::rate_limit::{self, Limited, TokenAsk};
use crate::checks::shared::Cluster;
use crate::error::{ApiError, ErrorKind};
use crate::receipts::{CheckName, CheckResult};

#[derive(Default)]
pub struct EndUserRateLimit {
    shared: Option<Arc<Cluster>>,
}

/// This check's reservation (apart from the key's own in the request's state).
struct Held(rate_limit::Reservation);

/// The end user, the key's per-end-user limits and what this request asks to hold; `None`
/// without an end user or without such limits.
fn limits(ex: &Exchange) -> Option<(&str, Option<u64>, Option<u64>, TokenAsk)> {
    let end_user = ex.end_user.as_deref()?;
    let rec = &ex.key.record;
    let rpm = rec.end_user_rpm_limit.map(|n| n.max(0) as u64);
    let tpm = rec.end_user_tpm_limit.map(|n| n.max(0) as u64);
    if rpm.is_none() && tpm.is_none() {
        return None;
    }
    let cap = ex.completion_tokens_cap();
    Some((end_user, rpm, tpm, TokenAsk::new(ex.prompt_tokens_est, ex.max_tokens.map(|_| cap), cap)))
}

/// The shared store's name for the end user's windows: the receipt's actor.
pub fn shared_id(key_id: &str, end_user: &str) -> Arc<str> {
    format!("{key_id}/{end_user}").into()
}

/// The refusal, its message naming the end user and the per-end-user limit.
fn refused(limited: Limited, end_user: &str) -> Verdict {
    let message = limited
        .message
        .replace("for this key", &format!("for end user \"{end_user}\" of this key (endUserRpmLimit/endUserTpmLimit)"))
        .replace("the key's limit", "the key's per-end-user limit");
    Verdict::Block(CheckResult::Block, ApiError::new(ErrorKind::RateLimited, message).with_headers(limited.headers))
}

/// Whether the key has limits of its own, whose headers the client gets instead.
fn key_limited(ex: &Exchange) -> bool {
    ex.key.record.rpm_limit.is_some() || ex.key.record.tpm_limit.is_some()
}

impl EndUserRateLimit {
    pub fn new(shared: Option<Arc<Cluster>>) -> Self {
        EndUserRateLimit { shared }
    }

    /// In this process's own windows.
    fn local(&self, ex: &Exchange, cx: &mut Ctx) -> Verdict {
        let (end_user, rpm, tpm, ask) = limits(ex).expect("run only with limits");
        let now = ex.now.timestamp_millis();
        let windows = ex.key.state.end_users.get(end_user, now);
        let mut headers = Vec::new();
        match rate_limit::acquire(&windows, rpm, tpm, ask, now, &mut headers) {
            Ok(reservation) => {
                if !key_limited(ex) {
                    cx.headers.extend(headers);
                }
                cx.keep(Held(reservation));
                Verdict::Pass(CheckResult::Pass)
            }
            Err(limited) => refused(limited, end_user),
        }
    }

    /// Redis does not answer: `cluster.on_redis_down` decides.
    fn without_store(&self, c: &Cluster, ex: &Exchange, cx: &mut Ctx, why: &str) -> Verdict {
        c.fell_back("RATELIMIT");
        if c.fail_open() {
            return self.local(ex, cx);
        }
        Verdict::Block(
            CheckResult::Block,
            ApiError::new(
                ErrorKind::Unavailable,
                format!(
                    "end-user rate limits are shared across gateway instances and the shared state is \
                     unreachable ({why}); retry shortly"
                ),
            )
            .with_headers(vec![("retry-after", "1".into())]),
        )
    }

    /// The store's decision, with the headers the same arithmetic gives on the counts it saw.
    fn decided(&self, ex: &Exchange, cx: &mut Ctx, counts: RateCounts) -> Verdict {
        let (end_user, rpm, tpm, ask) = limits(ex).expect("asked only with limits");
        let mut state = counts.before;
        let mut headers = Vec::new();
        let replay = rate_limit::admit(&mut state, rpm, tpm, ask, counts.now_ms, &mut headers);
        match (counts.admitted, replay) {
            (true, _) => {
                if !key_limited(ex) {
                    cx.headers.extend(headers);
                }
                let id = shared_id(ex.key_id(), end_user);
                cx.keep(Held(rate_limit::Reservation::shared(id, counts.tokens, state.start_ms)));
                Verdict::Pass(CheckResult::Pass)
            }
            (false, Err(limited)) => refused(limited, end_user),
            (false, Ok(_)) => refused(
                Limited {
                    what: "requests",
                    message: "rate limit reached for this key; retry in 1 s".into(),
                    retry_after_ms: 1000,
                    headers: vec![("retry-after", "1".into())],
                },
                end_user,
            ),
        }
    }
}

impl Check for EndUserRateLimit {
    fn name(&self) -> CheckName {
        CheckName::RateLimit
    }

    /// Applies when the request names an end user and its key has per-end-user limits;
    /// refuses with 429 (the message says it is the end user's limit).
    fn on_request(&self, ex: &mut Exchange, cx: &mut Ctx) -> Verdict {
        let Some((end_user, rpm, tpm, ask)) = limits(ex) else { return Verdict::Skip };
        match &self.shared {
            None => self.local(ex, cx),
            Some(c) if c.is_up() => Verdict::Ask(Ask::Rate { key_id: shared_id(ex.key_id(), end_user), rpm, tpm, ask }),
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
            _ => self.local(ex, cx),
        }
    }

    /// Corrects the token reservation to what the answer really used.
    fn on_complete(&self, done: &Outcome, cx: &mut Ctx) {
        if let Some(Held(r)) = cx.take::<Held>() {
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

    fn exchange(end_user: Option<&str>, rpm: Option<i64>) -> Exchange {
        let mut ex = Exchange::fixture(json!({"model": "gpt-4o-mini", "messages": []}));
        let mut rec = ex.key.record.clone();
        rec.end_user_rpm_limit = rpm;
        ex.key = Arc::new(crate::snapshot::KeyEntry::new(rec, Default::default()));
        ex.end_user = end_user.map(Into::into);
        ex
    }

    #[test]
    fn each_end_user_has_its_own_windows_and_the_refusal_names_it() {
        let check = EndUserRateLimit::default();
        assert!(matches!(check.on_request(&mut exchange(None, Some(1)), &mut Ctx::default()), Verdict::Skip));
        assert!(matches!(check.on_request(&mut exchange(Some("a"), None), &mut Ctx::default()), Verdict::Skip));
        let mut a = exchange(Some("alice"), Some(2));
        for _ in 0..2 {
            assert!(matches!(check.on_request(&mut a, &mut Ctx::default()), Verdict::Pass(CheckResult::Pass)));
        }
        match check.on_request(&mut a, &mut Ctx::default()) {
            Verdict::Block(CheckResult::Block, e) => {
                assert_eq!(e.status(), 429);
                assert!(e.message.contains("end user \"alice\""), "{}", e.message);
            }
            other => panic!("expected a block, got {other:?}"),
        }
        // Another end user of the same key is not affected.
        let mut b = exchange(Some("bob"), Some(2));
        b.key = a.key.clone();
        assert!(matches!(check.on_request(&mut b, &mut Ctx::default()), Verdict::Pass(CheckResult::Pass)));
        assert_eq!(a.key.state.end_users.len(), 2);
    }

    /// The windows are the request's clock's: two minutes on, the end user has its limit again.
    #[test]
    fn an_end_users_window_resets() {
        let check = EndUserRateLimit::default();
        let mut a = exchange(Some("alice"), Some(1));
        assert!(matches!(check.on_request(&mut a, &mut Ctx::default()), Verdict::Pass(_)));
        assert!(matches!(check.on_request(&mut a, &mut Ctx::default()), Verdict::Block(..)));
        a.now += chrono::Duration::minutes(2);
        assert!(matches!(check.on_request(&mut a, &mut Ctx::default()), Verdict::Pass(_)));
    }
}
