//! A Chat Completions request body → an Anthropic Messages request body.

use serde_json::{json, Map, Value};

use super::TranslateError;

/// Anthropic requires `max_tokens`; OpenAI clients usually leave it out.
pub const DEFAULT_MAX_TOKENS: u64 = 4096;

/// Image types Anthropic accepts in a base64 source.
const IMAGE_TYPES: &[&str] = &["image/jpeg", "image/png", "image/gif", "image/webp"];

/// Fields accepted and not sent upstream: they do not change the answer (`seed` is best-effort
/// at OpenAI too, `store`/`metadata` concern OpenAI's own stored completions) or the caller
/// reads them (`stream_options`, see [`include_usage`]).
const IGNORED: &[&str] =
    &["seed", "store", "metadata", "service_tier", "stream_options", "prompt_cache_key", "safety_identifier"];

type Obj = Map<String, Value>;

/// Whether a streamed answer must end with the usage chunk (`stream_options.include_usage`).
pub fn include_usage(openai: &Value) -> bool {
    openai.pointer("/stream_options/include_usage").and_then(Value::as_bool).unwrap_or(false)
}

/// Translates a `/v1/chat/completions` body into a `/v1/messages` body. Every field is either
/// translated, in [`IGNORED`], at its neutral value, or refused with the field's name: a field
/// silently dropped would give the client an answer it did not ask for.
pub fn to_anthropic_request(openai: &Value) -> Result<Value, TranslateError> {
    let body = openai.as_object().ok_or_else(|| TranslateError::new("body", "must be a JSON object"))?;
    let mut out = Obj::new();
    if let Some(model) = body.get("model") {
        out.insert("model".into(), model.clone());
    }
    let (system, messages) = messages(body.get("messages"))?;
    if let Some(system) = system {
        out.insert("system".into(), system);
    }
    out.insert("messages".into(), messages);
    out.insert("max_tokens".into(), max_tokens(body)?.into());
    for (key, value) in body {
        translate_field(key, value, body, &mut out)?;
    }
    tool_choice(body, &mut out)?;
    Ok(Value::Object(out))
}

/// One top-level field (other than those [`to_anthropic_request`] handles itself).
fn translate_field(key: &str, value: &Value, body: &Obj, out: &mut Obj) -> Result<(), TranslateError> {
    match key {
        "model" | "messages" | "max_tokens" | "max_completion_tokens" | "tool_choice" | "parallel_tool_calls" => {}
        "stop" => {
            if let Some(stop) = stop_sequences(value)? {
                out.insert("stop_sequences".into(), stop);
            }
        }
        "temperature" => sampling(key, value, 1.0, out)?,
        "top_p" => sampling(key, value, 1.0, out)?,
        "stream" => {
            let stream = value.as_bool().ok_or_else(|| TranslateError::new("stream", "must be a boolean"))?;
            out.insert("stream".into(), stream.into());
        }
        "user" => {
            let user = value.as_str().ok_or_else(|| TranslateError::new("user", "must be a string"))?;
            out.insert("metadata".into(), json!({ "user_id": user }));
        }
        "tools" => {
            out.insert("tools".into(), tools(value)?);
        }
        _ if IGNORED.contains(&key) => {}
        _ => neutral_or_refused(key, value, body)?,
    }
    Ok(())
}

/// Fields with no Anthropic equivalent pass only at the value that means "not used".
fn neutral_or_refused(key: &str, value: &Value, body: &Obj) -> Result<(), TranslateError> {
    let neutral = match key {
        "n" => value.is_null() || value.as_u64() == Some(1),
        "frequency_penalty" | "presence_penalty" => value.is_null() || value.as_f64() == Some(0.0),
        "logprobs" => value.is_null() || value == &Value::Bool(false),
        "top_logprobs" => value.is_null() || (value.as_u64() == Some(0) && body.get("logprobs") != Some(&true.into())),
        "logit_bias" => value.is_null() || value.as_object().is_some_and(Map::is_empty),
        "response_format" => value.is_null() || value.get("type").and_then(Value::as_str) == Some("text"),
        "modalities" => value.is_null() || value == &json!(["text"]),
        _ => false,
    };
    if neutral {
        return Ok(());
    }
    let reason = match key {
        "n" => "only 1 choice can be served by Anthropic models",
        "frequency_penalty" | "presence_penalty" | "logprobs" | "top_logprobs" | "logit_bias" => {
            "is not supported by Anthropic models"
        }
        "response_format" => "only {\"type\": \"text\"} is supported for Anthropic models",
        "modalities" => "only [\"text\"] is supported for Anthropic models",
        _ => "is not supported for Anthropic models",
    };
    Err(TranslateError::new(key, reason))
}

/// `max_completion_tokens` (current) wins over `max_tokens` (deprecated); absent → the default.
fn max_tokens(body: &Obj) -> Result<u64, TranslateError> {
    for key in ["max_completion_tokens", "max_tokens"] {
        match body.get(key) {
            None | Some(Value::Null) => continue,
            Some(v) => {
                return v
                    .as_u64()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| TranslateError::new(key, "must be a positive integer"))
            }
        }
    }
    Ok(DEFAULT_MAX_TOKENS)
}

/// `temperature` and `top_p`: Anthropic's range is 0..=1 (OpenAI's temperature goes to 2).
fn sampling(key: &str, value: &Value, max: f64, out: &mut Obj) -> Result<(), TranslateError> {
    if value.is_null() {
        return Ok(());
    }
    let v = value.as_f64().ok_or_else(|| TranslateError::new(key, "must be a number"))?;
    if !(0.0..=max).contains(&v) {
        return Err(TranslateError::new(key, format!("must be between 0 and {max} for Anthropic models")));
    }
    out.insert(key.into(), value.clone());
    Ok(())
}

/// `stop`: a string or an array of strings → `stop_sequences`.
fn stop_sequences(value: &Value) -> Result<Option<Value>, TranslateError> {
    let bad = || TranslateError::new("stop", "must be a string or an array of strings");
    match value {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(json!([s]))),
        Value::Array(items) if items.iter().all(Value::is_string) => {
            Ok((!items.is_empty()).then(|| Value::Array(items.clone())))
        }
        _ => Err(bad()),
    }
}

/// Function tools → Anthropic tools (`parameters` → `input_schema`; `strict` has no equivalent
/// and is dropped: Anthropic validates tool input against the schema either way).
fn tools(value: &Value) -> Result<Value, TranslateError> {
    let list = value.as_array().ok_or_else(|| TranslateError::new("tools", "must be an array"))?;
    let mut out = Vec::with_capacity(list.len());
    for (i, tool) in list.iter().enumerate() {
        let field = format!("tools[{i}]");
        if tool.get("type").and_then(Value::as_str) != Some("function") {
            return Err(TranslateError::new(field, "only function tools are supported for Anthropic models"));
        }
        let function = tool.get("function").ok_or_else(|| TranslateError::new(&field, "function is missing"))?;
        let name = function
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| TranslateError::new(format!("{field}.function.name"), "must be a string"))?;
        let schema = match function.get("parameters") {
            None | Some(Value::Null) => json!({ "type": "object", "properties": {} }),
            Some(p) => p.clone(),
        };
        let mut t = json!({ "name": name });
        if let Some(d) = function.get("description").filter(|d| !d.is_null()) {
            t["description"] = d.clone();
        }
        t["input_schema"] = schema;
        out.push(t);
    }
    Ok(Value::Array(out))
}

/// `tool_choice` and `parallel_tool_calls` → Anthropic's `tool_choice`. `none` keeps the tools
/// (they may be named in the conversation) and forbids calling them, as OpenAI does.
fn tool_choice(body: &Obj, out: &mut Obj) -> Result<(), TranslateError> {
    let choice = body.get("tool_choice").filter(|c| !c.is_null());
    let serial = body.get("parallel_tool_calls") == Some(&Value::Bool(false));
    let has_tools = out.get("tools").and_then(Value::as_array).is_some_and(|t| !t.is_empty());
    let mut anthropic = match choice {
        None if serial && has_tools => json!({ "type": "auto" }),
        None => return Ok(()),
        Some(c) => choice_value(c)?,
    };
    if !has_tools {
        if anthropic["type"] == "none" || anthropic["type"] == "auto" {
            return Ok(());
        }
        return Err(TranslateError::new("tool_choice", "requires tools"));
    }
    if serial && anthropic["type"] != "none" {
        anthropic["disable_parallel_tool_use"] = true.into();
    }
    out.insert("tool_choice".into(), anthropic);
    Ok(())
}

fn choice_value(choice: &Value) -> Result<Value, TranslateError> {
    let bad = || TranslateError::new("tool_choice", "must be \"auto\", \"none\", \"required\" or a function");
    match choice {
        Value::String(s) => match s.as_str() {
            "auto" => Ok(json!({ "type": "auto" })),
            "none" => Ok(json!({ "type": "none" })),
            "required" => Ok(json!({ "type": "any" })),
            _ => Err(bad()),
        },
        Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("function") => {
            let name = o.get("function").and_then(|f| f.get("name")).and_then(Value::as_str).ok_or_else(bad)?;
            Ok(json!({ "type": "tool", "name": name }))
        }
        _ => Err(bad()),
    }
}

/// The conversation: `system`/`developer` messages, wherever they are, become the top-level
/// `system` (Anthropic has no system turn); the others become turns of content blocks, and
/// consecutive turns of one role merge into one turn (several `tool` answers → one user turn
/// of `tool_result` blocks, then the user's text, in the order Anthropic requires).
fn messages(value: Option<&Value>) -> Result<(Option<Value>, Value), TranslateError> {
    let list = value
        .and_then(Value::as_array)
        .filter(|l| !l.is_empty())
        .ok_or_else(|| TranslateError::new("messages", "must be a non-empty array"))?;
    let mut system = Vec::new();
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for (i, message) in list.iter().enumerate() {
        let field = format!("messages[{i}]");
        let role = message
            .get("role")
            .and_then(Value::as_str)
            .ok_or_else(|| TranslateError::new(format!("{field}.role"), "must be a string"))?;
        let (role, blocks) = match role {
            "system" | "developer" => {
                system.extend(text_parts(message.get("content"), &field)?);
                continue;
            }
            "user" => ("user", user_blocks(message.get("content"), &field)?),
            "assistant" => ("assistant", assistant_blocks(message, &field)?),
            "tool" => ("user", vec![tool_result(message, &field)?]),
            other => return Err(TranslateError::new(format!("{field}.role"), format!("{other:?} is not supported"))),
        };
        match turns.last_mut() {
            Some((last, content)) if *last == role => content.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    let system = (!system.is_empty()).then(|| text_content(system));
    let turns = turns.into_iter().map(|(role, content)| json!({ "role": role, "content": content })).collect();
    Ok((system, Value::Array(turns)))
}

/// A content that may only hold text: a string or an array of `text` parts. Empty texts are
/// left out (Anthropic refuses empty text blocks).
fn text_parts(content: Option<&Value>, field: &str) -> Result<Vec<String>, TranslateError> {
    let field = format!("{field}.content");
    match content {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(if s.is_empty() { Vec::new() } else { vec![s.clone()] }),
        Some(Value::Array(parts)) => {
            let mut texts = Vec::new();
            for (i, part) in parts.iter().enumerate() {
                let text = match part.get("type").and_then(Value::as_str) {
                    Some("text") => part.get("text").and_then(Value::as_str),
                    // An earlier assistant turn's refusal is what the model said.
                    Some("refusal") => part.get("refusal").and_then(Value::as_str),
                    _ => None,
                };
                let text = text.ok_or_else(|| TranslateError::new(format!("{field}[{i}]"), "must be a text part"))?;
                if !text.is_empty() {
                    texts.push(text.to_string());
                }
            }
            Ok(texts)
        }
        Some(_) => Err(TranslateError::new(field, "must be a string or an array of parts")),
    }
}

/// Texts where Anthropic takes a string or text blocks (`system`, `tool_result`): one text stays
/// a string; several stay apart as blocks (joining them could run words together).
fn text_content(mut texts: Vec<String>) -> Value {
    match texts.len() {
        0 => Value::String(String::new()),
        1 => Value::String(texts.remove(0)),
        _ => Value::Array(texts.into_iter().map(text_block).collect()),
    }
}

fn text_block(text: impl Into<String>) -> Value {
    json!({ "type": "text", "text": text.into() })
}

/// A user turn: text and images.
fn user_blocks(content: Option<&Value>, field: &str) -> Result<Vec<Value>, TranslateError> {
    let Some(Value::Array(parts)) = content else {
        let blocks: Vec<Value> = text_parts(content, field)?.into_iter().map(text_block).collect();
        return non_empty(blocks, field);
    };
    let mut blocks = Vec::with_capacity(parts.len());
    for (i, part) in parts.iter().enumerate() {
        let part_field = format!("{field}.content[{i}]");
        match part.get("type").and_then(Value::as_str) {
            Some("text") => {
                let text = part
                    .get("text")
                    .and_then(Value::as_str)
                    .ok_or_else(|| TranslateError::new(format!("{part_field}.text"), "must be a string"))?;
                if !text.is_empty() {
                    blocks.push(text_block(text));
                }
            }
            Some("image_url") => blocks.push(image_block(part, &part_field)?),
            Some(other) => {
                return Err(TranslateError::new(
                    part_field,
                    format!("{other:?} parts are not supported for Anthropic models"),
                ))
            }
            None => return Err(TranslateError::new(format!("{part_field}.type"), "must be a string")),
        }
    }
    non_empty(blocks, field)
}

fn non_empty(blocks: Vec<Value>, field: &str) -> Result<Vec<Value>, TranslateError> {
    if blocks.is_empty() {
        return Err(TranslateError::new(format!("{field}.content"), "must not be empty"));
    }
    Ok(blocks)
}

/// `image_url`: a `data:` URL → a base64 source, an http(s) URL → a url source. `detail` has no
/// Anthropic equivalent and is dropped.
fn image_block(part: &Value, field: &str) -> Result<Value, TranslateError> {
    let url = part
        .get("image_url")
        .and_then(|i| i.get("url"))
        .and_then(Value::as_str)
        .ok_or_else(|| TranslateError::new(format!("{field}.image_url.url"), "must be a string"))?;
    let source = if let Some(rest) = url.strip_prefix("data:") {
        let (media_type, data) = rest
            .split_once(";base64,")
            .ok_or_else(|| TranslateError::new(format!("{field}.image_url.url"), "a data: URL must be base64"))?;
        if !IMAGE_TYPES.contains(&media_type) {
            let reason = format!("image type {media_type:?} is not supported (jpeg, png, gif, webp are)");
            return Err(TranslateError::new(format!("{field}.image_url.url"), reason));
        }
        json!({ "type": "base64", "media_type": media_type, "data": data })
    } else if url.starts_with("https://") || url.starts_with("http://") {
        json!({ "type": "url", "url": url })
    } else {
        return Err(TranslateError::new(format!("{field}.image_url.url"), "must be a data: or http(s) URL"));
    };
    Ok(json!({ "type": "image", "source": source }))
}

/// An assistant turn: its text, then one `tool_use` block per tool call.
fn assistant_blocks(message: &Value, field: &str) -> Result<Vec<Value>, TranslateError> {
    if message.get("function_call").is_some_and(|f| !f.is_null()) {
        return Err(TranslateError::new(format!("{field}.function_call"), "is deprecated; use tool_calls"));
    }
    let mut blocks: Vec<Value> = text_parts(message.get("content"), field)?.into_iter().map(text_block).collect();
    let calls = match message.get("tool_calls") {
        None | Some(Value::Null) => &Vec::new(),
        Some(Value::Array(calls)) => calls,
        Some(_) => return Err(TranslateError::new(format!("{field}.tool_calls"), "must be an array")),
    };
    for (i, call) in calls.iter().enumerate() {
        blocks.push(tool_use(call, &format!("{field}.tool_calls[{i}]"))?);
    }
    non_empty(blocks, field)
}

/// A tool call → `tool_use`: `arguments`, a JSON string, becomes the `input` object.
fn tool_use(call: &Value, field: &str) -> Result<Value, TranslateError> {
    let string = |key: &str| {
        call.pointer(key)
            .and_then(Value::as_str)
            .ok_or_else(|| TranslateError::new(format!("{field}{}", key.replace('/', ".")), "must be a string"))
    };
    let id = string("/id")?;
    let name = string("/function/name")?;
    let arguments = string("/function/arguments")?;
    let input: Value = if arguments.trim().is_empty() {
        json!({})
    } else {
        serde_json::from_str(arguments).map_err(|_| {
            TranslateError::new(format!("{field}.function.arguments"), "must be a JSON object encoded as a string")
        })?
    };
    if !input.is_object() {
        return Err(TranslateError::new(format!("{field}.function.arguments"), "must encode a JSON object"));
    }
    Ok(json!({ "type": "tool_use", "id": id, "name": name, "input": input }))
}

/// A `tool` message → a `tool_result` block for the user turn that follows the call.
fn tool_result(message: &Value, field: &str) -> Result<Value, TranslateError> {
    let id = message
        .get("tool_call_id")
        .and_then(Value::as_str)
        .ok_or_else(|| TranslateError::new(format!("{field}.tool_call_id"), "must be a string"))?;
    let content = text_content(text_parts(message.get("content"), field)?);
    Ok(json!({ "type": "tool_result", "tool_use_id": id, "content": content }))
}

/// Makes a streamed OpenAI-dialect chat request report usage. Returns true when the gateway
/// added the option (so the extra usage-only chunk is not shown to a client that never asked).
pub fn ensure_stream_usage(body: &mut Value) -> bool {
    let Some(obj) = body.as_object_mut() else { return false };
    let opts = obj.entry("stream_options").or_insert_with(|| Value::Object(Default::default()));
    let Some(opts) = opts.as_object_mut() else { return false };
    if opts.get("include_usage").and_then(Value::as_bool) == Some(true) {
        return false;
    }
    opts.insert("include_usage".into(), Value::Bool(true));
    true
}
