//! OpenAI Chat Completions ↔ AWS Bedrock Converse, as pure functions over JSON (issue 18 §2, §4).
//!
//! Converse is structurally the Anthropic Messages API with other spellings (alternating turns
//! of content blocks, a separate system prompt, tool use and tool results as blocks, the same
//! stop reasons), so this module goes through the Anthropic translation rather than beside it:
//!
//! - [`to_converse_request`]: OpenAI body → [`super::to_anthropic_request`] (every check and
//!   refusal of that translation holds here too) → the Converse body, with the few differences
//!   Bedrock adds (image URLs refused, `tool_choice: "none"` as no tools, no default
//!   `maxTokens`, no `parallel_tool_calls: false`).
//! - [`to_openai_completion`]: a Converse answer → the Anthropic message it corresponds to →
//!   [`super::to_openai_completion`].
//! - [`openai_error`]: a Bedrock error answer → the OpenAI error object.
//! - [`ConverseStreamTranslator`]: ConverseStream union values (from
//!   [`crate::providers::eventstream::Decoder`]) → the Anthropic events they
//!   correspond to → [`super::StreamTranslator`], so streamed chunks have exactly the shape the
//!   Anthropic route's have (and that the openai SDK's tests already accept).
//!
//! No I/O and no clock: `created`, `id` and `model` come from the caller (a Converse answer has
//! none of them; the model id is in the URL). The mapping and what is refused are in
//! docs/decisions.md ("Bedrock: SigV4, event stream and Converse translation").

use serde_json::{json, Map, Value};

use super::{to_anthropic_request, ChunkTranslator, StreamTranslator, TranslateError};
use crate::providers::eventstream::exception_of;

type Obj = Map<String, Value>;

/// Translates a `/v1/chat/completions` body into a Converse (or ConverseStream) body. The
/// model goes in the URL, `stream` in the choice of endpoint: neither is in the body.
pub fn to_converse_request(openai: &Value) -> Result<Value, TranslateError> {
    refuse_image_urls(openai)?;
    let anthropic = to_anthropic_request(openai).map_err(for_bedrock)?;
    let messages = turns(anthropic.get("messages"))?;
    let mut out = Obj::new();
    if let Some(system) = anthropic.get("system") {
        out.insert("system".into(), Value::Array(text_blocks(system)));
    }
    let has_tool_blocks = messages.iter().any(holds_tool_blocks);
    out.insert("messages".into(), Value::Array(messages));
    let config = inference_config(openai, &anthropic);
    if !config.is_empty() {
        out.insert("inferenceConfig".into(), Value::Object(config));
    }
    if let Some(tools) = tool_config(&anthropic, has_tool_blocks)? {
        out.insert("toolConfig".into(), tools);
    }
    Ok(Value::Object(out))
}

/// The Anthropic translation's refusals name "Anthropic models"; here the client asked for a
/// Bedrock model.
fn for_bedrock(e: TranslateError) -> TranslateError {
    TranslateError { field: e.field, reason: e.reason.replace("Anthropic models", "Bedrock models") }
}

/// Converse takes images as bytes (or S3 locations), never as web URLs: an `http(s)` image is
/// refused here, naming the client's own field (the Anthropic body has merged turns).
fn refuse_image_urls(openai: &Value) -> Result<(), TranslateError> {
    let Some(messages) = openai.get("messages").and_then(Value::as_array) else {
        return Ok(());
    };
    for (i, message) in messages.iter().enumerate() {
        let Some(parts) = message.get("content").and_then(Value::as_array) else { continue };
        for (j, part) in parts.iter().enumerate() {
            let url = part.pointer("/image_url/url").and_then(Value::as_str).unwrap_or("");
            if part.get("type").and_then(Value::as_str) == Some("image_url")
                && (url.starts_with("https://") || url.starts_with("http://"))
            {
                return Err(TranslateError::new(
                    format!("messages[{i}].content[{j}].image_url.url"),
                    "Bedrock models take images inline only: send a data: URL (base64)",
                ));
            }
        }
    }
    Ok(())
}

/// `system` (a string or text blocks) → Converse `[{text}]`.
fn text_blocks(system: &Value) -> Vec<Value> {
    match system {
        Value::String(s) => vec![json!({ "text": s })],
        Value::Array(blocks) => {
            blocks.iter().filter_map(|b| b.get("text").and_then(Value::as_str)).map(|t| json!({ "text": t })).collect()
        }
        _ => Vec::new(),
    }
}

/// Anthropic turns → Converse turns: the same alternation (consecutive same-role messages and
/// consecutive tool results already merged), each block respelled.
fn turns(messages: Option<&Value>) -> Result<Vec<Value>, TranslateError> {
    let mut out = Vec::new();
    for (i, turn) in messages.and_then(Value::as_array).into_iter().flatten().enumerate() {
        let blocks = turn.get("content").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        let content = blocks.iter().map(|b| block(b, i)).collect::<Result<Vec<_>, _>>()?;
        out.push(json!({ "role": turn.get("role").cloned().unwrap_or(Value::Null), "content": content }));
    }
    Ok(out)
}

/// One Anthropic content block → its Converse form.
fn block(b: &Value, turn: usize) -> Result<Value, TranslateError> {
    let s = |key: &str| b.get(key).cloned().unwrap_or(Value::Null);
    match b.get("type").and_then(Value::as_str) {
        Some("text") => Ok(json!({ "text": s("text") })),
        Some("image") => image(b.get("source").unwrap_or(&Value::Null), turn),
        Some("tool_use") => Ok(json!({ "toolUse": { "toolUseId": s("id"), "name": s("name"), "input": s("input") } })),
        Some("tool_result") => {
            let content = match b.get("content") {
                Some(Value::String(t)) => vec![json!({ "text": t })],
                Some(other) => text_blocks(other),
                None => Vec::new(),
            };
            Ok(json!({ "toolResult": { "toolUseId": s("tool_use_id"), "content": content } }))
        }
        // The Anthropic translation makes no other block; a new one must be mapped here first.
        _ => Err(TranslateError::new(format!("messages[{turn}]"), "has content Bedrock models do not take")),
    }
}

/// A base64 image → `{image: {format, source: {bytes}}}` (the JSON protocol carries blobs as
/// base64 strings, so the data passes as it is).
fn image(source: &Value, turn: usize) -> Result<Value, TranslateError> {
    let media_type = source.get("media_type").and_then(Value::as_str).unwrap_or("");
    match (source.get("type").and_then(Value::as_str), media_type.strip_prefix("image/")) {
        (Some("base64"), Some(format)) => {
            Ok(json!({ "image": { "format": format, "source": { "bytes": source.get("data").cloned() } } }))
        }
        _ => {
            Err(TranslateError::new(format!("messages[{turn}]"), "images must be base64 data: URLs for Bedrock models"))
        }
    }
}

fn holds_tool_blocks(turn: &Value) -> bool {
    let blocks = turn.get("content").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    blocks.iter().any(|b| b.get("toolUse").is_some() || b.get("toolResult").is_some())
}

/// `maxTokens` only when the client set one (Converse, unlike Anthropic, has a per-model
/// default), then `temperature`, `topP` and `stopSequences` as validated by the Anthropic
/// translation.
fn inference_config(openai: &Value, anthropic: &Value) -> Obj {
    let mut config = Obj::new();
    let asked = ["max_completion_tokens", "max_tokens"].iter().any(|k| openai.get(k).is_some_and(|v| !v.is_null()));
    for (from, to, present) in [
        ("max_tokens", "maxTokens", asked),
        ("temperature", "temperature", true),
        ("top_p", "topP", true),
        ("stop_sequences", "stopSequences", true),
    ] {
        if let Some(v) = anthropic.get(from).filter(|_| present) {
            config.insert(to.into(), v.clone());
        }
    }
    config
}

/// Anthropic `tools`/`tool_choice` → `toolConfig`. `none` sends no tools (Converse cannot
/// forbid calling tools it was given), which Bedrock refuses when earlier turns hold tool
/// calls, so that case is refused here with the reason. Converse cannot limit a turn to one
/// call either: `parallel_tool_calls: false` is refused.
fn tool_config(anthropic: &Value, has_tool_blocks: bool) -> Result<Option<Value>, TranslateError> {
    let Some(tools) = anthropic.get("tools").and_then(Value::as_array).filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    let choice = anthropic.get("tool_choice");
    if choice.and_then(|c| c.get("disable_parallel_tool_use")) == Some(&Value::Bool(true)) {
        let reason = "false is not supported for Bedrock models (Converse cannot limit a turn to one tool call)";
        return Err(TranslateError::new("parallel_tool_calls", reason));
    }
    let tool_choice = match choice.and_then(|c| c.get("type")).and_then(Value::as_str) {
        None => None,
        Some("auto") => Some(json!({ "auto": {} })),
        Some("any") => Some(json!({ "any": {} })),
        Some("tool") => Some(json!({ "tool": { "name": choice.and_then(|c| c.get("name")).cloned() } })),
        Some(_none) if has_tool_blocks => {
            let reason = "\"none\" cannot be honoured for Bedrock models once the conversation holds tool calls \
                          (Bedrock then requires the tools, and cannot forbid calling them)";
            return Err(TranslateError::new("tool_choice", reason));
        }
        Some(_none) => return Ok(None),
    };
    let specs: Vec<Value> = tools.iter().map(tool_spec).collect();
    let mut config = json!({ "tools": specs });
    if let Some(c) = tool_choice {
        config["toolChoice"] = c;
    }
    Ok(Some(config))
}

fn tool_spec(tool: &Value) -> Value {
    let mut spec = json!({ "name": tool.get("name").cloned() });
    if let Some(d) = tool.get("description") {
        spec["description"] = d.clone();
    }
    spec["inputSchema"] = json!({ "json": tool.get("input_schema").cloned() });
    json!({ "toolSpec": spec })
}

/// Translates a Converse answer into a `chat.completion`. `model` and `id` are the caller's
/// (Converse answers carry neither), `created` the Unix time it stamps. Text and `toolUse`
/// blocks carry over; reasoning, images and guard content have no Chat Completions form.
pub fn to_openai_completion(converse: &Value, model: &str, id: &str, created: i64) -> Result<Value, TranslateError> {
    let content = converse
        .pointer("/output/message/content")
        .and_then(Value::as_array)
        .ok_or_else(|| TranslateError::new("output.message.content", "the Bedrock answer has no content array"))?;
    let mut blocks = Vec::with_capacity(content.len());
    for (i, b) in content.iter().enumerate() {
        if let Some(text) = b.get("text").and_then(Value::as_str) {
            blocks.push(json!({ "type": "text", "text": text }));
        } else if let Some(tool_use) = b.get("toolUse") {
            blocks.push(anthropic_tool_use(tool_use, &format!("output.message.content[{i}].toolUse"))?);
        }
    }
    let stop = converse.get("stopReason").and_then(Value::as_str).unwrap_or("end_turn");
    let anthropic = json!({
        "id": id,
        "model": model,
        "content": blocks,
        "stop_reason": anthropic_stop_reason(stop),
        "usage": anthropic_usage(converse.get("usage").unwrap_or(&Value::Null)),
    });
    super::to_openai_completion(&anthropic, created)
}

fn anthropic_tool_use(tool_use: &Value, field: &str) -> Result<Value, TranslateError> {
    let string = |key: &str| {
        tool_use
            .get(key)
            .and_then(Value::as_str)
            .ok_or_else(|| TranslateError::new(format!("{field}.{key}"), "must be a string"))
    };
    let input = tool_use.get("input").cloned().unwrap_or_else(|| json!({}));
    Ok(json!({ "type": "tool_use", "id": string("toolUseId")?, "name": string("name")?, "input": input }))
}

/// Converse `stopReason` → the Anthropic `stop_reason` with the same OpenAI `finish_reason`:
/// a guardrail or content filter that stopped the answer reads as Anthropic's `refusal`
/// (`content_filter`); the others are spelled alike.
fn anthropic_stop_reason(stop: &str) -> &str {
    match stop {
        "guardrail_intervened" | "content_filtered" => "refusal",
        other => other,
    }
}

/// Converse `usage` → Anthropic's spelling (cache reads and writes apart from `inputTokens`, as
/// Anthropic counts them), so OpenAI's `prompt_tokens` includes them both ways.
fn anthropic_usage(usage: &Value) -> Value {
    let mut out = Obj::new();
    for (from, to) in [
        ("inputTokens", "input_tokens"),
        ("outputTokens", "output_tokens"),
        ("cacheReadInputTokens", "cache_read_input_tokens"),
        ("cacheWriteInputTokens", "cache_creation_input_tokens"),
    ] {
        if let Some(n) = usage.get(from).filter(|n| n.is_u64()) {
            out.insert(to.into(), n.clone());
        }
    }
    Value::Object(out)
}

/// A Bedrock error answer (a non-2xx status, the body `{"message": ...}`) → the OpenAI error
/// object. `error_type` is the `x-amzn-errortype` header (`ValidationException:http://…`: the
/// part before `:` is kept); without it the body's `__type` (`…#ThrottlingException`) is used.
pub fn openai_error(error_type: Option<&str>, body: &Value) -> Value {
    let from_body = body.get("__type").and_then(Value::as_str).map(|t| t.rsplit('#').next().unwrap_or(t));
    let kind = error_type.and_then(|t| t.split(':').next()).filter(|t| !t.is_empty()).or(from_body);
    let message = body.get("message").or_else(|| body.get("Message")).and_then(Value::as_str);
    let error = json!({
        "type": kind.unwrap_or("api_error"),
        "message": message.unwrap_or("the Bedrock upstream answered an error"),
    });
    super::openai_error(&json!({ "error": error }))
}

/// ConverseStream union values → `chat.completion.chunk` objects. Feed every value of
/// [`crate::providers::eventstream::Decoder`] in order. `messageStop` gives the
/// `finish_reason` chunk; `metadata`, which Bedrock sends last, gives the usage chunk (when
/// asked) and ends the answer; an exception gives an OpenAI error object and ends it too.
///
/// [`ChunkTranslator::finish`] emits nothing: a stream cut before `metadata` has no counts to
/// report, and a usage chunk of zeros would be read as a real (free) answer.
#[derive(Debug)]
pub struct ConverseStreamTranslator {
    inner: StreamTranslator,
    id: String,
    model: String,
    done: bool,
}

impl ConverseStreamTranslator {
    /// `model` and `id` are stamped on every chunk (the stream carries neither), `created` is
    /// the Unix time, `include_usage` the client's `stream_options.include_usage`.
    pub fn new(model: &str, id: &str, created: i64, include_usage: bool) -> Self {
        Self { inner: StreamTranslator::new(created, include_usage), id: id.into(), model: model.into(), done: false }
    }

    /// One union value → the chunks it becomes, often none. Events Bedrock may add later, and
    /// everything after the end, are skipped.
    pub fn on_event(&mut self, event: &Value) -> Vec<Value> {
        if self.done {
            return Vec::new();
        }
        if let Some((kind, message)) = exception_of(event) {
            self.done = true;
            return self.inner.on_event(&json!({ "type": "error", "error": { "type": kind, "message": message } }));
        }
        let Some((kind, body)) = event.as_object().and_then(|o| o.iter().next()) else {
            return Vec::new();
        };
        let anthropic = match kind.as_str() {
            "messageStart" => {
                let message = json!({ "id": self.id, "model": self.model, "usage": {} });
                vec![json!({ "type": "message_start", "message": message })]
            }
            "contentBlockStart" => block_start(body).into_iter().collect(),
            "contentBlockDelta" => block_delta(body).into_iter().collect(),
            "messageStop" => {
                let stop = anthropic_stop_reason(body.get("stopReason").and_then(Value::as_str).unwrap_or("end_turn"));
                vec![json!({ "type": "message_delta", "delta": { "stop_reason": stop } })]
            }
            "metadata" => self.metadata(body),
            _ => Vec::new(),
        };
        anthropic.iter().flat_map(|e| self.inner.on_event(e)).collect()
    }

    /// The end of the answer: its usage, then the Anthropic `message_stop` that emits the usage
    /// chunk. Without a `usage` the answer still ends, with no usage chunk.
    fn metadata(&mut self, body: &Value) -> Vec<Value> {
        self.done = true;
        match body.get("usage").filter(|u| u.is_object()) {
            Some(usage) => vec![
                json!({ "type": "message_delta", "delta": {}, "usage": anthropic_usage(usage) }),
                json!({ "type": "message_stop" }),
            ],
            None => Vec::new(),
        }
    }
}

/// `contentBlockStart` with a `toolUse` → Anthropic's `tool_use` block start (the translator
/// numbers tool calls 0, 1, ... in start order and keys their deltas by block index).
fn block_start(body: &Value) -> Option<Value> {
    let tool_use = body.pointer("/start/toolUse")?;
    let block = json!({ "type": "tool_use", "id": tool_use.get("toolUseId"), "name": tool_use.get("name") });
    Some(json!({ "type": "content_block_start", "index": body.get("contentBlockIndex"), "content_block": block }))
}

/// `contentBlockDelta`: text → `text_delta`, a `toolUse.input` fragment → `input_json_delta`.
/// Reasoning and citation deltas have no Chat Completions form.
fn block_delta(body: &Value) -> Option<Value> {
    let delta = body.get("delta")?;
    let anthropic = if let Some(text) = delta.get("text") {
        json!({ "type": "text_delta", "text": text })
    } else {
        json!({ "type": "input_json_delta", "partial_json": delta.pointer("/toolUse/input")? })
    };
    Some(json!({ "type": "content_block_delta", "index": body.get("contentBlockIndex"), "delta": anthropic }))
}

impl ChunkTranslator for ConverseStreamTranslator {
    fn on_event(&mut self, event: &Value) -> Vec<Value> {
        ConverseStreamTranslator::on_event(self, event)
    }
    fn finish(&mut self) -> Vec<Value> {
        Vec::new()
    }
    fn is_done(&self) -> bool {
        self.done
    }
}

#[cfg(test)]
mod tests;
