//! A provider credential in its two forms: the `PUT /v1/providers/{provider}` body, and the
//! opened credential the snapshot holds for the hot path.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{json, Value};

use super::bedrock::sign::AwsKeys;
use super::vertex::auth::ServiceAccount;
use crate::error::{ApiError, ErrorKind};
use crate::providers::ProviderName;
use crate::secrets::Secret;
use crate::upstream::BaseUrl;

/// Decrypted credentials of one tenant for one provider.
#[derive(Debug)]
pub struct ProviderCred {
    pub provider: ProviderName,
    pub auth: ProviderAuth,
    pub base_url: BaseUrl,
    pub status: String,
}

/// How a credential authenticates: the secret part, opened.
#[derive(Debug)]
pub enum ProviderAuth {
    /// OpenAI, Anthropic.
    ApiKey(Secret),
    /// Bedrock: SigV4 with these keys, in this region.
    Aws { keys: AwsKeys, region: String },
    /// Vertex: tokens minted from this service account, models in this region.
    Google { account: Arc<ServiceAccount>, location: String },
}

/// The union of the fields the providers take; which are required depends on the provider
/// ([`Fields`]).
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CredentialBody {
    pub api_key: Option<String>,
    pub base_url: Option<String>,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    pub region: Option<String>,
    pub service_account_json: Option<String>,
}

/// The provider-specific fields of [`CredentialBody`], in the order a field that does not apply
/// is looked for (the first one found is named). `base_url` applies to every provider.
const PROVIDER_FIELDS: [&str; 5] = ["api_key", "access_key_id", "secret_access_key", "service_account_json", "region"];

/// Which of the body's fields a provider takes.
#[derive(Debug, Clone, Copy)]
pub struct Fields {
    /// Must be present and not blank, named in this order when missing.
    pub required: &'static [&'static str],
    /// May be present.
    pub optional: &'static [&'static str],
}

impl Fields {
    pub const API_KEY: Fields = Fields { required: &["api_key"], optional: &[] };

    /// The fields present in `body` that this provider does not take, in [`PROVIDER_FIELDS`] order.
    pub fn foreign<'b>(&self, body: &'b CredentialBody) -> impl Iterator<Item = &'static str> + 'b {
        let own = *self;
        PROVIDER_FIELDS
            .into_iter()
            .filter(move |f| !own.required.contains(f) && !own.optional.contains(f))
            .filter(|f| body.raw(f).is_some())
    }
}

impl CredentialBody {
    fn raw(&self, name: &str) -> Option<&String> {
        match name {
            "api_key" => self.api_key.as_ref(),
            "base_url" => self.base_url.as_ref(),
            "access_key_id" => self.access_key_id.as_ref(),
            "secret_access_key" => self.secret_access_key.as_ref(),
            "region" => self.region.as_ref(),
            "service_account_json" => self.service_account_json.as_ref(),
            _ => None,
        }
    }

    /// The field's value, trimmed, or None when it is absent or blank.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.raw(name).map(|v| v.trim()).filter(|s| !s.is_empty())
    }
}

/// The sealed secret and hint of an API-key credential.
pub(crate) fn api_key_secret(body: &CredentialBody) -> (Value, String) {
    let k = body.field("api_key").unwrap_or_default();
    (json!({ "api_key": k }), Secret::new(k).hint())
}

/// An opened API-key secret.
pub(crate) fn api_key_auth(secret: &Value) -> ProviderAuth {
    ProviderAuth::ApiKey(Secret::new(secret_field(secret, "api_key")))
}

/// A string member of an opened secret, empty when absent.
pub(crate) fn secret_field(secret: &Value, name: &str) -> String {
    secret.get(name).and_then(|k| k.as_str()).unwrap_or_default().to_string()
}

/// The credential's API key, or the error that says it has none.
pub(crate) fn api_key(cred: &ProviderCred) -> Result<&Secret, ApiError> {
    match &cred.auth {
        ProviderAuth::ApiKey(k) => Ok(k),
        _ => Err(ApiError::new(ErrorKind::NotConfigured, format!("provider {} has no api_key", cred.provider))),
    }
}
