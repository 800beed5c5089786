//! The exact-match answer cache: bounded memory, per-entry TTL, keyed per tenant.
//!
//! The key is SHA-256 over the tenant, the route and the RFC 8785 form of the request body
//! (after request guardrails ran, minus the end-user field), so the same question asked with
//! members in another order or other whitespace hits, and one tenant never sees another's
//! answer. `stream` stays in the key: a streamed request replays the SSE bytes it was answered
//! with. Entries are weighed by their size; the least recently used go first.

pub mod plugin;

use std::sync::Arc;
use std::time::{Duration, Instant};

use moka::sync::Cache;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::checks::pipeline::Cached;

/// Where a request's answer goes once it is complete.
#[derive(Debug, Clone)]
pub struct Slot {
    pub key: [u8; 32],
    pub ttl: Duration,
}

struct Entry {
    answer: Cached,
    ttl: Duration,
}

struct PerEntryTtl;

impl moka::Expiry<[u8; 32], Arc<Entry>> for PerEntryTtl {
    fn expire_after_create(&self, _key: &[u8; 32], value: &Arc<Entry>, _created_at: Instant) -> Option<Duration> {
        Some(value.ttl)
    }
}

pub struct AnswerCache {
    entries: Cache<[u8; 32], Arc<Entry>>,
    max_entry_bytes: usize,
}

impl AnswerCache {
    pub fn new(max_bytes: u64, max_entry_bytes: usize) -> Self {
        let entries = Cache::builder()
            .max_capacity(max_bytes)
            .weigher(|_k: &[u8; 32], e: &Arc<Entry>| {
                u32::try_from(e.answer.body.len() + e.answer.content_type.len() + 96).unwrap_or(u32::MAX)
            })
            .expire_after(PerEntryTtl)
            .build();
        AnswerCache { entries, max_entry_bytes }
    }

    pub fn get(&self, key: &[u8; 32]) -> Option<Cached> {
        self.entries.get(key).map(|e| e.answer.clone())
    }

    pub fn put(&self, slot: &Slot, answer: Cached) {
        if answer.body.len() > self.max_entry_bytes || slot.ttl.is_zero() {
            return;
        }
        self.entries.insert(slot.key, Arc::new(Entry { answer, ttl: slot.ttl }));
    }

    /// Entries and weighed bytes (after pending maintenance), for tests and status.
    pub fn usage(&self) -> (u64, u64) {
        self.entries.run_pending_tasks();
        (self.entries.entry_count(), self.entries.weighted_size())
    }
}

/// The cache key of a request.
/// `model` too: the native Bedrock and Vertex routes carry it in the path, not the body.
pub fn key(tenant_id: &str, route: &str, model: &str, body: &Value) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(tenant_id.as_bytes());
    h.update([0]);
    h.update(route.as_bytes());
    h.update([0]);
    h.update(model.as_bytes());
    h.update([0]);
    match body {
        Value::Object(m) if m.contains_key("user") => {
            let mut m = m.clone();
            m.remove("user");
            h.update(crate::receipts::canonical::canonical_bytes(&m));
        }
        other => h.update(crate::receipts::canonical::canonical_bytes(other)),
    }
    h.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::Usage;
    use bytes::Bytes;
    use serde_json::json;

    fn answer(n: usize) -> Cached {
        Cached {
            status: 200,
            content_type: "application/json".into(),
            body: Bytes::from(vec![b'x'; n]),
            usage: Usage::plain(3, 2),
            cost_usd: 0.001,
        }
    }

    #[test]
    fn keys_ignore_member_order_and_the_end_user_but_not_the_tenant() {
        let a = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "user": "alice"});
        let b: Value = serde_json::from_str(r#"{ "messages":[{"content":"hi","role":"user"}],"model":"m"}"#).unwrap();
        assert_eq!(key("t1", "/v1/chat/completions", "m", &a), key("t1", "/v1/chat/completions", "m", &b));
        assert_ne!(key("t1", "/v1/chat/completions", "m", &a), key("t2", "/v1/chat/completions", "m", &a));
        assert_ne!(key("t1", "/v1/chat/completions", "m", &a), key("t1", "/v1/messages", "m", &a));
        let streamed = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": true});
        assert_ne!(key("t1", "/v1/chat/completions", "m", &b), key("t1", "/v1/chat/completions", "m", &streamed));
    }

    #[test]
    fn memory_is_bounded_and_big_answers_are_not_kept() {
        let c = AnswerCache::new(10_000, 2_000);
        for i in 0..100u8 {
            let slot = Slot { key: [i; 32], ttl: Duration::from_secs(60) };
            c.put(&slot, answer(1_000));
        }
        let (_, bytes) = c.usage();
        assert!(bytes <= 10_000, "weighed {bytes}");
        let big = Slot { key: [200; 32], ttl: Duration::from_secs(60) };
        c.put(&big, answer(5_000));
        assert!(c.get(&big.key).is_none());
    }

    #[test]
    fn entries_expire_after_their_ttl() {
        let c = AnswerCache::new(1 << 20, 1 << 16);
        let slot = Slot { key: [1; 32], ttl: Duration::from_millis(30) };
        c.put(&slot, answer(10));
        assert_eq!(c.get(&slot.key).unwrap().usage.prompt_tokens, 3);
        std::thread::sleep(Duration::from_millis(80));
        assert!(c.get(&slot.key).is_none());
    }
}
