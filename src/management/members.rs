//! `/v1/team/members`: the people of the tenant (as its identity provider knows them) and their
//! roles. Members are not keys: changing one does not change what the gateway allows.

use serde::Deserialize;
use utoipa::ToSchema;

use super::fields::{present, tenant_team};
use super::handler::{Caller, Handled, Reply, Req};
use super::openapi_parts::{Authenticated, Manager, Missing};
use crate::app::App;
use crate::error::ApiError;
use crate::store::members::{self, Member, MemberPatch, NewMember};

#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(as = MemberRole)]
pub(super) enum Role {
    Owner,
    Manager,
    Developer,
    Viewer,
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Role::Owner => "owner",
            Role::Manager => "manager",
            Role::Developer => "developer",
            Role::Viewer => "viewer",
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct CreateMember {
    #[schema(max_length = 320, example = "ada@example.com")]
    email: String,
    role: Role,
    #[schema(max_length = 200)]
    name: Option<String>,
    #[schema(max_length = 256)]
    idp_user_id: Option<String>,
    #[schema(max_length = 2048)]
    image_url: Option<String>,
    /// A team of the tenant.
    team_id: Option<String>,
}

/// Fields left out stay as they are; `teamId: null` takes the member out of its team.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct PatchMember {
    #[schema(max_length = 320)]
    email: Option<String>,
    role: Option<Role>,
    #[schema(max_length = 200)]
    name: Option<String>,
    #[schema(max_length = 256)]
    idp_user_id: Option<String>,
    #[schema(max_length = 2048)]
    image_url: Option<String>,
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    team_id: Option<Option<String>>,
}

/// A plausible address: one `@`, something before it, a dotted domain after it, no spaces.
/// Deliverability is the identity provider's business.
fn email(v: String) -> Result<String, ApiError> {
    let v = v.trim().to_string();
    let ok = v.len() <= 320
        && !v.chars().any(|c| c.is_whitespace() || c.is_control())
        && match v.split_once('@') {
            Some((local, domain)) => {
                !local.is_empty()
                    && !domain.contains('@')
                    && domain.contains('.')
                    && !domain.starts_with('.')
                    && !domain.ends_with('.')
            }
            None => false,
        };
    if ok {
        Ok(v)
    } else {
        Err(ApiError::invalid("field `email` must be an email address like `ada@example.com`"))
    }
}

fn text(field: &str, v: Option<String>, max: usize) -> Result<Option<String>, ApiError> {
    match v {
        Some(s) if s.chars().count() > max || s.chars().any(char::is_control) => {
            Err(ApiError::invalid(format!("field `{field}` must be at most {max} printable characters")))
        }
        other => Ok(other),
    }
}

/// List the tenant's members
#[utoipa::path(get, path = "/v1/team/members", operation_id = "listMembers", tag = "teams",
    responses((status = 200, description = "Every member", body = Vec<Member>), Authenticated))]
pub async fn list(app: &App, caller: &Caller) -> Handled {
    let rows = members::list(&app.store, caller.tenant()).await?;
    Ok(Reply::json(200, &rows))
}

/// Add a member (manager)
#[utoipa::path(post, path = "/v1/team/members", operation_id = "createMember", tag = "teams",
    request_body = CreateMember,
    responses((status = 201, description = "The member", body = Member), Manager, Authenticated))]
pub async fn create(app: &App, caller: &Caller, req: &Req) -> Handled {
    caller.require_manager()?;
    let body: CreateMember = req.json()?;
    let email = email(body.email)?;
    if let Some(team) = &body.team_id {
        tenant_team(app, caller, "teamId", team).await?;
    }
    let m = NewMember {
        email,
        role: body.role.as_str().to_string(),
        idp_user_id: text("idpUserId", body.idp_user_id, 256)?.unwrap_or_default(),
        name: text("name", body.name, 200)?.unwrap_or_default(),
        image_url: text("imageUrl", body.image_url, 2048)?.unwrap_or_default(),
        team_id: body.team_id,
    };
    let member = members::insert(&app.store, caller.tenant(), m).await?;
    Ok(Reply::json(201, &member))
}

/// Change a member (manager)
#[utoipa::path(patch, path = "/v1/team/members/{id}", operation_id = "updateMember", tag = "teams",
    params(("id" = String, Path, description = "Member id")), request_body = PatchMember,
    responses((status = 200, description = "The member", body = Member), Manager, Missing, Authenticated))]
pub async fn update(app: &App, caller: &Caller, id: &str, req: &Req) -> Handled {
    caller.require_manager()?;
    let body: PatchMember = req.json()?;
    if let Some(Some(team)) = &body.team_id {
        tenant_team(app, caller, "teamId", team).await?;
    }
    let patch = MemberPatch {
        email: body.email.map(email).transpose()?,
        role: body.role.map(|r| r.as_str().to_string()),
        idp_user_id: text("idpUserId", body.idp_user_id, 256)?,
        name: text("name", body.name, 200)?,
        image_url: text("imageUrl", body.image_url, 2048)?,
        team_id: body.team_id,
    };
    let member =
        members::update(&app.store, caller.tenant(), id, patch).await?.ok_or_else(|| ApiError::not_found("member"))?;
    Ok(Reply::json(200, &member))
}

/// Remove a member (manager)
#[utoipa::path(delete, path = "/v1/team/members/{id}", operation_id = "deleteMember", tag = "teams",
    params(("id" = String, Path, description = "Member id")),
    responses((status = 204, description = "Removed"), Manager, Missing, Authenticated))]
pub async fn delete(app: &App, caller: &Caller, id: &str) -> Handled {
    caller.require_manager()?;
    if !members::delete(&app.store, caller.tenant(), id).await? {
        return Err(ApiError::not_found("member"));
    }
    Ok(Reply::NoContent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn email_shapes() {
        for ok in ["ada@example.com", " a.b+c@sub.example.org ", "x@y.io"] {
            assert_eq!(email(ok.into()).unwrap(), ok.trim());
        }
        for bad in
            ["", "ada", "@example.com", "ada@", "ada@example", "ada@.com", "ada@example.", "a da@x.io", "a@b@c.io"]
        {
            assert!(email(bad.into()).is_err(), "{bad}");
        }
    }
}
