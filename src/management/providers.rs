//! `/v1/providers`: masked credentials, create-or-replace, and a live test call.

use bytes::Bytes;
use serde::Serialize;
use utoipa::ToSchema;

use super::handler::{Caller, Handled, Reply, Req};
use super::openapi_parts::{string_enum, Authenticated, Manager, Missing};
use crate::app::App;
use crate::error::ApiError;
use crate::providers::CredentialBody;
use crate::providers::ProviderName;
use crate::store::{self, providers::CredentialRow};

fn provider_from_path(p: &str) -> Result<ProviderName, ApiError> {
    ProviderName::parse(p).ok_or_else(|| {
        ApiError::invalid(format!(
            "unknown provider `{p}`: expected one of {}",
            ProviderName::ALL.map(ProviderName::as_str).join(", ")
        ))
    })
}

impl utoipa::PartialSchema for ProviderName {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        string_enum(ProviderName::ALL.map(ProviderName::as_str))
    }
}

impl ToSchema for ProviderName {}

/// `active`, `failing` (the last test failed) or `unconfigured`.
struct CredentialStatus;

impl utoipa::PartialSchema for CredentialStatus {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        string_enum(["active", "failing", "unconfigured"])
    }
}

impl ToSchema for CredentialStatus {}

/// The seed's masked credential and nothing beside it: the base URL and region stay server-side.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct MaskedCredential<'a> {
    #[schema(value_type = ProviderName)]
    provider: &'a str,
    #[schema(value_type = CredentialStatus)]
    status: &'a str,
    /// The last 4 characters of the secret; empty when unconfigured.
    key_hint: &'a str,
    updated_at: Option<&'a str>,
}

fn masked(row: &CredentialRow) -> MaskedCredential<'_> {
    MaskedCredential {
        provider: &row.provider,
        status: &row.status,
        key_hint: &row.key_hint,
        updated_at: Some(&row.updated_at),
    }
}

/// The outcome of a live test call.
#[derive(Serialize, ToSchema)]
pub(super) struct ProviderTest {
    ok: bool,
    reason: String,
}

/// List the providers' masked credentials
#[utoipa::path(get, path = "/v1/providers", operation_id = "listProviders", tag = "providers",
    responses((status = 200, description = "One entry per provider, configured or not", body = Vec<MaskedCredential>),
        Authenticated))]
pub async fn list(app: &App, caller: &Caller) -> Handled {
    let rows = store::providers::for_tenant(&app.store, caller.tenant()).await?;
    let out: Vec<MaskedCredential> = ProviderName::ALL
        .iter()
        .map(|p| match rows.iter().find(|r| r.provider == p.as_str() && r.name == store::providers::DEFAULT) {
            Some(r) => masked(r),
            None => MaskedCredential { provider: p.as_str(), status: "unconfigured", key_hint: "", updated_at: None },
        })
        .collect();
    Ok(Reply::json(200, &out))
}

/// Create or replace a provider's credentials (manager)
///
/// `openai` and `anthropic` take `api_key` (and `base_url`); `bedrock` takes `access_key_id`,
/// `secret_access_key` and `region`; `vertex` takes `service_account_json` and `region`.
#[utoipa::path(put, path = "/v1/providers/{provider}", operation_id = "putProvider", tag = "providers",
    params(("provider" = ProviderName, Path)), request_body = CredentialBody,
    responses((status = 200, description = "The masked credential", body = MaskedCredential),
        Manager, Authenticated))]
pub async fn put(app: &App, caller: &Caller, provider: &str, req: &Req) -> Handled {
    let row = put_credential(app, caller, provider, store::providers::DEFAULT, req).await?;
    Ok(Reply::json(200, &masked(&row)))
}

/// Encrypts and stores the credential `name` of `provider`; rebuilds the snapshot.
async fn put_credential(
    app: &App,
    caller: &Caller,
    provider: &str,
    name: &str,
    req: &Req,
) -> Result<CredentialRow, ApiError> {
    caller.require_manager()?;
    let p = provider_from_path(provider)?;
    let name = credential_name(name)?;
    let body: CredentialBody = req.json()?;
    let sealed = body.encrypt_named(p, caller.tenant(), &name, &app.master).map_err(ApiError::invalid)?;
    let row = store::providers::upsert(
        &app.store,
        CredentialRow {
            tenant_id: caller.tenant().to_string(),
            provider: p.as_str().to_string(),
            name: name.clone(),
            sealed: sealed.sealed,
            key_hint: sealed.key_hint,
            base_url: sealed.base_url,
            region: sealed.region,
            status: "active".into(),
            updated_at: String::new(),
        },
    )
    .await?;
    app.snapshot.changed().await?;
    log::info!("provider {p} credential {name} replaced for tenant {}", caller.tenant());
    Ok(row)
}

/// A credential's name from the path: letters, digits, `.`, `_`, `-`, at most 64.
fn credential_name(raw: &str) -> Result<String, ApiError> {
    let name = percent_encoding::percent_decode_str(raw).decode_utf8_lossy().into_owned();
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    match ok {
        true => Ok(name),
        false => Err(ApiError::invalid(format!("credential name `{name}`: 1 to 64 letters, digits, `.`, `_` or `-`"))),
    }
}

/// A named credential, masked.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct NamedCredential<'a> {
    name: &'a str,
    #[schema(value_type = ProviderName)]
    provider: &'a str,
    #[schema(value_type = CredentialStatus)]
    status: &'a str,
    /// The last 4 characters of the secret.
    key_hint: &'a str,
    updated_at: &'a str,
}

fn named(row: &CredentialRow) -> NamedCredential<'_> {
    NamedCredential {
        name: &row.name,
        provider: &row.provider,
        status: &row.status,
        key_hint: &row.key_hint,
        updated_at: &row.updated_at,
    }
}

/// Create or replace a named credential of a provider (manager)
///
/// The same fields, masking and encryption as `PUT /v1/providers/{provider}`, which sets the
/// credential named `default`. Routes name credentials in their targets.
#[utoipa::path(put, path = "/v1/providers/{provider}/credentials/{name}", operation_id = "putProviderCredential",
    tag = "providers",
    params(("provider" = ProviderName, Path), ("name" = String, Path, description = "Credential name")),
    request_body = CredentialBody,
    responses((status = 200, description = "The masked credential", body = NamedCredential),
        Manager, Authenticated))]
pub async fn put_named(app: &App, caller: &Caller, provider: &str, name: &str, req: &Req) -> Handled {
    let row = put_credential(app, caller, provider, name, req).await?;
    Ok(Reply::json(200, &named(&row)))
}

/// List a provider's credentials, masked
#[utoipa::path(get, path = "/v1/providers/{provider}/credentials", operation_id = "listProviderCredentials",
    tag = "providers", params(("provider" = ProviderName, Path)),
    responses((status = 200, description = "The provider's credentials by name, `default` included when set",
        body = Vec<NamedCredential>), Authenticated))]
pub async fn list_named(app: &App, caller: &Caller, provider: &str) -> Handled {
    let p = provider_from_path(provider)?;
    let rows = store::providers::for_tenant(&app.store, caller.tenant()).await?;
    let out: Vec<NamedCredential> = rows.iter().filter(|r| r.provider == p.as_str()).map(named).collect();
    Ok(Reply::json(200, &out))
}

/// Delete a named credential (manager)
#[utoipa::path(delete, path = "/v1/providers/{provider}/credentials/{name}",
    operation_id = "deleteProviderCredential", tag = "providers",
    params(("provider" = ProviderName, Path), ("name" = String, Path, description = "Credential name")),
    responses((status = 204, description = "Deleted"), Missing, Manager, Authenticated))]
pub async fn delete_named(app: &App, caller: &Caller, provider: &str, name: &str) -> Handled {
    caller.require_manager()?;
    let p = provider_from_path(provider)?;
    let name = credential_name(name)?;
    store::providers::delete(&app.store, caller.tenant(), p.as_str(), &name)
        .await?
        .ok_or_else(|| ApiError::not_found(&format!("credential {name} of provider {p}")))?;
    app.snapshot.changed().await?;
    Ok(Reply::NoContent)
}

/// Test a provider's stored credentials (manager)
///
/// A minimal authenticated call with the stored credential: `GET /v1/models` for OpenAI and
/// Anthropic, a signed Converse call for Bedrock (its validation error proves the signature
/// was accepted), a token minted and a one-token `generateContent` for Vertex.
#[utoipa::path(post, path = "/v1/providers/{provider}/test", operation_id = "testProvider", tag = "providers",
    params(("provider" = ProviderName, Path)),
    responses((status = 200, description = "Whether the provider accepted the credential", body = ProviderTest),
        Manager, Authenticated))]
pub async fn test(app: &App, caller: &Caller, provider: &str) -> Handled {
    caller.require_manager()?;
    let p = provider_from_path(provider)?;
    let snap = app.snapshot.load();
    let Some(cred) = snap.provider(caller.tenant(), p).cloned() else {
        return Ok(Reply::json(200, &ProviderTest { ok: false, reason: format!("no credentials stored for {p}") }));
    };
    let (ok, reason) = probe(app, &snap, &cred).await;
    let status = if ok { "active" } else { "failing" };
    // The reason is the test's own text (a status or a connection error), never a credential.
    let event = (!ok).then(|| {
        let data = serde_json::json!({"provider": p.as_str(), "status": status, "reason": reason.chars().take(300).collect::<String>()});
        store::webhooks::Event::new(caller.tenant(), "provider.test_failed", data)
    });
    store::providers::set_status(&app.store, caller.tenant(), p.as_str(), status, event).await?;
    app.snapshot.changed().await?;
    Ok(Reply::json(200, &ProviderTest { ok, reason }))
}

/// The provider's test call: whether the credential was accepted, and why not.
async fn probe(app: &App, snap: &crate::snapshot::Snapshot, cred: &crate::providers::ProviderCred) -> (bool, String) {
    let provider = crate::providers::provider(cred.provider);
    let probe = provider.probe();
    let env = crate::providers::Env { config: &snap.config, tokens: &app.tokens };
    let mut call =
        match provider.prepare(&env, cred, probe.target, Bytes::from_static(probe.body.as_bytes()), &|_| None).await {
            Ok(call) => call,
            Err(e) => return (false, e.message),
        };
    call.method = probe.method;
    if probe.method == "GET" {
        call.body = Bytes::new();
        call.headers.retain(|(k, _)| *k != "content-type");
    }
    match app.upstream.send(&cred.base_url, call.method, &call.path, &call.headers, call.body).await {
        Ok(mut resp) => {
            let status = resp.header().status.as_u16();
            let _ = resp.read_all(1 << 20).await;
            resp.release().await;
            if (200..300).contains(&status) || probe.accepted.contains(&status) {
                (true, "ok".to_string())
            } else {
                (false, format!("{} answered HTTP {status}", cred.provider))
            }
        }
        Err(e) => (false, e.to_string()),
    }
}
