//! `/v1/team/teams`: teams of the tenant. A team's name is unique in the tenant; its
//! `budgetPoolUsd` caps the spend of its keys, so writes swap a new snapshot in before answering.

use serde::Deserialize;
use serde_json::json;

use super::{page_limit, paginate, present, usd, Caller, Handled, Reply, Req};
use crate::app::App;
use crate::error::{ApiError, ErrorKind};
use crate::store::teams::{self, Deleted, Saved};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CreateTeam {
    name: String,
    budget_pool_usd: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PatchTeam {
    name: String,
    #[serde(default, deserialize_with = "present")]
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

pub async fn create(app: &App, caller: &Caller, req: &Req) -> Handled {
    caller.require_manager()?;
    let body: CreateTeam = req.json()?;
    let name = team_name(&body.name)?;
    let pool = body.budget_pool_usd.map(|p| usd("budgetPoolUsd", p)).transpose()?;
    let team = saved(teams::create(&app.store, caller.tenant(), &name, pool).await?, &name)?;
    app.snapshot.rebuild().await?;
    Ok(Reply::Json(201, json!(team)))
}

pub async fn list(app: &App, caller: &Caller, req: &Req) -> Handled {
    let limit = page_limit(req)?;
    let rows = teams::list(&app.store, caller.tenant(), req.query("cursor"), limit + 1).await?;
    let (page, next) = paginate(rows, limit, |t| &t.id);
    Ok(Reply::Json(200, json!({ "data": page, "nextCursor": next })))
}

pub async fn get(app: &App, caller: &Caller, id: &str) -> Handled {
    let team = teams::get(&app.store, caller.tenant(), id).await?.ok_or_else(|| ApiError::not_found("team"))?;
    Ok(Reply::Json(200, json!(team)))
}

pub async fn update(app: &App, caller: &Caller, id: &str, req: &Req) -> Handled {
    caller.require_manager()?;
    let body: PatchTeam = req.json()?;
    let name = team_name(&body.name)?;
    let pool = match body.budget_pool_usd {
        Some(Some(p)) => Some(Some(usd("budgetPoolUsd", p)?)),
        other => other,
    };
    let team = saved(teams::update(&app.store, caller.tenant(), id, &name, pool).await?, &name)?;
    app.snapshot.rebuild().await?;
    Ok(Reply::Json(200, json!(team)))
}

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
    app.snapshot.rebuild().await?;
    Ok(Reply::NoContent)
}
