//! An Anthropic message → a `chat.completion`; an Anthropic error → an OpenAI error object.

use serde_json::{json, Value};

use super::error::TranslateError;

/// Translates an Anthropic Messages answer. `created` is the Unix time the caller stamps (the
/// answer has none). Only `text` and `tool_use` blocks carry over: the request never asks for
/// thinking, and other block kinds have no Chat Completions form.
pub fn to_openai_completion(anthropic: &Value, created: i64) -> Result<Value, TranslateError> {
    let content = anthropic
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| TranslateError::new("content", "the Anthropic answer has no content array"))?;
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for block in content {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => text.push_str(block.get("text").and_then(Value::as_str).unwrap_or("")),
            Some("tool_use") => tool_calls.push(tool_call(block)?),
            _ => {}
        }
    }
    let mut message = json!({
        "role": "assistant",
        // OpenAI answers `null` content when the model only called tools.
        "content": if text.is_empty() && !tool_calls.is_empty() { Value::Null } else { text.into() },
        "refusal": null,
    });
    if !tool_calls.is_empty() {
        message["tool_calls"] = Value::Array(tool_calls);
    }
    let stop = anthropic.get("stop_reason").and_then(Value::as_str).unwrap_or("end_turn");
    Ok(json!({
        "id": anthropic.get("id").cloned().unwrap_or(Value::Null),
        "object": "chat.completion",
        "created": created,
        "model": anthropic.get("model").cloned().unwrap_or(Value::Null),
        "choices": [{ "index": 0, "message": message, "logprobs": null, "finish_reason": finish_reason(stop) }],
        "usage": usage(anthropic.get("usage").unwrap_or(&Value::Null)),
    }))
}

/// `tool_use` → a function tool call; `input` is re-encoded as the `arguments` string.
fn tool_call(block: &Value) -> Result<Value, TranslateError> {
    let field = |key: &str| {
        block
            .get(key)
            .and_then(Value::as_str)
            .ok_or_else(|| TranslateError::new(format!("content.tool_use.{key}"), "must be a string"))
    };
    let arguments = block.get("input").unwrap_or(&json!({})).to_string();
    Ok(json!({
        "id": field("id")?,
        "type": "function",
        "function": { "name": field("name")?, "arguments": arguments },
    }))
}

/// Anthropic counts cached prompt tokens apart from `input_tokens`; OpenAI's `prompt_tokens`
/// includes them, with the cache reads repeated in `prompt_tokens_details.cached_tokens`.
/// OpenAI has no member for cache writes: when there were some they are repeated in
/// `cache_creation_input_tokens` (LiteLLM's spelling), which is also how the gateway, reading
/// a translated stream's usage chunk, prices them at the cache-write rate.
pub(super) fn usage(u: &Value) -> Value {
    let n = |key: &str| u.get(key).and_then(Value::as_u64).unwrap_or(0);
    let cached = n("cache_read_input_tokens");
    let written = n("cache_creation_input_tokens");
    let prompt = n("input_tokens").saturating_add(written).saturating_add(cached);
    let completion = n("output_tokens");
    let mut usage = json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt.saturating_add(completion),
        "prompt_tokens_details": { "cached_tokens": cached },
    });
    if written > 0 {
        usage["cache_creation_input_tokens"] = written.into();
    }
    usage
}

/// An Anthropic error (a body `{"type":"error","error":{type,message}}` or the same as an SSE
/// `error` event) → the OpenAI error object the openai SDK raises from. Anthropic's error type
/// names are kept as the OpenAI `type` (`invalid_request_error`, `overloaded_error`, ...).
pub fn openai_error(anthropic: &Value) -> Value {
    let error = anthropic.get("error").unwrap_or(anthropic);
    let message = error.get("message").and_then(Value::as_str).unwrap_or("the Anthropic upstream answered an error");
    let kind = error.get("type").and_then(Value::as_str).unwrap_or("api_error");
    json!({ "error": { "message": message, "type": kind, "param": null, "code": null } })
}

/// Anthropic `stop_reason` → OpenAI `finish_reason`. Reasons Anthropic may add later read as
/// `stop`: the turn ended, and `stop` is the one value every client handles.
pub(super) fn finish_reason(stop_reason: &str) -> &'static str {
    match stop_reason {
        "max_tokens" | "model_context_window_exceeded" => "length",
        "tool_use" => "tool_calls",
        "refusal" => "content_filter",
        _ => "stop",
    }
}
