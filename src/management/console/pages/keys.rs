//! Keys: the list, a new key (its secret shown once, on the answer to the form, never stored),
//! revocation and limits.

use http::Method;
use serde_json::{json, Map, Value};

use super::ctx::{done, form_error, Ctx};
use crate::error::ApiError;
use crate::management::handler::Reply;

pub async fn page(c: &Ctx<'_>, error: Option<Value>) -> Result<Reply, ApiError> {
    let keys = c.get("/v1/keys", &[("limit".into(), "200".into())]).await?;
    let status = error.as_ref().and_then(|e| e["status"].as_u64()).unwrap_or(200) as u16;
    Ok(c.render(status, "keys.html", "keys", json!({"keys": keys["data"], "error": error, "form": form(c)})))
}

/// The posted form, to draw again after an error.
fn form(c: &Ctx<'_>) -> Value {
    c.form.iter().filter(|(k, _)| k != "_csrf").map(|(k, v)| (k.clone(), json!(v))).collect::<Map<_, _>>().into()
}

/// A money or count field: absent/empty → null; else the number, or the text as it is (so the
/// API names the field that is not a number).
fn number(c: &Ctx<'_>, name: &str) -> Value {
    match c.field(name) {
        "" => Value::Null,
        v => super::ctx::number_value(v),
    }
}

pub async fn create(c: &Ctx<'_>) -> Result<Reply, ApiError> {
    let mut body = Map::new();
    body.insert("label".into(), json!(c.field("label")));
    for name in ["role", "keyClass", "teamId"] {
        if !c.field(name).is_empty() {
            body.insert(name.into(), json!(c.field(name)));
        }
    }
    if !c.field("budgetUsd").is_empty() {
        body.insert("budgetUsd".into(), number(c, "budgetUsd"));
    }
    match c.send(Method::POST, "/v1/keys", &Value::Object(body)).await {
        Ok(created) => Ok(c.render(201, "key_created.html", "keys", json!({"k": created}))),
        Err(e) if e.status() == 400 || e.status() == 403 => page(c, Some(form_error(&e))).await,
        Err(e) => Err(e),
    }
}

pub async fn revoke(c: &Ctx<'_>, id: &str) -> Result<Reply, ApiError> {
    c.send(Method::DELETE, &format!("/v1/keys/{}", super::super::api::seg(id)), &Value::Null).await?;
    done("/console/keys")
}

pub async fn limits(c: &Ctx<'_>, id: &str) -> Result<Reply, ApiError> {
    let body = json!({"rpmLimit": number(c, "rpmLimit"), "tpmLimit": number(c, "tpmLimit")});
    match c.send(Method::PATCH, &format!("/v1/keys/{}/limits", super::super::api::seg(id)), &body).await {
        Ok(_) => done("/console/keys"),
        Err(e) if e.status() == 400 => page(c, Some(form_error(&e))).await,
        Err(e) => Err(e),
    }
}
