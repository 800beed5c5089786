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

/// The `check` and `result` of `control` on a receipt with these `checks`: the most telling of
/// several matching checks wins (a request GUARDRAIL PASS and a response GUARDRAIL BLOCK read as
/// BLOCK).
fn control_result(control: &Control, checks: &[Check], verified: bool) -> (Option<String>, Option<String>) {
    if control.coverage == Coverage::External {
        return (None, None);
    }
    let mut best: Option<&Check> = None;
    for c in checks.iter().filter(|c| control.proven_by.iter().any(|p| *p == c.name.as_str())) {
        if best.is_none_or(|b| c.result.severity() > b.result.severity()) {
            best = Some(c);
        }
    }
    if let Some(c) = best {
        return (Some(c.name.to_string()), Some(c.result.to_string()));
    }
    let has = |n: &str| control.proven_by.iter().any(|p| p == n);
    if has(RECEIPT) {
        return (Some(RECEIPT.into()), Some(if verified { "PASS" } else { "FAIL" }.into()));
    }
    if has(KEY) {
        return (Some(KEY.into()), Some("PASS".into()));
    }
    // None of the proving checks ran on this request (e.g. no guardrail configured).
    (control.proven_by.first().cloned(), Some("NOT_RUN".into()))
}

fn framework_item(p: &Pack, resolution: &str, checks: &[Check], verified: bool) -> Value {
    let controls: Vec<Value> = p
        .controls
        .iter()
        .map(|c| {
            let (check, result) = control_result(c, checks, verified);
            json!({"id": c.id, "title": c.title, "coverage": c.coverage, "check": check, "result": result})
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

    #[test]
    fn the_most_telling_matching_check_is_the_result() {
        let c = control(Coverage::Partial, &["policy", "GUARDRAIL"]);
        let cs = checks(&[("policy", "allow"), ("GUARDRAIL", "PASS"), ("UPSTREAM", "PASS"), ("GUARDRAIL", "REDACT")]);
        assert_eq!(control_result(&c, &cs, true), (Some("GUARDRAIL".into()), Some("REDACT".into())));
        let cs = checks(&[("policy", "deny")]);
        assert_eq!(control_result(&c, &cs, true), (Some("policy".into()), Some("deny".into())));
    }

    #[test]
    fn receipt_key_external_and_not_run() {
        let cs = checks(&[("UPSTREAM", "PASS")]);
        let r = control(Coverage::Enforced, &["RECEIPT"]);
        assert_eq!(control_result(&r, &cs, true).1.as_deref(), Some("PASS"));
        assert_eq!(control_result(&r, &cs, false).1.as_deref(), Some("FAIL"));
        let k = control(Coverage::Enforced, &["KEY", "ALLOWLIST"]);
        assert_eq!(control_result(&k, &cs, true), (Some("KEY".into()), Some("PASS".into())));
        let e = control(Coverage::External, &[]);
        assert_eq!(control_result(&e, &cs, true), (None, None));
        let g = control(Coverage::Partial, &["GUARDRAIL"]);
        assert_eq!(control_result(&g, &cs, true), (Some("GUARDRAIL".into()), Some("NOT_RUN".into())));
    }
}
