//! Budgets and budget requests: a developer asks for more, a manager approves or denies.

use http::Method;
use serde_json::{json, Value};

use super::ctx::{done, form_error, Ctx};
use crate::error::ApiError;
use crate::management::handler::Reply;

pub async fn page(c: &Ctx<'_>, error: Option<Value>) -> Result<Reply, ApiError> {
    let budgets = c.get("/v1/budgets", &[("limit".into(), "200".into())]).await?;
    let requests = c.get("/v1/budgets/requests", &[("limit".into(), "200".into())]).await?;
    let status = error.as_ref().and_then(|e| e["status"].as_u64()).unwrap_or(200) as u16;
    let data = json!({"budgets": budgets["data"], "requests": requests["data"], "error": error});
    Ok(c.render(status, "budgets.html", "budgets", data))
}

/// A new budget request (any key that may spend: the API decides).
pub async fn request(c: &Ctx<'_>) -> Result<Reply, ApiError> {
    let amount = c.field("amountUsd");
    let amount = super::ctx::number_value(amount);
    let body = json!({"budgetId": c.field("budgetId"), "amountUsd": amount, "reason": c.field("reason")});
    match c.send(Method::POST, "/v1/budgets/requests", &body).await {
        Ok(_) => done("/console/budgets"),
        Err(e) if e.status() == 400 || e.status() == 404 => page(c, Some(form_error(&e))).await,
        Err(e) => Err(e),
    }
}

/// Approve or deny a request (a manager; the API refuses anyone else).
pub async fn decide(c: &Ctx<'_>, id: &str, verb: &str) -> Result<Reply, ApiError> {
    if verb != "approve" && verb != "deny" {
        return Err(ApiError::not_found("console form"));
    }
    let path = format!("/v1/budgets/requests/{}/{verb}", super::super::api::seg(id));
    match c.send(Method::POST, &path, &Value::Null).await {
        Ok(_) => done("/console/budgets"),
        Err(e) if e.status() == 409 => page(c, Some(form_error(&e))).await,
        Err(e) => Err(e),
    }
}
