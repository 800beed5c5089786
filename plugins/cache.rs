//! `CACHE`: exact-match answers per tenant, when a policy turns `cache.mode: exact` on.

use std::sync::Arc;

use crate::cache::{self, AnswerCache, Slot};
use crate::pipeline::{Check, Ctx, Exchange, Outcome, Saved, Verdict};

pub struct Cache {
    store: Arc<AnswerCache>,
}

impl Cache {
    pub fn new(store: Arc<AnswerCache>) -> Self {
        Cache { store }
    }
}

impl Check for Cache {
    fn name(&self) -> &'static str {
        "CACHE"
    }

    /// `HIT` answers from memory (the upstream is never called), `MISS` lets the request go
    /// and keeps its answer, `BYPASS` (`Cache-Control: no-cache`) skips the lookup but still
    /// refreshes the entry.
    fn on_request(&self, ex: &mut Exchange, cx: &mut Ctx) -> Verdict {
        let Some(settings) = ex.snap.policy(ex.tenant_id()).cache() else { return Verdict::Skip };
        let key = cache::key(ex.tenant_id(), ex.route, &ex.body);
        cx.cache_slot = Some(Slot { key, ttl: settings.ttl });
        if ex.no_cache {
            return Verdict::Pass("BYPASS");
        }
        match self.store.get(&key) {
            Some(hit) => {
                cx.cache_slot = None;
                cx.saved =
                    Some(Saved { tokens: hit.usage.prompt_tokens + hit.usage.completion_tokens, usd: hit.cost_usd });
                Verdict::Serve(hit)
            }
            None => Verdict::Pass("MISS"),
        }
    }

    /// Keeps a complete, successful answer.
    fn on_complete(&self, done: &Outcome, cx: &mut Ctx) {
        if let (Some(slot), Some(answer)) = (cx.cache_slot.take(), done.answer.as_ref()) {
            if (200..300).contains(&answer.status) {
                self.store.put(&slot, answer.clone());
            }
        }
    }
}
