//! `/v1/policies`: the tenant's API policies (read/write) and the policy files that apply to it
//! (read-only, `source: "file"`). Every write is validated, compiled and swapped into the
//! snapshot before it answers, so the next request is evaluated against it.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::handler::{Caller, Handled, Page, Reply, Req};
use super::openapi_parts::{string_enum, Authenticated, Conflicting, Manager, Missing, PageQuery};
use crate::app::App;
use crate::checks::policy::document::PolicyDoc;
use crate::checks::policy::files::FilePolicy;
use crate::checks::policy::validate;
use crate::error::{ApiError, ErrorKind};
use crate::store::{self, policies::PolicyInput, policies::PolicyRecord};

const FILE_PREFIX: &str = "file:";

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct PolicyBody {
    #[schema(min_length = 1, max_length = 200)]
    name: String,
    /// Default true.
    #[serde(default = "enabled_by_default")]
    enabled: bool,
    /// The policy document (YAML): `rules`, `guardrails`, ...
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
    checked(&body.yaml)?;
    Ok(PolicyInput { name, enabled: body.enabled, yaml: body.yaml })
}

/// The one check of a policy's text, for create, replace and validate alike: the refusal names
/// the line, column and field (`field \`yaml\` is not a valid policy: line L, column C: ...`).
fn checked(yaml: &str) -> Result<PolicyDoc, ApiError> {
    validate::parse_api(yaml).map_err(|e| ApiError::invalid(format!("field `yaml` is not a valid policy: {e}")))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ValidateBody {
    /// The policy document (YAML) to check.
    yaml: String,
}

/// A policy that would be accepted as it is.
#[derive(Serialize, ToSchema)]
pub(super) struct Validated {
    /// Always true (an invalid policy is a 400).
    valid: bool,
    /// How many `rules` it has.
    rules: usize,
}

/// `api` (made through this API) or `file` (a policy file on disk, read-only here).
struct PolicySource;

impl utoipa::PartialSchema for PolicySource {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        string_enum(["api", "file"])
    }
}

impl ToSchema for PolicySource {}

/// A policy as the API shows it; file policies add where they come from.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct Policy {
    /// A UUID, or `file:<file name>` for a policy file.
    id: String,
    name: String,
    enabled: bool,
    yaml: String,
    #[schema(value_type = PolicySource)]
    source: &'static str,
    /// File policies only: the file.
    #[serde(skip_serializing_if = "Option::is_none")]
    path: Option<String>,
    /// File policies only: the tenant the file names, if it names one.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    tenant: Option<Option<String>>,
    /// File policies only: set while the file on disk is broken (the version shown is then the
    /// last good one), else null.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    error: Option<Option<String>>,
    created_at: String,
    updated_at: String,
}

fn api_policy(rec: &PolicyRecord) -> Policy {
    Policy {
        id: rec.id.clone(),
        name: rec.name.clone(),
        enabled: rec.enabled,
        yaml: rec.yaml.clone(),
        source: "api",
        path: None,
        tenant: None,
        error: None,
        created_at: rec.created_at.clone(),
        updated_at: rec.updated_at.clone(),
    }
}

fn file_policy(f: &FilePolicy, error: Option<&str>) -> Policy {
    Policy {
        id: format!("{FILE_PREFIX}{}", f.name),
        name: f.name.clone(),
        enabled: true,
        yaml: f.compiled.yaml().to_string(),
        source: "file",
        path: Some(f.path.display().to_string()),
        tenant: Some(f.compiled.doc().tenant.clone()),
        error: Some(error.map(str::to_string)),
        created_at: f.modified.clone(),
        updated_at: f.modified.clone(),
    }
}

/// The policy files in force for the caller's tenant, by file name.
fn files_for(app: &App, caller: &Caller) -> Vec<Policy> {
    let snap = app.snapshot.load();
    let name = snap.tenant_name(caller.tenant()).unwrap_or_default().to_string();
    let set = app.snapshot.files.current();
    set.policies
        .iter()
        .filter(|f| f.compiled.applies_to(caller.tenant(), &name))
        .map(|f| file_policy(f, set.error_of(&f.name)))
        .collect()
}

fn file_for(app: &App, caller: &Caller, id: &str) -> Option<Policy> {
    files_for(app, caller).into_iter().find(|p| p.id == id)
}

/// Create a policy (manager)
#[utoipa::path(post, path = "/v1/policies", operation_id = "createPolicy", tag = "policies", request_body = PolicyBody,
    responses((status = 201, description = "The policy, in force from the next request", body = Policy),
        Manager, Authenticated))]
pub async fn create(app: &App, caller: &Caller, req: &Req) -> Handled {
    caller.require_manager()?;
    let p = input(req)?;
    let rec = store::policies::insert(&app.store, caller.tenant(), p).await?;
    app.snapshot.changed().await?;
    log::info!("policy {} of tenant {} created", rec.id, caller.tenant());
    Ok(Reply::json(201, &api_policy(&rec)))
}

/// Check a policy without saving it (any key but an auditor's)
///
/// The same check as create and replace, with the same refusal: a 400 whose message names the
/// line, column and field. Nothing is stored, nothing is recorded in the admin trail (it changes
/// nothing); an editor may call it as the user types.
#[utoipa::path(post, path = "/v1/policies/validate", operation_id = "validatePolicy", tag = "policies",
    request_body = ValidateBody,
    responses((status = 200, description = "The policy is valid", body = Validated), Manager, Authenticated))]
pub async fn validate(req: &Req) -> Handled {
    let body: ValidateBody = req.json()?;
    let doc = checked(&body.yaml)?;
    Ok(Reply::json(200, &Validated { valid: true, rules: doc.rules.len() }))
}

/// List policies: the API's, then the policy files that apply
///
/// API policies in creation order, then the applicable files by name; one cursor walks both.
#[utoipa::path(get, path = "/v1/policies", operation_id = "listPolicies", tag = "policies", params(PageQuery),
    responses((status = 200, description = "A page of policies", body = Page<Policy>), Authenticated))]
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
    let mut page: Vec<Policy> = Vec::new();
    if !cursor.is_some_and(|c| c.starts_with(FILE_PREFIX)) {
        let rows = store::policies::list(&app.store, caller.tenant(), cursor, limit as i64 + 1).await?;
        if rows.len() > limit {
            let data = rows[..limit].iter().map(api_policy).collect();
            let next = Some(rows[limit - 1].id.clone());
            return Ok(Reply::json(200, &Page { data, next_cursor: next }));
        }
        page.extend(rows.iter().map(api_policy));
    }
    let files = files_for(app, caller);
    let after_file = cursor.filter(|c| c.starts_with(FILE_PREFIX));
    let mut rest = files.into_iter().filter(|f| after_file.is_none_or(|c| f.id.as_str() > c));
    page.extend(rest.by_ref().take(limit - page.len()));
    let next = if rest.next().is_some() { page.last().map(|p| p.id.clone()) } else { None };
    Ok(Reply::json(200, &Page { data: page, next_cursor: next }))
}

/// Get a policy
#[utoipa::path(get, path = "/v1/policies/{id}", operation_id = "getPolicy", tag = "policies",
    params(("id" = String, Path, description = "Policy id (a UUID or `file:<name>`)")),
    responses((status = 200, description = "The policy", body = Policy), Missing, Authenticated))]
pub async fn get(app: &App, caller: &Caller, id: &str) -> Handled {
    if id.starts_with(FILE_PREFIX) {
        return file_for(app, caller, id).map(|p| Reply::json(200, &p)).ok_or_else(|| ApiError::not_found("policy"));
    }
    let rec =
        store::policies::get(&app.store, caller.tenant(), id).await?.ok_or_else(|| ApiError::not_found("policy"))?;
    Ok(Reply::json(200, &api_policy(&rec)))
}

/// Files are edited on disk, not through the API; another tenant's file is simply not found.
fn file_is_read_only(app: &App, caller: &Caller, id: &str) -> ApiError {
    match file_for(app, caller, id) {
        Some(p) => ApiError::new(
            ErrorKind::Conflict,
            format!(
                "policy `{id}` is managed on disk ({}): edit or remove the file; the change is picked up automatically",
                p.path.unwrap_or_default()
            ),
        ),
        None => ApiError::not_found("policy"),
    }
}

/// Replace an API policy (manager); file policies are edited on disk (409)
#[utoipa::path(put, path = "/v1/policies/{id}", operation_id = "replacePolicy", tag = "policies",
    params(("id" = String, Path, description = "Policy id")), request_body = PolicyBody,
    responses((status = 200, description = "The policy, in force from the next request", body = Policy),
        Manager, Missing, Conflicting, Authenticated))]
pub async fn replace(app: &App, caller: &Caller, id: &str, req: &Req) -> Handled {
    caller.require_manager()?;
    if id.starts_with(FILE_PREFIX) {
        return Err(file_is_read_only(app, caller, id));
    }
    let p = input(req)?;
    let rec = store::policies::replace(&app.store, caller.tenant(), id, p)
        .await?
        .ok_or_else(|| ApiError::not_found("policy"))?;
    app.snapshot.changed().await?;
    log::info!("policy {id} of tenant {} replaced", caller.tenant());
    Ok(Reply::json(200, &api_policy(&rec)))
}

/// Delete an API policy (manager); file policies are removed on disk (409)
#[utoipa::path(delete, path = "/v1/policies/{id}", operation_id = "deletePolicy", tag = "policies",
    params(("id" = String, Path, description = "Policy id")),
    responses((status = 204, description = "Deleted"), Manager, Missing, Conflicting, Authenticated))]
pub async fn delete(app: &App, caller: &Caller, id: &str) -> Handled {
    caller.require_manager()?;
    if id.starts_with(FILE_PREFIX) {
        return Err(file_is_read_only(app, caller, id));
    }
    if !store::policies::delete(&app.store, caller.tenant(), id).await? {
        return Err(ApiError::not_found("policy"));
    }
    app.snapshot.changed().await?;
    log::info!("policy {id} of tenant {} deleted", caller.tenant());
    Ok(Reply::NoContent)
}
