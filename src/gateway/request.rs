//! The client's request, parsed and checked: a provider-neutral view the rest of the path uses.

use bytes::Bytes;
use serde_json::Value;

use super::routes::Route;
use crate::config::ProviderName;
use crate::error::ApiError;
use crate::snapshot::Snapshot;

pub struct ParsedRequest {
    pub stream: bool,
    pub provider: ProviderName,
    /// The body as received; forwarded byte for byte unless the gateway must change it.
    pub raw: Bytes,
    pub json: Value,
}

fn field_type(json: &Value, field: &str, ok: fn(&Value) -> bool, expected: &str) -> Result<(), ApiError> {
    match json.get(field) {
        Some(v) if !ok(v) => Err(ApiError::invalid(format!("field `{field}` must be {expected}"))),
        _ => Ok(()),
    }
}

/// Parses and checks the body. `seen_model` learns the model as soon as it is known, so even
/// a request refused for another field leaves a receipt that names it.
pub fn parse(route: Route, raw: Bytes, snap: &Snapshot, seen_model: &mut String) -> Result<ParsedRequest, ApiError> {
    let json: Value =
        serde_json::from_slice(&raw).map_err(|e| ApiError::invalid(format!("request body is not valid JSON: {e}")))?;
    if !json.is_object() {
        return Err(ApiError::invalid("request body must be a JSON object"));
    }
    if let Some(m) = json.get("model").and_then(Value::as_str) {
        *seen_model = m.chars().take(256).collect();
    }
    let model = match json.get("model") {
        Some(Value::String(m)) if !m.trim().is_empty() => m.clone(),
        Some(_) => return Err(ApiError::invalid("field `model` must be a non-empty string")),
        None => return Err(ApiError::invalid("field `model` is required")),
    };
    field_type(&json, "stream", |v| v.is_boolean() || v.is_null(), "a boolean")?;
    match route {
        Route::ChatCompletions | Route::Messages => {
            if json.get("messages").is_none() {
                return Err(ApiError::invalid("field `messages` is required"));
            }
            field_type(&json, "messages", Value::is_array, "an array")?;
            for f in ["max_tokens", "max_completion_tokens"] {
                field_type(&json, f, |v| v.is_u64() || v.is_null(), "a non-negative integer")?;
            }
        }
        Route::Embeddings => {
            if json.get("input").is_none() {
                return Err(ApiError::invalid("field `input` is required"));
            }
        }
    }
    let stream = json.get("stream").and_then(Value::as_bool).unwrap_or(false);
    if route == Route::Embeddings && stream {
        return Err(ApiError::invalid("field `stream` is not supported on /v1/embeddings"));
    }
    let provider = pick_provider(route, &model, snap)?;
    Ok(ParsedRequest { stream, provider, raw, json })
}

fn pick_provider(route: Route, model: &str, snap: &Snapshot) -> Result<ProviderName, ApiError> {
    let routed = snap.route(model);
    match (route, routed) {
        // The Messages API is Anthropic's own; models the table gives elsewhere don't speak it.
        (Route::Messages, None | Some(ProviderName::Anthropic)) => Ok(ProviderName::Anthropic),
        (Route::Messages, Some(p)) => {
            Err(ApiError::invalid(format!("model `{model}` is served by {p}; call it through /v1/chat/completions")))
        }
        (Route::Embeddings, Some(ProviderName::OpenAi)) => Ok(ProviderName::OpenAi),
        (Route::ChatCompletions, Some(p @ (ProviderName::OpenAi | ProviderName::Anthropic))) => Ok(p),
        (_, Some(p)) => Err(ApiError::invalid(format!(
            "model `{model}` is routed to {p}, which does not serve {}",
            route.upstream_path()
        ))),
        (_, None) => {
            Err(ApiError::invalid(format!("no route for model `{model}`: add a `routes` entry in tollgate.yaml")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::pricing::Pricing;
    use std::sync::Arc;

    fn snap() -> Snapshot {
        let c = Arc::new(Config::default());
        let p = Arc::new(Pricing::from_config(&c).unwrap());
        Snapshot::empty(c, p)
    }

    fn err(route: Route, body: &str) -> String {
        parse(route, Bytes::from(body.to_string()), &snap(), &mut String::new()).err().unwrap().message
    }

    #[test]
    fn validation_names_the_field() {
        assert!(err(Route::ChatCompletions, "{not json").contains("not valid JSON"));
        assert!(err(Route::ChatCompletions, "[]").contains("JSON object"));
        assert!(err(Route::ChatCompletions, r#"{"messages":[]}"#).contains("`model`"));
        assert!(err(Route::ChatCompletions, r#"{"model":5,"messages":[]}"#).contains("`model`"));
        assert!(err(Route::ChatCompletions, r#"{"model":"gpt-4o","messages":"hi"}"#).contains("`messages`"));
        assert!(err(Route::ChatCompletions, r#"{"model":"gpt-4o","messages":[],"stream":"yes"}"#).contains("`stream`"));
        assert!(
            err(Route::ChatCompletions, r#"{"model":"gpt-4o","messages":[],"max_tokens":-1}"#).contains("`max_tokens`")
        );
        assert!(err(Route::ChatCompletions, r#"{"model":"llama-3","messages":[]}"#).contains("no route"));
        assert!(err(Route::Embeddings, r#"{"model":"text-embedding-3-small"}"#).contains("`input`"));
        assert!(err(Route::Messages, r#"{"model":"gpt-4o","messages":[]}"#).contains("openai"));
    }

    #[test]
    fn routing() {
        let s = snap();
        let ok = |r, b: &str| parse(r, Bytes::from(b.to_string()), &s, &mut String::new()).unwrap().provider;
        assert_eq!(ok(Route::ChatCompletions, r#"{"model":"gpt-4o-mini","messages":[]}"#), ProviderName::OpenAi);
        assert_eq!(
            ok(Route::ChatCompletions, r#"{"model":"claude-sonnet-4-5","messages":[]}"#),
            ProviderName::Anthropic
        );
        assert_eq!(ok(Route::Messages, r#"{"model":"claude-3-5-haiku","messages":[]}"#), ProviderName::Anthropic);
        assert_eq!(ok(Route::Embeddings, r#"{"model":"text-embedding-3-small","input":"x"}"#), ProviderName::OpenAi);
    }
}
