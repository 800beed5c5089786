//! OpenAI (and any OpenAI-compatible API): bearer key, the client's body as it is.

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::Value;

use crate::config::ProviderSpec;
use crate::error::ApiError;
use crate::providers::credential::{api_key, ProviderCred};
use crate::providers::headers::base_headers;
use crate::providers::translate::{ChunkTranslator, TranslateError};
use crate::providers::ProviderName;
use crate::providers::{ClientHeader, Dialect, Env, Probe, Provider, Target, UpstreamCall};

/// Client headers worth forwarding. Everything else (auth, cookies, SDK telemetry, hop-by-hop)
/// stays at the gateway.
const FORWARD: &[&str] = &["openai-organization", "openai-project", "openai-beta", "idempotency-key"];

/// What config knows of OpenAI: its API's address, and the model names routed to it by default.
pub const SPEC: ProviderSpec = ProviderSpec {
    name: ProviderName::OpenAi.as_str(),
    base_url: "https://api.openai.com",
    version: "",
    routes: &["gpt-*", "chatgpt-*", "o1*", "o3*", "o4*", "text-embedding-*", "omni-moderation-*"],
    needs_base_url: true,
};

pub struct OpenAi;

#[async_trait]
impl Provider for OpenAi {
    fn name(&self) -> ProviderName {
        ProviderName::OpenAi
    }

    fn dialect(&self) -> Dialect {
        Dialect::OpenAi
    }

    async fn prepare(
        &self,
        _env: &Env<'_>,
        cred: &ProviderCred,
        target: Target<'_>,
        body: Bytes,
        client_header: &ClientHeader<'_>,
    ) -> Result<UpstreamCall, ApiError> {
        let path = match target {
            Target::Path(p) => p.to_string(),
            Target::Model { .. } => "/v1/chat/completions".to_string(),
            Target::Native { path, .. } => path.to_string(),
        };
        let mut headers = base_headers(FORWARD, client_header);
        headers.push(("authorization", format!("Bearer {}", api_key(cred)?.expose())));
        Ok(UpstreamCall { method: "POST", path, headers, body })
    }

    fn request_from_chat(&self, openai: &Value, _model: &str) -> Result<Value, TranslateError> {
        Ok(openai.clone())
    }

    fn to_chat(&self, answer: &Value, _model: &str, _id: &str, _created: i64) -> Result<Value, TranslateError> {
        Ok(answer.clone())
    }

    fn chunk_translator(&self, _model: &str, _id: &str, _created: i64) -> Box<dyn ChunkTranslator> {
        Box::new(Identity { done: false })
    }

    fn openai_error(&self, body: &Value) -> Value {
        body.clone()
    }

    fn probe(&self) -> Probe {
        Probe { method: "GET", target: Target::Path("/v1/models"), body: "", accepted: &[] }
    }
}

/// OpenAI's own chunks pass as they are.
struct Identity {
    done: bool,
}

impl ChunkTranslator for Identity {
    fn on_event(&mut self, event: &Value) -> Vec<Value> {
        vec![event.clone()]
    }
    fn finish(&mut self) -> Vec<Value> {
        self.done = true;
        Vec::new()
    }
    fn is_done(&self) -> bool {
        self.done
    }
}
