//! Policies: the list and a YAML editor. The API checks a policy before it stores anything; its
//! error names the line and column, which the editor shows beside the text it keeps.

use http::Method;
use serde_json::{json, Value};

use super::ctx::{done, form_error, Ctx};
use crate::error::ApiError;
use crate::management::handler::Reply;

pub async fn list(c: &Ctx<'_>, error: Option<Value>) -> Result<Reply, ApiError> {
    let policies = c.get("/v1/policies", &[("limit".into(), "200".into())]).await?;
    let status = error.as_ref().and_then(|e| e["status"].as_u64()).unwrap_or(200) as u16;
    let data = json!({"policies": policies["data"], "error": error, "at": error.as_ref().map(at),
                      "form": {"name": c.field("name"), "yaml": c.field("yaml")}});
    Ok(c.render(status, "policies.html", "policies", data))
}

pub async fn one(c: &Ctx<'_>, id: &str, error: Option<Value>) -> Result<Reply, ApiError> {
    let mut policy = c.get(&format!("/v1/policies/{}", super::super::api::seg(id)), &[]).await?;
    if error.is_some() {
        policy["yaml"] = json!(c.field("yaml"));
    }
    let status = error.as_ref().and_then(|e| e["status"].as_u64()).unwrap_or(200) as u16;
    let data = json!({"p": policy, "error": error, "at": error.as_ref().map(at)});
    Ok(c.render(status, "policy.html", "policies", data))
}

/// `{line, column}` of an error whose message says `line L column C` (serde_yaml's words).
fn at(error: &Value) -> Value {
    let msg = error["message"].as_str().unwrap_or("");
    let num = |word: &str| {
        msg.split(word)
            .nth(1)
            .and_then(|t| t.trim_start().split(|ch: char| !ch.is_ascii_digit()).next())
            .and_then(|n| n.parse::<u64>().ok())
    };
    match (num("line"), num("column")) {
        (Some(l), Some(col)) => json!({"line": l, "column": col}),
        _ => Value::Null,
    }
}

fn body(c: &Ctx<'_>) -> Value {
    json!({"name": c.field("name"), "enabled": c.field("enabled") == "on", "yaml": c.field("yaml")})
}

pub async fn create(c: &Ctx<'_>) -> Result<Reply, ApiError> {
    match c.send(Method::POST, "/v1/policies", &body(c)).await {
        Ok(p) => done(&format!("/console/policies/{}", p["id"].as_str().unwrap_or(""))),
        Err(e) if e.status() == 400 || e.status() == 409 => list(c, Some(form_error(&e))).await,
        Err(e) => Err(e),
    }
}

pub async fn save(c: &Ctx<'_>, id: &str) -> Result<Reply, ApiError> {
    let path = format!("/v1/policies/{}", super::super::api::seg(id));
    match c.send(Method::PUT, &path, &body(c)).await {
        Ok(_) => done(&format!("/console/policies/{}?saved=1", super::super::api::seg(id))),
        Err(e) if e.status() == 400 || e.status() == 409 => one(c, id, Some(form_error(&e))).await,
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_line_and_column() {
        let e =
            json!({"message": "field `yaml` is not a valid policy: rules[0]: unknown field `x` at line 3 column 5"});
        assert_eq!(at(&e), json!({"line": 3, "column": 5}));
        assert_eq!(at(&json!({"message": "no place"})), Value::Null);
    }
}
