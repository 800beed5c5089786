//! The OpenAI Responses API (`/v1/responses`): who owns a stored response, what a Responses
//! stream looks like to the relay, and the calls on stored responses that are not model calls
//! (retrieve, delete, input items, input token counts).
//!
//! A create is a model call like a chat completion (same stages, checks and one receipt); its
//! answer names the response and its output items, which OpenAI keeps and later calls name
//! again. Those ids are claimed for the tenant as soon as the answer names them ([`Owners`]),
//! and every call that names one is refused with 404 unless it is the caller's tenant's, before
//! anything reaches the provider (docs/decisions.md, "OpenAI Responses API").

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use pingora::proxy::Session;
use serde_json::{json, Value};

use super::aside::Aside;
use super::ending::Ending;
use super::sse::event_data;
use super::{body, request, routes, Ctx, Gateway};
use crate::checks::guardrail::plugin as guardrail;
use crate::config::ProviderName;
use crate::error::{ApiError, ErrorKind};
use crate::providers::Flavor;
use crate::providers::{self, Dialect, Target};
use crate::snapshot::KeyEntry;
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

/// The ids a whole create answer names: the response's and its output items'.
pub fn answer_ids(body: &[u8]) -> Vec<String> {
    #[derive(serde::Deserialize)]
    struct Item {
        id: Option<Value>,
    }
    #[derive(serde::Deserialize)]
    struct Answer {
        id: Option<Value>,
        output: Option<Vec<Item>>,
    }
    let Ok(a) = serde_json::from_slice::<Answer>(body) else { return Vec::new() };
    let items = a.output.unwrap_or_default().into_iter().map(|i| i.id);
    std::iter::once(a.id).chain(items).filter_map(|id| id?.as_str().map(str::to_string)).collect()
}

/// The ids a stream event names first: the response in `response.created`, an output item in
/// `response.output_item.added`. Other events are not parsed.
pub fn event_ids(event: &[u8]) -> Vec<String> {
    let named = |t: &[u8]| event.windows(t.len()).any(|w| w == t);
    if !named(b"response.created") && !named(b"response.output_item.added") {
        return Vec::new();
    }
    let Some(v) = event_data(event).and_then(|d| serde_json::from_str::<Value>(&d).ok()) else { return Vec::new() };
    let id = match v.get("type").and_then(Value::as_str) {
        Some("response.created") => v.pointer("/response/id"),
        Some("response.output_item.added") => v.pointer("/item/id"),
        _ => None,
    };
    id.and_then(Value::as_str).map(|s| vec![s.to_string()]).unwrap_or_default()
}

/// The events that end a Responses stream (each carries the whole response and its usage).
const TERMINAL: [&str; 3] = ["response.completed", "response.incomplete", "response.failed"];

/// Whether this event ends the stream: held back until the receipt is committed.
pub fn is_terminal(event: &[u8]) -> bool {
    named_one_of(event, &TERMINAL)
}

/// The provider failed after the stream began: OpenAI's `error` event, or `response.failed`.
pub fn is_failure(event: &[u8]) -> bool {
    named_one_of(event, &["error", "response.failed"])
}

/// Whether the event's name (its `event:` line, else its data's `type`) is one of `names`.
fn named_one_of(event: &[u8], names: &[&str]) -> bool {
    let mentions = |t: &str| event.windows(t.len()).any(|w| w == t.as_bytes());
    if !names.iter().any(|t| mentions(t)) {
        return false;
    }
    let text = String::from_utf8_lossy(event);
    let named = text.lines().find_map(|l| l.strip_prefix("event:")).map(str::trim);
    if let Some(name) = named {
        return names.contains(&name);
    }
    // No `event:` line (allowed by SSE): the data's `type` says it.
    event_data(event)
        .and_then(|d| serde_json::from_str::<Value>(&d).ok())
        .is_some_and(|v| v.get("type").and_then(Value::as_str).is_some_and(|t| names.contains(&t)))
}

/// A refusal as the Responses stream's last event: OpenAI's `error` event (`type`, `code`,
/// `message`, `param`) that also carries the gateway's `error` object, which is what makes the
/// openai SDK raise `APIError` instead of yielding the event.
pub fn error_event(envelope: Value) -> Value {
    let error = envelope.get("error").cloned().unwrap_or(Value::Null);
    json!({
        "type": "error",
        "code": error.get("type").cloned().unwrap_or(Value::Null),
        "message": error.get("message").cloned().unwrap_or(Value::Null),
        "param": null,
        "error": error,
    })
}

/// The answer text each output part of a Responses stream was given, as the client saw it
/// (after the answer guardrails), keyed by `(output_index, content_index)`.
#[derive(Default)]
pub struct SaidText {
    parts: HashMap<(u64, u64), String>,
}

fn index(v: &Value, field: &str) -> u64 {
    v.get(field).and_then(Value::as_u64).unwrap_or(0)
}

impl SaidText {
    /// `text` went out in a delta of the part `event` names.
    pub fn add(&mut self, event: &Value, text: &str) {
        let key = (index(event, "output_index"), index(event, "content_index"));
        self.parts.entry(key).or_default().push_str(text);
    }

    /// Puts the said text into an event that repeats a part whole; true when it changed.
    pub fn rewrite(&self, event: &mut Value) -> bool {
        let kind = event.get("type").and_then(Value::as_str).unwrap_or_default().to_string();
        let oi = index(event, "output_index");
        let mut changed = false;
        let mut put = |slot: Option<&mut Value>, key: (u64, u64)| {
            if let (Some(slot @ Value::String(_)), Some(said)) = (slot, self.parts.get(&key)) {
                if slot.as_str() != Some(said.as_str()) {
                    *slot = Value::String(said.clone());
                    changed = true;
                }
            }
        };
        match kind.as_str() {
            "response.output_text.done" => {
                let ci = index(event, "content_index");
                put(event.get_mut("text"), (oi, ci));
            }
            "response.content_part.done" => {
                let ci = index(event, "content_index");
                put(event.get_mut("part").and_then(|p| p.get_mut("text")), (oi, ci));
            }
            "response.output_item.done" => {
                for (ci, part) in parts(event.get_mut("item")).into_iter().enumerate() {
                    put(part.get_mut("text"), (oi, ci as u64));
                }
            }
            k if TERMINAL.contains(&k) => {
                let output = event.pointer_mut("/response/output").and_then(Value::as_array_mut);
                for (oi, item) in output.into_iter().flatten().enumerate() {
                    for (ci, part) in parts(Some(item)).into_iter().enumerate() {
                        put(part.get_mut("text"), (oi as u64, ci as u64));
                    }
                }
            }
            _ => {}
        }
        changed
    }
}

/// The content parts of an output item.
fn parts(item: Option<&mut Value>) -> Vec<&mut Value> {
    match item.and_then(|i| i.get_mut("content")).and_then(Value::as_array_mut) {
        Some(content) => content.iter_mut().collect(),
        None => Vec::new(),
    }
}

/// `stream=true` in a retrieve's query (a background response's events, replayed).
fn query_streams(query: Option<&str>) -> bool {
    query.is_some_and(|q| q.split('&').any(|kv| kv == "stream=true"))
}

impl Gateway {
    /// A call on stored responses that is not a model call: retrieve, delete, input items, or an
    /// input token count. Only the caller's tenant's responses are reached; it leaves no receipt
    /// and is not billed. The answer guardrails still see a retrieved response (its text is the
    /// model's answer again), and the request guardrails a counted input (it leaves for OpenAI).
    pub(super) async fn stored_responses(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        key: Arc<KeyEntry>,
        aside: &Aside,
    ) -> Result<Ending, ApiError> {
        ctx.provider = Some(ProviderName::OpenAi);
        let raw = body::read(session, ctx.snap.config.limits.max_body_bytes).await?;
        let tenant = key.tenant_id();
        let (method, body, stream) = match aside {
            Aside::ResponseRetrieve(id) | Aside::ResponseDelete(id) | Aside::ResponseInputItems(id) => {
                self.owners.check(tenant, &[StoredRef::response(id)]).await?;
                let method = if matches!(aside, Aside::ResponseDelete(_)) { "DELETE" } else { "GET" };
                let stream =
                    matches!(aside, Aside::ResponseRetrieve(_)) && query_streams(session.req_header().uri.query());
                (method, Bytes::new(), stream)
            }
            _ => {
                let mut json = request::json_object(&raw)?;
                // The model, when named, is one this key may call.
                if let Some(m) = json.get("model").and_then(Value::as_str) {
                    ctx.model = m.chars().take(256).collect();
                    self.admit_model(ctx, &key, &[])?;
                }
                self.owners.check(tenant, &references(&json)?).await?;
                let body = match guardrail::scan_side_request(&ctx.snap, tenant, &mut json)? {
                    true => Bytes::from(serde_json::to_vec(&json).unwrap_or_default()),
                    false => raw,
                };
                ("POST", body, false)
            }
        };
        // The answer-side state lives here, not in `ctx.cx`: nothing of this call is recorded.
        let mut cx = crate::checks::pipeline::Ctx::default();
        if matches!(aside, Aside::ResponseRetrieve(_)) {
            guardrail::arm_answer_scan(&ctx.snap, tenant, &mut cx);
        }
        let cred = self.credential(ctx, &key, ProviderName::OpenAi)?;
        let provider = providers::provider(ProviderName::OpenAi);
        let req = session.req_header();
        let path = routes::normalize(req.uri.path_and_query().map_or("", |p| p.as_str())).to_string();
        let client_header = |name: &str| req.headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
        let env = providers::Env { config: &ctx.snap.config, tokens: &self.app.tokens };
        let target = Target::Native { path: &path, stream };
        let mut call = provider.prepare(&env, &cred, target, body, &client_header).await?;
        call.method = method;
        if method != "POST" {
            call.headers.retain(|(k, _)| *k != "content-type");
        }
        let resp = self.send_upstream(ctx, ProviderName::OpenAi, &cred, call).await?;
        let headers = ctx.answer_headers();
        let route = (Dialect::Responses, Flavor::OpenAi, ProviderName::OpenAi, stream);
        Ok(self.relay_aside(session, ctx, resp, route, &headers, &mut cx).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn ids_come_from_the_answer_and_the_first_events() {
        let body = br#"{"id":"resp_1","object":"response","output":[{"id":"msg_1","type":"message"},
            {"id":"fc_1","type":"function_call"},{"type":"x"}],"usage":null}"#;
        assert_eq!(answer_ids(body), ["resp_1", "msg_1", "fc_1"]);
        assert!(answer_ids(b"not json").is_empty());
        let created =
            b"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_9\"}}\n\n";
        assert_eq!(event_ids(created), ["resp_9"]);
        let added = b"event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"id\":\"msg_9\"}}\n\n";
        assert_eq!(event_ids(added), ["msg_9"]);
        assert!(event_ids(b"event: response.output_text.delta\ndata: {\"delta\":\"x\"}\n\n").is_empty());
    }

    #[test]
    fn terminal_and_failure_events_by_name_or_type() {
        assert!(is_terminal(b"event: response.completed\ndata: {\"type\":\"response.completed\"}\n\n"));
        assert!(is_terminal(b"data: {\"type\":\"response.incomplete\",\"response\":{}}\n\n"));
        assert!(is_terminal(b"event: response.failed\r\ndata: {}\r\n\r\n"));
        assert!(!is_terminal(b"event: response.output_text.done\ndata: {\"type\":\"response.output_text.done\"}\n\n"));
        assert!(!is_terminal(b"event: response.created\ndata: {\"response\":{\"status\":\"response.completed\"}}\n\n"));
        assert!(is_failure(b"event: error\ndata: {\"type\":\"error\",\"code\":\"server_error\"}\n\n"));
        assert!(is_failure(b"data: {\"type\":\"response.failed\",\"response\":{\"error\":{}}}\n\n"));
        assert!(!is_failure(b"event: response.created\ndata: {\"response\":{\"error\":null}}\n\n"));
    }

    #[test]
    fn the_error_event_makes_the_sdk_raise() {
        let e = ApiError::new(ErrorKind::GuardrailBlocked, "the answer was blocked by a guardrail (credit_card)");
        let v = error_event(e.envelope(crate::providers::Flavor::OpenAi));
        assert_eq!(v["type"], "error");
        assert_eq!(v["code"], "guardrail_blocked");
        assert_eq!(v["message"], v["error"]["message"]);
        assert_eq!(v["error"]["type"], "guardrail_blocked");
    }

    #[test]
    fn whole_texts_are_rewritten_to_what_the_deltas_said() {
        let mut said = SaidText::default();
        let delta = json!({"type": "response.output_text.delta", "output_index": 1, "content_index": 0});
        said.add(&delta, "card ");
        said.add(&delta, "[REDACTED:CREDIT_CARD]");
        let full = "card 4111 1111 1111 1111";
        let mut done =
            json!({"type": "response.output_text.done", "output_index": 1, "content_index": 0, "text": full});
        assert!(said.rewrite(&mut done));
        assert_eq!(done["text"], "card [REDACTED:CREDIT_CARD]");
        assert!(!said.rewrite(&mut done), "already what was said");
        let mut part = json!({"type": "response.content_part.done", "output_index": 1, "content_index": 0,
            "part": {"type": "output_text", "text": full}});
        assert!(said.rewrite(&mut part));
        let mut item = json!({"type": "response.output_item.done", "output_index": 1,
            "item": {"id": "msg_1", "content": [{"type": "output_text", "text": full}]}});
        assert!(said.rewrite(&mut item));
        assert_eq!(item["item"]["content"][0]["text"], "card [REDACTED:CREDIT_CARD]");
        let mut completed = json!({"type": "response.completed", "response": {"output": [
            {"type": "function_call", "arguments": "{}"},
            {"id": "msg_1", "content": [{"type": "output_text", "text": full}]}]}});
        assert!(said.rewrite(&mut completed));
        assert_eq!(completed["response"]["output"][1]["content"][0]["text"], "card [REDACTED:CREDIT_CARD]");
        let mut other =
            json!({"type": "response.output_text.done", "output_index": 0, "content_index": 0, "text": "x"});
        assert!(!said.rewrite(&mut other), "a part no delta said is left alone");
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
