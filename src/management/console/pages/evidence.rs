//! Evidence: a period's attestation (a recorded evidence read, so only when asked for), the
//! coverage of every framework in force with a drill-down to a control's receipts, the bundle
//! and export downloads, and the period's chain verified in the browser (verify.js reads the
//! export, the attestation's signed root and the signing keys).

use http::Method;
use serde_json::{json, Value};

use super::ctx::{pass, Ctx};
use super::receipts::period;
use crate::error::ApiError;
use crate::management::handler::Reply;

pub async fn page(c: &Ctx<'_>) -> Result<Reply, ApiError> {
    let packs = c.get("/v1/compliance/packs", &[]).await?;
    let mut coverage = Vec::new();
    for fw in packs["data"].as_array().or(packs.as_array()).into_iter().flatten() {
        let Some(name) = fw["framework"].as_str() else { continue };
        let map = c.get(&format!("/v1/compliance/coverage/{}", super::super::api::seg(name)), &[]).await?;
        coverage.push(json!({"framework": name, "map": map}));
    }
    let asked = c.req.query("from").is_some() || c.req.query("to").is_some();
    let (attestation, error) = if asked {
        match c.get("/v1/compliance/attestation", &period(c)).await {
            Ok(a) => (a, Value::Null),
            Err(e) if e.status() == 400 => (Value::Null, super::ctx::form_error(&e)),
            Err(e) => return Err(e),
        }
    } else {
        (Value::Null, Value::Null)
    };
    let keys = c.get("/v1/compliance/signing-keys", &[]).await?;
    let q: Value = period(c).into_iter().map(|(k, v)| (k, json!(v))).collect::<serde_json::Map<_, _>>().into();
    let f = json!({"from": c.req.query("from"), "to": c.req.query("to")});
    let data = json!({"coverage": coverage, "a": attestation, "error": error, "f": f,
                      "data": {"attestation": attestation, "keys": keys, "period": q}});
    let status = error["status"].as_u64().unwrap_or(200) as u16;
    Ok(c.render(status, "evidence.html", "evidence", data))
}

/// The receipts a control of a framework covers.
pub async fn control(c: &Ctx<'_>, framework: &str, control: &str) -> Result<Reply, ApiError> {
    let path = format!(
        "/v1/compliance/coverage/{}/controls/{}/receipts",
        super::super::api::seg(framework),
        super::super::api::seg(control)
    );
    let page = c.get(&path, &pass(c.req, &["cursor"])).await?;
    let data = json!({"framework": framework, "control": control, "page": page});
    Ok(c.render(200, "coverage.html", "evidence", data))
}

/// The API's download (evidence bundle, receipt export) for the period, passed through as the
/// API streams it (the API records the read).
pub async fn download(c: &Ctx<'_>, path: &str) -> Result<Reply, ApiError> {
    let mut q = period(c);
    q.extend(pass(c.req, &["format", "limit", "kind"]));
    c.api.call(&c.s.caller, Method::GET, path, &q, Vec::new()).await
}
