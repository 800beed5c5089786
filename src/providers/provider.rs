//! What a provider is: the [`Provider`] trait every `providers/<name>/` folder implements, and
//! the upstream call it prepares.

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::Value;

use super::credential::{self, CredentialBody, Fields, ProviderAuth, ProviderCred};
use super::translate::{ChunkTranslator, TranslateError};
use super::usage::Dialect;
use super::vertex::auth::TokenCache;
use crate::config::Config;
use crate::error::ApiError;
use crate::providers::ProviderName;

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
    fn request_from_chat(&self, openai: &Value, model: &str) -> Result<Value, TranslateError>;

    /// This provider's whole answer → a `chat.completion`.
    fn to_chat(&self, answer: &Value, model: &str, id: &str, created: i64) -> Result<Value, TranslateError>;

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

    /// The credential fields it takes (`PUT /v1/providers/{provider}`): an API key unless it
    /// says otherwise.
    fn credential_fields(&self) -> Fields {
        Fields::API_KEY
    }

    /// Whether its credentials are API keys alone: the providers `/status` lists, each with
    /// how many of its credentials fail their last test.
    fn keyed_by_api_key(&self) -> bool {
        self.credential_fields().required == Fields::API_KEY.required
    }

    /// The secret part of a credential body whose required fields are present: the JSON that
    /// is sealed, and the hint shown in its place.
    fn secret_to_store(&self, body: &CredentialBody) -> Result<(Value, String), String> {
        Ok(credential::api_key_secret(body))
    }

    /// An opened secret → how the provider authenticates; `region` is the credential's own.
    fn auth_from_stored(&self, secret: &Value, _region: &str) -> Result<ProviderAuth, String> {
        Ok(credential::api_key_auth(secret))
    }

    /// Whether an answer's headers say the credential's request limit is used up, and until
    /// when (Unix ms). The `x-ratelimit-*-requests` pair unless the provider says otherwise.
    fn requests_exhausted_until(&self, headers: &http::HeaderMap, now_ms: i64) -> Option<i64> {
        super::ratelimit::x_ratelimit_exhausted(headers, now_ms)
    }

    /// The base URL of a credential that names none; `configured` is config's
    /// `providers.<name>.base_url`.
    fn default_base_url(&self, configured: &str, _region: &str) -> String {
        configured.to_string()
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
