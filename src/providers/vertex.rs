//! Google Vertex AI (Gemini `generateContent`): a bearer access token minted from the stored
//! service account ([`super::vertex_auth`]); streams as SSE (`alt=sse`); OpenAI-shaped
//! requests translated by [`crate::providers::translate::gemini`].

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::Value;

use super::{base_headers, ClientHeader, Dialect, Env, Probe, Provider, Target, UpstreamCall};
use crate::config::ProviderName;
use crate::error::{ApiError, ErrorKind};
use crate::providers::translate::{gemini, ChunkTranslator, TranslateError};
use crate::snapshot::{ProviderAuth, ProviderCred};

pub struct Vertex;

#[async_trait]
impl Provider for Vertex {
    fn name(&self) -> ProviderName {
        ProviderName::Vertex
    }

    fn dialect(&self) -> Dialect {
        Dialect::Gemini
    }

    async fn prepare(
        &self,
        env: &Env<'_>,
        cred: &ProviderCred,
        target: Target<'_>,
        body: Bytes,
        client_header: &ClientHeader<'_>,
    ) -> Result<UpstreamCall, ApiError> {
        let ProviderAuth::Google { account, location } = &cred.auth else {
            return Err(ApiError::new(ErrorKind::NotConfigured, "provider vertex has no service account"));
        };
        let path = match target {
            Target::Model { model, stream } => {
                let op = if stream { "streamGenerateContent?alt=sse" } else { "generateContent" };
                format!(
                    "/v1/projects/{}/locations/{location}/publishers/google/models/{model}:{op}",
                    account.project_id
                )
            }
            Target::Path(p) => p.to_string(),
            Target::Native { path, .. } => path.to_string(),
        };
        let token = env.tokens.token(account).await.map_err(|e| e.api_error())?;
        let mut headers = base_headers(&["x-goog-user-project"], client_header);
        headers.push(("authorization", format!("Bearer {}", token.token.expose())));
        Ok(UpstreamCall { method: "POST", path, headers, body })
    }

    fn request_from_openai(&self, openai: &Value, _model: &str) -> Result<Value, TranslateError> {
        gemini::to_gemini_request(openai)
    }

    fn to_openai(&self, answer: &Value, model: &str, id: &str, created: i64) -> Result<Value, TranslateError> {
        gemini::to_openai_completion(answer, model, id, created)
    }

    fn chunk_translator(&self, model: &str, id: &str, created: i64) -> Box<dyn ChunkTranslator> {
        Box::new(gemini::GeminiStreamTranslator::new(model, id, created, true))
    }

    fn openai_error(&self, body: &Value) -> Value {
        gemini::openai_error(body)
    }

    /// Mints a token, then asks the smallest model for one output token.
    fn probe(&self) -> Probe {
        Probe {
            method: "POST",
            target: Target::Model { model: "gemini-2.0-flash-lite", stream: false },
            body: r#"{"contents":[{"role":"user","parts":[{"text":"ping"}]}],"generationConfig":{"maxOutputTokens":1}}"#,
            accepted: &[],
        }
    }

    /// Google's own models on Vertex (`gemini-*`); the client names them `vertex/<model>`.
    fn listed_as(&self, priced: &str) -> Option<String> {
        priced.starts_with("gemini-").then(|| format!("vertex/{priced}"))
    }
}
