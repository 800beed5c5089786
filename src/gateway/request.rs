//! The client's request, parsed and checked: a provider-neutral view the rest of the path uses.

use bytes::Bytes;
use serde_json::Value;

use super::stored::{self, StoredRef};
use crate::checks::pipeline::Exchange;
use crate::checks::policy::plugin::facts;
use crate::checks::policy::{Decision, Facts, TenantPolicy};
use crate::error::ApiError;
use crate::providers::ProviderName;
use crate::providers::Route;
use crate::routing::{ModelRoute, RouteTarget};
use crate::snapshot::Snapshot;

pub struct ParsedRequest {
    pub stream: bool,
    pub provider: ProviderName,
    /// The body as received; forwarded byte for byte unless the gateway must change it.
    pub raw: Bytes,
    /// `max_tokens`, else `max_completion_tokens`.
    pub max_tokens: Option<u64>,
    /// OpenAI's `user` field, when it is a string.
    pub user: Option<String>,
    /// The body as JSON when validating it needed the whole tree (unusual bodies); otherwise
    /// it is built only if a check asks for it ([`crate::checks::pipeline::JsonBody`]).
    pub json: Option<Value>,
    /// Stored responses and items the request names (Responses only): they must be this
    /// tenant's before anything reaches the provider.
    pub refs: Vec<StoredRef>,
}

/// The JSON type of a member's value, read without building the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JsonKind {
    Array,
    Other,
}

impl<'de> serde::Deserialize<'de> for JsonKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Kind;
        impl<'de> serde::de::Visitor<'de> for Kind {
            type Value = JsonKind;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<JsonKind, A::Error> {
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(JsonKind::Array)
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<JsonKind, A::Error> {
                while map.next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?.is_some() {}
                Ok(JsonKind::Other)
            }
            fn visit_bool<E>(self, _: bool) -> Result<JsonKind, E> {
                Ok(JsonKind::Other)
            }
            fn visit_i64<E>(self, _: i64) -> Result<JsonKind, E> {
                Ok(JsonKind::Other)
            }
            fn visit_u64<E>(self, _: u64) -> Result<JsonKind, E> {
                Ok(JsonKind::Other)
            }
            fn visit_f64<E>(self, _: f64) -> Result<JsonKind, E> {
                Ok(JsonKind::Other)
            }
            fn visit_str<E>(self, _: &str) -> Result<JsonKind, E> {
                Ok(JsonKind::Other)
            }
            fn visit_unit<E>(self) -> Result<JsonKind, E> {
                Ok(JsonKind::Other)
            }
        }
        d.deserialize_any(Kind)
    }
}

/// The members the gateway itself reads; every other member is skipped, not built.
#[derive(serde::Deserialize)]
struct Fields {
    model: Option<Value>,
    stream: Option<Value>,
    messages: Option<JsonKind>,
    input: Option<JsonKind>,
    max_tokens: Option<Value>,
    max_completion_tokens: Option<Value>,
    user: Option<Value>,
    metadata: Option<Value>,
}

/// The end user a body names: OpenAI's `user`, else Anthropic's `metadata.user_id` (strings).
fn body_user(user: Option<&Value>, metadata: Option<&Value>) -> Option<String> {
    let s = |v: Option<&Value>| v.and_then(Value::as_str).filter(|u| !u.is_empty()).map(str::to_string);
    s(user).or_else(|| s(metadata.and_then(|m| m.get("user_id"))))
}

/// The common, valid request read without building its JSON tree. `None` for anything else
/// (not an object, a duplicate or missing member, a wrong type): [`parse`] then validates the
/// whole tree as before, so errors read exactly the same.
fn parse_fields(route: Route, raw: &[u8]) -> Option<(String, bool, Option<u64>, Option<String>)> {
    if raw.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return None;
    }
    let f: Fields = serde_json::from_slice(raw).ok()?;
    let model = match f.model? {
        Value::String(m) if !m.trim().is_empty() => m,
        _ => return None,
    };
    let stream = match f.stream {
        None => false,
        Some(Value::Bool(b)) => b,
        Some(_) => return None,
    };
    let cap = |v: Option<Value>| match v {
        None => Some(None),
        Some(v) => v.as_u64().map(Some),
    };
    let (max_tokens, max_completion_tokens) = (cap(f.max_tokens)?, cap(f.max_completion_tokens)?);
    match route {
        Route::ChatCompletions | Route::Messages => (f.messages? == JsonKind::Array).then_some(())?,
        Route::Embeddings => (f.input.is_some() && !stream).then_some(())?,
        _ => return None,
    }
    let user = body_user(f.user.as_ref(), f.metadata.as_ref());
    Some((model, stream, max_tokens.or(max_completion_tokens), user))
}

fn field_type(json: &Value, field: &str, ok: fn(&Value) -> bool, expected: &str) -> Result<(), ApiError> {
    match json.get(field) {
        Some(v) if !ok(v) => Err(ApiError::invalid(format!("field `{field}` must be {expected}"))),
        _ => Ok(()),
    }
}

/// A client's string as a receipt records it: at most 256 characters, control characters as
/// U+FFFD (PostgreSQL's text cannot hold NUL, and a receipt that cannot be stored withholds
/// its answer: a 503 for what is the client's mistake).
fn recorded(s: &str) -> String {
    // The usual model name (short, printable ASCII) is copied as it is: the char walk below
    // cost 730 instructions for the bench's 11-character name, this test ~60 (callgrind, session 54).
    if s.len() <= 256 && s.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return s.to_string();
    }
    recorded_by_char(s)
}

/// [`recorded`]'s reference: every case it copies, this gives the same.
fn recorded_by_char(s: &str) -> String {
    s.chars().take(256).map(|c| if c.is_control() { '\u{FFFD}' } else { c }).collect()
}

/// Refuses control characters in a field that names something (`model`) or someone (`user`).
fn printable(field: &str, value: Option<&str>) -> Result<(), ApiError> {
    match value {
        Some(v) if v.chars().any(char::is_control) => {
            Err(ApiError::invalid(format!("field `{field}` must not contain control characters")))
        }
        _ => Ok(()),
    }
}

/// Parses and checks the body. `seen_model` learns the model as soon as it is known, so even
/// a request refused for another field leaves a receipt that names it.
pub fn parse(
    route: Route,
    raw: Bytes,
    snap: &Snapshot,
    tenant: &str,
    seen_model: &mut String,
) -> Result<ParsedRequest, ApiError> {
    if route == Route::Responses {
        return parse_responses(raw, snap, seen_model);
    }
    if let Some((model, stream, max_tokens, user)) = parse_fields(route, &raw) {
        *seen_model = recorded(&model);
        printable("model", Some(&model))?;
        printable("user", user.as_deref())?;
        let provider = pick_provider(route, &model, snap, tenant)?;
        return Ok(ParsedRequest { stream, provider, raw, max_tokens, user, json: None, refs: Vec::new() });
    }
    parse_full(route, raw, snap, tenant, seen_model)
}

/// Builds and validates the whole JSON tree: the reference behaviour, with its error messages.
fn parse_full(
    route: Route,
    raw: Bytes,
    snap: &Snapshot,
    tenant: &str,
    seen_model: &mut String,
) -> Result<ParsedRequest, ApiError> {
    let json: Value =
        serde_json::from_slice(&raw).map_err(|e| ApiError::invalid(format!("request body is not valid JSON: {e}")))?;
    if !json.is_object() {
        return Err(ApiError::invalid("request body must be a JSON object"));
    }
    if let Some(m) = json.get("model").and_then(Value::as_str) {
        *seen_model = recorded(m);
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
        _ => return Err(ApiError::internal("native routes are parsed by parse_native")),
    }
    let stream = json.get("stream").and_then(Value::as_bool).unwrap_or(false);
    if route == Route::Embeddings && stream {
        return Err(ApiError::invalid("field `stream` is not supported on /v1/embeddings"));
    }
    printable("model", Some(&model))?;
    let user = body_user(json.get("user"), json.get("metadata"));
    printable("user", user.as_deref())?;
    let provider = pick_provider(route, &model, snap, tenant)?;
    let max_tokens = ["max_tokens", "max_completion_tokens"].iter().find_map(|f| json.get(*f).and_then(Value::as_u64));
    Ok(ParsedRequest { stream, provider, raw, max_tokens, user, json: Some(json), refs: Vec::new() })
}

/// The body as a JSON object, or the error that says why it is not one.
pub fn json_object(raw: &[u8]) -> Result<Value, ApiError> {
    let json: Value =
        serde_json::from_slice(raw).map_err(|e| ApiError::invalid(format!("request body is not valid JSON: {e}")))?;
    if !json.is_object() {
        return Err(ApiError::invalid("request body must be a JSON object"));
    }
    Ok(json)
}

/// An OpenAI Responses create. The tree is always built: the stored responses and items the
/// request names are read from it (`input` items can be many, and anywhere in the list).
fn parse_responses(raw: Bytes, snap: &Snapshot, seen_model: &mut String) -> Result<ParsedRequest, ApiError> {
    let json = json_object(&raw)?;
    if let Some(m) = json.get("model").and_then(Value::as_str) {
        *seen_model = recorded(m);
    }
    let model = match json.get("model") {
        Some(Value::String(m)) if !m.trim().is_empty() => m.clone(),
        Some(_) => return Err(ApiError::invalid("field `model` must be a non-empty string")),
        None => return Err(ApiError::invalid("field `model` is required")),
    };
    field_type(&json, "stream", |v| v.is_boolean() || v.is_null(), "a boolean")?;
    field_type(&json, "input", |v| v.is_string() || v.is_array() || v.is_null(), "a string or an array")?;
    field_type(&json, "max_output_tokens", |v| v.is_u64() || v.is_null(), "a non-negative integer")?;
    printable("model", Some(&model))?;
    let user = json.get("user").and_then(Value::as_str).map(str::to_string);
    printable("user", user.as_deref())?;
    if json.get("background").and_then(Value::as_bool) == Some(true) {
        // Its usage is known only after the create has answered, when nothing bills it.
        return Err(ApiError::invalid(
            "field `background` is not supported through the gateway: a background response's usage \
             arrives after the create answers, so it could not be checked against limits or billed",
        ));
    }
    let refs = stored::references(&json)?;
    let provider = pick_provider(Route::Responses, &model, snap, "")?;
    Ok(ParsedRequest {
        stream: json.get("stream").and_then(Value::as_bool).unwrap_or(false),
        provider,
        raw,
        max_tokens: json.get("max_output_tokens").and_then(Value::as_u64),
        user,
        json: Some(json),
        refs,
    })
}

/// A native Bedrock or Vertex request: the model is the one its path names, the body must be
/// an object with the operation's conversation (`messages` for Converse, `contents` for Gemini).
pub fn parse_native(
    route: Route,
    raw: Bytes,
    path_model: &str,
    seen_model: &mut String,
) -> Result<ParsedRequest, ApiError> {
    *seen_model = recorded(path_model);
    printable("model", Some(path_model))?;
    let json: Value =
        serde_json::from_slice(&raw).map_err(|e| ApiError::invalid(format!("request body is not valid JSON: {e}")))?;
    if !json.is_object() {
        return Err(ApiError::invalid("request body must be a JSON object"));
    }
    let (conversation, cap) = match route.dialect() {
        crate::providers::Dialect::Converse => ("messages", "/inferenceConfig/maxTokens"),
        _ => ("contents", "/generationConfig/maxOutputTokens"),
    };
    match json.get(conversation) {
        None => return Err(ApiError::invalid(format!("field `{conversation}` is required"))),
        Some(v) if !v.is_array() => return Err(ApiError::invalid(format!("field `{conversation}` must be an array"))),
        Some(_) => {}
    }
    let max_tokens = json.pointer(cap).and_then(Value::as_u64);
    let provider = route.default_provider();
    Ok(ParsedRequest {
        stream: route.streams(),
        provider,
        raw,
        max_tokens,
        user: None,
        json: Some(json),
        refs: Vec::new(),
    })
}

/// The model id the provider serves: the routing prefix (`bedrock/`, `vertex/`) removed.
pub fn upstream_model(provider: ProviderName, model: &str) -> &str {
    model.strip_prefix(provider.as_str()).and_then(|m| m.strip_prefix('/')).unwrap_or(model)
}

/// Whether a target of a model route can serve a client's route: every provider serves chat
/// (through translation), the other routes (messages, embeddings, the native Bedrock and Vertex
/// paths) only their own provider. `/v1/responses` is never routed: its stored responses live
/// in the account that made them (docs/decisions/routes.md).
pub fn serves(route: Route, provider: ProviderName) -> bool {
    match route {
        Route::ChatCompletions => true,
        Route::Responses => false,
        _ => provider == route.default_provider(),
    }
}

/// The provider of a route's first target that serves the client's route, or the 400 that
/// says none does.
pub fn first_serving(route: Route, r: &ModelRoute) -> Result<ProviderName, ApiError> {
    r.targets.iter().map(|t| t.provider).find(|&p| serves(route, p)).ok_or_else(|| {
        ApiError::invalid(format!("route `{}` has no target that serves {}", r.model, route.upstream_path()))
    })
}

/// Whether the tenant's policies let the request go to `t`: its allowlist and deny rules,
/// matched with the target's provider and model id (the checks match the client's model).
pub fn target_allowed(ex: &Exchange, policy: &TenantPolicy, t: &RouteTarget) -> bool {
    if !policy.has_allowlist() && !policy.has_rules() {
        return true;
    }
    let facts = Facts { provider: t.provider.as_str(), model: &t.model, ..facts(ex) };
    policy.allowlist_violation(&facts).is_none() && policy.evaluate(&facts) == Decision::Allow
}

fn pick_provider(route: Route, model: &str, snap: &Snapshot, tenant: &str) -> Result<ProviderName, ApiError> {
    if let Some(r) = snap.model_route(tenant, model) {
        // A model route decides; the checks see the first target the request may use
        // (`ModelCall::exchange`), the gateway may answer from another.
        return first_serving(route, r);
    }
    let routed = snap.route(model);
    let own = route.default_provider();
    match (route, routed) {
        // A provider's own API (Messages, Responses) is served by that provider; models the
        // table gives elsewhere don't speak it. Embeddings are served by one provider.
        (Route::Messages | Route::Responses, None) => Ok(own),
        (Route::Messages | Route::Responses | Route::Embeddings, Some(p)) if p == own => Ok(own),
        (Route::Messages, Some(p)) => {
            Err(ApiError::invalid(format!("model `{model}` is served by {p}; call it through /v1/chat/completions")))
        }
        // Every provider serves chat: the others through translation.
        (Route::ChatCompletions, Some(p)) => Ok(p),
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
    use crate::providers::pricing::Pricing;
    use std::sync::Arc;

    fn snap() -> Snapshot {
        let c = Arc::new(Config::defaults(&crate::providers::VOCABULARY));
        let p = Arc::new(Pricing::from_config(&c).unwrap());
        Snapshot::empty(c, p)
    }

    fn err(route: Route, body: &str) -> String {
        parse(route, Bytes::from(body.to_string()), &snap(), "t", &mut String::new()).err().unwrap().message
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
        for body in
            [r#"{"model":"gpt-4o\u0000x","messages":[]}"#, r#"{"model":"gpt-4o","messages":[],"user":"a\u0000"}"#]
        {
            assert!(err(Route::ChatCompletions, body).contains("control characters"), "{body}");
        }
        assert!(err(Route::Embeddings, r#"{"model":"text-embedding-3-small"}"#).contains("`input`"));
        assert!(err(Route::Messages, r#"{"model":"gpt-4o","messages":[]}"#).contains("openai"));
        assert!(err(Route::Responses, r#"{"input":"hi"}"#).contains("`model`"));
        assert!(err(Route::Responses, r#"{"model":"gpt-4o","input":5}"#).contains("`input`"));
        assert!(err(Route::Responses, r#"{"model":"gpt-4o","max_output_tokens":-1}"#).contains("`max_output_tokens`"));
        assert!(err(Route::Responses, r#"{"model":"claude-3-5-haiku","input":"hi"}"#).contains("does not serve"));
        assert!(
            err(Route::Responses, r#"{"model":"gpt-4o","previous_response_id":7}"#).contains("`previous_response_id`")
        );
        assert!(err(Route::Responses, r#"{"model":"gpt-4o","background":true}"#).contains("`background`"));
    }

    #[test]
    fn recorded_equals_its_char_by_char_reference() {
        let long = "m".repeat(300);
        let at_limit = "m".repeat(256);
        for s in
            ["gpt-4o-mini", "", "a\u{0}b", "tab\there", "del\u{7f}", "c1\u{85}x", "é-model", &long, &at_limit, " ~"]
        {
            assert_eq!(recorded(s), recorded_by_char(s), "{s:?}");
        }
        assert_eq!(recorded(&long).len(), 256);
    }

    #[test]
    fn responses_requests() {
        let s = snap();
        let body = r#"{"model":"gpt-4o-mini","input":[{"type":"item_reference","id":"msg_1"}],"stream":true,
            "max_output_tokens":64,"previous_response_id":"resp_1"}"#;
        let p = parse(Route::Responses, Bytes::from(body), &s, "t", &mut String::new()).unwrap();
        assert_eq!((p.stream, p.provider, p.max_tokens), (true, ProviderName::OpenAi, Some(64)));
        let ids: Vec<(&str, bool)> = p.refs.iter().map(|r| (r.id.as_str(), r.strict)).collect();
        assert_eq!(ids, [("resp_1", true), ("msg_1", true)]);
        assert!(p.json.is_some(), "the tree is built once, for the checks too");
    }

    /// The fast path must agree with the full parse on every body it accepts, and give up
    /// (so the full parse answers, with its messages) on everything else.
    #[test]
    fn fast_path_agrees_with_the_full_parse() {
        let s = snap();
        let bodies = [
            r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}"#,
            r#"  {"model":"gpt-4o","messages":[],"stream":true,"max_tokens":5,"user":"u-1","extra":{"a":[1,2]}}"#,
            r#"{"model":"gpt-4o","messages":[],"stream":null,"max_tokens":null,"max_completion_tokens":9}"#,
            r#"{"model":"gpt-4o","messages":[],"max_tokens":7,"max_completion_tokens":9,"user":5}"#,
            r#"{"model":"gpt-4o","messages":[],"max_tokens":-1}"#,
            r#"{"model":"gpt-4o","messages":[],"max_tokens":1.5}"#,
            r#"{"model":"gpt-4o","model":"claude-3-5-haiku","messages":[]}"#,
            r#"{"model":null,"messages":[]}"#,
            r#"{"model":"  ","messages":[]}"#,
            r#"{"model":"gpt-4o","messages":null}"#,
            r#"{"model":"gpt-4o","messages":{}}"#,
            r#"{"model":"gpt-4o","messages":[],"stream":"yes"}"#,
            r#"{"model":"gpt-4o","messages":[]}"#,
            r#"{"model":"llama-3","messages":[]}"#,
            r#"["gpt-4o",false]"#,
            r#"{"model":"gpt-4o","messages":[]"#,
            r#"{"model":"text-embedding-3-small","input":"x"}"#,
            r#"{"model":"text-embedding-3-small","input":"x","stream":true}"#,
            r#"{"model":"text-embedding-3-small"}"#,
        ];
        for body in bodies {
            for route in [Route::ChatCompletions, Route::Messages, Route::Embeddings] {
                let (mut seen_a, mut seen_b) = (String::new(), String::new());
                let a = parse(route, Bytes::from(body), &s, "t", &mut seen_a);
                let b = parse_full(route, Bytes::from(body), &s, "t", &mut seen_b);
                match (a, b) {
                    (Ok(a), Ok(b)) => {
                        let view = |p: &ParsedRequest| (p.stream, p.provider, p.max_tokens, p.user.clone());
                        assert_eq!(view(&a), view(&b), "{route:?} {body}");
                    }
                    (Err(a), Err(b)) => assert_eq!(a.message, b.message, "{route:?} {body}"),
                    (a, b) => panic!("{route:?} {body}: fast {:?} vs full {:?}", a.is_ok(), b.is_ok()),
                }
                assert_eq!(seen_a, seen_b, "{route:?} {body}");
            }
        }
        let fast = |b: &str| parse_fields(Route::ChatCompletions, b.as_bytes()).is_some();
        assert!(fast(bodies[0]) && fast(bodies[1]) && fast(bodies[2]));
        assert!(!fast(bodies[6]) && !fast(bodies[7]) && !fast(bodies[14]));
    }

    #[test]
    fn routing() {
        let s = snap();
        let ok = |r, b: &str| parse(r, Bytes::from(b.to_string()), &s, "t", &mut String::new()).unwrap().provider;
        assert_eq!(ok(Route::ChatCompletions, r#"{"model":"gpt-4o-mini","messages":[]}"#), ProviderName::OpenAi);
        assert_eq!(
            ok(Route::ChatCompletions, r#"{"model":"claude-sonnet-4-5","messages":[]}"#),
            ProviderName::Anthropic
        );
        assert_eq!(ok(Route::Messages, r#"{"model":"claude-3-5-haiku","messages":[]}"#), ProviderName::Anthropic);
        assert_eq!(ok(Route::Embeddings, r#"{"model":"text-embedding-3-small","input":"x"}"#), ProviderName::OpenAi);
    }
}
