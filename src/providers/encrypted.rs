//! Encrypting a credential body for the database and decrypting a stored row into the
//! credential the snapshot holds. The secret part is encrypted at rest (AES-GCM,
//! `secrets::at_rest`) with `tenant/provider` as associated data, so a row copied to another
//! tenant or provider does not decrypt. (The `sealed` column names predate this wording.) Which fields a provider
//! takes, and what its secret holds, its own folder says ([`Provider`]).

use super::credential::{CredentialBody, ProviderCred};
use super::{provider, Provider};
use crate::config::Config;
use crate::providers::ProviderName;
use crate::secrets::at_rest::MasterKey;
use crate::store::providers::CredentialRow;
use crate::upstream::BaseUrl;

/// A validated credential ready to be stored.
pub struct EncryptedCredential {
    pub sealed: String,
    pub key_hint: String,
    pub base_url: Option<String>,
    pub region: Option<String>,
}

/// The associated data: `tenant/provider` for the `default` credential (as the seed had it),
/// `tenant/provider/name` for a named one.
fn context(tenant_id: &str, provider: ProviderName, name: &str) -> String {
    match name {
        crate::store::providers::DEFAULT => format!("{tenant_id}/{provider}"),
        _ => format!("{tenant_id}/{provider}/{name}"),
    }
}

/// Checks the fields `p` needs, naming every missing one, and refuses the first field that
/// does not apply to it.
fn check_fields(body: &CredentialBody, p: &dyn Provider) -> Result<(), String> {
    let fields = p.credential_fields();
    let missing: Vec<&str> = fields.required.iter().copied().filter(|f| body.field(f).is_none()).collect();
    if !missing.is_empty() {
        return Err(format!("missing required field(s) for {}: {}", p.name(), missing.join(", ")));
    }
    if let Some(name) = fields.foreign(body).next() {
        return Err(format!("field {name} does not apply to provider {}", p.name()));
    }
    if let Some(url) = body.field("base_url") {
        BaseUrl::parse(url).map_err(|e| format!("field base_url: {e}"))?;
    }
    Ok(())
}

impl CredentialBody {
    /// Checks the fields `provider` needs, naming every missing one, then encrypts the secret part.
    pub fn encrypt(
        &self,
        provider_name: ProviderName,
        tenant_id: &str,
        master: &MasterKey,
    ) -> Result<EncryptedCredential, String> {
        self.encrypt_named(provider_name, tenant_id, crate::store::providers::DEFAULT, master)
    }

    /// [`CredentialBody::encrypt`] for the credential called `name`.
    pub fn encrypt_named(
        &self,
        provider_name: ProviderName,
        tenant_id: &str,
        name: &str,
        master: &MasterKey,
    ) -> Result<EncryptedCredential, String> {
        let p = provider(provider_name);
        check_fields(self, p)?;
        let (secret, hint) = p.secret_to_store(self)?;
        Ok(EncryptedCredential {
            sealed: master.encrypt(secret.to_string().as_bytes(), &context(tenant_id, provider_name, name)),
            key_hint: hint,
            base_url: self.field("base_url").map(str::to_string),
            region: self.field("region").map(str::to_string),
        })
    }
}

/// Opens a stored row into what the gateway needs (decrypted key, effective base URL).
pub fn decrypt(master: &MasterKey, cfg: &Config, row: &CredentialRow) -> Result<ProviderCred, String> {
    let name = ProviderName::parse(&row.provider).ok_or("unknown provider")?;
    let clear = master.decrypt(&row.sealed, &context(&row.tenant_id, name, &row.name)).map_err(|e| e.to_string())?;
    let secret: serde_json::Value = serde_json::from_slice(&clear).map_err(|_| "stored secret is not JSON")?;
    let region = row.region.clone().unwrap_or_default();
    let p = provider(name);
    let auth = p.auth_from_stored(&secret, &region)?;
    let url = match &row.base_url {
        Some(url) => url.clone(),
        None => p.default_base_url(&cfg.provider_defaults(name.as_str()).base_url, &region),
    };
    let base_url = BaseUrl::parse(&url)?;
    Ok(ProviderCred { provider: name, auth, base_url, status: row.status.clone() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::ProviderAuth;
    use serde_json::json;

    fn body(j: serde_json::Value) -> CredentialBody {
        serde_json::from_value(j).unwrap()
    }

    #[test]
    fn required_fields_are_named() {
        let mk = MasterKey::from_bytes(&[1; 32]);
        let e = body(json!({})).encrypt(ProviderName::Bedrock, "t", &mk).err().unwrap();
        assert!(e.contains("access_key_id") && e.contains("secret_access_key") && e.contains("region"), "{e}");
        let e = body(json!({"api_key": " "})).encrypt(ProviderName::OpenAi, "t", &mk).err().unwrap();
        assert!(e.contains("api_key"), "{e}");
        let e = body(json!({"api_key": "k", "base_url": "gopher://x"}))
            .encrypt(ProviderName::OpenAi, "t", &mk)
            .err()
            .unwrap();
        assert!(e.contains("base_url"), "{e}");
        let e = body(json!({"service_account_json": "{}"})).encrypt(ProviderName::Vertex, "t", &mk).err().unwrap();
        assert!(e.contains("client_email"), "{e}");
    }

    #[test]
    fn the_first_field_that_does_not_apply_is_named() {
        let mk = MasterKey::from_bytes(&[1; 32]);
        let refused = |p, j| body(j).encrypt(p, "t", &mk).err().unwrap();
        let all = json!({"api_key": "k", "access_key_id": "a", "secret_access_key": "s",
            "service_account_json": "{}", "region": "r"});
        let e = refused(ProviderName::OpenAi, json!({"api_key": "k", "region": "r", "service_account_json": "{}"}));
        assert_eq!(e, "field service_account_json does not apply to provider openai");
        assert_eq!(
            refused(ProviderName::Anthropic, all.clone()),
            "field access_key_id does not apply to provider anthropic"
        );
        assert_eq!(refused(ProviderName::Bedrock, all.clone()), "field api_key does not apply to provider bedrock");
        let e = refused(
            ProviderName::Bedrock,
            json!({"access_key_id": "a", "secret_access_key": "s", "region": "r",
            "service_account_json": "{}"}),
        );
        assert_eq!(e, "field service_account_json does not apply to provider bedrock");
        let e = refused(
            ProviderName::Vertex,
            json!({"service_account_json": "{}", "region": "r", "secret_access_key": "s"}),
        );
        assert_eq!(e, "field secret_access_key does not apply to provider vertex");
        assert_eq!(
            refused(ProviderName::Vertex, json!({})),
            "missing required field(s) for vertex: service_account_json"
        );
    }

    #[test]
    fn rows_without_a_base_url_take_the_regional_or_configured_one() {
        let mk = MasterKey::from_bytes(&[1; 32]);
        let row = |provider: &str, secret: serde_json::Value, region: Option<&str>| CredentialRow {
            tenant_id: "t1".into(),
            provider: provider.into(),
            name: "default".into(),
            sealed: mk.encrypt(secret.to_string().as_bytes(), &format!("t1/{provider}")),
            key_hint: String::new(),
            base_url: None,
            region: region.map(str::to_string),
            status: "active".into(),
            updated_at: String::new(),
        };
        let cfg = Config::defaults(&crate::providers::VOCABULARY);
        let keys = json!({"access_key_id": "AKIA", "secret_access_key": "s"});
        let cred = decrypt(&mk, &cfg, &row("bedrock", keys, Some("eu-west-1"))).unwrap();
        assert_eq!(cred.base_url.authority(), "bedrock-runtime.eu-west-1.amazonaws.com");
        let ProviderAuth::Aws { keys, region } = cred.auth else { panic!("aws keys") };
        assert_eq!((keys.access_key_id.as_str(), region.as_str()), ("AKIA", "eu-west-1"));
        let cred = decrypt(&mk, &cfg, &row("anthropic", json!({"api_key": "sk"}), None)).unwrap();
        assert_eq!(cred.base_url.authority(), "api.anthropic.com");
        let sealed_elsewhere =
            CredentialRow { tenant_id: "t2".into(), ..row("openai", json!({"api_key": "sk"}), None) };
        assert!(decrypt(&mk, &cfg, &sealed_elsewhere).is_err(), "the tenant/provider pair is bound to the seal");
    }

    #[test]
    fn sealed_row_opens_to_the_key() {
        let mk = MasterKey::from_bytes(&[1; 32]);
        let s = body(json!({"api_key": "sk-abcdefgh1234", "base_url": "http://127.0.0.1:9/v1"}))
            .encrypt(ProviderName::OpenAi, "t1", &mk)
            .unwrap();
        assert_eq!(s.key_hint, "...1234");
        assert!(!s.sealed.contains("sk-abc"));
        let row = CredentialRow {
            tenant_id: "t1".into(),
            provider: "openai".into(),
            name: "default".into(),
            sealed: s.sealed,
            key_hint: s.key_hint,
            base_url: s.base_url,
            region: None,
            status: "active".into(),
            updated_at: String::new(),
        };
        let cred = decrypt(&mk, &Config::defaults(&crate::providers::VOCABULARY), &row).unwrap();
        let ProviderAuth::ApiKey(key) = cred.auth else { panic!("an api key") };
        assert_eq!(key.expose(), "sk-abcdefgh1234");
        assert_eq!(cred.base_url.port, 9);
    }
}
