//! What a Responses answer (`/v1/responses`) looks like to the relay: the stored ids it names,
//! the events that end or fail its stream, its error event, and the text its parts repeat
//! whole. A create is a model call like a chat completion (same stages, checks and one
//! receipt); ownership of what it stores is `stored.rs`.

use std::collections::HashMap;

use serde_json::{json, Value};

use super::sse::event_data;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{ApiError, ErrorKind};

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
}
