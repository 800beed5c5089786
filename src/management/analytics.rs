//! Analytics (any valid key): `GET /v1/anomalies` (guardrail events), `GET /v1/cache` and
//! `GET /v1/latency`.

use serde::Serialize;
use utoipa::{IntoParams, ToSchema};

use super::handler::{number, ts_bound, Caller, Handled, Page, Reply, Req};
use super::openapi_parts::Authenticated;
use crate::app::App;
use crate::store;
use crate::store::analytics::{CacheModelStats, GuardrailEvent, LatencyFilter, LatencyStats};

/// `?from=&to=`: the period of an analytics answer.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // describes the query string; `ts_bound` reads it
pub(super) struct TimeRange {
    /// From this instant (RFC 3339).
    #[param(format = DateTime)]
    from: Option<String>,
    /// Up to this instant (RFC 3339).
    #[param(format = DateTime)]
    to: Option<String>,
}

/// The response cache over a period, in total and by model, and its memory now.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct CacheReport {
    hits: u64,
    misses: u64,
    bypasses: u64,
    /// hits / (hits + misses); 0 when there was no lookup.
    hit_rate: f64,
    saved_tokens: u64,
    saved_usd: f64,
    by_model: Vec<CacheModelStats>,
    memory: CacheMemory,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct CacheMemory {
    entries: u64,
    bytes: u64,
    max_bytes: u64,
}

/// Guardrail redactions and blocks, newest first
#[utoipa::path(get, path = "/v1/anomalies", operation_id = "listAnomalies", tag = "analytics",
    params(TimeRange, super::openapi_parts::PageQuery),
    responses((status = 200, description = "A page of guardrail events", body = Page<GuardrailEvent>),
        Authenticated))]
pub async fn anomalies(app: &App, caller: &Caller, req: &Req) -> Handled {
    let limit = number(req, "limit", 1, 200)?.unwrap_or(50) as i64;
    let cursor = req.query("cursor").filter(|c| !c.is_empty()).map(str::to_string);
    let (from, to) = (ts_bound(req, "from")?, ts_bound(req, "to")?);
    let mut rows = store::analytics::guardrail_events(&app.store, caller.tenant(), from, to, cursor, limit + 1).await?;
    let more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    let next = if more { rows.last().map(|e| e.id.clone()) } else { None };
    Ok(Reply::json(200, &Page { data: rows, next_cursor: next }))
}

/// Cache hits, misses, hit rate and savings, in total and by model
#[utoipa::path(get, path = "/v1/cache", operation_id = "getCacheStats", tag = "analytics",
    params(TimeRange),
    responses((status = 200, description = "Cache statistics", body = CacheReport), Authenticated))]
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
    let memory = CacheMemory { entries, bytes, max_bytes: app.config.limits.cache_max_bytes };
    Ok(Reply::json(
        200,
        &CacheReport {
            hits,
            misses,
            bypasses,
            hit_rate,
            saved_tokens,
            saved_usd: (saved_usd * 1e9).round() / 1e9,
            by_model,
            memory,
        },
    ))
}

/// `?from=&to=&model=`: the model calls a latency report covers.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // describes the query string; `latency` reads it
pub(super) struct LatencyQuery {
    /// From this instant (RFC 3339).
    #[param(format = DateTime)]
    from: Option<String>,
    /// Up to this instant (RFC 3339).
    #[param(format = DateTime)]
    to: Option<String>,
    /// Only this model (as receipts name it).
    model: Option<String>,
}

/// Nearest-rank latency percentiles in milliseconds (null when `count` is 0).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct LatencyFigures {
    /// Model calls with a known latency.
    count: u64,
    p50_ms: Option<f64>,
    p90_ms: Option<f64>,
    p99_ms: Option<f64>,
    max_ms: Option<f64>,
}

impl LatencyFigures {
    fn of(s: LatencyStats) -> LatencyFigures {
        let ms = |us: u64| (s.count > 0).then(|| us as f64 / 1000.0);
        LatencyFigures {
            count: s.count,
            p50_ms: ms(s.p50_us),
            p90_ms: ms(s.p90_us),
            p99_ms: ms(s.p99_us),
            max_ms: ms(s.max_us),
        }
    }
}

/// One model's figures.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct ModelLatency {
    model: String,
    #[serde(flatten)]
    figures: LatencyFigures,
}

/// Latency of model calls over a period, in total and by model (busiest first).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct LatencyReport {
    #[serde(flatten)]
    figures: LatencyFigures,
    by_model: Vec<ModelLatency>,
}

/// Latency percentiles of model calls, in total and by model
///
/// Each request's time from reaching the gateway to the end of its answer, as recorded beside
/// its receipt (`latencyMs`); p50, p90 and p99 by nearest rank over the period's model calls.
/// A key that is not a manager's sees its own key's requests only.
#[utoipa::path(get, path = "/v1/latency", operation_id = "getLatencyStats", tag = "analytics",
    params(LatencyQuery),
    responses((status = 200, description = "Latency percentiles", body = LatencyReport), Authenticated))]
pub async fn latency(app: &App, caller: &Caller, req: &Req) -> Handled {
    let f = LatencyFilter {
        from_ts: ts_bound(req, "from")?,
        to_ts: ts_bound(req, "to")?,
        model: req.query("model").filter(|m| !m.is_empty()).map(str::to_string),
        // As `GET /v1/keys` and `/v1/end-users`: a key that is not a manager's sees its own.
        key_id: (!caller.key.is_manager()).then(|| caller.key.record.id.clone()),
    };
    let (all, by_model) = store::analytics::latency_stats(&app.store, caller.tenant(), f).await?;
    let by_model = by_model.into_iter().map(|(model, s)| ModelLatency { model, figures: LatencyFigures::of(s) });
    Ok(Reply::json(200, &LatencyReport { figures: LatencyFigures::of(all), by_model: by_model.collect() }))
}
