//! `GET /v1/compliance/coverage/{framework}` (the pack as a coverage map) and
//! `.../controls/{controlId}/receipts` (the receipts whose checks prove one control).

use std::sync::Arc;

use serde::Serialize;
use utoipa::ToSchema;

use super::super::handler::{number, Caller, Handled, Reply, Req};
use super::super::openapi_parts::{Authenticated, Missing};
use super::super::receipts::{list_entry, pruned_before, ReceiptEntry};
use crate::app::App;
use crate::compliance::pack::{Control, Coverage, Pack, Source, Status, Summary, KEY, RECEIPT};
use crate::compliance::{DISCLAIMER, SCOPE};
use crate::error::{ApiError, ErrorKind};
use crate::receipts::stored;
use crate::receipts::StoredReceipt;
use crate::store;

/// The seed's coverage map of one pack. `disclaimer` is the pack's own legal-posture text (the
/// baseline packs carry the project's); a tenant pack with other text also gets the project's
/// as `gatewayDisclaimer`, so the fixed statement is never lost.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(in super::super) struct CoverageMap<'a> {
    framework: &'a str,
    version: &'a str,
    title: &'a str,
    status: Status,
    effective_date: &'a str,
    disclaimer: &'a str,
    pack_hash: &'a str,
    source: Source,
    summary: Summary,
    controls: &'a [Control],
    scope: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    gateway_disclaimer: Option<&'static str>,
}

impl<'a> CoverageMap<'a> {
    pub(super) fn of(p: &'a Pack) -> CoverageMap<'a> {
        let own_text = p.source == Source::Tenant && p.disclaimer != DISCLAIMER;
        CoverageMap {
            framework: &p.framework,
            version: &p.version,
            title: &p.title,
            status: p.status,
            effective_date: &p.effective_date,
            disclaimer: &p.disclaimer,
            pack_hash: &p.hash,
            source: p.source,
            summary: p.summary(),
            controls: &p.controls,
            scope: SCOPE,
            gateway_disclaimer: own_text.then_some(DISCLAIMER),
        }
    }
}

/// A pack for the coverage endpoints: the tenant's set in force, or 404 naming the framework.
fn in_force(app: &App, tenant: &str, framework: &str) -> Result<Arc<Pack>, ApiError> {
    app.snapshot.load().packs(tenant).get(framework).cloned().ok_or_else(|| {
        ApiError::new(
            ErrorKind::NotFound,
            format!("no compliance pack for framework `{framework}`; GET /v1/compliance/packs lists those in force"),
        )
    })
}

/// A pack as a coverage map
#[utoipa::path(get, path = "/v1/compliance/coverage/{framework}", operation_id = "getCoverage", tag = "compliance",
    params(("framework" = String, Path, description = "e.g. `eu-ai-act`")),
    responses((status = 200, description = "The pack in force for the framework, control by control", body = CoverageMap),
        Missing, Authenticated))]
pub async fn coverage(app: &App, caller: &Caller, framework: &str) -> Handled {
    let pack = in_force(app, caller.tenant(), framework)?;
    Ok(Reply::json(200, &CoverageMap::of(&pack)))
}

/// The control a receipt list is about.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(in super::super) struct ControlRef<'a> {
    id: &'a str,
    title: &'a str,
    coverage: Coverage,
    proven_by: &'a [String],
}

/// The receipts whose checks prove one control, newest first.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(in super::super) struct ControlReceipts<'a> {
    receipts: Vec<ReceiptEntry<'a>>,
    next_cursor: Option<u64>,
    /// Receipts pruned by the log's retention are not listed: every pruned one has a seq below
    /// this; null = none was pruned (docs/log.md §7).
    pruned_before: Option<u64>,
    framework: &'a str,
    pack_hash: &'a str,
    control: ControlRef<'a>,
    note: Option<&'static str>,
    scope: &'static str,
    disclaimer: &'static str,
}

/// The receipts that prove one control
#[utoipa::path(get, path = "/v1/compliance/coverage/{framework}/controls/{controlId}/receipts",
    operation_id = "listControlReceipts", tag = "compliance",
    params(("framework" = String, Path),
        ("controlId" = String, Path, description = "The full `<framework>:<control>` id, URL-encoded or not"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 200, description = "Page size, default 25"),
        ("cursor" = Option<u64>, Query, minimum = 1, description = "`nextCursor` of the previous page")),
    responses((status = 200, description = "A page of receipts", body = ControlReceipts), Missing,
        Authenticated))]
pub async fn control_receipts(app: &App, caller: &Caller, framework: &str, control_id: &str, req: &Req) -> Handled {
    let tenant = caller.tenant();
    let pack = in_force(app, tenant, framework)?;
    let control = pack.control(control_id).ok_or_else(|| {
        ApiError::new(ErrorKind::NotFound, format!("no control `{control_id}` in the `{framework}` pack in force"))
    })?;
    let limit = number(req, "limit", 1, 200)?.unwrap_or(25);
    let cursor = number(req, "cursor", 1, u64::MAX >> 11)?;
    // RECEIPT and KEY hold for every receipt; an external control has no receipt evidence.
    let every = control.proven_by.iter().any(|n| n == RECEIPT || n == KEY);
    let mut rows = proving_receipts(app, tenant, control, every, cursor, limit).await?;
    let more = rows.len() as u64 > limit;
    rows.truncate(limit as usize);
    let next = if more { rows.last().map(|r| r.receipt.seq) } else { None };
    let note = note(control.coverage, every);
    let control = ControlRef {
        id: &control.id,
        title: &control.title,
        coverage: control.coverage,
        proven_by: &control.proven_by,
    };
    let body = ControlReceipts {
        receipts: rows.iter().map(list_entry).collect(),
        next_cursor: next,
        pruned_before: pruned_before(&app.store, tenant).await?,
        framework: &pack.framework,
        pack_hash: &pack.hash,
        control,
        note,
        scope: SCOPE,
        disclaimer: DISCLAIMER,
    };
    Ok(Reply::json(200, &body))
}

/// Why a list shows no receipts, or all of them.
fn note(coverage: Coverage, every: bool) -> Option<&'static str> {
    match (coverage, every) {
        (Coverage::External, _) => {
            Some("external control: no receipt proves it; the evidence lies outside the gateway")
        }
        (_, true) => {
            Some("proven by RECEIPT or KEY, which every receipt proves: all of the tenant's receipts are listed")
        }
        _ => None,
    }
}

/// Up to `limit + 1` receipts from `cursor` on that prove `control` (`every`: all of them).
async fn proving_receipts(
    app: &App,
    tenant: &str,
    control: &Control,
    every: bool,
    cursor: Option<u64>,
    limit: u64,
) -> Result<Vec<StoredReceipt>, ApiError> {
    Ok(if control.coverage == Coverage::External {
        Vec::new()
    } else if every {
        // Every receipt of a call; the admin trail is not evidence of a control (log.md §8).
        let all = store::receipts::Filter { calls_only: true, ..Default::default() };
        stored::page(&app.store, tenant, &all, cursor, None, limit as i64 + 1).await?
    } else {
        stored::page_with_any_check(&app.store, tenant, &control.proven_by, cursor, limit as i64 + 1).await?
    })
}
