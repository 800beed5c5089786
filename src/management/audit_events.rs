//! `GET /v1/audit-events` (docs/log.md §8): the tenant's `admin` receipts, newest first — who
//! changed what through this API, and who read which evidence — each signed and chained like
//! every receipt, with the `thisHash` and `signature` to check it by.

use serde::Serialize;
use utoipa::ToSchema;

use super::handler::{number, ts_bound, Caller, Handled, Reply, Req};
use super::openapi_parts::Authenticated;
use crate::app::App;
use crate::receipts::canonical::Receipt;
use crate::receipts::{stored, Kind, StoredReceipt};
use crate::store::receipts::Filter;

/// One admin receipt: its signed members (with `subject`) and how to check them.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct AuditEvent<'a> {
    #[serde(flatten)]
    receipt: &'a Receipt,
    this_hash: &'a str,
    /// Ed25519 over the canonical (JCS) bytes, base64.
    signature: &'a str,
    key_id: &'a str,
}

/// A page of audit events, newest first.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct AuditPage<'a> {
    data: Vec<AuditEvent<'a>>,
    /// The `seq` to pass as `?cursor=` for the next page; null on the last.
    next_cursor: Option<u64>,
}

fn event(r: &StoredReceipt) -> AuditEvent<'_> {
    AuditEvent { receipt: &r.receipt, this_hash: &r.this_hash, signature: &r.signature, key_id: &r.key_id }
}

/// List the admin trail
#[utoipa::path(get, path = "/v1/audit-events", operation_id = "listAuditEvents", tag = "receipts",
    params(
        ("actor" = Option<String>, Query, description = "The acting key's id"),
        ("action" = Option<String>, Query, description = "`<resource>.<verb>`, e.g. `policies.create`, \
            `compliance.evidence-bundle` (the receipt's `model`)"),
        ("from" = Option<String>, Query, format = DateTime, description = "At or after this instant (RFC 3339)"),
        ("to" = Option<String>, Query, format = DateTime, description = "At or before this instant (RFC 3339)"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 200, description = "Page size, default 25"),
        ("cursor" = Option<u64>, Query, minimum = 1, description = "`nextCursor` of the previous page")),
    responses((status = 200, description = "The tenant's admin receipts, newest first", body = AuditPage),
        Authenticated))]
pub async fn list(app: &App, caller: &Caller, req: &Req) -> Handled {
    let limit = number(req, "limit", 1, 200)?.unwrap_or(25);
    let cursor = number(req, "cursor", 1, u64::MAX >> 11)?;
    let text = |n: &str| req.query(n).filter(|v| !v.is_empty()).map(str::to_string);
    let f = Filter {
        from_ts: ts_bound(req, "from")?,
        to_ts: ts_bound(req, "to")?,
        actor: text("actor"),
        model: text("action"),
        kind: Some(Kind::Admin.as_str().to_string()),
        ..Filter::default()
    };
    let mut rows = stored::page(&app.store, caller.tenant(), &f, cursor, None, limit as i64 + 1).await?;
    let more = rows.len() as u64 > limit;
    rows.truncate(limit as usize);
    let next_cursor = if more { rows.last().map(|r| r.receipt.seq) } else { None };
    Ok(Reply::json(200, &AuditPage { data: rows.iter().map(event).collect(), next_cursor }))
}
