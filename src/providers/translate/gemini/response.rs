//! A Gemini `GenerateContentResponse` → a `chat.completion`; Google's usage and errors in
//! OpenAI's shapes.

use serde_json::{json, Value};

use super::{answer_text, finish_reason, tool_call, tool_call_id, TranslateError};
use crate::providers::Usage;

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

/// The usage of a Gemini answer, or of one `streamGenerateContent` event (each carries the
/// counts so far; the last one the totals), or of a whole non-SSE stream (a JSON array of such
/// answers: the last counts are the totals). `None` without `usageMetadata`. The cached tokens
/// (`cachedContentTokenCount`) are inside the prompt, the thinking tokens inside the completion.
pub fn usage_of(gemini: &Value) -> Option<Usage> {
    let meta = match gemini {
        Value::Array(events) => events.iter().rev().find_map(|e| e.get("usageMetadata"))?,
        _ => gemini.get("usageMetadata")?,
    };
    let c = Counts::of(meta);
    Some(Usage {
        prompt_tokens: c.prompt,
        completion_tokens: c.completion,
        cache_read_tokens: c.cached,
        reasoning_tokens: c.reasoning,
        ..Usage::default()
    })
}

/// Gemini's counts as OpenAI reckons them. The thinking tokens are output Google bills apart
/// from `candidatesTokenCount`; OpenAI counts reasoning inside `completion_tokens`. Tokens of
/// tool-use prompts are input. The cached tokens are already inside `promptTokenCount`, as they
/// are inside OpenAI's `prompt_tokens`.
struct Counts {
    prompt: u64,
    completion: u64,
    total: u64,
    cached: u64,
    reasoning: u64,
}

impl Counts {
    fn of(meta: &Value) -> Self {
        let n = |key: &str| meta.get(key).and_then(Value::as_u64).unwrap_or(0);
        let prompt = n("promptTokenCount").saturating_add(n("toolUsePromptTokenCount"));
        let reasoning = n("thoughtsTokenCount");
        let completion = n("candidatesTokenCount").saturating_add(reasoning);
        let total = meta.get("totalTokenCount").and_then(Value::as_u64).unwrap_or(prompt.saturating_add(completion));
        Self { prompt, completion, total, cached: n("cachedContentTokenCount"), reasoning }
    }
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
