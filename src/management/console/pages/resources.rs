//! The simpler resources, each a list and a form or two: providers (credentials, masked; a
//! test call), teams, prompts (versions, a run through the gateway), webhook endpoints and tool
//! servers.

use http::Method;
use serde_json::{json, Map, Value};

use super::ctx::{done, form_error, Ctx};
use crate::error::{ApiError, ErrorKind};
use crate::management::handler::Reply;

/// A console section: its list route, its template.
struct Section {
    name: &'static str,
    list: &'static str,
    template: &'static str,
}

const SECTIONS: &[Section] = &[
    Section { name: "providers", list: "/v1/providers", template: "providers.html" },
    Section { name: "teams", list: "/v1/team/teams", template: "teams.html" },
    Section { name: "prompts", list: "/v1/prompts", template: "prompts.html" },
    Section { name: "webhooks", list: "/v1/webhook-endpoints", template: "webhooks.html" },
    Section { name: "tool-servers", list: "/v1/tool-servers", template: "tool_servers.html" },
];

/// A list answer's items: `data` of a page, or the array itself.
fn items(v: Value) -> Value {
    match v {
        Value::Array(_) => v,
        mut other => other["data"].take(),
    }
}

/// The section's page; `extra` adds what a form's answer shows (an error, a test's or a
/// run's result).
pub async fn page(c: &Ctx<'_>, name: &str, extra: Option<Value>) -> Result<Reply, ApiError> {
    let Some(sec) = SECTIONS.iter().find(|s| s.name == name) else {
        return Err(ApiError::not_found("console page"));
    };
    let query: Vec<(String, String)> =
        if matches!(name, "providers" | "tool-servers") { vec![] } else { vec![("limit".into(), "200".into())] };
    let list = items(c.get(sec.list, &query).await?);
    let mut data = Map::new();
    data.insert("items".into(), list);
    if name == "prompts" {
        data.insert("versions".into(), versions(c).await?);
    }
    let form: Map<String, Value> =
        c.form.iter().filter(|(k, _)| k != "_csrf").map(|(k, v)| (k.clone(), json!(v))).collect();
    data.insert("form".into(), Value::Object(form));
    let mut status = 200;
    if let Some(Value::Object(extra)) = extra {
        status = extra.get("error").and_then(|e| e["status"].as_u64()).unwrap_or(200) as u16;
        data.extend(extra);
    }
    Ok(c.render(status, sec.template, name, Value::Object(data)))
}

/// The versions of the prompt named by `?prompt=`, for the playground.
async fn versions(c: &Ctx<'_>) -> Result<Value, ApiError> {
    let Some(id) = c.req.query("prompt").or(Some(c.field("promptId")).filter(|v| !v.is_empty())) else {
        return Ok(Value::Null);
    };
    let v = c.get(&format!("/v1/prompts/{}/versions", super::super::api::seg(id)), &[]).await?;
    Ok(json!({"prompt": id, "items": items(v)}))
}

/// A form of a section: the API call it makes, then back to the section or its answer shown.
pub async fn post(c: &Ctx<'_>, name: &str, rest: &[&str]) -> Result<Reply, ApiError> {
    let seg = super::super::api::seg;
    let (method, path, body) = match (name, rest) {
        ("providers", [p]) => (Method::PUT, format!("/v1/providers/{}", seg(p)), provider_body(c)),
        ("providers", [p, "test"]) => (Method::POST, format!("/v1/providers/{}/test", seg(p)), Value::Null),
        ("teams", []) => (Method::POST, "/v1/team/teams".into(), team_body(c)),
        ("prompts", []) => (Method::POST, "/v1/prompts".into(), prompt_body(c)),
        ("prompts", ["run"]) => (Method::POST, "/v1/prompts/run".into(), run_body(c)?),
        ("webhooks", []) => (Method::POST, "/v1/webhook-endpoints".into(), webhook_body(c)),
        ("webhooks", [id, "delete"]) => (Method::DELETE, format!("/v1/webhook-endpoints/{}", seg(id)), Value::Null),
        ("tool-servers", []) => {
            (Method::POST, "/v1/tool-servers".into(), json!({"name": c.field("name"), "url": c.field("url")}))
        }
        ("tool-servers", [n, "delete"]) => (Method::DELETE, format!("/v1/tool-servers/{}", seg(n)), Value::Null),
        _ => return Err(ApiError::not_found("console form")),
    };
    match c.send(method, &path, &body).await {
        Ok(answer) if rest.last().is_some_and(|l| *l == "test" || *l == "run") => {
            page(c, name, Some(json!({"result": answer, "resultFor": rest[0]}))).await
        }
        Ok(answer) if name == "webhooks" && rest.is_empty() => page(c, name, Some(json!({"created": answer}))).await,
        Ok(_) => done(&format!("/console/{name}")),
        Err(e) if matches!(e.status(), 400 | 404 | 409 | 422 | 502 | 503) => {
            page(c, name, Some(json!({"error": form_error(&e)}))).await
        }
        // The API's refusal of an auditor's run (recorded as `deny`), said plainly.
        Err(e) if e.status() == 403 && rest == ["run"] && c.s.row.role == "auditor" => {
            Err(ApiError::new(ErrorKind::Forbidden, format!("auditors cannot run prompts ({})", e.message)))
        }
        Err(e) => Err(e),
    }
}

fn provider_body(c: &Ctx<'_>) -> Value {
    let mut m = Map::new();
    for name in ["api_key", "base_url", "access_key_id", "secret_access_key", "region", "service_account_json"] {
        if !c.field(name).is_empty() {
            m.insert(name.into(), json!(c.field(name)));
        }
    }
    Value::Object(m)
}

fn team_body(c: &Ctx<'_>) -> Value {
    let pool = match c.field("budgetPoolUsd") {
        "" => Value::Null,
        v => super::ctx::number_value(v),
    };
    json!({"name": c.field("name"), "budgetPoolUsd": pool})
}

fn prompt_body(c: &Ctx<'_>) -> Value {
    json!({"name": c.field("name"), "description": c.field("description"), "content": c.field("content")})
}

/// A playground run: variables are a JSON object typed into the form.
fn run_body(c: &Ctx<'_>) -> Result<Value, ApiError> {
    let vars = match c.field("variables") {
        "" => json!({}),
        v => serde_json::from_str::<Value>(v)
            .map_err(|e| ApiError::invalid(format!("field `variables` must be a JSON object: {e}")))?,
    };
    let mut body = json!({"promptId": c.field("promptId"), "versionId": c.field("versionId"), "variables": vars});
    if !c.field("model").is_empty() {
        body["model"] = json!(c.field("model"));
    }
    Ok(body)
}

fn webhook_body(c: &Ctx<'_>) -> Value {
    let events: Vec<&str> = c.form.iter().filter(|(k, _)| k == "events").map(|(_, v)| v.as_str()).collect();
    json!({"url": c.field("url"), "events": events})
}
