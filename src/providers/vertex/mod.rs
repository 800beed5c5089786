//! Google Vertex AI (Gemini `generateContent`): a bearer access token minted from the stored
//! service account ([`auth`]); streams as SSE (`alt=sse`); OpenAI-shaped
//! requests translated by [`crate::providers::translate::gemini`].

pub mod auth;

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::{json, Value};

use crate::config::ProviderSpec;
use crate::error::{ApiError, ErrorKind};
use crate::providers::credential::{secret_field, CredentialBody, Fields, ProviderAuth, ProviderCred};
use crate::providers::headers::base_headers;
use crate::providers::translate::{gemini, ChunkTranslator, TranslateError};
use crate::providers::ProviderName;
use crate::providers::{ClientHeader, Dialect, Env, Probe, Provider, Target, UpstreamCall};
use crate::secrets::Secret;
use auth::ServiceAccount;

/// What config knows of Vertex: models under the `vertex/` prefix. Its address is the
/// credential's region's, so config has none to check.
pub const SPEC: ProviderSpec = ProviderSpec {
    name: ProviderName::Vertex.as_str(),
    base_url: "",
    version: "",
    routes: &["vertex/*"],
    needs_base_url: false,
};

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
            Target::Native { path, .. } => upstream_path(path),
        };
        let token = env.tokens.token(account).await.map_err(|e| e.api_error())?;
        let mut headers = base_headers(&["x-goog-user-project"], client_header);
        headers.push(("authorization", format!("Bearer {}", token.token.expose())));
        Ok(UpstreamCall { method: "POST", path, headers, body })
    }

    fn request_from_chat(&self, openai: &Value, _model: &str) -> Result<Value, TranslateError> {
        gemini::to_gemini_request(openai)
    }

    fn to_chat(&self, answer: &Value, model: &str, id: &str, created: i64) -> Result<Value, TranslateError> {
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

    /// A service account key file; the region (Vertex's location) is optional.
    fn credential_fields(&self) -> Fields {
        Fields { required: &["service_account_json"], optional: &["region"] }
    }

    fn secret_to_store(&self, body: &CredentialBody) -> Result<(Value, String), String> {
        let sa = body.field("service_account_json").unwrap_or_default();
        // The parse the token source uses: a key file that cannot mint a token is refused when
        // it is stored, naming what is wrong, rather than on the first request.
        let account = ServiceAccount::parse(sa).map_err(|e| e.to_string())?;
        Ok((json!({ "service_account_json": sa }), Secret::new(account.private_key_id.as_str()).hint()))
    }

    fn auth_from_stored(&self, secret: &Value, region: &str) -> Result<ProviderAuth, String> {
        let account =
            ServiceAccount::parse(&secret_field(secret, "service_account_json")).map_err(|e| e.to_string())?;
        Ok(ProviderAuth::Google { account: Arc::new(account), location: location(region).to_string() })
    }

    /// The regional endpoint, unless config names one for every tenant.
    fn default_base_url(&self, configured: &str, region: &str) -> String {
        if configured.is_empty() {
            format!("https://{}-aiplatform.googleapis.com", location(region))
        } else {
            configured.to_string()
        }
    }
}

/// Vertex's region when the credential names none.
const DEFAULT_LOCATION: &str = "us-central1";

/// The credential's region, or the default one.
fn location(region: &str) -> &str {
    if region.is_empty() {
        DEFAULT_LOCATION
    } else {
        region
    }
}

/// The `google.rpc.Code` name Google's clients expect for this status.
pub(crate) fn google_status(status: u16) -> &'static str {
    match status {
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        409 => "ALREADY_EXISTS",
        429 | 402 => "RESOURCE_EXHAUSTED",
        503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        s if s >= 500 => "INTERNAL",
        _ => "INVALID_ARGUMENT",
    }
}

/// The client's native path (`/vertex/[v1/]projects/...`, with its query) as Vertex's own API
/// path (`/v1/projects/...`).
pub(crate) fn upstream_path(path_and_query: &str) -> String {
    let rest = path_and_query.strip_prefix("/vertex/").unwrap_or(path_and_query);
    let rest = rest.strip_prefix("v1/").unwrap_or(rest);
    format!("/v1/{rest}")
}
