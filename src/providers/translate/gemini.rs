//! OpenAI Chat Completions ↔ Google Gemini `generateContent` as Vertex AI serves it (v1 REST:
//! `GenerateContentRequest` / `GenerateContentResponse`), as pure functions over JSON.
//!
//! - [`to_gemini_request`]: a `/v1/chat/completions` body → a `generateContent` body (the model
//!   and streaming are in the URL, not the body), or a [`TranslateError`] naming the field that
//!   has no Gemini equivalent (the client's 400).
//! - [`to_openai_completion`]: a `GenerateContentResponse` → a `chat.completion`.
//! - [`GeminiStreamTranslator`]: the events of `:streamGenerateContent?alt=sse` (each one a
//!   `GenerateContentResponse`) → `chat.completion.chunk` objects.
//! - [`usage_of`]: (prompt, completion) tokens of an answer or of one stream event, for receipts.
//! - [`openai_error`]: Google's `{"error": {code, message, status}}` → the OpenAI error object.
//!
//! No I/O and no clock: the caller passes `id` and `created`, so the same input always gives the
//! same output (the golden tests in tests/fixtures/translate/gemini/ rely on it). The mapping, and
//! what is refused, is in docs/decisions.md ("Vertex Gemini translation").

mod media;
mod request;
mod response;
mod stream;
mod tools;

pub use request::to_gemini_request;
pub use response::{openai_error, to_openai_completion, usage_of};
pub use stream::GeminiStreamTranslator;

use serde_json::{json, Value};

use super::TranslateError;

/// Gemini's `finishReason` → OpenAI's `finish_reason`. A turn that called functions ends with
/// `STOP` at Gemini and `tool_calls` at OpenAI. Reasons Google may add later read as `stop`:
/// the turn ended, and `stop` is the one value every client handles.
fn finish_reason(reason: &str, called_tools: bool) -> &'static str {
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
fn tool_call_id(id: &str, n: usize) -> String {
    format!("call_{id}_{n}")
}

/// A `functionCall` part → an OpenAI tool call without `index` (`Ok(None)` when the part is
/// not a function call). `args` is re-encoded as the `arguments` string. Gemini 3 signs its
/// function calls (`thoughtSignature`) and refuses a later turn whose calls lost the signature,
/// so it is carried where Google's own OpenAI-compatible endpoint puts it: `extra_content.google`.
fn tool_call(part: &Value, id: String) -> Result<Option<Value>, TranslateError> {
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
fn str_at<'a>(value: &'a Value, pointer: &str, field: &str) -> Result<&'a str, TranslateError> {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .ok_or_else(|| TranslateError::new(format!("{field}{}", pointer.replace('/', ".")), "must be a string"))
}

/// The visible text of a part: thoughts (`thought: true`, only sent when asked for) are the
/// model's reasoning, not its answer.
fn answer_text(part: &Value) -> Option<&str> {
    if part.get("thought").and_then(Value::as_bool) == Some(true) {
        return None;
    }
    part.get("text").and_then(Value::as_str).filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests;
