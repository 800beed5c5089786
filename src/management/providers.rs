//! `/v1/providers`: masked credentials, create-or-replace, and a live test call.

use bytes::Bytes;
use serde_json::{json, Value};

use super::{Caller, Handled, Reply, Req};
use crate::app::App;
use crate::config::ProviderName;
use crate::error::ApiError;
use crate::providers::credentials::CredentialBody;
use crate::store::{self, providers::CredentialRow};

fn provider_from_path(p: &str) -> Result<ProviderName, ApiError> {
    ProviderName::parse(p).ok_or_else(|| {
        ApiError::invalid(format!("unknown provider `{p}`: expected one of openai, anthropic, bedrock, vertex"))
    })
}

/// The seed's masked credential and nothing beside it: the base URL and region stay server-side.
fn masked(row: &CredentialRow) -> Value {
    json!({
        "provider": row.provider,
        "status": row.status,
        "keyHint": row.key_hint,
        "updatedAt": row.updated_at,
    })
}

pub async fn list(app: &App, caller: &Caller) -> Handled {
    let rows = store::providers::for_tenant(&app.store, caller.tenant()).await?;
    let out: Vec<Value> = ProviderName::ALL
        .iter()
        .map(|p| match rows.iter().find(|r| r.provider == p.as_str()) {
            Some(r) => masked(r),
            None => json!({ "provider": p.as_str(), "status": "unconfigured", "keyHint": "", "updatedAt": null }),
        })
        .collect();
    Ok(Reply::Json(200, Value::Array(out)))
}

pub async fn put(app: &App, caller: &Caller, provider: &str, req: &Req) -> Handled {
    caller.require_manager()?;
    let p = provider_from_path(provider)?;
    let body: CredentialBody = req.json()?;
    let sealed = body.seal(p, caller.tenant(), &app.master).map_err(ApiError::invalid)?;
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
    app.snapshot.rebuild().await?;
    log::info!("provider {p} credentials replaced for tenant {}", caller.tenant());
    Ok(Reply::Json(200, masked(&row)))
}

/// A minimal authenticated call (`GET /v1/models`) with the stored credential.
pub async fn test(app: &App, caller: &Caller, provider: &str) -> Handled {
    caller.require_manager()?;
    let p = provider_from_path(provider)?;
    let snap = app.snapshot.load();
    let Some(cred) = snap.provider(caller.tenant(), p).cloned() else {
        return Ok(Reply::Json(200, json!({ "ok": false, "reason": format!("no credentials stored for {p}") })));
    };
    let (ok, reason) = match (p, &cred.api_key) {
        (ProviderName::OpenAi | ProviderName::Anthropic, Some(key)) => {
            let mut headers = vec![("accept", "application/json".to_string())];
            if p == ProviderName::Anthropic {
                headers.push(("x-api-key", key.expose().to_string()));
                headers.push(("anthropic-version", snap.config.providers.anthropic.version.clone()));
            } else {
                headers.push(("authorization", format!("Bearer {}", key.expose())));
            }
            match app.upstream.send(&cred.base_url, "GET", "/v1/models", &headers, Bytes::new()).await {
                Ok(mut resp) => {
                    let status = resp.header().status.as_u16();
                    let _ = resp.read_all(1 << 20).await;
                    resp.release().await;
                    if (200..300).contains(&status) {
                        (true, "ok".to_string())
                    } else {
                        (false, format!("{p} answered HTTP {status}"))
                    }
                }
                Err(e) => (false, e.to_string()),
            }
        }
        _ => (false, format!("connection tests for {p} are not available in this version")),
    };
    let status = if ok { "active" } else { "failing" };
    store::providers::set_status(&app.store, caller.tenant(), p.as_str(), status).await?;
    app.snapshot.rebuild().await?;
    Ok(Reply::Json(200, json!({ "ok": ok, "reason": reason })))
}
