//! AWS Signature Version 4 for Bedrock requests, with the AWS SDK's own signer (`aws-sigv4`).
//!
//! The settings are botocore's for `bedrock-runtime` (its `SigV4Auth`, the signer boto3 uses),
//! because that is what AWS verifies against and what tests/sdk/sigv4_check.py recomputes:
//!
//! - signing name `bedrock` (botocore's `signingName` for `bedrock-runtime`), the stored region;
//! - the path signed double-encoded: the request path carries the model id percent-encoded once
//!   (`…-v1%3A0`, [`model_path`]) and the canonical URI encodes it again (`…-v1%253A0`), as
//!   botocore's `quote(path, safe='/~')` does for every service but S3;
//! - the body hashed into the canonical request, and no `x-amz-content-sha256` header (botocore
//!   sends one only for S3 or unsigned payloads);
//! - the session token, when there is one, signed as `x-amz-security-token`;
//! - every header the caller passes signed, except the hop-by-hop and tracing headers botocore
//!   leaves out ([`UNSIGNED_HEADERS`]); `host` comes from the URL, without a default port.

use std::borrow::Cow;
use std::fmt;
use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{self, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;

/// The name Bedrock Runtime signs under (botocore's `signingName` for `bedrock-runtime`).
pub const SIGNING_NAME: &str = "bedrock";

/// Headers the signer sets itself: a caller passing one would sign a stale value.
const SIGNER_HEADERS: &[&str] = &["authorization", "x-amz-date", "x-amz-security-token", "x-amz-content-sha256"];

/// botocore's `SIGNED_HEADERS_BLACKLIST` (auth.py): headers a proxy may change or drop, so
/// they are sent unsigned. `authorization` is the signature itself.
pub const UNSIGNED_HEADERS: &[&str] = &[
    "authorization",
    "baggage",
    "connection",
    "expect",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "traceparent",
    "tracestate",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "user-agent",
    "x-amzn-trace-id",
];

/// An AWS access key. `Debug` shows the key id only: the secret and the session token never
/// reach a log line.
#[derive(Clone, PartialEq, Eq)]
pub struct AwsKeys {
    pub access_key_id: String,
    pub secret_access_key: String,
    /// Temporary credentials (STS) come with one; long-term keys do not.
    pub session_token: Option<String>,
}

impl fmt::Debug for AwsKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsKeys")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"***")
            .field("session_token", &self.session_token.as_ref().map(|_| "***"))
            .finish()
    }
}

/// Why a request could not be signed. No variant carries a key, a token or a header value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignError {
    #[error("AWS credential field {0} is empty")]
    MissingField(&'static str),
    #[error("the upstream URL must be an absolute http(s) URL with a host")]
    Url,
    #[error("header {0} is set by the signer and must not be passed in")]
    SignerHeader(String),
    #[error("AWS SigV4 signing failed: {0}")]
    Signer(String),
}

/// Signs one request and returns the headers to add to it: `x-amz-date`, `authorization` and,
/// with temporary credentials, `x-amz-security-token` (names lower-case). `url` is the URL as
/// sent (path already percent-encoded, see [`model_path`]); `headers` are the other headers
/// the request carries, every one of which is signed unless it is in [`UNSIGNED_HEADERS`], so
/// they must be sent exactly as passed. `at` is the signing time (AWS accepts ±5 minutes).
#[allow(clippy::too_many_arguments)] // The parts of one HTTP request plus who signs and when.
pub fn sign(
    keys: &AwsKeys,
    region: &str,
    service: &str,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    at: SystemTime,
) -> Result<Vec<(String, String)>, SignError> {
    check_inputs(keys, region, service, url, headers)?;
    let credentials =
        Credentials::new(&keys.access_key_id, &keys.secret_access_key, keys.session_token.clone(), None, "tollgate");
    let identity: Identity = credentials.into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(service)
        .time(at)
        .settings(botocore_settings())
        .build()
        .map_err(|e| SignError::Signer(e.to_string()))?
        .into();
    let request =
        SignableRequest::new(method, url, headers.iter().copied(), SignableBody::Bytes(body)).map_err(signer_error)?;
    let (instructions, _signature) = http_request::sign(request, &params).map_err(signer_error)?.into_parts();
    let (added, _query) = instructions.into_parts();
    Ok(added.into_iter().map(|h| (h.name().to_string(), h.value().to_string())).collect())
}

/// The checks that keep `aws-sigv4` from panicking (it expects a URL with a host) or from
/// signing a header the caller would then send with another value.
fn check_inputs(
    keys: &AwsKeys,
    region: &str,
    service: &str,
    url: &str,
    headers: &[(&str, &str)],
) -> Result<(), SignError> {
    for (field, value) in [
        ("access_key_id", keys.access_key_id.as_str()),
        ("secret_access_key", keys.secret_access_key.as_str()),
        ("region", region),
        ("service", service),
    ] {
        if value.trim().is_empty() {
            return Err(SignError::MissingField(field));
        }
    }
    let uri: http::Uri = url.parse().map_err(|_| SignError::Url)?;
    let http_scheme = matches!(uri.scheme_str(), Some("http" | "https"));
    if !http_scheme || uri.host().is_none_or(str::is_empty) {
        return Err(SignError::Url);
    }
    if let Some((name, _)) = headers.iter().find(|(n, _)| SIGNER_HEADERS.iter().any(|s| n.eq_ignore_ascii_case(s))) {
        return Err(SignError::SignerHeader(name.to_ascii_lowercase()));
    }
    Ok(())
}

/// `aws-sigv4`'s defaults already are botocore's choices (double-encoded path, normalised path,
/// no payload-hash header, session token signed, signature in headers) except the set of
/// unsigned headers, which is botocore's here.
fn botocore_settings() -> SigningSettings {
    let mut settings = SigningSettings::default();
    settings.excluded_headers = Some(UNSIGNED_HEADERS.iter().map(|h| Cow::Borrowed(*h)).collect());
    settings
}

/// The signer's error and its cause ("failed to create canonical request: invalid header
/// value"): neither names a value.
fn signer_error(e: http_request::SigningError) -> SignError {
    use std::error::Error as _;
    match e.source() {
        Some(cause) => SignError::Signer(format!("{e}: {cause}")),
        None => SignError::Signer(e.to_string()),
    }
}

/// The Bedrock Runtime path for `model_id` and `action` (`converse`, `converse-stream`,
/// `invoke`, ...), the model id percent-encoded as botocore encodes a URI label: everything but
/// `A-Z a-z 0-9 - . _ ~` (so `:` → `%3A` and an ARN's `/` → `%2F`).
pub fn model_path(model_id: &str, action: &str) -> String {
    format!("/model/{}/{action}", encode_label(model_id))
}

/// RFC 3986 percent-encoding of every byte outside the unreserved set, upper-case hex.
fn encode_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests;
