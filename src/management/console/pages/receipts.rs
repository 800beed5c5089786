//! Receipts: the filtered, paginated list, and one receipt with everything the browser needs
//! to verify it itself (verify.js): its signed members as the API returns them, the signing-key
//! registry, the current signed checkpoint, the log's verifier keys, the receipt's inclusion
//! proof in that checkpoint, and its neighbours in the chain.

use serde_json::{json, Value};

use super::ctx::{pass, Ctx};
use crate::error::ApiError;
use crate::management::handler::Reply;

/// The list's filters, named as the API's query.
const FILTERS: &[&str] = &["actor", "model", "provider", "kind", "check", "upstreamStatus", "cursor"];

/// The members a receipt signs (receipts.md §1), in the order the page shows them.
pub const SIGNED: &[&str] = &[
    "v",
    "tenantId",
    "seq",
    "receiptId",
    "requestId",
    "actor",
    "provider",
    "model",
    "promptTokens",
    "completionTokens",
    "costUsd",
    "checks",
    "upstreamStatus",
    "ts",
    "prevHash",
    "subject",
];

/// A `datetime-local` value (`2026-01-31T12:00`) as the API's RFC 3339, taken as UTC; a full
/// RFC 3339 value is passed on as it is.
pub fn instant(v: &str) -> String {
    let has_zone = v.ends_with('Z') || v.get(19..).is_some_and(|t| t.contains('+') || t.contains('-'));
    match (has_zone, v.len()) {
        (true, _) => v.to_string(),
        (false, 16) => format!("{v}:00Z"),
        (false, _) => format!("{v}Z"),
    }
}

/// `from`/`to` of the request as the API wants them.
pub fn period(c: &Ctx<'_>) -> Vec<(String, String)> {
    ["from", "to"].iter().filter_map(|n| c.req.query(n).map(|v| (n.to_string(), instant(v)))).collect()
}

pub async fn list(c: &Ctx<'_>) -> Result<Reply, ApiError> {
    let mut q = pass(c.req, FILTERS);
    q.extend(period(c));
    q.push(("limit".into(), "50".into()));
    let filters: Value =
        c.req.query.iter().map(|(k, v)| (k.clone(), json!(v))).collect::<serde_json::Map<_, _>>().into();
    match c.get("/v1/receipts", &q).await {
        Ok(page) => Ok(c.render(200, "receipts.html", "receipts", json!({"page": page, "f": filters}))),
        Err(e) if e.status() == 400 => {
            let err = super::ctx::form_error(&e);
            Ok(c.render(
                400,
                "receipts.html",
                "receipts",
                json!({"page": {"receipts": []}, "f": filters, "error": err}),
            ))
        }
        Err(e) => Err(e),
    }
}

pub async fn one(c: &Ctx<'_>, id: &str) -> Result<Reply, ApiError> {
    let receipt = c.get(&format!("/v1/receipts/{}", super::super::api::seg(id)), &[]).await?;
    let seq = receipt["seq"].as_u64().unwrap_or(0);
    let keys = c.get("/v1/compliance/signing-keys", &[]).await?;
    let checkpoint = c.get("/v1/log/checkpoint", &[]).await?;
    let verifier = c.get("/v1/log/verifier-keys", &[]).await?;
    let size = checkpoint.as_str().and_then(|t| t.lines().nth(1)).and_then(|l| l.parse::<u64>().ok()).unwrap_or(0);
    let inclusion = if seq >= 1 && seq <= size {
        let q = vec![("seq".into(), seq.to_string()), ("size".into(), size.to_string())];
        c.get("/v1/log/inclusion", &q).await?
    } else {
        Value::Null
    };
    let prev = neighbour(c, seq, seq.saturating_sub(1)).await?;
    let next = neighbour(c, seq, seq + 1).await?;
    let members: Vec<Value> =
        SIGNED.iter().filter_map(|n| receipt.get(*n).map(|v| json!({"name": n, "value": v.to_string()}))).collect();
    let data = json!({
        "receipt": receipt, "keys": keys, "checkpoint": checkpoint, "verifierKeys": verifier,
        "inclusion": inclusion, "prev": prev, "next": next, "signed": SIGNED,
    });
    Ok(c.render(
        200,
        "receipt.html",
        "receipts",
        json!({"r": receipt, "members": members, "data": data, "prev": prev, "next": next}),
    ))
}

/// The receipt with `want` (seq - 1 or seq + 1) as `{receiptId, seq, thisHash, prevHash}`, through the
/// list (newest first, `cursor` = below this seq) and the receipt itself; null when none.
async fn neighbour(c: &Ctx<'_>, seq: u64, want: u64) -> Result<Value, ApiError> {
    if want == 0 || want == seq {
        return Ok(Value::Null);
    }
    let q = vec![("cursor".into(), (want + 1).to_string()), ("limit".into(), "1".into())];
    let page = c.get("/v1/receipts", &q).await?;
    let Some(first) = page["receipts"].get(0).filter(|r| r["seq"].as_u64() == Some(want)) else {
        return Ok(Value::Null);
    };
    let id = first["receiptId"].as_str().unwrap_or("");
    let full = c.get(&format!("/v1/receipts/{}", super::super::api::seg(id)), &[]).await;
    let full = full.unwrap_or(Value::Null);
    Ok(json!({"receiptId": id, "seq": want, "thisHash": full["thisHash"], "prevHash": full["prevHash"]}))
}

#[cfg(test)]
mod tests {
    use super::instant;

    #[test]
    fn datetime_local_reads_as_utc() {
        assert_eq!(instant("2026-01-31T12:00"), "2026-01-31T12:00:00Z");
        assert_eq!(instant("2026-01-31T12:00:05"), "2026-01-31T12:00:05Z");
        assert_eq!(instant("2026-01-31T12:00:00Z"), "2026-01-31T12:00:00Z");
        assert_eq!(instant("2026-01-31T12:00:00+02:00"), "2026-01-31T12:00:00+02:00");
    }
}
