//! Where the free text sits in every dialect's bodies and stream events, for the code that reads
//! or rewrites text without knowing any dialect (the guardrails). Only text written by a person
//! or a model counts; ids, model names, tool schemas, URLs and function calls are structured
//! data and are left out.
//!
//! A body's text is handed out as *content*: a string, or a list of strings and blocks whose
//! `text` is text and whose `content` nests (tool results, Responses items). The reader walks
//! content itself. The guardrails' byte-level fast path (`checks/guardrail/json_scan.rs`)
//! follows the same members without building the tree; its tests hold the two walks equal.

use serde_json::Value;

/// Each text content of a request body, in this order: chat and Messages `messages[].content`
/// (Converse's too), `system`, embeddings and Responses `input`, legacy `prompt`, Gemini
/// `contents[].parts` and `systemInstruction.parts`.
pub fn request_contents(body: &mut Value, mut visit: impl FnMut(&mut Value)) {
    let Some(obj) = body.as_object_mut() else { return };
    if let Some(Value::Array(messages)) = obj.get_mut("messages") {
        messages.iter_mut().filter_map(|m| m.get_mut("content")).for_each(&mut visit);
    }
    for field in ["system", "input", "prompt"] {
        if let Some(v) = obj.get_mut(field) {
            visit(v);
        }
    }
    if let Some(Value::Array(turns)) = obj.get_mut("contents") {
        turns.iter_mut().filter_map(gemini_parts).for_each(&mut visit);
    }
    if let Some(parts) = obj.get_mut("systemInstruction").and_then(gemini_parts) {
        visit(parts);
    }
}

/// Each text content of a whole (non-streamed) answer, in this order: chat
/// `choices[].message.content` and legacy `choices[].text`, Messages `content[]`, Responses
/// `output[]`, Converse `output.message.content`, Gemini `candidates[].content.parts`.
pub fn response_contents(body: &mut Value, mut visit: impl FnMut(&mut Value)) {
    let Some(obj) = body.as_object_mut() else { return };
    if let Some(Value::Array(choices)) = obj.get_mut("choices") {
        for c in choices {
            if let Some(v) = c.get_mut("message").and_then(|m| m.get_mut("content")) {
                visit(v);
            }
            if let Some(v @ Value::String(_)) = c.get_mut("text") {
                visit(v);
            }
        }
    }
    // Only as lists: a top-level string `content` or `output` is no answer text.
    for field in ["content", "output"] {
        if let Some(v @ Value::Array(_)) = obj.get_mut(field) {
            visit(v);
        }
    }
    if let Some(c) = obj.get_mut("output").and_then(|o| o.get_mut("message")).and_then(|m| m.get_mut("content")) {
        visit(c);
    }
    if let Some(Value::Array(candidates)) = obj.get_mut("candidates") {
        candidates.iter_mut().filter_map(|c| c.get_mut("content")).filter_map(gemini_parts).for_each(&mut visit);
    }
}

/// A Gemini `Content` (`{role, parts}`): its parts, whose `text` is text. Function calls and
/// responses are structured data, not free text.
fn gemini_parts(turn: &mut Value) -> Option<&mut Value> {
    turn.get_mut("parts")
}

/// The text delta of one parsed stream event: chat `choices[0].delta.content` (or legacy
/// `choices[0].text`), Messages `content_block_delta` → `delta.text`, Gemini
/// `candidates[0].content.parts[i].text` (see [`gemini_text_part`]), Converse
/// `contentBlockDelta.delta.text` (the event named by its type, as the AWS SDKs give it, or the
/// bare frame payload `{contentBlockIndex, delta}`), Responses `response.output_text.delta` →
/// `delta`.
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

/// The value [`event_text`] reads, for writing (it may be a string or not).
pub fn event_text_slot(v: &mut Value) -> Option<&mut Value> {
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

/// An OpenAI Responses stream's answer text delta.
fn is_responses_text_delta(v: &Value) -> bool {
    v.get("type").and_then(Value::as_str) == Some("response.output_text.delta")
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
