//! Google service-account access tokens for Vertex AI.
//!
//! Vertex takes an OAuth2 access token, not the stored key: the gateway signs a JWT with the
//! service account's RSA key (RS256, `kid` = `private_key_id`) and trades it at the account's
//! `token_uri` for a token (the JWT-bearer grant, RFC 7523, as Google's service-account flow
//! describes it). Tokens live an hour, so [`TokenCache`] keeps one per credential, refreshes
//! it shortly before it expires, and lets exactly one refresh run for all concurrent requests.
//!
//! The private key and the signed assertion never appear in an error or a log line.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::Value;

use crate::error::{ApiError, ErrorKind};
use crate::secrets::Secret;
use crate::upstream::{BaseUrl, UpstreamClient, UpstreamError};

/// The scope Vertex AI accepts (Google's documented scope for the Vertex REST API).
pub const CLOUD_PLATFORM_SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
/// Google's token endpoint, used when a key file has no `token_uri` (as Google's own libraries do).
pub const DEFAULT_TOKEN_URI: &str = "https://oauth2.googleapis.com/token";
/// How long a minted assertion is valid: Google's maximum.
const ASSERTION_LIFETIME_SECS: u64 = 3600;
/// The form body's fixed part, already form-encoded.
const GRANT_TYPE: &str = "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer";
/// A token endpoint's answer is a few hundred bytes; anything much larger is not one.
const ANSWER_LIMIT: usize = 64 * 1024;

/// What is wrong with a credential or with getting a token for it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VertexAuthError {
    /// The stored `service_account_json` cannot be used (answered as 400).
    #[error("field service_account_json: {0}")]
    InvalidServiceAccount(String),
    /// The token endpoint answered, but not with a token (answered as 502).
    #[error("the token endpoint {endpoint} refused the service-account grant: {detail}")]
    Refused { endpoint: String, detail: String },
    /// The token endpoint could not be reached or did not answer in time (502 or 504).
    #[error("the token endpoint {endpoint} could not be reached: {detail}")]
    Unreachable { endpoint: String, detail: String, timed_out: bool },
}

impl VertexAuthError {
    /// The error in the one envelope, with the status the contract gives it.
    pub fn api_error(&self) -> ApiError {
        let kind = match self {
            VertexAuthError::InvalidServiceAccount(_) => ErrorKind::InvalidRequest,
            VertexAuthError::Refused { .. } => ErrorKind::UpstreamError,
            VertexAuthError::Unreachable { timed_out: true, .. } => ErrorKind::UpstreamTimeout,
            VertexAuthError::Unreachable { .. } => ErrorKind::UpstreamError,
        };
        ApiError::new(kind, self.to_string())
    }
}

fn invalid(msg: impl Into<String>) -> VertexAuthError {
    VertexAuthError::InvalidServiceAccount(msg.into())
}

/// Where a credential's tokens come from: `token_uri` split into the upstream and its path.
#[derive(Debug, Clone)]
struct TokenEndpoint {
    uri: String,
    base: BaseUrl,
    path: String,
}

impl TokenEndpoint {
    fn parse(uri: &str) -> Result<TokenEndpoint, VertexAuthError> {
        let bad = || invalid(format!("`token_uri` is not an http(s) URL: `{uri}`"));
        let parsed: http::Uri = uri.parse().map_err(|_| bad())?;
        let (Some(scheme), Some(authority)) = (parsed.scheme_str(), parsed.authority()) else { return Err(bad()) };
        // BaseUrl checks the scheme and host; the path is kept whole (BaseUrl would drop a `/v1`).
        let base =
            BaseUrl::parse(&format!("{scheme}://{authority}")).map_err(|e| invalid(format!("`token_uri`: {e}")))?;
        let path = parsed.path_and_query().map_or("/", |p| p.as_str()).to_string();
        Ok(TokenEndpoint { uri: uri.to_string(), base, path })
    }
}

/// A parsed, usable service-account key (Google's JSON key file).
#[derive(Debug, Clone)]
pub struct ServiceAccount {
    pub project_id: String,
    pub client_email: String,
    pub private_key_id: String,
    pub token_uri: String,
    endpoint: TokenEndpoint,
    /// The signing key; its Debug output is redacted by jsonwebtoken.
    key: EncodingKey,
}

/// The claims of Google's service-account JWT-bearer grant.
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct GrantClaims {
    pub iss: String,
    pub scope: String,
    pub aud: String,
    pub iat: u64,
    pub exp: u64,
}

/// The fields of a Google key file that minting a token needs (`token_uri` has a default).
const REQUIRED: [&str; 5] = ["type", "project_id", "private_key_id", "private_key", "client_email"];

/// A string field of the key file, naming the field when it is missing, not a string or empty.
/// Values are never echoed: one of them is the private key.
fn text_field<'a>(doc: &'a Value, name: &str) -> Result<&'a str, VertexAuthError> {
    match doc.get(name) {
        None | Some(Value::Null) => Err(invalid(format!("missing `{name}`"))),
        Some(Value::String(s)) if s.trim().is_empty() => Err(invalid(format!("`{name}` is empty"))),
        Some(Value::String(s)) => Ok(s.trim()),
        Some(_) => Err(invalid(format!("`{name}` must be a string"))),
    }
}

impl ServiceAccount {
    /// Parses and checks a key file: every field Vertex needs, and a private key that signs.
    pub fn parse(json: &str) -> Result<ServiceAccount, VertexAuthError> {
        let doc: Value = serde_json::from_str(json)
            .map_err(|e| invalid(format!("not a JSON document (line {}, column {})", e.line(), e.column())))?;
        if !doc.is_object() {
            return Err(invalid("not a JSON object (expected a Google service-account key file)"));
        }
        let missing: Vec<String> =
            REQUIRED.iter().filter(|f| doc.get(**f).is_none_or(Value::is_null)).map(|f| format!("`{f}`")).collect();
        if !missing.is_empty() {
            return Err(invalid(format!("missing {}", missing.join(", "))));
        }
        let kind = text_field(&doc, "type")?;
        if kind != "service_account" {
            return Err(invalid(format!("`type` is `{kind}`; a service-account key has `service_account`")));
        }
        let token_uri = match doc.get("token_uri") {
            None | Some(Value::Null) => DEFAULT_TOKEN_URI,
            Some(_) => text_field(&doc, "token_uri")?,
        };
        let account = ServiceAccount {
            project_id: text_field(&doc, "project_id")?.to_string(),
            client_email: text_field(&doc, "client_email")?.to_string(),
            private_key_id: text_field(&doc, "private_key_id")?.to_string(),
            token_uri: token_uri.to_string(),
            endpoint: TokenEndpoint::parse(token_uri)?,
            key: signing_key(text_field(&doc, "private_key")?)?,
        };
        // jsonwebtoken reads the PEM's label and ASN.1 frame; only signing proves the RSA key itself.
        account.assertion(0).map_err(|_| invalid("`private_key` is not a usable RSA private key"))?;
        Ok(account)
    }

    /// The signed JWT-bearer assertion, issued at `iat` (seconds since the epoch).
    fn assertion(&self, iat: u64) -> Result<String, jsonwebtoken::errors::Error> {
        install_crypto_backend();
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some(self.private_key_id.clone());
        let claims = GrantClaims {
            iss: self.client_email.clone(),
            scope: CLOUD_PLATFORM_SCOPE.to_string(),
            aud: self.token_uri.clone(),
            iat,
            exp: iat + ASSERTION_LIFETIME_SECS,
        };
        jsonwebtoken::encode(&header, &claims, &self.key)
    }

    fn cache_key(&self) -> CacheKey {
        (self.client_email.clone(), self.private_key_id.clone(), self.token_uri.clone())
    }
}

/// jsonwebtoken picks its crypto backend from its own features and, should a dependency ever
/// enable its second one too, signs by panicking. Naming ours before the first signature keeps
/// that from happening (a backend someone else installed first is as good).
fn install_crypto_backend() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = jsonwebtoken::crypto::CryptoProvider::install_default(&jsonwebtoken::crypto::aws_lc::DEFAULT_PROVIDER);
    });
}

fn signing_key(pem: &str) -> Result<EncodingKey, VertexAuthError> {
    EncodingKey::from_rsa_pem(pem.as_bytes())
        .map_err(|_| invalid("`private_key` is not a PEM-encoded RSA private key (PKCS#8 or PKCS#1)"))
}

/// An access token and when the endpoint said it expires.
#[derive(Debug, Clone)]
pub struct AccessToken {
    pub token: Secret,
    pub expires_at: Instant,
}

/// Trades a freshly signed assertion for an access token at the account's `token_uri`.
pub async fn mint(client: &UpstreamClient, account: &ServiceAccount) -> Result<AccessToken, VertexAuthError> {
    let endpoint = &account.endpoint;
    let unreachable = |e: UpstreamError| VertexAuthError::Unreachable {
        endpoint: endpoint.uri.clone(),
        timed_out: matches!(e, UpstreamError::Timeout(_)),
        detail: e.to_string(),
    };
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let assertion = account.assertion(now).map_err(|_| invalid("`private_key` is not a usable RSA private key"))?;
    // The assertion is base64url and dots: nothing in it needs form-encoding.
    let body = Bytes::from(format!("{GRANT_TYPE}&assertion={assertion}"));
    let headers = [
        ("content-type", "application/x-www-form-urlencoded".to_string()),
        ("accept", "application/json".to_string()),
        ("accept-encoding", "identity".to_string()),
    ];
    let sent = Instant::now();
    let mut answer = client.send(&endpoint.base, "POST", &endpoint.path, &headers, body).await.map_err(unreachable)?;
    let status = answer.header().status.as_u16();
    let text = answer.read_all(ANSWER_LIMIT).await.map_err(unreachable)?;
    answer.release().await;
    let refused = |detail: String| VertexAuthError::Refused { endpoint: endpoint.uri.clone(), detail };
    let doc: Option<Value> = serde_json::from_slice(&text).ok();
    if !(200..300).contains(&status) {
        return Err(refused(refusal_detail(status, doc.as_ref(), &assertion)));
    }
    let doc = doc.ok_or_else(|| refused(format!("HTTP {status} with a body that is not JSON")))?;
    let token = doc.get("access_token").and_then(Value::as_str).filter(|t| !t.is_empty());
    let token = token.ok_or_else(|| refused(format!("HTTP {status} without an `access_token`")))?;
    // RFC 6749 makes `expires_in` optional; Google always sends it. Without it, the hour we asked for.
    let lifetime = doc.get("expires_in").and_then(Value::as_u64).unwrap_or(ASSERTION_LIFETIME_SECS);
    // Counted from when the request left, so the cache never trusts a token longer than it lives.
    Ok(AccessToken { token: Secret::new(token), expires_at: sent + Duration::from_secs(lifetime) })
}

/// `HTTP 400: invalid_grant: Invalid JWT Signature.` from an OAuth2 error answer. The
/// description is the endpoint's text: shortened, and scrubbed of the assertion in case an
/// endpoint echoes the request.
fn refusal_detail(status: u16, doc: Option<&Value>, assertion: &str) -> String {
    let field = |name: &str| doc.and_then(|d| d.get(name)).and_then(Value::as_str).map(str::to_string);
    let mut detail = format!("HTTP {status}");
    match (field("error"), field("error_description")) {
        (None, None) if doc.is_none() => detail.push_str(" with a body that is not JSON"),
        (None, None) => detail.push_str(" without an OAuth2 `error`"),
        (error, description) => {
            for part in [error, description].into_iter().flatten() {
                let part: String = part.replace(assertion, "[assertion]").chars().take(300).collect();
                detail.push_str(": ");
                detail.push_str(&part);
            }
        }
    }
    detail
}

/// Credentials are told apart by who they are, which key signs, and where tokens come from.
type CacheKey = (String, String, String);

/// Reuse and failure timing of the [`TokenCache`].
#[derive(Debug, Clone, Copy)]
pub struct CacheTiming {
    /// A token is replaced this long before it expires (at most half its lifetime).
    pub refresh_margin: Duration,
    /// A failed mint is answered from the cache this long, so a queue of requests behind a
    /// refusing endpoint gets one answer instead of one request each.
    pub failure_hold: Duration,
}

impl Default for CacheTiming {
    fn default() -> Self {
        CacheTiming { refresh_margin: Duration::from_secs(300), failure_hold: Duration::from_secs(5) }
    }
}

/// One credential's last outcome.
enum Slot {
    Empty,
    Token { token: AccessToken, refresh_at: Instant },
    Failed { error: VertexAuthError, until: Instant },
}

impl Slot {
    /// The cached answer, if it is still good at `now`.
    fn answer(&self, now: Instant) -> Option<Result<AccessToken, VertexAuthError>> {
        match self {
            Slot::Token { token, refresh_at } if now < *refresh_at => Some(Ok(token.clone())),
            Slot::Failed { error, until } if now < *until => Some(Err(error.clone())),
            _ => None,
        }
    }
}

/// When a token obtained at `obtained` should be replaced: `margin` before it expires, or
/// halfway through its life when that is shorter than twice the margin.
fn refresh_at(obtained: Instant, expires_at: Instant, margin: Duration) -> Instant {
    let lifetime = expires_at.saturating_duration_since(obtained);
    expires_at - margin.min(lifetime / 2)
}

/// Access tokens per credential, shared by every request of the process.
pub struct TokenCache {
    client: Arc<UpstreamClient>,
    timing: CacheTiming,
    /// Each slot has its own async lock: the caller that finds it stale refreshes it while the
    /// others for that credential wait, then read what it stored (one request for all of them).
    slots: Mutex<HashMap<CacheKey, Arc<tokio::sync::Mutex<Slot>>>>,
}

impl TokenCache {
    pub fn new(client: Arc<UpstreamClient>, timing: CacheTiming) -> TokenCache {
        TokenCache { client, timing, slots: Mutex::new(HashMap::new()) }
    }

    /// A valid access token for `account`: the cached one, or one minted now.
    pub async fn token(&self, account: &ServiceAccount) -> Result<AccessToken, VertexAuthError> {
        let slot = self.slot(account);
        let mut slot = slot.lock().await;
        if let Some(answer) = slot.answer(Instant::now()) {
            return answer;
        }
        let minted = mint(&self.client, account).await;
        let now = Instant::now();
        *slot = match &minted {
            Ok(token) => Slot::Token {
                token: token.clone(),
                refresh_at: refresh_at(now, token.expires_at, self.timing.refresh_margin),
            },
            Err(error) => Slot::Failed { error: error.clone(), until: now + self.timing.failure_hold },
        };
        minted
    }

    /// The slot of `account`'s credential. A new credential also drops slots nobody holds
    /// whose answer has gone stale (rotated or deleted keys), so the map stays as small as the
    /// set of credentials in use.
    fn slot(&self, account: &ServiceAccount) -> Arc<tokio::sync::Mutex<Slot>> {
        let key = account.cache_key();
        let mut slots = self.slots.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(slot) = slots.get(&key) {
            return slot.clone();
        }
        let now = Instant::now();
        slots
            .retain(|_, slot| Arc::strong_count(slot) > 1 || slot.try_lock().map_or(true, |s| s.answer(now).is_some()));
        slots.entry(key).or_insert_with(|| Arc::new(tokio::sync::Mutex::new(Slot::Empty))).clone()
    }
}

#[cfg(test)]
mod tests;
