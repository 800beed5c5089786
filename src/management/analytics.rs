//! Analytics (any valid key): `GET /v1/anomalies` (guardrail events) and `GET /v1/cache`.

use serde_json::json;

use super::receipts::{number, ts_bound};
use super::{Caller, Handled, Reply, Req};
use crate::app::App;
use crate::store;

/// Guardrail redactions and blocks, newest first: `?from=&to=` (RFC 3339), `?limit=&cursor=`.
pub async fn anomalies(app: &App, caller: &Caller, req: &Req) -> Handled {
    let limit = number(req, "limit", 1, 200)?.unwrap_or(50) as i64;
    let cursor = req.query("cursor").filter(|c| !c.is_empty()).map(str::to_string);
    let (from, to) = (ts_bound(req, "from")?, ts_bound(req, "to")?);
    let mut rows = store::analytics::guardrail_events(&app.store, caller.tenant(), from, to, cursor, limit + 1).await?;
    let more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    let next = if more { rows.last().map(|e| e.id.clone()) } else { None };
    Ok(Reply::Json(200, json!({ "data": rows, "nextCursor": next })))
}

/// Cache hits, misses, hit rate and savings over `?from=&to=`, in total and by model.
pub async fn cache(app: &App, caller: &Caller, req: &Req) -> Handled {
    let (from, to) = (ts_bound(req, "from")?, ts_bound(req, "to")?);
    let by_model = store::analytics::cache_stats(&app.store, caller.tenant(), from, to).await?;
    let hits: u64 = by_model.iter().map(|m| m.hits).sum();
    let misses: u64 = by_model.iter().map(|m| m.misses).sum();
    let bypasses: u64 = by_model.iter().map(|m| m.bypasses).sum();
    let saved_tokens: u64 = by_model.iter().map(|m| m.saved_tokens).sum();
    let saved_usd: f64 = by_model.iter().map(|m| m.saved_usd).sum();
    let lookups = hits + misses;
    let hit_rate = if lookups == 0 { 0.0 } else { hits as f64 / lookups as f64 };
    let (entries, bytes) = app.cache.usage();
    Ok(Reply::Json(
        200,
        json!({
            "hits": hits, "misses": misses, "bypasses": bypasses, "hitRate": hit_rate,
            "savedTokens": saved_tokens, "savedUsd": (saved_usd * 1e9).round() / 1e9,
            "byModel": by_model,
            "memory": { "entries": entries, "bytes": bytes, "maxBytes": app.config.limits.cache_max_bytes },
        }),
    ))
}
