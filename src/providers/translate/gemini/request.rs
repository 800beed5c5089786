//! A Chat Completions request body → a Vertex AI `generateContent` request body.

use serde_json::{json, Map, Value};

use super::parts::str_at;
use crate::providers::translate::TranslateError;

type Obj = Map<String, Value>;

/// Fields accepted and not sent upstream: the URL carries `model` and streaming (`stream`,
/// `stream_options`: the caller reads those); the others do not change the answer (`store`,
/// `metadata` concern OpenAI's stored completions, `user` and `safety_identifier` its abuse
/// monitoring).
const IGNORED: &[&str] =
    &["model", "stream_options", "store", "metadata", "service_tier", "prompt_cache_key", "safety_identifier", "user"];

/// Sent in place of a lost thought signature: Google documents this value for histories that
/// were not written by Gemini, so a Gemini 3 model takes the turn instead of answering 400.
const SKIP_SIGNATURE: &str = "skip_thought_signature_validator";

/// Translates a `/v1/chat/completions` body into a `generateContent` body. Every field is either
/// translated, in [`IGNORED`], at its neutral value, or refused with the field's name: a field
/// silently dropped would give the client an answer it did not ask for.
pub fn to_gemini_request(openai: &Value) -> Result<Value, TranslateError> {
    let body = openai.as_object().ok_or_else(|| TranslateError::new("body", "must be a JSON object"))?;
    let (system, contents) = conversation(body.get("messages"))?;
    let mut out = Obj::new();
    out.insert("contents".into(), contents);
    if !system.is_empty() {
        out.insert("systemInstruction".into(), json!({ "parts": system }));
    }
    let mut config = Obj::new();
    if let Some(max) = max_tokens(body)? {
        config.insert("maxOutputTokens".into(), max.into());
    }
    for (key, value) in body {
        translate_field(key, value, &mut config, &mut out)?;
    }
    if !config.is_empty() {
        out.insert("generationConfig".into(), Value::Object(config));
    }
    super::tools::tool_config(body, &mut out)?;
    Ok(Value::Object(out))
}

/// One top-level field (other than those [`to_gemini_request`] handles itself).
fn translate_field(key: &str, value: &Value, config: &mut Obj, out: &mut Obj) -> Result<(), TranslateError> {
    if value.is_null() || IGNORED.contains(&key) {
        return Ok(());
    }
    let (name, translated) = match key {
        "messages" | "max_tokens" | "max_completion_tokens" | "tool_choice" | "parallel_tool_calls" => return Ok(()),
        "stream" if value.is_boolean() => return Ok(()),
        "stream" => return Err(TranslateError::new(key, "must be a boolean")),
        "temperature" => ("temperature", number_within(key, value, 0.0, 2.0)?),
        "top_p" => ("topP", number_within(key, value, 0.0, 1.0)?),
        "presence_penalty" => ("presencePenalty", number_within(key, value, -2.0, 2.0)?),
        "frequency_penalty" => ("frequencyPenalty", number_within(key, value, -2.0, 2.0)?),
        "seed" => ("seed", seed(value)?),
        "stop" => match stop_sequences(value)? {
            Some(stop) => ("stopSequences", stop),
            None => return Ok(()),
        },
        "response_format" => return response_format(value, config),
        "tools" => {
            if let Some(tools) = super::tools::tools(value)? {
                out.insert("tools".into(), tools);
            }
            return Ok(());
        }
        _ => return neutral_or_refused(key, value),
    };
    config.insert(name.into(), translated);
    Ok(())
}

/// Fields with no Gemini equivalent pass only at the value that means "not used".
fn neutral_or_refused(key: &str, value: &Value) -> Result<(), TranslateError> {
    let (neutral, reason) = match key {
        "n" => (value.as_u64() == Some(1), "only 1 choice can be served by Vertex Gemini models"),
        "logprobs" => (value == &Value::Bool(false), "is not supported for Vertex Gemini models"),
        "top_logprobs" => (value.as_u64() == Some(0), "is not supported for Vertex Gemini models"),
        "logit_bias" => (value.as_object().is_some_and(Map::is_empty), "is not supported for Vertex Gemini models"),
        "modalities" => (value == &json!(["text"]), "only [\"text\"] is supported for Vertex Gemini models"),
        _ => (false, "is not supported for Vertex Gemini models"),
    };
    if neutral {
        return Ok(());
    }
    Err(TranslateError::new(key, reason))
}

/// `max_completion_tokens` (current) wins over `max_tokens` (deprecated); Gemini needs neither.
fn max_tokens(body: &Obj) -> Result<Option<u64>, TranslateError> {
    let Some((key, value)) = ["max_completion_tokens", "max_tokens"]
        .iter()
        .find_map(|k| body.get(*k).filter(|v| !v.is_null()).map(|v| (k, v)))
    else {
        return Ok(None);
    };
    match value.as_u64() {
        Some(n) if n > 0 => Ok(Some(n)),
        _ => Err(TranslateError::new(*key, "must be a positive integer")),
    }
}

/// A number OpenAI bounds the same way Gemini does, passed through once checked.
fn number_within(key: &str, value: &Value, min: f64, max: f64) -> Result<Value, TranslateError> {
    match value.as_f64() {
        Some(v) if (min..=max).contains(&v) => Ok(value.clone()),
        Some(_) => Err(TranslateError::new(key, format!("must be between {min} and {max}"))),
        None => Err(TranslateError::new(key, "must be a number")),
    }
}

/// Gemini's seed is a 32-bit integer; OpenAI's may be any integer.
fn seed(value: &Value) -> Result<Value, TranslateError> {
    match value.as_i64() {
        Some(s) if i32::try_from(s).is_ok() => Ok(value.clone()),
        _ => Err(TranslateError::new("seed", "must be an integer between -2147483648 and 2147483647 for Vertex")),
    }
}

/// `stop`: a string or an array of strings → `stopSequences` (an empty array → none).
fn stop_sequences(value: &Value) -> Result<Option<Value>, TranslateError> {
    match value {
        Value::String(s) => Ok(Some(json!([s]))),
        Value::Array(items) if items.iter().all(Value::is_string) => Ok((!items.is_empty()).then(|| value.clone())),
        _ => Err(TranslateError::new("stop", "must be a string or an array of strings")),
    }
}

/// `json_object` → JSON output; `json_schema` → JSON output held to the schema, sent as
/// `responseJsonSchema` (JSON Schema as OpenAI clients write it; `responseSchema` would need the
/// OpenAPI subset, which refuses `additionalProperties` and more). `name` and `strict` have no
/// equivalent: Gemini holds the output to the schema either way.
fn response_format(value: &Value, config: &mut Obj) -> Result<(), TranslateError> {
    let bad =
        || TranslateError::new("response_format", "must be {\"type\": \"text\" | \"json_object\" | \"json_schema\"}");
    match value.get("type").and_then(Value::as_str).ok_or_else(bad)? {
        "text" => {}
        "json_object" => {
            config.insert("responseMimeType".into(), "application/json".into());
        }
        "json_schema" => {
            let spec = value.get("json_schema").filter(|s| s.is_object()).ok_or_else(|| {
                TranslateError::new("response_format.json_schema", "must be an object with a `schema`")
            })?;
            config.insert("responseMimeType".into(), "application/json".into());
            if let Some(schema) = spec.get("schema").filter(|s| !s.is_null()) {
                config.insert("responseJsonSchema".into(), schema.clone());
            }
        }
        _ => return Err(bad()),
    }
    Ok(())
}

/// The conversation: `system`/`developer` messages, wherever they are, become the
/// `systemInstruction` parts; the others become `contents` turns (`assistant` → role `model`,
/// `tool` → role `user` with a `functionResponse`), and consecutive turns of one role merge into
/// one (the answers to parallel calls must arrive together, in one turn).
fn conversation(value: Option<&Value>) -> Result<(Vec<Value>, Value), TranslateError> {
    let list = value
        .and_then(Value::as_array)
        .filter(|l| !l.is_empty())
        .ok_or_else(|| TranslateError::new("messages", "must be a non-empty array"))?;
    let mut system = Vec::new();
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    // The tool calls seen so far (id, name): a `functionResponse` names its function, an OpenAI
    // tool message only the call's id.
    let mut calls: Vec<(&str, &str)> = Vec::new();
    for (i, message) in list.iter().enumerate() {
        let field = format!("messages[{i}]");
        let (role, parts) = match str_at(message, "/role", &field)? {
            "system" | "developer" => {
                system.extend(texts(message.get("content"), &field)?.into_iter().map(text_part));
                continue;
            }
            "user" => ("user", user_parts(message.get("content"), &field)?),
            "assistant" => ("model", model_parts(message, &field, &mut calls)?),
            "tool" => ("user", vec![function_response(message, &field, &calls)?]),
            other => return Err(TranslateError::new(format!("{field}.role"), format!("{other:?} is not supported"))),
        };
        match turns.last_mut() {
            Some((last, content)) if *last == role => content.extend(parts),
            _ => turns.push((role, parts)),
        }
    }
    if turns.is_empty() {
        return Err(TranslateError::new("messages", "must hold a user message besides the system messages"));
    }
    let contents = turns.into_iter().map(|(role, parts)| json!({ "role": role, "parts": parts })).collect();
    Ok((system, Value::Array(contents)))
}

fn text_part(text: &str) -> Value {
    json!({ "text": text })
}

/// A content that may only hold text: a string or an array of `text` (or an earlier assistant
/// turn's `refusal`) parts. Empty texts are left out: Vertex refuses an empty text part.
fn texts<'a>(content: Option<&'a Value>, field: &str) -> Result<Vec<&'a str>, TranslateError> {
    match content {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok([s.as_str()].into_iter().filter(|s| !s.is_empty()).collect()),
        Some(Value::Array(parts)) => {
            let mut out = Vec::with_capacity(parts.len());
            for (i, part) in parts.iter().enumerate() {
                let key = match part.get("type").and_then(Value::as_str) {
                    Some("refusal") => "refusal",
                    _ => "text",
                };
                let text = part
                    .get(key)
                    .and_then(Value::as_str)
                    .ok_or_else(|| TranslateError::new(format!("{field}.content[{i}]"), "must be a text part"))?;
                if !text.is_empty() {
                    out.push(text);
                }
            }
            Ok(out)
        }
        Some(_) => Err(TranslateError::new(format!("{field}.content"), "must be a string or an array of parts")),
    }
}

/// A user turn: text, images, audio and files.
fn user_parts(content: Option<&Value>, field: &str) -> Result<Vec<Value>, TranslateError> {
    let Some(Value::Array(items)) = content else {
        return non_empty(texts(content, field)?.into_iter().map(text_part).collect(), field);
    };
    let mut parts = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let item_field = format!("{field}.content[{i}]");
        let part = match item.get("type").and_then(Value::as_str) {
            Some("text") => match item.get("text").and_then(Value::as_str) {
                Some("") => continue,
                Some(text) => text_part(text),
                None => return Err(TranslateError::new(format!("{item_field}.text"), "must be a string")),
            },
            Some("image_url") => super::media::image(item, &item_field)?,
            Some("input_audio") => super::media::audio(item, &item_field)?,
            Some("file") => super::media::file(item, &item_field)?,
            Some(other) => {
                let reason = format!("{other:?} parts are not supported for Vertex Gemini models");
                return Err(TranslateError::new(item_field, reason));
            }
            None => return Err(TranslateError::new(format!("{item_field}.type"), "must be a string")),
        };
        parts.push(part);
    }
    non_empty(parts, field)
}

fn non_empty(parts: Vec<Value>, field: &str) -> Result<Vec<Value>, TranslateError> {
    if parts.is_empty() {
        return Err(TranslateError::new(format!("{field}.content"), "must not be empty"));
    }
    Ok(parts)
}

/// An assistant turn: its text, then one `functionCall` part per tool call. The first call of
/// the turn carries the thought signature Gemini gave it ([`super::tool_call`]), or the
/// documented stand-in when the client did not keep it.
fn model_parts<'a>(
    message: &'a Value,
    field: &str,
    calls: &mut Vec<(&'a str, &'a str)>,
) -> Result<Vec<Value>, TranslateError> {
    if message.get("function_call").is_some_and(|f| !f.is_null()) {
        return Err(TranslateError::new(format!("{field}.function_call"), "is deprecated; use tool_calls"));
    }
    let mut parts: Vec<Value> = texts(message.get("content"), field)?.into_iter().map(text_part).collect();
    let tool_calls = match message.get("tool_calls") {
        None | Some(Value::Null) => &[][..],
        Some(Value::Array(list)) => list.as_slice(),
        Some(_) => return Err(TranslateError::new(format!("{field}.tool_calls"), "must be an array")),
    };
    for (i, call) in tool_calls.iter().enumerate() {
        let call_field = format!("{field}.tool_calls[{i}]");
        let (id, name, mut part) = function_call(call, &call_field)?;
        let signature = call.pointer("/extra_content/google/thought_signature").and_then(Value::as_str);
        match (signature, i) {
            (Some(s), _) => part["thoughtSignature"] = s.into(),
            (None, 0) => part["thoughtSignature"] = SKIP_SIGNATURE.into(),
            (None, _) => {}
        }
        calls.push((id, name));
        parts.push(part);
    }
    non_empty(parts, field)
}

/// A tool call → (its id, its name, a `functionCall` part): `arguments`, a JSON string, becomes
/// the `args` object.
fn function_call<'a>(call: &'a Value, field: &str) -> Result<(&'a str, &'a str, Value), TranslateError> {
    let string = |pointer: &str| str_at(call, pointer, field);
    let (id, name, arguments) = (string("/id")?, string("/function/name")?, string("/function/arguments")?);
    let args = match arguments.trim() {
        "" => json!({}),
        text => serde_json::from_str::<Value>(text).ok().filter(Value::is_object).ok_or_else(|| {
            TranslateError::new(format!("{field}.function.arguments"), "must be a JSON object encoded as a string")
        })?,
    };
    Ok((id, name, json!({ "functionCall": { "name": name, "args": args } })))
}

/// A `tool` message → a `functionResponse` part naming the function of the call it answers.
/// Its text is sent as `response.content`: parsed when it is a JSON object (the model then reads
/// the fields), as the string otherwise.
fn function_response(message: &Value, field: &str, calls: &[(&str, &str)]) -> Result<Value, TranslateError> {
    let id = str_at(message, "/tool_call_id", field)?;
    let name = calls.iter().rev().find(|(call_id, _)| *call_id == id).map(|(_, name)| *name).ok_or_else(|| {
        let reason = format!("{id:?} answers no tool call of an earlier assistant message");
        TranslateError::new(format!("{field}.tool_call_id"), reason)
    })?;
    let text = texts(message.get("content"), field)?.join("\n");
    let content = match serde_json::from_str::<Value>(&text) {
        Ok(object @ Value::Object(_)) => object,
        _ => Value::String(text),
    };
    Ok(json!({ "functionResponse": { "name": name, "response": { "content": content } } }))
}
