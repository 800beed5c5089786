//! `/v1/budgets`: caps on the spend of a key, a team or the whole tenant, per month or in total.
//! The hot path reads budgets from the snapshot, so writes swap a new one in before answering;
//! `spentUsd` comes from the in-memory ledger.

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{page_limit, paginate, usd, Caller, Handled, Reply, Req};
use crate::app::App;
use crate::budget::Period;
use crate::error::ApiError;
use crate::store::{self, budgets::Budget};

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Scope {
    Key,
    Team,
    Tenant,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
enum PeriodField {
    Monthly,
    Total,
}

impl From<PeriodField> for Period {
    fn from(p: PeriodField) -> Period {
        match p {
            PeriodField::Monthly => Period::Monthly,
            PeriodField::Total => Period::Total,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CreateBudget {
    scope: Scope,
    scope_id: Option<String>,
    amount_usd: f64,
    period: PeriodField,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PatchBudget {
    amount_usd: Option<f64>,
    period: Option<PeriodField>,
}

/// The API record: the stored budget plus its live spend and when it next resets.
pub(super) fn record(app: &App, b: &Budget, now: DateTime<Utc>) -> Value {
    let period = Period::parse(&b.period).unwrap_or(Period::Total);
    let spent = app.ledger.spent(&b.scope, &b.scope_id, period, now);
    json!({
        "id": b.id,
        "scope": b.scope,
        "scopeId": b.scope_id,
        "amountUsd": b.amount_usd,
        "period": b.period,
        "spentUsd": spent,
        "remainingUsd": (b.amount_usd - spent).max(0.0),
        "resetsAt": period.resets_at(now).map(|t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()),
        "createdAt": b.created_at,
        "updatedAt": b.updated_at,
    })
}

/// The scope id a new budget caps: a live key or a team of the tenant, or the tenant itself.
async fn scope_id(app: &App, caller: &Caller, scope: Scope, given: Option<String>) -> Result<String, ApiError> {
    let unknown = |what: &str, id: &str| ApiError::invalid(format!("field `scopeId`: unknown {what} `{id}`"));
    match (scope, given) {
        (Scope::Tenant, None) => Ok(caller.tenant().to_string()),
        (Scope::Tenant, Some(id)) if id == caller.tenant() => Ok(id),
        (Scope::Tenant, Some(id)) => Err(ApiError::invalid(format!(
            "field `scopeId`: `{id}` is not your tenant; omit `scopeId` for a tenant budget"
        ))),
        (_, None) => Err(ApiError::invalid("field `scopeId` is required for key and team budgets")),
        (Scope::Key, Some(id)) => match store::keys::is_live(&app.store, caller.tenant(), &id).await? {
            true => Ok(id),
            false => Err(unknown("key", &id)),
        },
        (Scope::Team, Some(id)) => match store::teams::get(&app.store, caller.tenant(), &id).await? {
            Some(_) => Ok(id),
            None => Err(unknown("team", &id)),
        },
    }
}

pub async fn create(app: &App, caller: &Caller, req: &Req) -> Handled {
    caller.require_manager()?;
    let body: CreateBudget = req.json()?;
    let amount = usd("amountUsd", body.amount_usd)?;
    let scope_id = scope_id(app, caller, body.scope, body.scope_id).await?;
    let scope = match body.scope {
        Scope::Key => "key",
        Scope::Team => "team",
        Scope::Tenant => "tenant",
    };
    let period = Period::from(body.period).as_str();
    let b = store::budgets::insert(&app.store, caller.tenant(), scope, &scope_id, amount, period).await?;
    app.snapshot.rebuild().await?;
    Ok(Reply::Json(201, record(app, &b, Utc::now())))
}

pub async fn list(app: &App, caller: &Caller, req: &Req) -> Handled {
    let limit = page_limit(req)?;
    let rows = store::budgets::list(&app.store, caller.tenant(), req.query("cursor"), limit + 1).await?;
    let (page, next) = paginate(rows, limit, |b| &b.id);
    let now = Utc::now();
    let data: Vec<Value> = page.iter().map(|b| record(app, b, now)).collect();
    Ok(Reply::Json(200, json!({ "data": data, "nextCursor": next })))
}

pub async fn get(app: &App, caller: &Caller, id: &str) -> Handled {
    let b = store::budgets::get(&app.store, caller.tenant(), id).await?.ok_or_else(|| ApiError::not_found("budget"))?;
    Ok(Reply::Json(200, record(app, &b, Utc::now())))
}

pub async fn update(app: &App, caller: &Caller, id: &str, req: &Req) -> Handled {
    caller.require_manager()?;
    let body: PatchBudget = req.json()?;
    let amount = body.amount_usd.map(|a| usd("amountUsd", a)).transpose()?;
    let period = body.period.map(|p| Period::from(p).as_str());
    let b = store::budgets::update(&app.store, caller.tenant(), id, amount, period)
        .await?
        .ok_or_else(|| ApiError::not_found("budget"))?;
    app.snapshot.rebuild().await?;
    Ok(Reply::Json(200, record(app, &b, Utc::now())))
}

pub async fn delete(app: &App, caller: &Caller, id: &str) -> Handled {
    caller.require_manager()?;
    if !store::budgets::delete(&app.store, caller.tenant(), id).await? {
        return Err(ApiError::not_found("budget"));
    }
    app.snapshot.rebuild().await?;
    Ok(Reply::NoContent)
}
