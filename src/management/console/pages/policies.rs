//! Policies: the list and a YAML editor. The API checks a policy before it stores anything; its
//! error names the line and column, which the editor shows beside the text it keeps. While the
//! user types, htmx posts the text to [`check`], which asks `POST /v1/policies/validate` (the same
//! check, storing nothing) and answers the fragment shown under the editor.

use http::Method;
use serde_json::{json, Value};

use super::ctx::{done, form_error, Ctx};
use crate::error::ApiError;
use crate::management::handler::Reply;

pub async fn list(c: &Ctx<'_>, error: Option<Value>) -> Result<Reply, ApiError> {
    let policies = c.get("/v1/policies", &[("limit".into(), "200".into())]).await?;
    let status = error.as_ref().and_then(|e| e["status"].as_u64()).unwrap_or(200) as u16;
    let data = json!({"policies": policies["data"], "error": error, "at": error.as_ref().map(at),
                      "form": {"name": c.field("name"), "yaml": c.raw("yaml")}});
    Ok(c.render(status, "policies.html", "policies", data))
}

pub async fn one(c: &Ctx<'_>, id: &str, error: Option<Value>) -> Result<Reply, ApiError> {
    let mut policy = c.get(&format!("/v1/policies/{}", super::super::api::seg(id)), &[]).await?;
    if error.is_some() {
        policy["yaml"] = json!(c.raw("yaml"));
    }
    let status = error.as_ref().and_then(|e| e["status"].as_u64()).unwrap_or(200) as u16;
    let data = json!({"p": policy, "error": error, "at": error.as_ref().map(at)});
    Ok(c.render(status, "policy.html", "policies", data))
}

/// `{line, column, text}` of an error whose message says `line L, column C: text` (the API's
/// words); `text` is what follows the position. Null when the message names no position.
fn at(error: &Value) -> Value {
    let msg = error["message"].as_str().unwrap_or("");
    let num = |word: &str| {
        msg.split(word)
            .nth(1)
            .and_then(|t| t.trim_start().split(|ch: char| !ch.is_ascii_digit()).next())
            .and_then(|n| n.parse::<u64>().ok())
    };
    match (num("line"), num("column")) {
        (Some(l), Some(col)) => {
            let text = msg.split_once(&format!("line {l}, column {col}: ")).map_or(msg, |(_, rest)| rest);
            json!({"line": l, "column": col, "text": text})
        }
        _ => Value::Null,
    }
}

fn body(c: &Ctx<'_>) -> Value {
    json!({"name": c.field("name"), "enabled": c.field("enabled") == "on", "yaml": c.raw("yaml")})
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

/// The editor's check as the user types (htmx): the text posted to `POST /v1/policies/validate`,
/// its answer drawn as a fragment. An invalid policy is a normal answer here (200); any other
/// refusal keeps its status, with the API's message.
pub async fn check(c: &Ctx<'_>) -> Result<Reply, ApiError> {
    let data = match c.send(Method::POST, "/v1/policies/validate", &json!({"yaml": c.raw("yaml")})).await {
        Ok(v) => json!({"rules": v["rules"]}),
        Err(e) if e.status() == 400 => {
            let error = form_error(&e);
            json!({"at": at(&error), "error": error})
        }
        Err(e) => json!({"error": form_error(&e)}),
    };
    let status = data["error"]["status"].as_u64().filter(|s| *s != 400).unwrap_or(200) as u16;
    Ok(c.render(status, "policy_check.html", "policies", data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_line_and_column() {
        let e = json!({"message": "field `yaml` is not a valid policy: line 3, column 5: field `rules[0]`: unknown field `x`"});
        assert_eq!(at(&e), json!({"line": 3, "column": 5, "text": "field `rules[0]`: unknown field `x`"}));
        assert_eq!(at(&json!({"message": "no place"})), Value::Null);
        // A message that words the place otherwise keeps its whole text.
        let e = json!({"message": "bad at line 3 column 5"});
        assert_eq!(at(&e)["text"], "bad at line 3 column 5");
    }
}
