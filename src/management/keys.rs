//! `/v1/keys`: create, list, revoke, limits. Every write swaps a new snapshot in before it
//! answers, so the very next request on either port sees it.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::fields::{present, tenant_team, usd};
use super::handler::{page_limit, paginate, Caller, Handled, Page, Reply, Req};
use super::openapi_parts::{Authenticated, Manager, Missing};
use crate::app::App;
use crate::checks::budget::Period;
use crate::error::ApiError;
use crate::store::{self, keys::KeyRecord, keys::NewKey};

#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub(super) enum KeyClass {
    Interactive,
    Service,
    Agent,
}

#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(as = KeyRole)]
pub(super) enum Role {
    Manager,
    Developer,
    /// Reads evidence only (docs/log.md §8).
    Auditor,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct CreateKey {
    #[schema(max_length = 200)]
    label: Option<String>,
    /// Default `interactive`.
    key_class: Option<KeyClass>,
    #[schema(minimum = 0)]
    budget_usd: Option<f64>,
    /// Default `developer`.
    role: Option<Role>,
    /// A team of the tenant.
    team_id: Option<String>,
}

/// A field left out stays as it is; `null` removes the limit.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct Limits {
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<i64>, minimum = 1, maximum = 1e12)]
    rpm_limit: Option<Option<i64>>,
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<i64>, minimum = 1, maximum = 1e12)]
    tpm_limit: Option<Option<i64>>,
    /// Requests per minute of each end user of the key (docs/decisions/end-users.md).
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<i64>, minimum = 1, maximum = 1e12)]
    end_user_rpm_limit: Option<Option<i64>>,
    /// Tokens per minute of each end user of the key.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<i64>, minimum = 1, maximum = 1e12)]
    end_user_tpm_limit: Option<Option<i64>>,
}

/// A new key: the record and its secret, shown this once.
#[derive(Serialize, ToSchema)]
pub(super) struct CreatedKey {
    #[serde(flatten)]
    record: KeyRecord,
    /// The secret (`tollgate_sk_...`); only its SHA-256 is stored.
    key: String,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct KeyLimits {
    id: String,
    rpm_limit: Option<i64>,
    tpm_limit: Option<i64>,
    end_user_rpm_limit: Option<i64>,
    end_user_tpm_limit: Option<i64>,
}

/// Create a key (manager)
#[utoipa::path(post, path = "/v1/keys", operation_id = "createKey", tag = "keys", request_body = CreateKey,
    responses((status = 201, description = "The key, with its secret", body = CreatedKey),
        Manager, Authenticated))]
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
    app.snapshot.changed().await?;
    Ok(Reply::json(201, &CreatedKey { record: rec, key: secret.secret }))
}

/// List keys (managers see all, others their own)
#[utoipa::path(get, path = "/v1/keys", operation_id = "listKeys", tag = "keys", params(super::openapi_parts::PageQuery),
    responses((status = 200, description = "A page of keys", body = Page<KeyRecord>), Authenticated))]
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
    Ok(Reply::json(200, &Page { data: page, next_cursor: next }))
}

/// Revoke a key (manager)
#[utoipa::path(delete, path = "/v1/keys/{id}", operation_id = "revokeKey", tag = "keys",
    params(("id" = String, Path, description = "Key id")),
    responses((status = 204, description = "Revoked: the key fails with 401 from the next request on"),
        Manager, Missing, Authenticated))]
pub async fn delete(app: &App, caller: &Caller, id: &str) -> Handled {
    caller.require_manager()?;
    if !store::keys::revoke(&app.store, caller.tenant(), id).await? {
        return Err(ApiError::not_found("key"));
    }
    app.snapshot.changed().await?;
    log::info!("key {id} of tenant {} revoked", caller.tenant());
    Ok(Reply::NoContent)
}

/// Set a key's rate limits (manager)
#[utoipa::path(patch, path = "/v1/keys/{id}/limits", operation_id = "setKeyLimits", tag = "keys",
    params(("id" = String, Path, description = "Key id")), request_body = Limits,
    responses((status = 200, description = "The limits now in force", body = KeyLimits),
        Manager, Missing, Authenticated))]
pub async fn set_limits(app: &App, caller: &Caller, id: &str, req: &Req) -> Handled {
    caller.require_manager()?;
    let body: Limits = req.json()?;
    let fields = [
        ("rpmLimit", body.rpm_limit),
        ("tpmLimit", body.tpm_limit),
        ("endUserRpmLimit", body.end_user_rpm_limit),
        ("endUserTpmLimit", body.end_user_tpm_limit),
    ];
    for (name, v) in fields {
        if let Some(Some(n)) = v {
            if !(1..=1_000_000_000_000).contains(&n) {
                return Err(ApiError::invalid(format!("field `{name}` must be a positive integer or null")));
            }
        }
    }
    let patch = store::keys::LimitsPatch {
        rpm: body.rpm_limit,
        tpm: body.tpm_limit,
        end_user_rpm: body.end_user_rpm_limit,
        end_user_tpm: body.end_user_tpm_limit,
    };
    let rec = store::keys::set_limits(&app.store, caller.tenant(), id, patch)
        .await?
        .ok_or_else(|| ApiError::not_found("key"))?;
    app.snapshot.changed().await?;
    Ok(Reply::json(
        200,
        &KeyLimits {
            id: rec.id,
            rpm_limit: rec.rpm_limit,
            tpm_limit: rec.tpm_limit,
            end_user_rpm_limit: rec.end_user_rpm_limit,
            end_user_tpm_limit: rec.end_user_tpm_limit,
        },
    ))
}
