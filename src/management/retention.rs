//! `/v1/log/retention` and `/v1/log/holds`: how long the tenant keeps its receipts' contents,
//! and the legal holds no retention sweep may touch (docs/log.md §7). The sweep itself is the
//! domain's (`tenant_log::retention`), run daily by the server and by `tollgate log sweep`.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::fields::present;
use super::handler::{page_limit, paginate, Caller, Handled, Page, Reply, Req};
use super::openapi_parts::{Authenticated, Manager, Missing, PageQuery};
use crate::app::App;
use crate::error::ApiError;
use crate::store::{self, retention::HoldRow};

/// The largest seq a hold may name (as in the receipt routes).
const SEQ_MAX: u64 = u64::MAX >> 11;

/// The longest retention a tenant may set: a century (null keeps forever).
const MAX_DAYS: u64 = 36_500;

/// The tenant's retention.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct RetentionView {
    /// Receipts older than this many days, under no hold, lose their contents at the next
    /// sweep; null = kept forever (the default).
    days: Option<u64>,
    /// The shortest retention this deployment allows (`log.retention_floor_days`).
    floor_days: u32,
    /// Receipts below this seq may have been pruned; null = none was.
    pruned_before: Option<u64>,
}

async fn view(app: &App, tenant: &str) -> Result<RetentionView, ApiError> {
    let r = store::retention::get(&app.store, tenant).await?;
    Ok(RetentionView {
        days: r.days,
        floor_days: app.config.log.retention_floor_days,
        pruned_before: (r.pruned_through > 0).then_some(r.pruned_through + 1),
    })
}

/// The log's retention
#[utoipa::path(get, path = "/v1/log/retention", operation_id = "getLogRetention", tag = "log",
    responses((status = 200, description = "The retention in force", body = RetentionView), Authenticated))]
pub async fn get(app: &App, caller: &Caller) -> Handled {
    Ok(Reply::json(200, &view(app, caller.tenant()).await?))
}

/// The retention to set.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RetentionBody {
    /// Days, from `log.retention_floor_days` (default 183) to 36500; null = keep forever.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<u64>, required = true, minimum = 1, maximum = 36500)]
    days: Option<Option<u64>>,
}

/// Set the log's retention (manager)
///
/// What a sweep pruned stays pruned: a longer retention, or null, keeps what is left from then on.
#[utoipa::path(put, path = "/v1/log/retention", operation_id = "putLogRetention", tag = "log",
    request_body = RetentionBody,
    responses((status = 200, description = "The retention in force", body = RetentionView), Manager,
        Authenticated))]
pub async fn put(app: &App, caller: &Caller, req: &Req) -> Handled {
    caller.require_manager()?;
    let body: RetentionBody = req.json()?;
    let Some(days) = body.days else {
        return Err(ApiError::invalid("field `days` is required: a number of days, or null to keep forever"));
    };
    let floor = app.config.log.retention_floor_days;
    let least = u64::from(floor).max(1);
    if let Some(d) = days.filter(|d| !(least..=MAX_DAYS).contains(d)) {
        return Err(ApiError::invalid(format!(
            "field `days` must be from {least} (the retention floor, `log.retention_floor_days`) to {MAX_DAYS}, \
             or null to keep forever; got {d}"
        )));
    }
    store::retention::set_days(&app.store, caller.tenant(), days, store::now_ts()).await?;
    log::info!("log retention of tenant {} set to {days:?} days", caller.tenant());
    Ok(Reply::json(200, &view(app, caller.tenant()).await?))
}

/// A legal hold: no sweep prunes a receipt with `fromSeq <= seq <= toSeq`.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct Hold {
    id: String,
    from_seq: u64,
    to_seq: u64,
    reason: String,
    created_at: String,
    /// The id of the key that placed it.
    created_by: String,
}

impl From<HoldRow> for Hold {
    fn from(h: HoldRow) -> Hold {
        Hold {
            id: h.id,
            from_seq: h.from_seq,
            to_seq: h.to_seq,
            reason: h.reason,
            created_at: h.created_at,
            created_by: h.created_by,
        }
    }
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct HoldBody {
    #[schema(minimum = 1)]
    from_seq: u64,
    /// May be past the log's size: receipts still to come are held too.
    #[schema(minimum = 1)]
    to_seq: u64,
    /// Why (a matter, a request); shown in the list.
    #[schema(min_length = 1, max_length = 2000)]
    reason: String,
}

/// Place a legal hold on a range of receipts (manager)
#[utoipa::path(post, path = "/v1/log/holds", operation_id = "createLogHold", tag = "log",
    request_body = HoldBody,
    responses((status = 201, description = "The hold, in force at once", body = Hold), Manager, Authenticated))]
pub async fn create_hold(app: &App, caller: &Caller, req: &Req) -> Handled {
    caller.require_manager()?;
    let body: HoldBody = req.json()?;
    if body.from_seq < 1 || body.from_seq > body.to_seq || body.to_seq > SEQ_MAX {
        return Err(ApiError::invalid(format!(
            "fields `fromSeq` and `toSeq` must satisfy 1 <= fromSeq <= toSeq <= {SEQ_MAX}; got {} and {}",
            body.from_seq, body.to_seq
        )));
    }
    let reason = body.reason.trim();
    if reason.is_empty() || reason.chars().count() > 2000 {
        return Err(ApiError::invalid("field `reason` must be 1 to 2000 characters: say why the receipts are held"));
    }
    let hold = HoldRow {
        id: uuid::Uuid::now_v7().to_string(),
        from_seq: body.from_seq,
        to_seq: body.to_seq,
        reason: reason.to_string(),
        created_at: store::now_ts(),
        created_by: caller.key.record.id.clone(),
    };
    let hold = store::retention::create_hold(&app.store, caller.tenant(), hold).await?;
    log::info!("legal hold {} on seq {}..={} of tenant {}", hold.id, hold.from_seq, hold.to_seq, caller.tenant());
    Ok(Reply::json(201, &Hold::from(hold)))
}

/// The legal holds in force, oldest first
#[utoipa::path(get, path = "/v1/log/holds", operation_id = "listLogHolds", tag = "log", params(PageQuery),
    responses((status = 200, description = "One page; `nextCursor` for the next", body = Page<Hold>),
        Authenticated))]
pub async fn list_holds(app: &App, caller: &Caller, req: &Req) -> Handled {
    let limit = page_limit(req)?;
    let after = req.query("cursor").filter(|c| !c.is_empty());
    let rows = store::retention::holds(&app.store, caller.tenant(), after, limit + 1).await?;
    let (rows, next_cursor) = paginate(rows, limit, |h| &h.id);
    Ok(Reply::json(200, &Page { data: rows.into_iter().map(Hold::from).collect::<Vec<_>>(), next_cursor }))
}

/// Release a legal hold (manager)
///
/// Its receipts are pruned at the next sweep if they are older than the retention.
#[utoipa::path(delete, path = "/v1/log/holds/{id}", operation_id = "deleteLogHold", tag = "log",
    params(("id" = String, Path, description = "Hold id")),
    responses((status = 204, description = "Released"), Manager, Missing, Authenticated))]
pub async fn delete_hold(app: &App, caller: &Caller, id: &str) -> Handled {
    caller.require_manager()?;
    if !store::retention::delete_hold(&app.store, caller.tenant(), id).await? {
        return Err(ApiError::not_found("hold"));
    }
    log::info!("legal hold {id} of tenant {} released", caller.tenant());
    Ok(Reply::NoContent)
}
