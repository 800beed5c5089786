//! `GET /v1/compliance/receipts/{id}/controls[?framework=]`: one receipt read through the packs
//! that were in force when it was written (its `receiptPackVersion` stamp).

use serde_json::{json, Value};

use super::super::receipts::verified;
use super::super::{Caller, Handled, Reply, Req};
use crate::app::App;
use crate::compliance::pack::{Control, Coverage, Pack, KEY, RECEIPT};
use crate::compliance::{pack_sets, DISCLAIMER, SCOPE};
use crate::error::{ApiError, ErrorKind};
use crate::receipts::Check;
use crate::store;

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

fn framework_item(p: &Pack, resolution: &str, checks: &[Check], verified: bool) -> Value {
    let controls: Vec<Value> = p
        .controls
        .iter()
        .filter_map(|c| {
            let (check, result) = proof(c, checks, verified)?;
            Some(json!({"id": c.id, "title": c.title, "coverage": c.coverage, "check": check, "result": result}))
        })
        .collect();
    json!({
        "framework": p.framework, "resolution": resolution, "version": p.version, "disclaimer": p.disclaimer,
        "packHash": p.hash, "source": p.source, "controls": controls,
    })
}

pub async fn receipt_controls(app: &App, caller: &Caller, id: &str, req: &Req) -> Handled {
    let tenant = caller.tenant();
    let r = store::receipts::by_id(&app.store, tenant, id).await?.ok_or_else(|| ApiError::not_found("receipt"))?;
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
    let frameworks: Vec<Value> = packs.iter().map(|p| framework_item(p, resolution.label(), checks, ok)).collect();
    let note = (!ok).then(|| {
        format!(
            "the receipt's signature or hash does not verify against signing key `{}`: its stored fields may have \
             been altered, so the results below are not proven",
            r.key_id
        )
    });
    Ok(Reply::Json(
        200,
        json!({
            "receiptId": r.receipt.receipt_id,
            "receiptPackVersion": r.pack_version,
            "checks": checks,
            "verified": ok,
            "frameworks": frameworks,
            "note": note,
            "scope": SCOPE,
            "disclaimer": DISCLAIMER,
        }),
    ))
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
