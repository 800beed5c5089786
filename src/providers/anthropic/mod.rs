//! Anthropic Messages: `x-api-key` and `anthropic-version`; OpenAI-shaped requests translated
//! by [`crate::providers::translate`].

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::Value;

use crate::config::ProviderSpec;
use crate::error::ApiError;
use crate::providers::credential::{api_key, ProviderCred};
use crate::providers::headers::base_headers;
use crate::providers::translate::{self, ChunkTranslator, StreamTranslator, TranslateError};
use crate::providers::ProviderName;
use crate::providers::{ClientHeader, Dialect, Env, Probe, Provider, Target, UpstreamCall};

const FORWARD: &[&str] = &[BETA];

/// The header a client asks for Anthropic's beta features with.
pub const BETA: &str = "anthropic-beta";

/// The beta features a request asks for: every beta header, comma-separated.
pub fn requested_betas(headers: &http::HeaderMap) -> Vec<String> {
    headers
        .get_all(BETA)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|b| !b.is_empty())
        .map(str::to_string)
        .collect()
}

/// What config knows of Anthropic: its API's address, the `anthropic-version` sent when the
/// client sends none, and the model names routed to it by default.
pub const SPEC: ProviderSpec = ProviderSpec {
    name: ProviderName::Anthropic.as_str(),
    base_url: "https://api.anthropic.com",
    version: "2023-06-01",
    routes: &["claude-*"],
    needs_base_url: true,
};

pub struct Anthropic;

#[async_trait]
impl Provider for Anthropic {
    /// `anthropic-ratelimit-requests-remaining: 0` with `-reset` (an RFC 3339 time).
    fn requests_exhausted_until(&self, headers: &http::HeaderMap, now_ms: i64) -> Option<i64> {
        let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
        if text("anthropic-ratelimit-requests-remaining") != Some("0") {
            return crate::providers::ratelimit::x_ratelimit_exhausted(headers, now_ms);
        }
        let reset = text("anthropic-ratelimit-requests-reset")
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .map_or(now_ms + 1000, |at| at.timestamp_millis());
        Some(reset.clamp(now_ms, now_ms + crate::providers::ratelimit::RESET_CAP_MS))
    }

    fn name(&self) -> ProviderName {
        ProviderName::Anthropic
    }

    fn dialect(&self) -> Dialect {
        Dialect::Anthropic
    }

    async fn prepare(
        &self,
        env: &Env<'_>,
        cred: &ProviderCred,
        target: Target<'_>,
        body: Bytes,
        client_header: &ClientHeader<'_>,
    ) -> Result<UpstreamCall, ApiError> {
        let path = match target {
            Target::Path(p) => p.to_string(),
            Target::Model { .. } => "/v1/messages".to_string(),
            Target::Native { path, .. } => path.to_string(),
        };
        let mut headers = base_headers(FORWARD, client_header);
        headers.push(("x-api-key", api_key(cred)?.expose().to_string()));
        let version = client_header("anthropic-version")
            .unwrap_or_else(|| env.config.provider_defaults(SPEC.name).version.clone());
        headers.push(("anthropic-version", version));
        Ok(UpstreamCall { method: "POST", path, headers, body })
    }

    fn request_from_chat(&self, openai: &Value, model: &str) -> Result<Value, TranslateError> {
        let mut body = translate::to_anthropic_request(openai)?;
        body["model"] = Value::String(model.to_string());
        Ok(body)
    }

    fn to_chat(&self, answer: &Value, _model: &str, _id: &str, created: i64) -> Result<Value, TranslateError> {
        translate::to_openai_completion(answer, created)
    }

    fn chunk_translator(&self, _model: &str, _id: &str, created: i64) -> Box<dyn ChunkTranslator> {
        // Usage is always asked for: the gateway reads it from the last chunk, and drops that
        // chunk when the client did not ask for it.
        Box::new(StreamTranslator::new(created, true))
    }

    fn openai_error(&self, body: &Value) -> Value {
        translate::openai_error(body)
    }

    fn probe(&self) -> Probe {
        Probe { method: "GET", target: Target::Path("/v1/models"), body: "", accepted: &[] }
    }
}
