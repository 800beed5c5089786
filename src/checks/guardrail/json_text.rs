//! Guardrails over JSON: the text fields of model-call bodies and stream events (where they sit
//! in each dialect is `providers::text`'s to say), and of MCP tool calls and results. Only free
//! text written by a person or a model is scanned; ids, model names, tool schemas and URLs are
//! left alone.

use std::borrow::Cow;

use serde_json::Value;

use super::rails::Guardrails;
use super::scan::Finding;
use crate::providers;

/// What applying guardrails to a JSON body found. Finding positions are offsets into the
/// text field they were found in.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JsonOutcome {
    pub findings: Vec<Finding>,
    pub blocked: bool,
    /// At least one text field was rewritten (the body must be re-serialized).
    pub changed: bool,
}

/// Nesting depth followed through content blocks (`tool_result` holding blocks); the dialects'
/// shapes need two.
pub(super) const MAX_DEPTH: usize = 4;

/// Request bodies: every text content of every dialect's request
/// ([`providers::text::request_contents`]).
pub fn apply_to_request_json(g: &Guardrails, body: &mut Value) -> JsonOutcome {
    let mut out = JsonOutcome::default();
    if !g.is_empty() {
        providers::text::request_contents(body, |c| content(g, c, 0, &mut out));
    }
    out
}

/// Non-streamed response bodies: every text content of every dialect's answer
/// ([`providers::text::response_contents`]).
pub fn apply_to_response_json(g: &Guardrails, body: &mut Value) -> JsonOutcome {
    let mut out = JsonOutcome::default();
    if !g.is_empty() {
        providers::text::response_contents(body, |c| content(g, c, 0, &mut out));
    }
    out
}

/// How deep tool arguments and results are followed: serde_json parses no deeper, so every
/// string of a parsed message is reached.
const TOOL_DEPTH: usize = 128;

/// A JSON-RPC `tools/call` request: every string in `params.arguments`, at any depth (tool
/// arguments have no fixed shape; an email in any of them is still an email). Object keys are
/// names, not text, and are left alone.
pub fn apply_to_tool_call(g: &Guardrails, message: &mut Value) -> JsonOutcome {
    let mut out = JsonOutcome::default();
    if let Some(args) = message.pointer_mut("/params/arguments").filter(|_| !g.is_empty()) {
        all_strings(g, args, 0, &mut out);
    }
    out
}

/// A JSON-RPC response to `tools/call`: the `text` of its `content` blocks (and of embedded
/// resources), and every string of `structuredContent`. Images, audio and URIs are left alone.
pub fn apply_to_tool_result(g: &Guardrails, message: &mut Value) -> JsonOutcome {
    let mut out = JsonOutcome::default();
    if g.is_empty() {
        return out;
    }
    let Some(result) = message.get_mut("result").and_then(Value::as_object_mut) else { return out };
    if let Some(Value::Array(blocks)) = result.get_mut("content") {
        for block in blocks {
            if let Some(Value::String(s)) = block.get_mut("text") {
                apply_str(g, s, &mut out);
            }
            if let Some(Value::String(s)) = block.pointer_mut("/resource/text") {
                apply_str(g, s, &mut out);
            }
        }
    }
    if let Some(v) = result.get_mut("structuredContent") {
        all_strings(g, v, 0, &mut out);
    }
    out
}

fn all_strings(g: &Guardrails, v: &mut Value, depth: usize, out: &mut JsonOutcome) {
    match v {
        Value::String(s) => apply_str(g, s, out),
        Value::Array(items) if depth < TOOL_DEPTH => items.iter_mut().for_each(|i| all_strings(g, i, depth + 1, out)),
        Value::Object(m) if depth < TOOL_DEPTH => m.values_mut().for_each(|i| all_strings(g, i, depth + 1, out)),
        _ => {}
    }
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

/// The text delta of one parsed stream event, in any dialect ([`providers::text::event_text`]).
pub fn event_text(v: &Value) -> Option<&str> {
    providers::text::event_text(v)
}

/// Writes `text` where [`event_text`] read it; `false` when the event has no such field.
pub fn set_event_text(v: &mut Value, text: String) -> bool {
    match providers::text::event_text_slot(v) {
        Some(s @ Value::String(_)) => {
            *s = Value::String(text);
            true
        }
        _ => false,
    }
}
