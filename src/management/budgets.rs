//! `/v1/budgets`: caps on the spend of a key, a team or the whole tenant, per month or in total.
//! The hot path reads budgets from the snapshot, so writes swap a new one in before answering;
//! `spentUsd` comes from the in-memory ledger.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::fields::usd;
use super::handler::{page_limit, paginate, Caller, Handled, Page, Reply, Req};
use super::openapi_parts::{Authenticated, Manager, Missing, PageQuery};
use crate::app::App;
use crate::checks::budget::Period;
use crate::error::ApiError;
use crate::store::{self, budgets::Budget};

#[derive(Debug, Clone, Copy, PartialEq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(as = BudgetScope)]
pub(super) enum Scope {
    Key,
    Team,
    Tenant,
}

#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(as = BudgetPeriod)]
pub(super) enum PeriodField {
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

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct CreateBudget {
    scope: Scope,
    /// The key or team id; left out (or the tenant's own id) for a tenant budget.
    scope_id: Option<String>,
    #[schema(minimum = 0)]
    amount_usd: f64,
    period: PeriodField,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct PatchBudget {
    #[schema(minimum = 0)]
    amount_usd: Option<f64>,
    period: Option<PeriodField>,
}

/// The API record: the stored budget plus its live spend and when it next resets.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct BudgetView<'a> {
    id: &'a str,
    #[schema(value_type = Scope)]
    scope: &'a str,
    scope_id: &'a str,
    amount_usd: f64,
    #[schema(value_type = PeriodField)]
    period: &'a str,
    spent_usd: f64,
    remaining_usd: f64,
    /// When a monthly budget starts over (RFC 3339); null for `total`.
    resets_at: Option<String>,
    created_at: &'a str,
    updated_at: &'a str,
}

pub(super) fn record<'a>(app: &App, b: &'a Budget, now: DateTime<Utc>) -> BudgetView<'a> {
    let period = Period::parse(&b.period).unwrap_or(Period::Total);
    let spent = app.ledger.spent(&b.scope, &b.scope_id, period, now);
    BudgetView {
        id: &b.id,
        scope: &b.scope,
        scope_id: &b.scope_id,
        amount_usd: b.amount_usd,
        period: &b.period,
        spent_usd: spent,
        remaining_usd: (b.amount_usd - spent).max(0.0),
        resets_at: period.resets_at(now).map(|t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()),
        created_at: &b.created_at,
        updated_at: &b.updated_at,
    }
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

/// Create a budget on a key, a team or the tenant (manager)
#[utoipa::path(post, path = "/v1/budgets", operation_id = "createBudget", tag = "budgets", request_body = CreateBudget,
    responses((status = 201, description = "The budget", body = BudgetView), Manager, Authenticated))]
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
    app.snapshot.changed().await?;
    Ok(Reply::json(201, &record(app, &b, Utc::now())))
}

/// List budgets with their live spend
#[utoipa::path(get, path = "/v1/budgets", operation_id = "listBudgets", tag = "budgets", params(PageQuery),
    responses((status = 200, description = "A page of budgets", body = Page<BudgetView>), Authenticated))]
pub async fn list(app: &App, caller: &Caller, req: &Req) -> Handled {
    let limit = page_limit(req)?;
    let rows = store::budgets::list(&app.store, caller.tenant(), req.query("cursor"), limit + 1).await?;
    let (page, next) = paginate(rows, limit, |b| &b.id);
    let now = Utc::now();
    let data = page.iter().map(|b| record(app, b, now)).collect();
    Ok(Reply::json(200, &Page { data, next_cursor: next }))
}

/// Get a budget
#[utoipa::path(get, path = "/v1/budgets/{id}", operation_id = "getBudget", tag = "budgets",
    params(("id" = String, Path, description = "Budget id")),
    responses((status = 200, description = "The budget", body = BudgetView), Missing, Authenticated))]
pub async fn get(app: &App, caller: &Caller, id: &str) -> Handled {
    let b = store::budgets::get(&app.store, caller.tenant(), id).await?.ok_or_else(|| ApiError::not_found("budget"))?;
    Ok(Reply::json(200, &record(app, &b, Utc::now())))
}

/// Change a budget's amount or period (manager)
#[utoipa::path(patch, path = "/v1/budgets/{id}", operation_id = "updateBudget", tag = "budgets",
    params(("id" = String, Path, description = "Budget id")), request_body = PatchBudget,
    responses((status = 200, description = "The budget", body = BudgetView), Manager, Missing,
        Authenticated))]
pub async fn update(app: &App, caller: &Caller, id: &str, req: &Req) -> Handled {
    caller.require_manager()?;
    let body: PatchBudget = req.json()?;
    let amount = body.amount_usd.map(|a| usd("amountUsd", a)).transpose()?;
    let period = body.period.map(|p| Period::from(p).as_str());
    let b = store::budgets::update(&app.store, caller.tenant(), id, amount, period)
        .await?
        .ok_or_else(|| ApiError::not_found("budget"))?;
    app.snapshot.changed().await?;
    Ok(Reply::json(200, &record(app, &b, Utc::now())))
}

/// Delete a budget (manager)
#[utoipa::path(delete, path = "/v1/budgets/{id}", operation_id = "deleteBudget", tag = "budgets",
    params(("id" = String, Path, description = "Budget id")),
    responses((status = 204, description = "Deleted"), Manager, Missing, Authenticated))]
pub async fn delete(app: &App, caller: &Caller, id: &str) -> Handled {
    caller.require_manager()?;
    if !store::budgets::delete(&app.store, caller.tenant(), id).await? {
        return Err(ApiError::not_found("budget"));
    }
    app.snapshot.changed().await?;
    Ok(Reply::NoContent)
}
