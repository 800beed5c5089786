//! Provider credentials: the `PUT /v1/providers/{provider}` body, sealing, and opening rows
//! into the decrypted form the snapshot holds.

use serde::Deserialize;
use serde_json::json;

use super::bedrock::sign::AwsKeys;
use super::vertex_auth::ServiceAccount;
use crate::config::{Config, ProviderName};
use crate::secrets::at_rest::MasterKey;
use crate::secrets::Secret;
use crate::snapshot::ProviderAuth;
use crate::store::providers::CredentialRow;
use crate::upstream::BaseUrl;

/// The union of the fields the four providers take; which are required depends on the provider.
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

/// A validated credential ready to be stored.
pub struct SealedCredential {
    pub sealed: String,
    pub key_hint: String,
    pub base_url: Option<String>,
    pub region: Option<String>,
}

fn context(tenant_id: &str, provider: ProviderName) -> String {
    format!("{tenant_id}/{provider}")
}

fn nonempty(v: &Option<String>) -> Option<&str> {
    v.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

impl CredentialBody {
    /// Checks the fields `provider` needs, naming every missing one, then seals the secret part.
    pub fn seal(
        &self,
        provider: ProviderName,
        tenant_id: &str,
        master: &MasterKey,
    ) -> Result<SealedCredential, String> {
        let required: &[(&str, &Option<String>)] = match provider {
            ProviderName::OpenAi | ProviderName::Anthropic => &[("api_key", &self.api_key)],
            ProviderName::Bedrock => &[
                ("access_key_id", &self.access_key_id),
                ("secret_access_key", &self.secret_access_key),
                ("region", &self.region),
            ],
            ProviderName::Vertex => &[("service_account_json", &self.service_account_json)],
        };
        let missing: Vec<&str> = required.iter().filter(|(_, v)| nonempty(v).is_none()).map(|(n, _)| *n).collect();
        if !missing.is_empty() {
            return Err(format!("missing required field(s) for {provider}: {}", missing.join(", ")));
        }
        let foreign: &[(&str, &Option<String>)] = match provider {
            ProviderName::OpenAi | ProviderName::Anthropic => &[
                ("access_key_id", &self.access_key_id),
                ("secret_access_key", &self.secret_access_key),
                ("service_account_json", &self.service_account_json),
                ("region", &self.region),
            ],
            ProviderName::Bedrock => {
                &[("api_key", &self.api_key), ("service_account_json", &self.service_account_json)]
            }
            ProviderName::Vertex => &[
                ("api_key", &self.api_key),
                ("access_key_id", &self.access_key_id),
                ("secret_access_key", &self.secret_access_key),
            ],
        };
        if let Some((name, _)) = foreign.iter().find(|(_, v)| v.is_some()) {
            return Err(format!("field {name} does not apply to provider {provider}"));
        }
        if let Some(url) = nonempty(&self.base_url) {
            BaseUrl::parse(url).map_err(|e| format!("field base_url: {e}"))?;
        }
        let (secret, hint) = match provider {
            ProviderName::OpenAi | ProviderName::Anthropic => {
                let k = nonempty(&self.api_key).unwrap_or_default();
                (json!({ "api_key": k }), Secret::new(k).hint())
            }
            ProviderName::Bedrock => {
                let id = nonempty(&self.access_key_id).unwrap_or_default();
                let secret = nonempty(&self.secret_access_key).unwrap_or_default();
                (json!({ "access_key_id": id, "secret_access_key": secret }), Secret::new(id).hint())
            }
            ProviderName::Vertex => {
                let sa = nonempty(&self.service_account_json).unwrap_or_default();
                // The parse the token source uses: a key file that cannot mint a token is refused
                // when it is stored, naming what is wrong, rather than on the first request.
                let account = ServiceAccount::parse(sa).map_err(|e| e.to_string())?;
                let id = account.private_key_id.as_str();
                (json!({ "service_account_json": sa }), Secret::new(id).hint())
            }
        };
        Ok(SealedCredential {
            sealed: master.seal(secret.to_string().as_bytes(), &context(tenant_id, provider)),
            key_hint: hint,
            base_url: nonempty(&self.base_url).map(str::to_string),
            region: nonempty(&self.region).map(str::to_string),
        })
    }
}

/// Opens a stored row into what the gateway needs (decrypted key, effective base URL).
pub fn open(master: &MasterKey, cfg: &Config, row: &CredentialRow) -> Result<crate::snapshot::ProviderCred, String> {
    let provider = ProviderName::parse(&row.provider).ok_or("unknown provider")?;
    let clear = master.open(&row.sealed, &context(&row.tenant_id, provider)).map_err(|e| e.to_string())?;
    let v: serde_json::Value = serde_json::from_slice(&clear).map_err(|_| "stored secret is not JSON")?;
    let field = |name: &str| v.get(name).and_then(|k| k.as_str()).unwrap_or_default().to_string();
    let region = row.region.clone().unwrap_or_default();
    let auth = match provider {
        ProviderName::OpenAi | ProviderName::Anthropic => ProviderAuth::ApiKey(Secret::new(field("api_key"))),
        ProviderName::Bedrock => ProviderAuth::Aws {
            keys: AwsKeys {
                access_key_id: field("access_key_id"),
                secret_access_key: field("secret_access_key"),
                session_token: None,
            },
            region: region.clone(),
        },
        ProviderName::Vertex => ProviderAuth::Google {
            account: std::sync::Arc::new(
                ServiceAccount::parse(&field("service_account_json")).map_err(|e| e.to_string())?,
            ),
            location: if region.is_empty() { DEFAULT_VERTEX_LOCATION.to_string() } else { region.clone() },
        },
    };
    let url = match (&row.base_url, provider) {
        (Some(url), _) => url.clone(),
        // The regional endpoints, unless config names one for every tenant.
        (None, ProviderName::Bedrock) if cfg.providers.bedrock.base_url.is_empty() => {
            format!("https://bedrock-runtime.{region}.amazonaws.com")
        }
        (None, ProviderName::Vertex) if cfg.providers.vertex.base_url.is_empty() => {
            let location = if region.is_empty() { DEFAULT_VERTEX_LOCATION } else { region.as_str() };
            format!("https://{location}-aiplatform.googleapis.com")
        }
        (None, _) => cfg.provider_defaults(provider).base_url.clone(),
    };
    let base_url = BaseUrl::parse(&url)?;
    Ok(crate::snapshot::ProviderCred { provider, auth, base_url, status: row.status.clone() })
}

/// Vertex's region when the credential names none.
pub const DEFAULT_VERTEX_LOCATION: &str = "us-central1";

#[cfg(test)]
mod tests {
    use super::*;

    fn body(j: serde_json::Value) -> CredentialBody {
        serde_json::from_value(j).unwrap()
    }

    #[test]
    fn required_fields_are_named() {
        let mk = MasterKey::from_bytes(&[1; 32]);
        let e = body(json!({})).seal(ProviderName::Bedrock, "t", &mk).err().unwrap();
        assert!(e.contains("access_key_id") && e.contains("secret_access_key") && e.contains("region"), "{e}");
        let e = body(json!({"api_key": " "})).seal(ProviderName::OpenAi, "t", &mk).err().unwrap();
        assert!(e.contains("api_key"), "{e}");
        let e =
            body(json!({"api_key": "k", "base_url": "gopher://x"})).seal(ProviderName::OpenAi, "t", &mk).err().unwrap();
        assert!(e.contains("base_url"), "{e}");
        let e = body(json!({"service_account_json": "{}"})).seal(ProviderName::Vertex, "t", &mk).err().unwrap();
        assert!(e.contains("client_email"), "{e}");
    }

    #[test]
    fn sealed_row_opens_to_the_key() {
        let mk = MasterKey::from_bytes(&[1; 32]);
        let s = body(json!({"api_key": "sk-abcdefgh1234", "base_url": "http://127.0.0.1:9/v1"}))
            .seal(ProviderName::OpenAi, "t1", &mk)
            .unwrap();
        assert_eq!(s.key_hint, "...1234");
        assert!(!s.sealed.contains("sk-abc"));
        let row = CredentialRow {
            tenant_id: "t1".into(),
            provider: "openai".into(),
            sealed: s.sealed,
            key_hint: s.key_hint,
            base_url: s.base_url,
            region: None,
            status: "active".into(),
            updated_at: String::new(),
        };
        let cred = open(&mk, &Config::default(), &row).unwrap();
        let ProviderAuth::ApiKey(key) = cred.auth else { panic!("an api key") };
        assert_eq!(key.expose(), "sk-abcdefgh1234");
        assert_eq!(cred.base_url.port, 9);
    }
}
