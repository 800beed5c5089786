//! `GET /v1/compliance/coverage/{framework}` (the pack as a coverage map) and
//! `.../controls/{controlId}/receipts` (the receipts whose checks prove one control).

use serde_json::{json, Value};

use super::super::receipts::{list_entry, number};
use super::super::{Caller, Handled, Reply, Req};
use crate::app::App;
use crate::compliance::pack::{Coverage, Pack, Source, KEY, RECEIPT};
use crate::compliance::{DISCLAIMER, SCOPE};
use crate::error::{ApiError, ErrorKind};
use crate::store;

/// The seed's coverage map of one pack. `disclaimer` is the pack's own legal-posture text (the
/// baseline packs carry the project's); a tenant pack with other text also gets the project's
/// as `gatewayDisclaimer`, so the fixed statement is never lost.
pub fn map(p: &Pack) -> Value {
    let mut doc = json!({
        "framework": p.framework,
        "version": p.version,
        "title": p.title,
        "status": p.status,
        "effectiveDate": p.effective_date,
        "disclaimer": p.disclaimer,
        "packHash": p.hash,
        "source": p.source,
        "summary": p.summary(),
        "controls": p.controls,
        "scope": SCOPE,
    });
    if p.source == Source::Tenant && p.disclaimer != DISCLAIMER {
        doc["gatewayDisclaimer"] = json!(DISCLAIMER);
    }
    doc
}

pub async fn coverage(app: &App, caller: &Caller, framework: &str) -> Handled {
    let pack = super::packs::in_force(app, caller.tenant(), framework)?;
    Ok(Reply::Json(200, map(&pack)))
}

pub async fn control_receipts(app: &App, caller: &Caller, framework: &str, control_id: &str, req: &Req) -> Handled {
    let tenant = caller.tenant();
    let pack = super::packs::in_force(app, tenant, framework)?;
    let control = pack.control(control_id).ok_or_else(|| {
        ApiError::new(ErrorKind::NotFound, format!("no control `{control_id}` in the `{framework}` pack in force"))
    })?;
    let limit = number(req, "limit", 1, 200)?.unwrap_or(25);
    let cursor = number(req, "cursor", 1, u64::MAX >> 11)?;
    // RECEIPT and KEY hold for every receipt; an external control has no receipt evidence.
    let every = control.proven_by.iter().any(|n| n == RECEIPT || n == KEY);
    let mut rows = if control.coverage == Coverage::External {
        Vec::new()
    } else if every {
        let all = store::receipts::Filter::default();
        store::receipts::page(&app.store, tenant, &all, cursor, None, limit as i64 + 1).await?
    } else {
        store::receipts::page_with_any_check(&app.store, tenant, &control.proven_by, cursor, limit as i64 + 1).await?
    };
    let more = rows.len() as u64 > limit;
    rows.truncate(limit as usize);
    let next = if more { rows.last().map(|r| r.receipt.seq) } else { None };
    let note = match (control.coverage, every) {
        (Coverage::External, _) => {
            Some("external control: no receipt proves it; the evidence lies outside the gateway")
        }
        (_, true) => {
            Some("proven by RECEIPT or KEY, which every receipt proves: all of the tenant's receipts are listed")
        }
        _ => None,
    };
    Ok(Reply::Json(
        200,
        json!({
            "receipts": rows.iter().map(list_entry).collect::<Vec<_>>(),
            "nextCursor": next,
            "framework": pack.framework,
            "packHash": pack.hash,
            "control": {"id": control.id, "title": control.title, "coverage": control.coverage, "provenBy": control.proven_by},
            "note": note,
            "scope": SCOPE,
            "disclaimer": DISCLAIMER,
        }),
    ))
}
