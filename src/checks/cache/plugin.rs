//! `CACHE`: exact-match answers per tenant, when a policy turns `cache.mode: exact` on.
//!
//! With `cluster.shared_cache` the answers are kept in Redis too: a miss in this process's
//! memory asks Redis ([`Verdict::Ask`]) before it goes upstream, and every kept answer is
//! written to both. Redis not answering is a miss, never a refusal.

use std::sync::Arc;

use crate::checks::cache::{self, AnswerCache, Slot};
use crate::checks::pipeline::shared::{Answer, Ask};
use crate::checks::pipeline::{Cached, Check, Ctx, Exchange, Outcome, Saved, Verdict};
use crate::checks::shared::Cluster;
use crate::receipts::{CheckName, CheckResult};

pub struct Cache {
    store: Arc<AnswerCache>,
    /// Set only when answers are shared (`cluster.shared_cache`).
    shared: Option<Arc<Cluster>>,
}

impl Cache {
    pub fn new(store: Arc<AnswerCache>, shared: Option<Arc<Cluster>>) -> Self {
        Cache { store, shared: shared.filter(|c| c.shared_cache) }
    }
}

fn hit(cx: &mut Ctx, hit: Cached) -> Verdict {
    cx.take::<Slot>();
    cx.capture_answer = false;
    cx.saved = Some(Saved { tokens: hit.usage.prompt_tokens + hit.usage.completion_tokens, usd: hit.cost_usd });
    Verdict::Serve(hit)
}

impl Check for Cache {
    fn name(&self) -> CheckName {
        CheckName::Cache
    }

    /// `HIT` answers from memory (the upstream is never called), `MISS` lets the request go
    /// and keeps its answer, `BYPASS` (`Cache-Control: no-cache`) skips the lookup but still
    /// refreshes the entry.
    fn on_request(&self, ex: &mut Exchange, cx: &mut Ctx) -> Verdict {
        // A tool call acts (writes a file, sends a mail): replaying an earlier answer would
        // skip the act. A Responses answer is a stored object with its own id, which later
        // calls name (`previous_response_id`, retrieve): replaying it would hand out one id
        // twice. Neither is ever cached.
        if ex.kind == crate::receipts::Kind::ToolCall || ex.route == "/v1/responses" {
            return Verdict::Skip;
        }
        let Some(settings) = ex.snap.policy(ex.tenant_id()).cache() else { return Verdict::Skip };
        let key_entry = ex.key.clone();
        let key = cache::key(key_entry.tenant_id(), ex.route, &ex.model, ex.body.json());
        cx.keep(Slot { key, ttl: settings.ttl });
        cx.capture_answer = true;
        if ex.no_cache {
            return Verdict::Pass(CheckResult::Bypass);
        }
        match (self.store.get(&key), &self.shared) {
            (Some(found), _) => hit(cx, found),
            (None, Some(c)) if c.is_up() => Verdict::Ask(Ask::Cache { key }),
            (None, _) => Verdict::Pass(CheckResult::Miss),
        }
    }

    fn on_answer(&self, _ex: &mut Exchange, cx: &mut Ctx, answer: Answer) -> Verdict {
        match answer {
            Answer::Cache(Some(found)) => hit(cx, found),
            _ => Verdict::Pass(CheckResult::Miss),
        }
    }

    /// Keeps a complete, successful answer.
    fn on_complete(&self, done: &Outcome, cx: &mut Ctx) {
        if let (Some(slot), Some(answer)) = (cx.take::<Slot>(), done.answer.as_ref()) {
            if (200..300).contains(&answer.status) {
                if let Some(c) = &self.shared {
                    c.cache_put(slot.key, answer, slot.ttl);
                }
                self.store.put(&slot, answer.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::fixtures::exchange;
    use crate::checks::pipeline::Cached;
    use crate::checks::pipeline::UpstreamOutcome;
    use crate::providers::Usage;
    use serde_json::json;

    #[test]
    fn miss_then_hit_and_no_cache_bypasses() {
        let cache = Cache::new(Arc::new(AnswerCache::new(1 << 20, 1 << 16)), None);
        let yaml = "cache: {mode: exact, ttlSeconds: 60}\n";
        let body = json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]});
        let mut ex = exchange(yaml, body.clone());
        let mut cx = Ctx::default();
        assert!(matches!(cache.on_request(&mut ex, &mut cx), Verdict::Pass(CheckResult::Miss)));
        let answer = Cached {
            status: 200,
            content_type: "application/json".into(),
            body: bytes::Bytes::from_static(b"{}"),
            usage: Usage::plain(3, 4),
            cost_usd: 0.5,
        };
        let done = Outcome {
            ex: &ex,
            status: 200,
            upstream: UpstreamOutcome::Pass,
            usage: None,
            cost_usd: 0.5,
            answer: Some(answer),
        };
        cache.on_complete(&done, &mut cx);

        let mut ex = exchange(yaml, body.clone());
        let mut cx = Ctx::default();
        assert!(matches!(cache.on_request(&mut ex, &mut cx), Verdict::Serve(_)));
        assert_eq!(cx.saved, Some(Saved { tokens: 7, usd: 0.5 }));

        let mut ex = exchange(yaml, body);
        ex.no_cache = true;
        assert!(matches!(cache.on_request(&mut ex, &mut Ctx::default()), Verdict::Pass(CheckResult::Bypass)));
    }
}
