//! Reading Gemini content parts and the fields of OpenAI bodies, shared by the request, answer
//! and stream translations.

use serde_json::{json, Value};

use crate::providers::translate::TranslateError;

/// Gemini's `finishReason` → OpenAI's `finish_reason`. A turn that called functions ends with
/// `STOP` at Gemini and `tool_calls` at OpenAI. Reasons Google may add later read as `stop`:
/// the turn ended, and `stop` is the one value every client handles.
pub(super) fn finish_reason(reason: &str, called_tools: bool) -> &'static str {
    match reason {
        "MAX_TOKENS" => "length",
        "SAFETY"
        | "RECITATION"
        | "BLOCKLIST"
        | "PROHIBITED_CONTENT"
        | "SPII"
        | "IMAGE_SAFETY"
        | "IMAGE_PROHIBITED_CONTENT"
        | "MODEL_ARMOR" => "content_filter",
        _ if called_tools => "tool_calls",
        _ => "stop",
    }
}

/// The id of the `n`th tool call of an answer: Gemini gives calls no id the client could echo,
/// so one is derived from the answer's id, the same on every run.
pub(super) fn tool_call_id(id: &str, n: usize) -> String {
    format!("call_{id}_{n}")
}

/// A `functionCall` part → an OpenAI tool call without `index` (`Ok(None)` when the part is
/// not a function call). `args` is re-encoded as the `arguments` string. Gemini 3 signs its
/// function calls (`thoughtSignature`) and refuses a later turn whose calls lost the signature,
/// so it is carried where Google's own OpenAI-compatible endpoint puts it: `extra_content.google`.
pub(super) fn tool_call(part: &Value, id: String) -> Result<Option<Value>, TranslateError> {
    let Some(call) = part.get("functionCall") else { return Ok(None) };
    let name = call.get("name").and_then(Value::as_str).ok_or_else(|| {
        TranslateError::new("functionCall.name", "the Gemini answer has a function call without a name")
    })?;
    let arguments = match call.get("args") {
        Some(args @ Value::Object(_)) => args.to_string(),
        _ => "{}".to_string(),
    };
    let mut tool_call = json!({ "id": id, "type": "function", "function": { "name": name, "arguments": arguments } });
    if let Some(signature) = part.get("thoughtSignature").and_then(Value::as_str) {
        tool_call["extra_content"] = json!({ "google": { "thought_signature": signature } });
    }
    Ok(Some(tool_call))
}

/// The string at `pointer` (e.g. `/function/name`) inside the value at `field`, or the error
/// naming it (`{field}.function.name: must be a string`).
pub(super) fn str_at<'a>(value: &'a Value, pointer: &str, field: &str) -> Result<&'a str, TranslateError> {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .ok_or_else(|| TranslateError::new(format!("{field}{}", pointer.replace('/', ".")), "must be a string"))
}

/// The visible text of a part: thoughts (`thought: true`, only sent when asked for) are the
/// model's reasoning, not its answer.
pub(super) fn answer_text(part: &Value) -> Option<&str> {
    if part.get("thought").and_then(Value::as_bool) == Some(true) {
        return None;
    }
    part.get("text").and_then(Value::as_str).filter(|t| !t.is_empty())
}
