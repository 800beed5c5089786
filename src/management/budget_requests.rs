//! `/v1/budgets/requests`: any key may ask for more room on a budget of its tenant; a manager
//! approves (raising the budget in the same transaction) or denies, once.

use serde::Deserialize;
use serde_json::json;

use super::{page_limit, paginate, Caller, Handled, Reply, Req};
use crate::app::App;
use crate::error::{ApiError, ErrorKind};
use crate::store::{self, budget_requests::Decided};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CreateRequest {
    budget_id: String,
    amount_usd: f64,
    reason: String,
}

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
    Ok(Reply::Json(201, json!(r)))
}

pub async fn list(app: &App, caller: &Caller, req: &Req) -> Handled {
    let limit = page_limit(req)?;
    let only = (!caller.key.is_manager()).then(|| caller.key.record.id.as_str());
    let rows = store::budget_requests::list(&app.store, caller.tenant(), only, req.query("cursor"), limit + 1).await?;
    let (page, next) = paginate(rows, limit, |r| &r.id);
    Ok(Reply::Json(200, json!({ "data": page, "nextCursor": next })))
}

pub async fn decide(app: &App, caller: &Caller, id: &str, approve: bool) -> Handled {
    caller.require_manager()?;
    let conflict = |m: String| ApiError::new(ErrorKind::Conflict, m);
    match store::budget_requests::decide(&app.store, caller.tenant(), id, approve, &caller.key.record.id).await? {
        Decided::Done(r) => {
            if approve {
                app.snapshot.rebuild().await?;
            }
            Ok(Reply::Json(200, json!(r)))
        }
        Decided::NotFound => Err(ApiError::not_found("budget request")),
        Decided::AlreadyDecided(status) => {
            Err(conflict(format!("this budget request is already {status}; a request is decided only once")))
        }
        Decided::BudgetGone => Err(conflict("the budget of this request was deleted; it cannot be raised".into())),
    }
}
