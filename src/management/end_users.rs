//! `GET /v1/end-users`: the end users of the tenant's keys (the `<endUser>` of receipts'
//! `actor = <keyId>/<endUser>`), with their all-time requests, spend and last request. Read from
//! `end_user_spend`, which the receipt writer keeps in the receipts' own transaction: the
//! gateway's request path never touches it.

use base64::Engine;

use super::handler::{page_limit, Caller, Handled, Page, Reply, Req};
use super::openapi_parts::{Authenticated, Missing};
use crate::app::App;
use crate::error::ApiError;
use crate::store::{self, spend::EndUser};

/// `?keyId=&limit=&cursor=` of `GET /v1/end-users`.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // describes the query string; the handler reads it
pub(super) struct EndUsersQuery {
    /// Only this key's end users.
    #[param(rename = "keyId")]
    key_id: Option<String>,
    /// Page size, default 50.
    #[param(minimum = 1, maximum = 200)]
    limit: Option<u32>,
    /// `nextCursor` of the previous page.
    cursor: Option<String>,
}

/// The cursor after `(key_id, end_user)`: opaque (URL-safe base64 of `<keyId>/<endUser>`).
fn cursor_of(u: &EndUser) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{}/{}", u.key_id, u.end_user))
}

fn parse_cursor(c: &str) -> Result<(String, String), ApiError> {
    let bad = || ApiError::invalid("query `cursor` is not a cursor of this list");
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(c).map_err(|_| bad())?;
    let text = String::from_utf8(raw).map_err(|_| bad())?;
    let (k, u) = text.split_once('/').ok_or_else(bad)?;
    Ok((k.to_string(), u.to_string()))
}

/// List the end users of the tenant's keys
#[utoipa::path(get, path = "/v1/end-users", operation_id = "listEndUsers", tag = "keys", params(EndUsersQuery),
    responses((status = 200, description = "A page of end users, by key then end user", body = Page<EndUser>),
        Missing, Authenticated))]
pub async fn list(app: &App, caller: &Caller, req: &Req) -> Handled {
    let limit = page_limit(req)?;
    let mut key_id = req.query("keyId").map(str::to_string);
    if let Some(k) = &key_id {
        if !store::keys::is_live(&app.store, caller.tenant(), k).await? {
            return Err(ApiError::not_found("key"));
        }
    }
    // As `GET /v1/keys`: a key that is not a manager's sees its own end users only.
    if !caller.key.is_manager() {
        let own = caller.key.record.id.clone();
        if key_id.as_ref().is_some_and(|k| *k != own) {
            return Err(ApiError::not_found("key"));
        }
        key_id = Some(own);
    }
    let after = req.query("cursor").map(parse_cursor).transpose()?;
    let mut rows =
        store::spend::end_users_page(&app.store, caller.tenant(), key_id.as_deref(), after, limit + 1).await?;
    let next = (rows.len() as i64 > limit).then(|| {
        rows.truncate(limit as usize);
        rows.last().map(cursor_of)
    });
    Ok(Reply::json(200, &Page { data: rows, next_cursor: next.flatten() }))
}
