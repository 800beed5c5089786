//! `/v1/keys`: create, list, revoke, limits. Every write swaps a new snapshot in before it
//! answers, so the very next request on either port sees it.

use serde::Deserialize;
use serde_json::json;

use super::{page_limit, paginate, present, tenant_team, usd, Caller, Handled, Reply, Req};
use crate::app::App;
use crate::budget::Period;
use crate::error::ApiError;
use crate::store::{self, keys::NewKey};

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
enum KeyClass {
    Interactive,
    Service,
    Agent,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Role {
    Manager,
    Developer,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CreateKey {
    label: Option<String>,
    key_class: Option<KeyClass>,
    budget_usd: Option<f64>,
    role: Option<Role>,
    team_id: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Limits {
    #[serde(default, deserialize_with = "present")]
    rpm_limit: Option<Option<i64>>,
    #[serde(default, deserialize_with = "present")]
    tpm_limit: Option<Option<i64>>,
}

pub async fn create(app: &App, caller: &Caller, req: &Req) -> Handled {
    caller.require_manager()?;
    let body: CreateKey = req.json()?;
    if let Some(b) = body.budget_usd {
        usd("budgetUsd", b)?;
    }
    if let Some(team) = &body.team_id {
        tenant_team(app, caller, "teamId", team).await?;
    }
    let label = body.label.unwrap_or_default();
    if label.chars().count() > 200 {
        return Err(ApiError::invalid("field `label` must be at most 200 characters"));
    }
    let secret = crate::keys::generate();
    let rec = store::keys::insert(
        &app.store,
        NewKey {
            tenant_id: caller.tenant().to_string(),
            key_hash: secret.hash_hex,
            key_hint: secret.hint,
            label,
            key_class: format!("{:?}", body.key_class.unwrap_or(KeyClass::Interactive)).to_lowercase(),
            role: format!("{:?}", body.role.unwrap_or(Role::Developer)).to_lowercase(),
            team_id: body.team_id,
            budget_usd: body.budget_usd,
        },
    )
    .await?;
    app.snapshot.rebuild().await?;
    let mut out = serde_json::to_value(&rec).map_err(|e| ApiError::internal(e.to_string()))?;
    out["key"] = json!(secret.secret);
    Ok(Reply::Json(201, out))
}

pub async fn list(app: &App, caller: &Caller, req: &Req) -> Handled {
    let limit = page_limit(req)?;
    let only = (!caller.key.is_manager()).then(|| caller.key.record.id.as_str());
    let rows = store::keys::list(&app.store, caller.tenant(), only, req.query("cursor"), limit + 1).await?;
    let (mut page, next) = paginate(rows, limit, |k| &k.id);
    // Spend lives in the ledger (settled in memory, persisted by the receipt writer).
    let now = chrono::Utc::now();
    for k in &mut page {
        k.spent_usd = app.ledger.spent("key", &k.id, Period::Total, now);
    }
    Ok(Reply::Json(200, json!({ "data": page, "nextCursor": next })))
}

pub async fn delete(app: &App, caller: &Caller, id: &str) -> Handled {
    caller.require_manager()?;
    if !store::keys::revoke(&app.store, caller.tenant(), id).await? {
        return Err(ApiError::not_found("key"));
    }
    app.snapshot.rebuild().await?;
    log::info!("key {id} of tenant {} revoked", caller.tenant());
    Ok(Reply::NoContent)
}

pub async fn set_limits(app: &App, caller: &Caller, id: &str, req: &Req) -> Handled {
    caller.require_manager()?;
    let body: Limits = req.json()?;
    for (name, v) in [("rpmLimit", body.rpm_limit), ("tpmLimit", body.tpm_limit)] {
        if let Some(Some(n)) = v {
            if !(1..=1_000_000_000_000).contains(&n) {
                return Err(ApiError::invalid(format!("field `{name}` must be a positive integer or null")));
            }
        }
    }
    let rec = store::keys::set_limits(&app.store, caller.tenant(), id, body.rpm_limit, body.tpm_limit)
        .await?
        .ok_or_else(|| ApiError::not_found("key"))?;
    app.snapshot.rebuild().await?;
    Ok(Reply::Json(200, json!({ "id": rec.id, "rpmLimit": rec.rpm_limit, "tpmLimit": rec.tpm_limit })))
}
