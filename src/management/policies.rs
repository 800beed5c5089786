//! `/v1/policies`: the tenant's API policies (read/write) and the policy files that apply to it
//! (read-only, `source: "file"`). Every write is validated, compiled and swapped into the
//! snapshot before it answers, so the next request is evaluated against it.

use serde::Deserialize;
use serde_json::{json, Value};

use super::{Caller, Handled, Reply, Req};
use crate::app::App;
use crate::error::{ApiError, ErrorKind};
use crate::policy::files::FilePolicy;
use crate::policy::validate;
use crate::store::{self, policies::PolicyInput, policies::PolicyRecord};

const FILE_PREFIX: &str = "file:";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyBody {
    name: String,
    #[serde(default = "enabled_by_default")]
    enabled: bool,
    yaml: String,
}

fn enabled_by_default() -> bool {
    true
}

/// Checks the body and the policy text; the YAML error keeps its line, column and field.
fn input(req: &Req) -> Result<PolicyInput, ApiError> {
    let body: PolicyBody = req.json()?;
    let name = body.name.trim().to_string();
    if name.is_empty() || name.chars().count() > 200 {
        return Err(ApiError::invalid("field `name` must be 1 to 200 characters"));
    }
    validate::parse_api(&body.yaml)
        .map_err(|e| ApiError::invalid(format!("field `yaml` is not a valid policy: {e}")))?;
    Ok(PolicyInput { name, enabled: body.enabled, yaml: body.yaml })
}

fn api_json(rec: &PolicyRecord) -> Value {
    json!({
        "id": rec.id,
        "name": rec.name,
        "enabled": rec.enabled,
        "yaml": rec.yaml,
        "source": "api",
        "createdAt": rec.created_at,
        "updatedAt": rec.updated_at,
    })
}

fn file_json(f: &FilePolicy, error: Option<&str>) -> Value {
    json!({
        "id": format!("{FILE_PREFIX}{}", f.name),
        "name": f.name,
        "enabled": true,
        "yaml": f.compiled.yaml(),
        "source": "file",
        "path": f.path.display().to_string(),
        "tenant": f.compiled.doc().tenant,
        // Set while the file on disk is broken: the version shown is the last good one.
        "error": error,
        "createdAt": f.modified,
        "updatedAt": f.modified,
    })
}

/// The policy files in force for the caller's tenant, by file name.
fn files_for(app: &App, caller: &Caller) -> Vec<Value> {
    let snap = app.snapshot.load();
    let name = snap.tenant_name(caller.tenant()).unwrap_or_default().to_string();
    let set = app.snapshot.files.current();
    set.policies
        .iter()
        .filter(|f| f.compiled.applies_to(caller.tenant(), &name))
        .map(|f| file_json(f, set.error_of(&f.name)))
        .collect()
}

fn file_for(app: &App, caller: &Caller, id: &str) -> Option<Value> {
    files_for(app, caller).into_iter().find(|v| v["id"] == id)
}

pub async fn create(app: &App, caller: &Caller, req: &Req) -> Handled {
    caller.require_manager()?;
    let p = input(req)?;
    let rec = store::policies::insert(&app.store, caller.tenant(), p).await?;
    app.snapshot.rebuild().await?;
    log::info!("policy {} of tenant {} created", rec.id, caller.tenant());
    Ok(Reply::Json(201, api_json(&rec)))
}

/// API policies in creation order, then the applicable files by name; one cursor walks both.
pub async fn list(app: &App, caller: &Caller, req: &Req) -> Handled {
    let limit = match req.query("limit") {
        None => 50,
        Some(v) => v
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=200).contains(n))
            .ok_or_else(|| ApiError::invalid("query `limit` must be an integer from 1 to 200"))?,
    };
    let cursor = req.query("cursor").filter(|c| !c.is_empty());
    let mut page: Vec<Value> = Vec::new();
    if !cursor.is_some_and(|c| c.starts_with(FILE_PREFIX)) {
        let rows = store::policies::list(&app.store, caller.tenant(), cursor, limit as i64 + 1).await?;
        if rows.len() > limit {
            let page: Vec<Value> = rows[..limit].iter().map(api_json).collect();
            let next = rows[limit - 1].id.clone();
            return Ok(Reply::Json(200, json!({ "data": page, "nextCursor": next })));
        }
        page.extend(rows.iter().map(api_json));
    }
    let files = files_for(app, caller);
    let after_file = cursor.filter(|c| c.starts_with(FILE_PREFIX));
    let mut rest = files.into_iter().filter(|f| after_file.is_none_or(|c| f["id"].as_str().is_some_and(|id| id > c)));
    page.extend(rest.by_ref().take(limit - page.len()));
    let next = if rest.next().is_some() { page.last().map(|v| v["id"].clone()) } else { None };
    Ok(Reply::Json(200, json!({ "data": page, "nextCursor": next })))
}

pub async fn get(app: &App, caller: &Caller, id: &str) -> Handled {
    if id.starts_with(FILE_PREFIX) {
        return file_for(app, caller, id).map(|v| Reply::Json(200, v)).ok_or_else(|| ApiError::not_found("policy"));
    }
    let rec =
        store::policies::get(&app.store, caller.tenant(), id).await?.ok_or_else(|| ApiError::not_found("policy"))?;
    Ok(Reply::Json(200, api_json(&rec)))
}

/// Files are edited on disk, not through the API; another tenant's file is simply not found.
fn file_is_read_only(app: &App, caller: &Caller, id: &str) -> ApiError {
    match file_for(app, caller, id) {
        Some(v) => ApiError::new(
            ErrorKind::Conflict,
            format!(
                "policy `{id}` is managed on disk ({}): edit or remove the file; the change is picked up automatically",
                v["path"].as_str().unwrap_or_default()
            ),
        ),
        None => ApiError::not_found("policy"),
    }
}

pub async fn replace(app: &App, caller: &Caller, id: &str, req: &Req) -> Handled {
    caller.require_manager()?;
    if id.starts_with(FILE_PREFIX) {
        return Err(file_is_read_only(app, caller, id));
    }
    let p = input(req)?;
    let rec = store::policies::replace(&app.store, caller.tenant(), id, p)
        .await?
        .ok_or_else(|| ApiError::not_found("policy"))?;
    app.snapshot.rebuild().await?;
    log::info!("policy {id} of tenant {} replaced", caller.tenant());
    Ok(Reply::Json(200, api_json(&rec)))
}

pub async fn delete(app: &App, caller: &Caller, id: &str) -> Handled {
    caller.require_manager()?;
    if id.starts_with(FILE_PREFIX) {
        return Err(file_is_read_only(app, caller, id));
    }
    if !store::policies::delete(&app.store, caller.tenant(), id).await? {
        return Err(ApiError::not_found("policy"));
    }
    app.snapshot.rebuild().await?;
    log::info!("policy {id} of tenant {} deleted", caller.tenant());
    Ok(Reply::NoContent)
}
