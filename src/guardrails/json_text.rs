//! The text fields of provider JSON bodies and SSE events, so callers never hand-walk
//! provider shapes. Only free text written by a person or a model is scanned; ids, model
//! names, tool schemas and URLs are left alone.

use std::borrow::Cow;

use serde_json::Value;

use super::{Finding, Guardrails};

/// What applying guardrails to a JSON body found. Finding positions are offsets into the
/// text field they were found in.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JsonOutcome {
    pub findings: Vec<Finding>,
    pub blocked: bool,
    /// At least one text field was rewritten (the body must be re-serialized).
    pub changed: bool,
}

/// Nesting depth followed through content blocks (`tool_result` holding blocks); provider
/// shapes need two.
pub(super) const MAX_DEPTH: usize = 4;

/// Request bodies: OpenAI chat `messages[].content` (string, or parts `{type: "text", text}`),
/// Anthropic `system` and `messages[].content` (string or blocks with `text`, `tool_result`
/// blocks with nested content), embeddings `input` (string or strings; Responses-style input
/// items with `content` too), legacy `prompt` (string or strings).
pub fn apply_to_request_json(g: &Guardrails, body: &mut Value) -> JsonOutcome {
    let mut out = JsonOutcome::default();
    if g.is_empty() {
        return out;
    }
    let Some(obj) = body.as_object_mut() else { return out };
    if let Some(Value::Array(messages)) = obj.get_mut("messages") {
        for m in messages {
            if let Some(c) = m.get_mut("content") {
                content(g, c, 0, &mut out);
            }
        }
    }
    for field in ["system", "input", "prompt"] {
        if let Some(v) = obj.get_mut(field) {
            content(g, v, 0, &mut out);
        }
    }
    out
}

/// Non-streamed response bodies: OpenAI `choices[].message.content` (and legacy
/// `choices[].text`), Anthropic `content[].text`, Responses `output[].content[].text`.
pub fn apply_to_response_json(g: &Guardrails, body: &mut Value) -> JsonOutcome {
    let mut out = JsonOutcome::default();
    if g.is_empty() {
        return out;
    }
    let Some(obj) = body.as_object_mut() else { return out };
    if let Some(Value::Array(choices)) = obj.get_mut("choices") {
        for c in choices {
            if let Some(v) = c.get_mut("message").and_then(|m| m.get_mut("content")) {
                content(g, v, 0, &mut out);
            }
            if let Some(Value::String(s)) = c.get_mut("text") {
                apply_str(g, s, &mut out);
            }
        }
    }
    for field in ["content", "output"] {
        if let Some(v @ Value::Array(_)) = obj.get_mut(field) {
            content(g, v, 0, &mut out);
        }
    }
    out
}

/// A string, or a list of strings / blocks. A block's `text` is scanned and its `content`
/// followed (tool results, Responses input and output items).
fn content(g: &Guardrails, v: &mut Value, depth: usize, out: &mut JsonOutcome) {
    match v {
        Value::String(s) => apply_str(g, s, out),
        Value::Array(items) if depth < MAX_DEPTH => {
            for item in items {
                match item {
                    Value::String(s) => apply_str(g, s, out),
                    Value::Object(block) => {
                        if let Some(Value::String(s)) = block.get_mut("text") {
                            apply_str(g, s, out);
                        }
                        if let Some(c) = block.get_mut("content") {
                            content(g, c, depth + 1, out);
                        }
                    }
                    _ => {}
                }
            }
        }
        _ => {}
    }
}

fn apply_str(g: &Guardrails, s: &mut String, out: &mut JsonOutcome) {
    let a = g.apply(s);
    out.blocked |= a.blocked;
    out.findings.extend(a.findings);
    if let Cow::Owned(t) = a.text {
        *s = t;
        out.changed = true;
    }
}

/// The text delta of one parsed SSE `data:` event: OpenAI `choices[0].delta.content` (or
/// legacy `choices[0].text`), Anthropic `content_block_delta` → `delta.text`.
pub fn event_text(v: &Value) -> Option<&str> {
    if let Some(choice) = v.get("choices").and_then(|c| c.get(0)) {
        return match choice.get("delta") {
            Some(d) => d.get("content").and_then(Value::as_str),
            None => choice.get("text").and_then(Value::as_str),
        };
    }
    if v.get("type").and_then(Value::as_str) == Some("content_block_delta") {
        return v.get("delta")?.get("text")?.as_str();
    }
    None
}

/// Writes `text` where [`event_text`] read it; `false` when the event has no such field.
pub fn set_event_text(v: &mut Value, text: String) -> bool {
    let slot = if v.get("choices").is_some() {
        let Some(choice) = v.get_mut("choices").and_then(|c| c.get_mut(0)) else { return false };
        if choice.get("delta").is_some() {
            choice.get_mut("delta").and_then(|d| d.get_mut("content"))
        } else {
            choice.get_mut("text")
        }
    } else if v.get("type").and_then(Value::as_str) == Some("content_block_delta") {
        v.get_mut("delta").and_then(|d| d.get_mut("text"))
    } else {
        None
    };
    match slot {
        Some(s @ Value::String(_)) => {
            *s = Value::String(text);
            true
        }
        _ => false,
    }
}
