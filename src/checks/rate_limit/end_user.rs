//! `RATELIMIT` per end user: each end user of a key has its own requests and tokens per minute
//! (`endUserRpmLimit` / `endUserTpmLimit`, `PATCH /v1/keys/{id}/limits`).
//!
//! The key's limiter ([`super::plugin::Limiter`]) over another [`Lane`]: in one process the
//! windows are the key's per-end-user ones (`KeyState::end_users`); with `cluster.redis_url`
//! they are a rate hash in Redis named `<keyId>/<endUser>` (the receipt's actor), decided in the
//! same atomic admission call as the key's limits and budgets. It runs just before the key's
//! limits and records under the same name (the pipeline keeps one `RATELIMIT` entry, the
//! strongest).

use std::sync::Arc;

use super::plugin::{Lane, Limiter, Limits};
use crate::checks::pipeline::{Exchange, Verdict};
use crate::checks::rate_limit::{Limited, Windows};
use crate::error::{ApiError, ErrorKind};
use crate::receipts::CheckResult;

/// Each end user's limits of the key.
pub struct EndUserLane;

/// The key's per-end-user limits.
pub type EndUserRateLimit = Limiter<EndUserLane>;

fn end_user(ex: &Exchange) -> &str {
    ex.end_user.as_deref().unwrap_or_default()
}

impl Lane for EndUserLane {
    const SHARED: &'static str = "end-user rate limits";

    /// None without an end user or without per-end-user limits.
    fn limits(ex: &Exchange) -> Option<Limits> {
        ex.end_user.as_ref()?;
        Limits::of(ex, ex.key.record.end_user_rpm_limit, ex.key.record.end_user_tpm_limit)
    }

    fn windows(ex: &Exchange, now_ms: i64) -> Arc<Windows> {
        ex.key.state.end_users.get(end_user(ex), now_ms)
    }

    /// The receipt's actor.
    fn shared_id(ex: &Exchange) -> Arc<str> {
        format!("{}/{}", ex.key_id(), end_user(ex)).into()
    }

    /// Only when the key has no limits of its own (one name, one value: the key's win).
    fn shows_headers(ex: &Exchange) -> bool {
        ex.key.record.rpm_limit.is_none() && ex.key.record.tpm_limit.is_none()
    }

    /// The message names the end user and the per-end-user limit.
    fn refused(ex: &Exchange, limited: Limited) -> Verdict {
        let message = limited
            .message
            .replace(
                "for this key",
                &format!("for end user \"{}\" of this key (endUserRpmLimit/endUserTpmLimit)", end_user(ex)),
            )
            .replace("the key's limit", "the key's per-end-user limit");
        Verdict::Block(CheckResult::Block, ApiError::new(ErrorKind::RateLimited, message).with_headers(limited.headers))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::pipeline::{Check, Ctx};
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
