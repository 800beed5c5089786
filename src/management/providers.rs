//! `/v1/providers`: masked credentials, create-or-replace, and a live test call.

use bytes::Bytes;
use serde::Serialize;
use utoipa::ToSchema;

use super::handler::{Caller, Handled, Reply, Req};
use super::openapi_parts::{string_enum, Authenticated, Manager};
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
        .map(|p| match rows.iter().find(|r| r.provider == p.as_str()) {
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
    caller.require_manager()?;
    let p = provider_from_path(provider)?;
    let body: CredentialBody = req.json()?;
    let sealed = body.encrypt(p, caller.tenant(), &app.master).map_err(ApiError::invalid)?;
    let row = store::providers::upsert(
        &app.store,
        CredentialRow {
            tenant_id: caller.tenant().to_string(),
            provider: p.as_str().to_string(),
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
    log::info!("provider {p} credentials replaced for tenant {}", caller.tenant());
    Ok(Reply::json(200, &masked(&row)))
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
