//! A Gemini `GenerateContentResponse` → a `chat.completion`; Google's usage and errors in
//! OpenAI's shapes.

use serde_json::{json, Value};

use super::parts::{answer_text, finish_reason, tool_call, tool_call_id};
use crate::providers::translate::TranslateError;
use crate::providers::usage::GeminiCounts as Counts;

/// Translates a whole Gemini answer. `model` and `id` are what the client sees (the answer's
/// `modelVersion` and `responseId` are Google's), `created` the Unix time the caller stamps.
/// Only the first candidate is read: the request never asks for more. A prompt Gemini blocked
/// (`promptFeedback.blockReason`, no candidates) is an empty `content_filter` answer, as OpenAI
/// answers a filtered prompt.
pub fn to_openai_completion(gemini: &Value, model: &str, id: &str, created: i64) -> Result<Value, TranslateError> {
    let candidate = gemini.get("candidates").and_then(Value::as_array).and_then(|c| c.first());
    let (message, finish) = match candidate {
        Some(candidate) => message(candidate, id)?,
        None if gemini.pointer("/promptFeedback/blockReason").is_some() => {
            (json!({ "role": "assistant", "content": "", "refusal": null }), "content_filter")
        }
        None => return Err(TranslateError::new("candidates", "the Gemini answer has no candidates")),
    };
    Ok(json!({
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{ "index": 0, "message": message, "logprobs": null, "finish_reason": finish }],
        "usage": usage(gemini.get("usageMetadata").unwrap_or(&Value::Null)),
    }))
}

/// One candidate → the assistant message and its finish reason. Its text parts (not thoughts)
/// concatenate into `content`; its `functionCall` parts become `tool_calls`.
fn message(candidate: &Value, id: &str) -> Result<(Value, &'static str), TranslateError> {
    let parts = candidate.pointer("/content/parts").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        if let Some(t) = answer_text(part) {
            text.push_str(t);
        }
        let call = tool_call(part, tool_call_id(id, tool_calls.len()))
            .map_err(|e| TranslateError::new(format!("candidates[0].content.parts[{i}].{}", e.field), e.reason))?;
        tool_calls.extend(call);
    }
    let reason = candidate.get("finishReason").and_then(Value::as_str).unwrap_or("STOP");
    let finish = finish_reason(reason, !tool_calls.is_empty());
    let mut message = json!({
        "role": "assistant",
        // OpenAI answers `null` content when the model only called tools.
        "content": if text.is_empty() && !tool_calls.is_empty() { Value::Null } else { text.into() },
        "refusal": null,
    });
    if !tool_calls.is_empty() {
        message["tool_calls"] = Value::Array(tool_calls);
    }
    Ok((message, finish))
}

/// `usageMetadata` → OpenAI's `usage` object.
pub(super) fn usage(meta: &Value) -> Value {
    let c = Counts::of(meta);
    json!({
        "prompt_tokens": c.prompt,
        "completion_tokens": c.completion,
        "total_tokens": c.total,
        "prompt_tokens_details": { "cached_tokens": c.cached },
        "completion_tokens_details": { "reasoning_tokens": c.reasoning },
    })
}

/// Google's error (a body `{"error": {code, message, status}}`, the same as a stream event, or
/// a JSON array holding one, as non-SSE streams answer) → the OpenAI error object the openai SDK
/// raises from. The type follows the gRPC status.
pub fn openai_error(gemini_error_body: &Value) -> Value {
    let body = match gemini_error_body {
        Value::Array(items) => items.first().unwrap_or(gemini_error_body),
        other => other,
    };
    let error = body.get("error").unwrap_or(body);
    let message = error.get("message").and_then(Value::as_str).unwrap_or("the Vertex AI upstream answered an error");
    let kind = match error.get("status").and_then(Value::as_str) {
        Some("INVALID_ARGUMENT" | "FAILED_PRECONDITION" | "OUT_OF_RANGE") => "invalid_request_error",
        Some("RESOURCE_EXHAUSTED") => "rate_limit_error",
        Some("UNAUTHENTICATED") => "authentication_error",
        Some("PERMISSION_DENIED") => "permission_error",
        Some("NOT_FOUND") => "not_found_error",
        _ => "api_error",
    };
    json!({ "error": { "message": message, "type": kind, "param": null, "code": null } })
}
