//! The text fields of provider JSON bodies and SSE events, so callers never hand-walk
//! provider shapes. Only free text written by a person or a model is scanned; ids, model
//! names, tool schemas and URLs are left alone.

use std::borrow::Cow;

use serde_json::Value;

use super::rails::Guardrails;
use super::scan::Finding;

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
/// blocks with nested content), Bedrock Converse `system[].text` and `messages[].content[].text`
/// (the same walk), Gemini `contents[].parts[].text` and `systemInstruction.parts[].text`,
/// embeddings `input` (string or strings; Responses-style input items with `content` too),
/// legacy `prompt` (string or strings).
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
    if let Some(Value::Array(turns)) = obj.get_mut("contents") {
        for turn in turns {
            gemini_parts(g, turn, &mut out);
        }
    }
    if let Some(system) = obj.get_mut("systemInstruction") {
        gemini_parts(g, system, &mut out);
    }
    out
}

/// Non-streamed response bodies: OpenAI `choices[].message.content` (and legacy
/// `choices[].text`), Anthropic `content[].text`, Responses `output[].content[].text`, Bedrock
/// Converse `output.message.content[].text`, Gemini `candidates[].content.parts[].text`.
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
    if let Some(c) = obj.get_mut("output").and_then(|o| o.get_mut("message")).and_then(|m| m.get_mut("content")) {
        content(g, c, 0, &mut out);
    }
    if let Some(Value::Array(candidates)) = obj.get_mut("candidates") {
        for candidate in candidates {
            if let Some(turn) = candidate.get_mut("content") {
                gemini_parts(g, turn, &mut out);
            }
        }
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

/// A Gemini `Content` (`{role, parts}`): the `text` of its parts. Function calls and responses
/// are structured data, not free text, and are left alone.
fn gemini_parts(g: &Guardrails, turn: &mut Value, out: &mut JsonOutcome) {
    if let Some(parts) = turn.get_mut("parts") {
        content(g, parts, 0, out);
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

/// The text delta of one parsed stream event: OpenAI `choices[0].delta.content` (or legacy
/// `choices[0].text`), Anthropic `content_block_delta` → `delta.text`, Gemini
/// `candidates[0].content.parts[i].text` (see [`gemini_text_part`]), Bedrock ConverseStream
/// `contentBlockDelta.delta.text` (the event named by its type, as the AWS SDKs give it, or the
/// bare frame payload `{contentBlockIndex, delta}`), OpenAI Responses
/// `response.output_text.delta` → `delta`.
pub fn event_text(v: &Value) -> Option<&str> {
    if is_responses_text_delta(v) {
        return v.get("delta")?.as_str();
    }
    if let Some(choice) = v.get("choices").and_then(|c| c.get(0)) {
        return match choice.get("delta") {
            Some(d) => d.get("content").and_then(Value::as_str),
            None => choice.get("text").and_then(Value::as_str),
        };
    }
    if v.get("type").and_then(Value::as_str) == Some("content_block_delta") {
        return v.get("delta")?.get("text")?.as_str();
    }
    if let Some(candidates) = v.get("candidates") {
        let parts = candidates.pointer("/0/content/parts")?.as_array()?;
        return parts.get(gemini_text_part(parts)?)?.get("text")?.as_str();
    }
    bedrock_delta(v)?.get("text")?.as_str()
}

/// Writes `text` where [`event_text`] read it; `false` when the event has no such field.
pub fn set_event_text(v: &mut Value, text: String) -> bool {
    match text_slot(v) {
        Some(s @ Value::String(_)) => {
            *s = Value::String(text);
            true
        }
        _ => false,
    }
}

/// An OpenAI Responses stream's answer text delta.
fn is_responses_text_delta(v: &Value) -> bool {
    v.get("type").and_then(Value::as_str) == Some("response.output_text.delta")
}

/// The value [`event_text`] reads, for writing.
fn text_slot(v: &mut Value) -> Option<&mut Value> {
    if is_responses_text_delta(v) {
        return v.get_mut("delta");
    }
    if v.get("choices").is_some() {
        let choice = v.get_mut("choices")?.get_mut(0)?;
        return if choice.get("delta").is_some() {
            choice.get_mut("delta")?.get_mut("content")
        } else {
            choice.get_mut("text")
        };
    }
    if v.get("type").and_then(Value::as_str) == Some("content_block_delta") {
        return v.get_mut("delta")?.get_mut("text");
    }
    if v.get("candidates").is_some() {
        let parts = v.pointer_mut("/candidates/0/content/parts")?.as_array_mut()?;
        let i = gemini_text_part(parts)?;
        return parts.get_mut(i)?.get_mut("text");
    }
    if v.get("contentBlockDelta").is_some() {
        return v.get_mut("contentBlockDelta")?.get_mut("delta")?.get_mut("text");
    }
    if v.get("contentBlockIndex").is_some() {
        return v.get_mut("delta")?.get_mut("text");
    }
    None
}

/// The part of a Gemini stream event whose text is the event's delta: the first answer text,
/// else the first thought (Gemini sends one text part an event; a thought shown to the client
/// is checked too).
fn gemini_text_part(parts: &[Value]) -> Option<usize> {
    let has_text = |p: &Value| p.get("text").is_some_and(Value::is_string);
    let thought = |p: &Value| p.get("thought").and_then(Value::as_bool) == Some(true);
    parts.iter().position(|p| has_text(p) && !thought(p)).or_else(|| parts.iter().position(has_text))
}

/// A Bedrock `contentBlockDelta` event's `delta`.
fn bedrock_delta(v: &Value) -> Option<&Value> {
    match v.get("contentBlockDelta") {
        Some(event) => event.get("delta"),
        None if v.get("contentBlockIndex").is_some() => v.get("delta"),
        None => None,
    }
}
