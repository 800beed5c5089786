//! Who owns which stored OpenAI response (`/v1/responses`): a create's answer names the response
//! and its output items, which OpenAI keeps and later calls name again. Those ids are claimed
//! for the tenant as soon as the answer names them ([`Owners`]), and every call that names one
//! is refused with 404 unless it is the caller's tenant's, before anything reaches the provider
//! (docs/decisions/gateway.md, "OpenAI Responses API").

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::error::{ApiError, ErrorKind};
use crate::store::{self, Store};

/// A stored response or item a request names.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredRef {
    pub id: String,
    /// Must be known as this tenant's (`previous_response_id`, an `item_reference`, a path id).
    /// Otherwise it is refused only when known as another tenant's: an input item may carry an
    /// id the provider never issued (agent frameworks put placeholders there).
    pub strict: bool,
    pub what: &'static str,
}

impl StoredRef {
    pub fn response(id: &str) -> StoredRef {
        StoredRef { id: id.to_string(), strict: true, what: "response" }
    }
}

/// The stored responses and items a Responses request body names. `conversation` is refused:
/// conversations are not served through the gateway, so none can be this tenant's.
pub fn references(json: &Value) -> Result<Vec<StoredRef>, ApiError> {
    let mut refs = Vec::new();
    match json.get("previous_response_id") {
        None | Some(Value::Null) => {}
        Some(Value::String(id)) => refs.push(StoredRef::response(id)),
        Some(_) => return Err(ApiError::invalid("field `previous_response_id` must be a string")),
    }
    if json.get("conversation").is_some_and(|c| !c.is_null()) {
        return Err(ApiError::invalid(
            "field `conversation` is not supported through the gateway (conversations are not served here); \
             continue a response with `previous_response_id`",
        ));
    }
    if let Some(Value::Array(items)) = json.get("input") {
        for item in items {
            let Some(id) = item.get("id").and_then(Value::as_str) else { continue };
            // An item reference is `{id}` with `type: item_reference` or no type (and no role).
            let strict = match item.get("type").and_then(Value::as_str) {
                Some(t) => t == "item_reference",
                None => item.get("role").is_none(),
            };
            refs.push(StoredRef { id: id.to_string(), strict, what: "item" });
        }
    }
    Ok(refs)
}

/// Ids worth looking up or recording: what the provider issues is short and printable.
fn plausible(id: &str) -> bool {
    !id.is_empty() && id.len() <= 256 && id.bytes().all(|b| b.is_ascii_graphic())
}

/// Recently claimed or looked-up owners, in two generations: when the current one is full it
/// becomes the previous one (the one before is dropped), so memory stays bounded and a claim
/// stays here far longer than its database write takes.
#[derive(Default)]
struct Recent {
    current: HashMap<Box<str>, Arc<str>>,
    previous: HashMap<Box<str>, Arc<str>>,
}

const GENERATION: usize = 1 << 16;

impl Recent {
    fn get(&self, id: &str) -> Option<Arc<str>> {
        self.current.get(id).or_else(|| self.previous.get(id)).cloned()
    }

    fn put(&mut self, id: &str, tenant: Arc<str>) {
        if self.current.len() >= GENERATION {
            self.previous = std::mem::take(&mut self.current);
        }
        self.current.insert(id.into(), tenant);
    }
}

/// Who owns which stored response (and output item): the `response_owners` table, with the
/// recent claims in memory. A claim is in memory before the answer that names it can end, so a
/// retrieve right after the create finds it on this instance; its database write is batched off
/// the request path.
pub struct Owners {
    store: Store,
    recent: Mutex<Recent>,
    writes: tokio::sync::mpsc::UnboundedSender<(String, Arc<str>)>,
}

/// Claims written per statement batch.
const WRITE_BATCH: usize = 256;

impl Owners {
    pub fn new(store: Store) -> Owners {
        let (writes, mut queued) = tokio::sync::mpsc::unbounded_channel::<(String, Arc<str>)>();
        let db = store.clone();
        // The database runtime lives as long as the process, like the receipt writer's.
        store::db_runtime().spawn(async move {
            while let Some(first) = queued.recv().await {
                let mut batch = vec![first];
                while batch.len() < WRITE_BATCH {
                    match queued.try_recv() {
                        Ok(c) => batch.push(c),
                        Err(_) => break,
                    }
                }
                let n = batch.len();
                if let Err(e) = store::responses::claim(&db, batch).await {
                    // Still in memory: this instance keeps serving them until they age out.
                    log::error!("{n} response owner(s) could not be recorded: {e}");
                }
            }
        });
        Owners { store, recent: Mutex::new(Recent::default()), writes }
    }

    fn recent(&self) -> std::sync::MutexGuard<'_, Recent> {
        self.recent.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records that `tenant` created `id` (first claim wins).
    pub fn claim(&self, tenant: &Arc<str>, id: &str) {
        if !plausible(id) {
            return;
        }
        {
            let mut recent = self.recent();
            if recent.get(id).is_some() {
                return;
            }
            recent.put(id, tenant.clone());
        }
        let _ = self.writes.send((id.to_string(), tenant.clone()));
    }

    /// Refuses (404, the provider never asked) any reference that is another tenant's, or that
    /// must be this tenant's and is not known to be.
    pub async fn check(&self, tenant: &str, refs: &[StoredRef]) -> Result<(), ApiError> {
        if refs.is_empty() {
            return Ok(());
        }
        let mut owners: HashMap<&str, Arc<str>> = HashMap::new();
        let mut unknown: Vec<String> = Vec::new();
        {
            let recent = self.recent();
            for r in refs.iter().filter(|r| plausible(&r.id)) {
                match recent.get(&r.id) {
                    Some(t) => {
                        owners.insert(&r.id, t);
                    }
                    None => unknown.push(r.id.clone()),
                }
            }
        }
        unknown.sort_unstable();
        unknown.dedup();
        if !unknown.is_empty() {
            let found = store::responses::owners(&self.store, unknown).await.map_err(|e| {
                log::error!("response owners could not be read: {e}");
                ApiError::new(ErrorKind::Unavailable, "could not check who owns the named response; retry shortly")
            })?;
            let mut recent = self.recent();
            for (id, t) in found {
                let t: Arc<str> = t.into();
                recent.put(&id, t.clone());
                if let Some(r) = refs.iter().find(|r| r.id == id) {
                    owners.insert(&r.id, t);
                }
            }
        }
        for r in refs {
            let ours = match owners.get(r.id.as_str()) {
                Some(t) => &**t == tenant,
                None => !r.strict,
            };
            if !ours {
                return Err(ApiError::not_found(&format!("{} `{}`", r.what, r.id)));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn references_name_the_chain_and_the_items() {
        let body = json!({"model": "m", "previous_response_id": "resp_a", "input": [
            {"role": "user", "content": "hi"},
            {"type": "item_reference", "id": "msg_1"},
            {"id": "rs_2"},
            {"type": "function_call_output", "call_id": "call_1", "output": "{}"},
            {"type": "message", "id": "msg_3", "role": "assistant", "content": []},
            {"type": "message", "id": "__fake_id__", "role": "user", "content": []},
        ]});
        let got: Vec<(String, bool)> = references(&body).unwrap().into_iter().map(|r| (r.id, r.strict)).collect();
        let want = [("resp_a", true), ("msg_1", true), ("rs_2", true), ("msg_3", false), ("__fake_id__", false)];
        assert_eq!(got, want.map(|(i, s)| (i.to_string(), s)));
        assert!(references(&json!({"input": "hi"})).unwrap().is_empty());
        assert!(references(&json!({"previous_response_id": null})).unwrap().is_empty());
        assert!(references(&json!({"previous_response_id": 5})).is_err());
        assert!(references(&json!({"conversation": "conv_1"})).unwrap_err().message.contains("conversation"));
    }

    #[test]
    fn recent_owners_stay_bounded() {
        let mut r = Recent::default();
        let t: Arc<str> = "t1".into();
        for i in 0..(2 * GENERATION + 1) {
            r.put(&format!("resp_{i}"), t.clone());
        }
        assert!(r.current.len() + r.previous.len() <= 2 * GENERATION);
        assert!(r.get(&format!("resp_{}", 2 * GENERATION)).is_some());
        assert!(r.get("resp_0").is_none());
    }
}
