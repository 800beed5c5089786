//! `/v1/budgets/requests`: any key may ask for more room on a budget of its tenant; a manager
//! approves (raising the budget in the same transaction) or denies, once.

use serde::Deserialize;
use utoipa::ToSchema;

use super::handler::{page_limit, paginate, Caller, Handled, Page, Reply, Req};
use super::openapi_parts::{Authenticated, Conflicting, Manager, Missing, PageQuery};
use crate::app::App;
use crate::error::{ApiError, ErrorKind};
use crate::store::{self, budget_requests::BudgetRequest, budget_requests::Decided};

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct CreateRequest {
    /// A budget of the tenant.
    budget_id: String,
    /// How much to add to the budget.
    #[schema(exclusive_minimum = 0)]
    amount_usd: f64,
    /// What the money is for.
    #[schema(min_length = 1, max_length = 2000)]
    reason: String,
}

/// Ask for more room on a budget (any key)
#[utoipa::path(post, path = "/v1/budgets/requests", operation_id = "createBudgetRequest", tag = "budgets",
    request_body = CreateRequest,
    responses((status = 201, description = "The pending request", body = BudgetRequest), Authenticated))]
pub async fn create(app: &App, caller: &Caller, req: &Req) -> Handled {
    let body: CreateRequest = req.json()?;
    if !(body.amount_usd.is_finite() && body.amount_usd > 0.0) {
        return Err(ApiError::invalid("field `amountUsd` must be a positive number"));
    }
    let reason = body.reason.trim();
    if reason.is_empty() || reason.chars().count() > 2000 {
        return Err(ApiError::invalid("field `reason` must be 1 to 2000 characters: say what the money is for"));
    }
    if store::budgets::get(&app.store, caller.tenant(), &body.budget_id).await?.is_none() {
        return Err(ApiError::invalid(format!("field `budgetId`: unknown budget `{}`", body.budget_id)));
    }
    let r = store::budget_requests::insert(
        &app.store,
        caller.tenant(),
        &body.budget_id,
        body.amount_usd,
        reason,
        &caller.key.record.id,
    )
    .await?;
    Ok(Reply::json(201, &r))
}

/// List budget requests (managers see all, others their own)
#[utoipa::path(get, path = "/v1/budgets/requests", operation_id = "listBudgetRequests", tag = "budgets",
    params(PageQuery),
    responses((status = 200, description = "A page of budget requests", body = Page<BudgetRequest>),
        Authenticated))]
pub async fn list(app: &App, caller: &Caller, req: &Req) -> Handled {
    let limit = page_limit(req)?;
    let only = (!caller.key.is_manager()).then(|| caller.key.record.id.as_str());
    let rows = store::budget_requests::list(&app.store, caller.tenant(), only, req.query("cursor"), limit + 1).await?;
    let (page, next) = paginate(rows, limit, |r| &r.id);
    Ok(Reply::json(200, &Page { data: page, next_cursor: next }))
}

/// Approve a budget request, raising its budget (manager)
#[utoipa::path(post, path = "/v1/budgets/requests/{id}/approve", operation_id = "approveBudgetRequest",
    tag = "budgets", params(("id" = String, Path, description = "Budget request id")),
    responses((status = 200, description = "The approved request", body = BudgetRequest), Manager, Missing,
        Conflicting, Authenticated))]
pub async fn approve(app: &App, caller: &Caller, id: &str) -> Handled {
    decide(app, caller, id, true).await
}

/// Deny a budget request (manager)
#[utoipa::path(post, path = "/v1/budgets/requests/{id}/deny", operation_id = "denyBudgetRequest", tag = "budgets",
    params(("id" = String, Path, description = "Budget request id")),
    responses((status = 200, description = "The denied request", body = BudgetRequest), Manager, Missing,
        Conflicting, Authenticated))]
pub async fn deny(app: &App, caller: &Caller, id: &str) -> Handled {
    decide(app, caller, id, false).await
}

/// A pending request is decided once: approved or denied.
async fn decide(app: &App, caller: &Caller, id: &str, approve: bool) -> Handled {
    caller.require_manager()?;
    let conflict = |m: String| ApiError::new(ErrorKind::Conflict, m);
    match store::budget_requests::decide(&app.store, caller.tenant(), id, approve, &caller.key.record.id).await? {
        Decided::Done(r) => {
            if approve {
                app.snapshot.changed().await?;
            }
            Ok(Reply::json(200, &r))
        }
        Decided::NotFound => Err(ApiError::not_found("budget request")),
        Decided::AlreadyDecided(status) => {
            Err(conflict(format!("this budget request is already {status}; a request is decided only once")))
        }
        Decided::BudgetGone => Err(conflict("the budget of this request was deleted; it cannot be raised".into())),
    }
}
