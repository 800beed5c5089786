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
use crate::checks::budget::{end_user_scope_id, Period};
use crate::error::ApiError;
use crate::store::{self, budgets::Budget};

#[derive(Debug, Clone, Copy, PartialEq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(as = BudgetScope)]
pub(super) enum Scope {
    Key,
    Team,
    Tenant,
    /// Each end user in scope (`keyId`, `teamId`, or the tenant's), or one (`endUser`).
    #[serde(rename = "end_user")]
    EndUser,
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
    /// `end_user` budgets: the key whose end users it caps.
    key_id: Option<String>,
    /// `end_user` budgets: the team whose end users it caps (its keys' end users).
    team_id: Option<String>,
    /// `end_user` budgets: the one end user it caps (left out: each end user in scope).
    #[schema(max_length = 256)]
    end_user: Option<String>,
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
    /// `end_user` budgets: the key whose end users it caps.
    #[serde(skip_serializing_if = "Option::is_none")]
    key_id: Option<&'a str>,
    /// `end_user` budgets: the team whose end users it caps.
    #[serde(skip_serializing_if = "Option::is_none")]
    team_id: Option<&'a str>,
    /// `end_user` budgets: the one end user it caps (null: each end user in scope).
    #[serde(skip_serializing_if = "Option::is_none")]
    end_user: Option<Option<&'a str>>,
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
    let end_users = b.scope == "end_user";
    // An end-user budget shows its end user's spend, or (over every end user in scope) the
    // most one of them has spent: what is left before the first of them is refused.
    let spent = match (end_users, &b.end_user) {
        (false, _) => app.ledger.spent(&b.scope, &b.scope_id, period, now),
        (true, Some(u)) => app.ledger.spent("end_user", &end_user_scope_id(&b.scope_id, u), period, now),
        (true, None) => app.ledger.most_spent_by_an_end_user(&b.scope_id, period, now),
    };
    let (owner, owner_id) = b.scope_id.split_once(':').unwrap_or(("", ""));
    BudgetView {
        id: &b.id,
        scope: &b.scope,
        scope_id: if end_users { owner_id } else { &b.scope_id },
        key_id: (end_users && owner == "key").then_some(owner_id),
        team_id: (end_users && owner == "team").then_some(owner_id),
        end_user: end_users.then_some(b.end_user.as_deref()),
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
        (Scope::EndUser, _) => Err(ApiError::internal("end-user budgets name their owner with keyId/teamId")),
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

/// Whose end users an `end_user` budget caps: `key:<id>` (a live key of the tenant),
/// `team:<id>` (a team of the tenant) or `tenant:<id>` (neither given).
async fn end_user_owner(app: &App, caller: &Caller, body: &CreateBudget) -> Result<String, ApiError> {
    if body.scope_id.is_some() {
        return Err(ApiError::invalid("an `end_user` budget names its owner with `keyId` or `teamId`, not `scopeId`"));
    }
    match (&body.key_id, &body.team_id) {
        (Some(_), Some(_)) => Err(ApiError::invalid("give `keyId` or `teamId`, not both")),
        (Some(k), None) => match store::keys::is_live(&app.store, caller.tenant(), k).await? {
            true => Ok(format!("key:{k}")),
            false => Err(ApiError::invalid(format!("field `keyId`: unknown key `{k}`"))),
        },
        (None, Some(t)) => match store::teams::get(&app.store, caller.tenant(), t).await? {
            Some(_) => Ok(format!("team:{t}")),
            None => Err(ApiError::invalid(format!("field `teamId`: unknown team `{t}`"))),
        },
        (None, None) => Ok(format!("tenant:{}", caller.tenant())),
    }
}

/// The one end user an `end_user` budget caps, checked as the gateway checks end-user ids.
fn end_user(body: &CreateBudget) -> Result<Option<String>, ApiError> {
    let Some(u) = &body.end_user else { return Ok(None) };
    if u.is_empty() || u.len() > 256 || u.chars().any(char::is_control) || u.trim() != u {
        return Err(ApiError::invalid(
            "field `endUser` must be 1 to 256 bytes of printable text without surrounding spaces",
        ));
    }
    Ok(Some(u.clone()))
}

/// Create a budget on a key, a team or the tenant (manager)
#[utoipa::path(post, path = "/v1/budgets", operation_id = "createBudget", tag = "budgets", request_body = CreateBudget,
    responses((status = 201, description = "The budget", body = BudgetView), Manager, Authenticated))]
pub async fn create(app: &App, caller: &Caller, req: &Req) -> Handled {
    caller.require_manager()?;
    let body: CreateBudget = req.json()?;
    let amount = usd("amountUsd", body.amount_usd)?;
    let (scope, scope_id, end_user) = match body.scope {
        Scope::EndUser => ("end_user", end_user_owner(app, caller, &body).await?, end_user(&body)?),
        s => {
            if body.key_id.is_some() || body.team_id.is_some() || body.end_user.is_some() {
                return Err(ApiError::invalid("fields `keyId`, `teamId` and `endUser` are for `end_user` budgets"));
            }
            let scope = match s {
                Scope::Key => "key",
                Scope::Team => "team",
                _ => "tenant",
            };
            (scope, scope_id(app, caller, s, body.scope_id).await?, None)
        }
    };
    let period = Period::from(body.period).as_str();
    let b = store::budgets::insert(&app.store, caller.tenant(), scope, &scope_id, end_user.as_deref(), amount, period)
        .await?;
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
