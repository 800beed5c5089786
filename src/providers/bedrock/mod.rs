//! AWS Bedrock (Converse): SigV4 with the stored access keys, service `bedrock`; streams in
//! AWS event-stream frames; OpenAI-shaped requests translated by [`crate::providers::translate::converse`].
//!
//! - [`sign`]: AWS Signature Version 4 over the upstream request (the `aws-sigv4` crate, set up
//!   the way botocore signs `bedrock-runtime`, so a request the gateway sends verifies exactly
//!   as one boto3 would send).
//!
//! Its `converse-stream` answers come in the `application/vnd.amazon.eventstream` framing,
//! read by [`crate::providers::eventstream`] (the framing of the Converse dialect).

pub mod sign;

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::{json, Value};

use crate::config::ProviderSpec;
use crate::error::{ApiError, ErrorKind};
use crate::providers::credential::{secret_field, CredentialBody, Fields, ProviderAuth, ProviderCred};
use crate::providers::headers::base_headers;
use crate::providers::translate::{converse, ChunkTranslator, TranslateError};
use crate::providers::ProviderName;
use crate::providers::{ClientHeader, Dialect, Env, Probe, Provider, Target, UpstreamCall};
use crate::secrets::Secret;

/// What config knows of Bedrock: models under the `bedrock/` prefix. Its address is the
/// credential's region's, so config has none to check.
pub const SPEC: ProviderSpec = ProviderSpec {
    name: ProviderName::Bedrock.as_str(),
    base_url: "",
    version: "",
    routes: &["bedrock/*"],
    needs_base_url: false,
};

pub struct Bedrock;

#[async_trait]
impl Provider for Bedrock {
    fn name(&self) -> ProviderName {
        ProviderName::Bedrock
    }

    fn dialect(&self) -> Dialect {
        Dialect::Converse
    }

    async fn prepare(
        &self,
        _env: &Env<'_>,
        cred: &ProviderCred,
        target: Target<'_>,
        body: Bytes,
        _client_header: &ClientHeader<'_>,
    ) -> Result<UpstreamCall, ApiError> {
        let ProviderAuth::Aws { keys, region } = &cred.auth else {
            return Err(ApiError::new(ErrorKind::NotConfigured, "provider bedrock has no access keys"));
        };
        let (path, stream) = match target {
            Target::Model { model, stream } => {
                (sign::model_path(model, if stream { "converse-stream" } else { "converse" }), stream)
            }
            Target::Path(p) => (p.to_string(), false),
            Target::Native { path, stream } => (path.to_string(), stream),
        };
        // Bedrock answers in its own content types; nothing of the client's is forwarded.
        let mut headers = base_headers(&[], &|_| None);
        let accept = if stream { "application/vnd.amazon.eventstream" } else { "application/json" };
        headers.push(("accept", accept.to_string()));
        let base = &cred.base_url;
        let url = format!("{}://{}{}{path}", if base.tls { "https" } else { "http" }, base.authority(), base.prefix);
        let mut signed_over: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let host = base.authority();
        signed_over.push(("host", host.as_str()));
        let added =
            sign::sign(keys, region, "bedrock", "POST", &url, &signed_over, &body, std::time::SystemTime::now())
                .map_err(|e| {
                    ApiError::new(ErrorKind::NotConfigured, format!("bedrock request could not be signed: {e}"))
                })?;
        for (name, value) in added {
            headers.push((static_header(&name), value));
        }
        Ok(UpstreamCall { method: "POST", path, headers, body })
    }

    fn request_from_chat(&self, openai: &Value, _model: &str) -> Result<Value, TranslateError> {
        converse::to_converse_request(openai)
    }

    fn to_chat(&self, answer: &Value, model: &str, id: &str, created: i64) -> Result<Value, TranslateError> {
        converse::to_openai_completion(answer, model, id, created)
    }

    fn chunk_translator(&self, model: &str, id: &str, created: i64) -> Box<dyn ChunkTranslator> {
        Box::new(converse::ConverseStreamTranslator::new(model, id, created, true))
    }

    fn openai_error(&self, body: &Value) -> Value {
        converse::openai_error(None, body)
    }

    /// A signed Converse call with no messages: Bedrock checks the signature first, so its
    /// `ValidationException` (400) proves the keys work without running (or paying for) a model;
    /// bad keys answer 403.
    fn probe(&self) -> Probe {
        Probe {
            method: "POST",
            target: Target::Model { model: "amazon.nova-micro-v1:0", stream: false },
            body: r#"{"messages":[]}"#,
            accepted: &[400],
        }
    }

    /// Bedrock model ids are `<vendor>.<model>:<version>` (`amazon.nova-micro-v1:0`); the
    /// client names them `bedrock/<id>`.
    fn listed_as(&self, priced: &str) -> Option<String> {
        let (vendor, rest) = priced.split_once('.')?;
        let vendor_ok = !vendor.is_empty() && vendor.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        (vendor_ok && rest.contains(':')).then(|| format!("bedrock/{priced}"))
    }

    /// AWS access keys and the region they sign for.
    fn credential_fields(&self) -> Fields {
        Fields { required: &["access_key_id", "secret_access_key", "region"], optional: &[] }
    }

    fn secret_to_store(&self, body: &CredentialBody) -> Result<(Value, String), String> {
        let id = body.field("access_key_id").unwrap_or_default();
        let secret = body.field("secret_access_key").unwrap_or_default();
        Ok((json!({ "access_key_id": id, "secret_access_key": secret }), Secret::new(id).hint()))
    }

    fn auth_from_stored(&self, secret: &Value, region: &str) -> Result<ProviderAuth, String> {
        let keys = sign::AwsKeys {
            access_key_id: secret_field(secret, "access_key_id"),
            secret_access_key: secret_field(secret, "secret_access_key"),
            session_token: None,
        };
        Ok(ProviderAuth::Aws { keys, region: region.to_string() })
    }

    /// The regional endpoint, unless config names one for every tenant.
    fn default_base_url(&self, configured: &str, region: &str) -> String {
        if configured.is_empty() {
            format!("https://bedrock-runtime.{region}.amazonaws.com")
        } else {
            configured.to_string()
        }
    }
}

/// The names SigV4 adds, as the static strings the upstream header list holds.
fn static_header(name: &str) -> &'static str {
    match name.to_ascii_lowercase().as_str() {
        "authorization" => "authorization",
        "x-amz-date" => "x-amz-date",
        "x-amz-security-token" => "x-amz-security-token",
        "x-amz-content-sha256" => "x-amz-content-sha256",
        _ => "x-amz-unknown",
    }
}

/// The AWS error code a Bedrock client expects for this status.
pub(crate) fn aws_error_code(status: u16) -> &'static str {
    match status {
        401 => "UnrecognizedClientException",
        403 => "AccessDeniedException",
        404 => "ResourceNotFoundException",
        408 | 504 => "ModelTimeoutException",
        429 => "ThrottlingException",
        402 => "ServiceQuotaExceededException",
        503 => "ServiceUnavailableException",
        s if s >= 500 => "InternalServerException",
        _ => "ValidationException",
    }
}
