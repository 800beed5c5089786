//! `/v1/team/teams`: teams of the tenant. A team's name is unique in the tenant; its
//! `budgetPoolUsd` caps the spend of its keys, so writes swap a new snapshot in before answering.

use serde::Deserialize;
use utoipa::ToSchema;

use super::fields::{present, usd};
use super::handler::{page_limit, paginate, Caller, Handled, Page, Reply, Req};
use super::openapi_parts::{Authenticated, Conflicting, Manager, Missing, PageQuery};
use crate::app::App;
use crate::error::{ApiError, ErrorKind};
use crate::store::teams::{self, Deleted, Saved, Team};

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct CreateTeam {
    /// Unique in the tenant.
    #[schema(min_length = 1, max_length = 200)]
    name: String,
    /// Caps the sum spent by the team's keys.
    #[schema(minimum = 0)]
    budget_pool_usd: Option<f64>,
}

/// `budgetPoolUsd` left out stays as it is; `null` removes the cap.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct PatchTeam {
    #[schema(min_length = 1, max_length = 200)]
    name: String,
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<f64>, minimum = 0)]
    budget_pool_usd: Option<Option<f64>>,
}

fn team_name(name: &str) -> Result<String, ApiError> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 200 || name.chars().any(char::is_control) {
        return Err(ApiError::invalid("field `name` must be 1 to 200 printable characters"));
    }
    Ok(name.to_string())
}

fn name_taken(name: &str) -> ApiError {
    ApiError::new(
        ErrorKind::Conflict,
        format!("a team named `{name}` already exists in this tenant; pick another name"),
    )
}

fn saved(s: Saved, name: &str) -> Result<teams::Team, ApiError> {
    match s {
        Saved::Team(t) => Ok(t),
        Saved::NameTaken => Err(name_taken(name)),
        Saved::NotFound => Err(ApiError::not_found("team")),
    }
}

/// Create a team (manager)
#[utoipa::path(post, path = "/v1/team/teams", operation_id = "createTeam", tag = "teams", request_body = CreateTeam,
    responses((status = 201, description = "The team", body = Team), Manager, Conflicting, Authenticated))]
pub async fn create(app: &App, caller: &Caller, req: &Req) -> Handled {
    caller.require_manager()?;
    let body: CreateTeam = req.json()?;
    let name = team_name(&body.name)?;
    let pool = body.budget_pool_usd.map(|p| usd("budgetPoolUsd", p)).transpose()?;
    let team = saved(teams::create(&app.store, caller.tenant(), &name, pool).await?, &name)?;
    app.snapshot.changed().await?;
    Ok(Reply::json(201, &team))
}

/// List teams
#[utoipa::path(get, path = "/v1/team/teams", operation_id = "listTeams", tag = "teams", params(PageQuery),
    responses((status = 200, description = "A page of teams", body = Page<Team>), Authenticated))]
pub async fn list(app: &App, caller: &Caller, req: &Req) -> Handled {
    let limit = page_limit(req)?;
    let rows = teams::list(&app.store, caller.tenant(), req.query("cursor"), limit + 1).await?;
    let (page, next) = paginate(rows, limit, |t| &t.id);
    Ok(Reply::json(200, &Page { data: page, next_cursor: next }))
}

/// Get a team
#[utoipa::path(get, path = "/v1/team/teams/{id}", operation_id = "getTeam", tag = "teams",
    params(("id" = String, Path, description = "Team id")),
    responses((status = 200, description = "The team", body = Team), Missing, Authenticated))]
pub async fn get(app: &App, caller: &Caller, id: &str) -> Handled {
    let team = teams::get(&app.store, caller.tenant(), id).await?.ok_or_else(|| ApiError::not_found("team"))?;
    Ok(Reply::json(200, &team))
}

/// Rename a team or change its budget pool (manager)
#[utoipa::path(patch, path = "/v1/team/teams/{id}", operation_id = "updateTeam", tag = "teams",
    params(("id" = String, Path, description = "Team id")), request_body = PatchTeam,
    responses((status = 200, description = "The team", body = Team), Manager, Missing, Conflicting,
        Authenticated))]
pub async fn update(app: &App, caller: &Caller, id: &str, req: &Req) -> Handled {
    caller.require_manager()?;
    let body: PatchTeam = req.json()?;
    let name = team_name(&body.name)?;
    let pool = match body.budget_pool_usd {
        Some(Some(p)) => Some(Some(usd("budgetPoolUsd", p)?)),
        other => other,
    };
    let team = saved(teams::update(&app.store, caller.tenant(), id, &name, pool).await?, &name)?;
    app.snapshot.changed().await?;
    Ok(Reply::json(200, &team))
}

/// Delete a team without keys (manager)
#[utoipa::path(delete, path = "/v1/team/teams/{id}", operation_id = "deleteTeam", tag = "teams",
    params(("id" = String, Path, description = "Team id")),
    responses((status = 204, description = "Deleted"), Manager, Missing, Conflicting, Authenticated))]
pub async fn delete(app: &App, caller: &Caller, id: &str) -> Handled {
    caller.require_manager()?;
    match teams::delete(&app.store, caller.tenant(), id).await? {
        Deleted::Done => {}
        Deleted::NotFound => return Err(ApiError::not_found("team")),
        Deleted::HasKeys(n) => {
            return Err(ApiError::new(
                ErrorKind::Conflict,
                format!("the team still has {n} key(s); revoke them (DELETE /v1/keys/{{id}}) before deleting the team"),
            ))
        }
    }
    app.snapshot.changed().await?;
    Ok(Reply::NoContent)
}
