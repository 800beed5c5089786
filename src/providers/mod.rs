//! The provider seam: one file per provider behind [`Provider`] (the pattern of TensorZero's
//! `providers/<name>.rs`). A provider knows how it authenticates and addresses an upstream
//! request, what it speaks ([`Dialect`]: usage, stream framing and errors are read by dialect),
//! how an OpenAI-shaped request is put into its own API, and its minimal test call. Adding a
//! provider is one file and one entry in [`provider`].
//!
//! The client's credentials never pass through: the upstream header set is built from an
//! allowlist plus the provider's own credential.

pub mod anthropic;
pub mod bedrock;
pub mod credentials;
pub mod openai;
pub mod pricing;
pub mod translate;
pub mod usage;
pub mod vertex;
pub mod vertex_auth;

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::Value;

use crate::config::{Config, ProviderName};
use crate::error::ApiError;
use crate::providers::translate::{ChunkTranslator, TranslateError};
use crate::snapshot::ProviderCred;
pub use usage::{Dialect, Usage};
use vertex_auth::TokenCache;

/// The upstream request the gateway will send.
pub struct UpstreamCall {
    pub method: &'static str,
    /// Path and query, relative to the credential's base URL.
    pub path: String,
    pub headers: Vec<(&'static str, String)>,
    pub body: Bytes,
}

/// Which operation of the provider's API a request is for.
#[derive(Debug, Clone, Copy)]
pub enum Target<'a> {
    /// A fixed API path (OpenAI's chat completions and embeddings, Anthropic's messages).
    Path(&'static str),
    /// A model by its id (Bedrock's model id, Vertex's Gemini model in the credential's project
    /// and region): the provider addresses it.
    Model { model: &'a str, stream: bool },
    /// The client's own path on the provider's API (Vertex's publisher-model paths, after the
    /// gateway's `/vertex` prefix).
    Native { path: &'a str, stream: bool },
}

/// Reads one of the client's request headers.
pub type ClientHeader<'a> = dyn for<'h> Fn(&'h str) -> Option<String> + Sync + 'a;

/// What providers share across requests.
pub struct Env<'a> {
    pub config: &'a Config,
    /// Vertex access tokens.
    pub tokens: &'a TokenCache,
}

/// One provider.
#[async_trait]
pub trait Provider: Sync {
    fn name(&self) -> ProviderName;

    /// What its API speaks.
    fn dialect(&self) -> Dialect;

    /// Authenticates and addresses the call. `client_header` reads the client's request headers
    /// (a provider forwards only its own allowlist of them).
    async fn prepare(
        &self,
        env: &Env<'_>,
        cred: &ProviderCred,
        target: Target<'_>,
        body: Bytes,
        client_header: &ClientHeader<'_>,
    ) -> Result<UpstreamCall, ApiError>;

    /// An OpenAI Chat Completions body → this provider's request body (identity for OpenAI).
    /// `model` is the model id the provider is to serve (the routing prefix removed).
    fn request_from_openai(&self, openai: &Value, model: &str) -> Result<Value, TranslateError>;

    /// This provider's whole answer → a `chat.completion`.
    fn to_openai(&self, answer: &Value, model: &str, id: &str, created: i64) -> Result<Value, TranslateError>;

    /// A translator of this provider's stream events into `chat.completion.chunk`s.
    fn chunk_translator(&self, model: &str, id: &str, created: i64) -> Box<dyn ChunkTranslator>;

    /// This provider's error answer → the OpenAI error object.
    fn openai_error(&self, body: &Value) -> Value;

    /// The minimal authenticated call of `POST /v1/providers/{provider}/test`, and whether an
    /// answer's status means the credential works.
    fn probe(&self) -> Probe;

    /// The name a client sends as `model` for a model of the price table that this provider
    /// serves, or None when it is not one of this provider's (`GET /v1/models`). The routing
    /// table has the last word: a name is listed only when it routes to this provider.
    fn listed_as(&self, priced: &str) -> Option<String> {
        Some(priced.to_string())
    }
}

/// A provider's test call.
pub struct Probe {
    pub method: &'static str,
    pub target: Target<'static>,
    pub body: &'static str,
    /// Statuses besides 2xx that prove the credential was accepted (a request refused for its
    /// content after authentication).
    pub accepted: &'static [u16],
}

/// The provider behind a name.
pub fn provider(name: ProviderName) -> &'static dyn Provider {
    match name {
        ProviderName::OpenAi => &openai::OpenAi,
        ProviderName::Anthropic => &anthropic::Anthropic,
        ProviderName::Bedrock => &bedrock::Bedrock,
        ProviderName::Vertex => &vertex::Vertex,
    }
}

/// The headers every JSON call starts with, plus the client's `accept` and whichever of the
/// client's headers `forward` allows.
pub(crate) fn base_headers(forward: &[&'static str], client_header: &ClientHeader<'_>) -> Vec<(&'static str, String)> {
    let mut headers: Vec<(&'static str, String)> = vec![
        ("content-type", "application/json".into()),
        // Identity encoding so the gateway can read usage from the answer.
        ("accept-encoding", "identity".into()),
    ];
    if let Some(a) = client_header("accept") {
        headers.push(("accept", a));
    }
    for &h in forward {
        if let Some(v) = client_header(h) {
            headers.push((h, v));
        }
    }
    headers
}

/// The credential's API key, or the error that says it has none.
pub(crate) fn api_key(cred: &ProviderCred) -> Result<&crate::secrets::Secret, ApiError> {
    match &cred.auth {
        crate::snapshot::ProviderAuth::ApiKey(k) => Ok(k),
        _ => Err(ApiError::new(
            crate::error::ErrorKind::NotConfigured,
            format!("provider {} has no api_key", cred.provider),
        )),
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn stream_usage_option() {
        let mut b = json!({"model": "m", "stream": true});
        assert!(ensure_stream_usage(&mut b));
        assert_eq!(b["stream_options"]["include_usage"], true);
        assert!(!ensure_stream_usage(&mut b), "already on");
        let mut b = json!({"stream_options": {"include_usage": false, "x": 1}});
        assert!(ensure_stream_usage(&mut b));
        assert_eq!(b["stream_options"]["x"], 1);
    }

    #[test]
    fn every_provider_has_its_entry() {
        for p in ProviderName::ALL {
            assert_eq!(provider(p).name(), p);
        }
    }
}
