//! One gateway request's span: started when the request arrives (a child of the client's W3C
//! `traceparent`, when it sent one), filled from the request's receipt, ended after the answer.

use std::borrow::Cow;

use opentelemetry::propagation::{Injector, TextMapPropagator};
use opentelemetry::trace::{Span as _, SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_http::HeaderExtractor;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::Span;
use serde_json::Value;

use crate::receipts::{Check, Draft, UpstreamStatus};
use crate::telemetry::Tracing;

/// The longest prompt attribute; longer prompts are cut (the attribute is then not valid JSON).
const PROMPT_CAP: usize = 64 << 10;

/// The span of one gateway request. Ended by [`RequestSpan::finish`], or when dropped.
pub struct RequestSpan {
    /// Boxed: the SDK's span is ~300 bytes, and every request's context carries this field,
    /// tracing on or off (boxed, the field is two words).
    span: Box<Span>,
    capture_prompts: bool,
}

impl RequestSpan {
    /// Starts the span of a request that just arrived. Its name is the method until the route
    /// and model are known ([`RequestSpan::record`]).
    pub fn start(tracing: &Tracing, req: &pingora::http::RequestHeader, request_id: &str) -> RequestSpan {
        let parent = TraceContextPropagator::new().extract(&HeaderExtractor(&req.headers));
        let path: String = req.uri.path().chars().take(256).collect();
        let tracer = tracing.tracer();
        let span = tracer
            .span_builder(req.method.as_str().to_owned())
            .with_kind(SpanKind::Server)
            .with_attributes([
                KeyValue::new("http.request.method", req.method.as_str().to_owned()),
                KeyValue::new("url.path", path),
                KeyValue::new("tollgate.request.id", request_id.to_owned()),
            ])
            .start_with_context(tracer, &parent);
        RequestSpan { span: Box::new(span), capture_prompts: tracing.captures_prompts() }
    }
}

/// Collects what the propagator writes, under the header names the upstream call takes.
struct UpstreamHeaders<'a>(&'a mut Vec<(&'static str, String)>);

impl Injector for UpstreamHeaders<'_> {
    fn set(&mut self, key: &str, value: String) {
        let name = match key {
            "traceparent" => "traceparent",
            "tracestate" => "tracestate",
            _ => return,
        };
        self.0.retain(|(k, _)| *k != name);
        self.0.push((name, value));
    }
}

impl RequestSpan {
    /// Adds `traceparent` (and the caller's `tracestate`) naming this span to the headers of
    /// the upstream call, so the provider's side of the trace is this span's child.
    pub fn propagate(&self, headers: &mut Vec<(&'static str, String)>) {
        let cx = Context::new().with_remote_span_context(self.span.span_context().clone());
        TraceContextPropagator::new().inject_context(&cx, &mut UpstreamHeaders(headers));
    }

    /// The prompt as it goes upstream (after redaction), only when capturing prompts is on.
    pub fn prompt(&mut self, upstream_body: &[u8]) {
        if self.capture_prompts && self.span.is_recording() {
            self.span.set_attributes(prompt_attributes(upstream_body));
        }
    }

    /// The model the provider says answered (`gen_ai.response.model`).
    pub fn response_model(&mut self, model: Option<String>) {
        if let Some(m) = model {
            self.span.set_attribute(KeyValue::new("gen_ai.response.model", m));
        }
    }

    /// What the request's receipt says: provider, model, tokens, the receipt id, and each check
    /// as an event named after it. `operation` is the GenAI operation of the route, when known.
    pub fn record(&mut self, operation: Option<&'static str>, draft: Option<&Draft>) {
        if !self.span.is_recording() {
            return;
        }
        if let Some(op) = operation {
            self.span.set_attribute(KeyValue::new("gen_ai.operation.name", op));
        }
        let Some(d) = draft else { return };
        if let Some(op) = operation.filter(|_| !d.model.is_empty()) {
            self.span.update_name(format!("{op} {}", d.model));
        }
        if !d.provider.is_empty() {
            self.span.set_attribute(KeyValue::new("gen_ai.provider.name", provider_name(&d.provider)));
        }
        if !d.model.is_empty() {
            self.span.set_attribute(KeyValue::new("gen_ai.request.model", d.model.clone()));
        }
        self.span.set_attributes([
            KeyValue::new("tollgate.receipt.id", d.receipt_id.clone()),
            KeyValue::new("tollgate.tenant.id", d.tenant_id.to_string()),
        ]);
        if d.upstream_status == UpstreamStatus::Ok {
            self.span.set_attributes([
                KeyValue::new("gen_ai.usage.input_tokens", clamp(d.prompt_tokens)),
                KeyValue::new("gen_ai.usage.output_tokens", clamp(d.completion_tokens)),
                KeyValue::new("tollgate.cost.usd", d.cost_usd),
            ]);
        }
        for c in &d.checks {
            let (name, result) = check_words(c);
            self.span.add_event(name, vec![KeyValue::new("tollgate.check.result", result)]);
        }
    }

    /// Ends the span with the status the client got. Server errors (5xx, or an answer cut off)
    /// mark the span as failed; a refusal (4xx) is the gateway working, so it only names its
    /// `error.type`: the gateway's error type, else (a provider's error relayed) the status.
    pub fn finish(mut self, status: u16, error: Option<&'static str>) {
        self.span.set_attribute(KeyValue::new("http.response.status_code", i64::from(status)));
        let failed = status >= 500 || status == 0;
        let kind: Option<Cow<'static, str>> = match (error, failed) {
            (Some(e), _) => Some(e.into()),
            (None, true) if status == 0 => Some("answer_cut_off".into()),
            (None, true) => Some(status.to_string().into()),
            (None, false) => None,
        };
        if let Some(k) = kind {
            if failed {
                self.span.set_status(Status::error(k.clone()));
            }
            self.span.set_attribute(KeyValue::new("error.type", k));
        }
        self.span.end();
    }
}

/// `gen_ai.provider.name`: the semantic conventions' names for the providers Tollgate routes to.
fn provider_name(provider: &str) -> String {
    crate::providers::semconv_name(provider).into()
}

fn clamp(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A check's name and result; words this build knows without copying them.
fn check_words(c: &Check) -> (Cow<'static, str>, Cow<'static, str>) {
    match c.known() {
        Some((name, result)) => (name.as_str().into(), result.as_str().into()),
        None => (c.name.as_str().to_owned().into(), c.result.as_str().to_owned().into()),
    }
}

/// `gen_ai.input.messages` and `gen_ai.system_instructions` from a chat or Messages body, as
/// the provider's JSON (not re-shaped into the conventions' parts). Embeddings have neither.
fn prompt_attributes(body: &[u8]) -> Vec<KeyValue> {
    #[derive(serde::Deserialize)]
    struct Prompt {
        messages: Option<Value>,
        system: Option<Value>,
    }
    let Ok(p) = serde_json::from_slice::<Prompt>(body) else { return Vec::new() };
    [("gen_ai.input.messages", p.messages), ("gen_ai.system_instructions", p.system)]
        .into_iter()
        .filter_map(|(key, v)| {
            let text = match v? {
                Value::Null => return None,
                Value::String(s) => s,
                v => v.to_string(),
            };
            Some(KeyValue::new(key, cut(text, PROMPT_CAP)))
        })
        .collect()
}

/// `s` cut to at most `cap` bytes, on a character boundary.
fn cut(mut s: String, cap: usize) -> String {
    if s.len() > cap {
        let mut end = cap;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_are_read_from_chat_and_messages_bodies_only() {
        let chat = br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
        let a = prompt_attributes(chat);
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].key.as_str(), "gen_ai.input.messages");
        assert_eq!(a[0].value.as_str(), r#"[{"role":"user","content":"hi"}]"#);
        let anthropic = br#"{"model":"m","system":"be brief","messages":[]}"#;
        let keys: Vec<String> = prompt_attributes(anthropic).iter().map(|k| k.key.to_string()).collect();
        assert_eq!(keys, ["gen_ai.input.messages", "gen_ai.system_instructions"]);
        assert!(prompt_attributes(br#"{"model":"e","input":"x"}"#).is_empty());
        assert!(prompt_attributes(b"not json").is_empty());
    }

    #[test]
    fn long_prompts_are_cut_on_a_character_boundary() {
        let s = "é".repeat(10);
        assert_eq!(cut(s.clone(), 5), "éé");
        assert_eq!(cut(s.clone(), 100), s);
    }

    #[test]
    fn a_request_context_pays_two_words_for_its_span() {
        assert_eq!(std::mem::size_of::<Option<RequestSpan>>(), std::mem::size_of::<usize>() * 2);
    }

    #[test]
    fn provider_names_follow_the_conventions() {
        assert_eq!(provider_name("openai"), "openai");
        assert_eq!(provider_name("anthropic"), "anthropic");
        assert_eq!(provider_name("bedrock"), "aws.bedrock");
        assert_eq!(provider_name("vertex"), "gcp.vertex_ai");
    }
}
