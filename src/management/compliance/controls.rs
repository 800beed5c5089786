//! `GET /v1/compliance/receipts/{id}/controls[?framework=]`: one receipt read through the packs
//! that were in force when it was written (its `receiptPackVersion` stamp).

use serde::Serialize;
use utoipa::ToSchema;

use super::super::handler::{Caller, Handled, Reply, Req};
use super::super::openapi_parts::{Authenticated, Missing};
use super::super::receipts::{kept, verified};
use crate::app::App;
use crate::compliance::pack::{Control, Coverage, Pack, Source, KEY, RECEIPT};
use crate::compliance::{pack_sets, DISCLAIMER, SCOPE};
use crate::error::{ApiError, ErrorKind};
use crate::receipts::Check;

/// The check that proves `control` on a receipt with these `checks`, and its result; `None` when
/// the receipt proves nothing about it: an external control, or none of its checks ran here.
/// The most telling of several matching checks wins (a request GUARDRAIL PASS and a response
/// GUARDRAIL BLOCK read as BLOCK). This is the inverse of the control's receipts list
/// (`coverage.rs`): a receipt is there exactly when this is `Some`.
fn proof(control: &Control, checks: &[Check], verified: bool) -> Option<(String, String)> {
    if control.coverage == Coverage::External {
        return None;
    }
    let mut best: Option<&Check> = None;
    for c in checks.iter().filter(|c| control.proven_by.iter().any(|p| *p == c.name.as_str())) {
        if best.is_none_or(|b| c.result.severity() > b.result.severity()) {
            best = Some(c);
        }
    }
    if let Some(c) = best {
        return Some((c.name.to_string(), c.result.to_string()));
    }
    let has = |n: &str| control.proven_by.iter().any(|p| p == n);
    if has(RECEIPT) {
        return Some((RECEIPT.into(), if verified { "PASS" } else { "FAIL" }.into()));
    }
    if has(KEY) {
        return Some((KEY.into(), "PASS".into()));
    }
    None
}

/// A control this receipt proves, and how.
#[derive(Serialize, ToSchema)]
pub(in super::super) struct ProvenControl<'a> {
    id: &'a str,
    title: &'a str,
    coverage: Coverage,
    /// The proving check's name.
    check: String,
    /// Its result on this receipt.
    result: String,
}

/// One framework's controls proven by the receipt.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(in super::super) struct FrameworkControls<'a> {
    framework: &'a str,
    /// How the receipt's pack version was resolved to packs.
    resolution: &'a str,
    version: &'a str,
    disclaimer: &'a str,
    pack_hash: &'a str,
    source: Source,
    controls: Vec<ProvenControl<'a>>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(in super::super) struct ReceiptControls<'a> {
    receipt_id: &'a str,
    receipt_pack_version: &'a str,
    checks: &'a [Check],
    verified: bool,
    frameworks: Vec<FrameworkControls<'a>>,
    /// Set when the receipt does not verify: the results are then not proven.
    note: Option<String>,
    scope: &'static str,
    disclaimer: &'static str,
}

fn framework_item<'a>(p: &'a Pack, resolution: &'a str, checks: &[Check], verified: bool) -> FrameworkControls<'a> {
    let controls = p
        .controls
        .iter()
        .filter_map(|c| {
            let (check, result) = proof(c, checks, verified)?;
            Some(ProvenControl { id: &c.id, title: &c.title, coverage: c.coverage, check, result })
        })
        .collect();
    FrameworkControls {
        framework: &p.framework,
        resolution,
        version: &p.version,
        disclaimer: &p.disclaimer,
        pack_hash: &p.hash,
        source: p.source,
        controls,
    }
}

/// The controls one receipt proves, per framework
///
/// Read through the packs in force when the receipt was written (its `receiptPackVersion`).
#[utoipa::path(get, path = "/v1/compliance/receipts/{id}/controls", operation_id = "getReceiptControls",
    tag = "compliance",
    params(("id" = String, Path, description = "Receipt id"),
        ("framework" = Option<String>, Query, description = "Only this framework")),
    responses((status = 200, description = "The receipt's controls", body = ReceiptControls), Missing,
        (status = 410, description = "receipt_pruned: the log's retention deleted its contents",
            body = crate::error::PrunedEnvelope), Authenticated))]
pub async fn receipt_controls(app: &App, caller: &Caller, id: &str, req: &Req) -> Handled {
    let tenant = caller.tenant();
    let r = kept(&app.store, tenant, id).await?;
    let ok = verified(&app.store, &r).await?;
    let snap = app.snapshot.load();
    let resolution = pack_sets::resolve(&app.store, tenant, &r.pack_version, snap.packs(tenant)).await?;
    let set = resolution.set();
    let packs: Vec<&Pack> = match req.query("framework").filter(|f| !f.is_empty()) {
        Some(f) => vec![set.get(f).map(|p| p.as_ref()).ok_or_else(|| {
            ApiError::new(
                ErrorKind::NotFound,
                format!("no compliance pack for framework `{f}` in the pack set that applies to this receipt"),
            )
        })?],
        None => set.packs.iter().map(|p| p.as_ref()).collect(),
    };
    let checks = &r.receipt.checks;
    let frameworks = packs.iter().map(|p| framework_item(p, resolution.label(), checks, ok)).collect();
    let note = (!ok).then(|| {
        format!(
            "the receipt's signature or hash does not verify against signing key `{}`: its stored fields may have \
             been altered, so the results below are not proven",
            r.key_id
        )
    });
    let body = ReceiptControls {
        receipt_id: &r.receipt.receipt_id,
        receipt_pack_version: &r.pack_version,
        checks,
        verified: ok,
        frameworks,
        note,
        scope: SCOPE,
        disclaimer: DISCLAIMER,
    };
    Ok(Reply::json(200, &body))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn control(coverage: Coverage, proven_by: &[&str]) -> Control {
        Control {
            id: "x:y".into(),
            title: "t".into(),
            coverage,
            proven_by: proven_by.iter().map(|s| s.to_string()).collect(),
            evidence: String::new(),
            gap: String::new(),
        }
    }

    fn checks(list: &[(&str, &str)]) -> Vec<Check> {
        list.iter().map(|(n, r)| Check { name: n.to_string().into(), result: r.to_string().into() }).collect()
    }

    fn proved(check: &str, result: &str) -> Option<(String, String)> {
        Some((check.into(), result.into()))
    }

    #[test]
    fn the_most_telling_matching_check_is_the_result() {
        let c = control(Coverage::Partial, &["policy", "GUARDRAIL"]);
        let cs = checks(&[("policy", "allow"), ("GUARDRAIL", "PASS"), ("UPSTREAM", "PASS"), ("GUARDRAIL", "REDACT")]);
        assert_eq!(proof(&c, &cs, true), proved("GUARDRAIL", "REDACT"));
        let cs = checks(&[("policy", "deny")]);
        assert_eq!(proof(&c, &cs, true), proved("policy", "deny"));
    }

    #[test]
    fn receipt_and_key_prove_every_receipt_external_and_not_run_prove_nothing() {
        let cs = checks(&[("UPSTREAM", "PASS")]);
        let r = control(Coverage::Enforced, &["RECEIPT"]);
        assert_eq!(proof(&r, &cs, true), proved("RECEIPT", "PASS"));
        assert_eq!(proof(&r, &cs, false), proved("RECEIPT", "FAIL"));
        let k = control(Coverage::Enforced, &["KEY", "ALLOWLIST"]);
        assert_eq!(proof(&k, &cs, true), proved("KEY", "PASS"));
        assert_eq!(proof(&control(Coverage::External, &[]), &cs, true), None);
        assert_eq!(proof(&control(Coverage::Partial, &["GUARDRAIL"]), &cs, true), None, "GUARDRAIL did not run");
    }
}
