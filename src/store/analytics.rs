//! Analytics reads: guardrail events and cache savings, both written beside the receipts.

use serde::Serialize;
use sqlx::Row;

use super::{Store, StoreError};

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct GuardrailEvent {
    pub id: String,
    pub ts: String,
    pub receipt_id: String,
    pub actor: String,
    pub model: String,
    pub check: String,
    pub result: String,
    pub category: String,
    pub direction: String,
}

/// Newest first; `before` is the id cursor (ids are UUIDv7, so they sort by time).
pub async fn guardrail_events(
    store: &Store,
    tenant_id: &str,
    from_ts: Option<String>,
    to_ts: Option<String>,
    before: Option<String>,
    limit: i64,
) -> Result<Vec<GuardrailEvent>, StoreError> {
    store.settled().await?;
    let t = tenant_id.to_string();
    store
        .run(move |pool, _| async move {
            let rows = sqlx::query(
                "SELECT id, ts, receipt_id, actor, model, check_name, result, category, direction \
                 FROM guardrail_events WHERE tenant_id = $1 \
                 AND (CAST($2 AS TEXT) IS NULL OR ts >= $2) AND (CAST($3 AS TEXT) IS NULL OR ts <= $3) \
                 AND (CAST($4 AS TEXT) IS NULL OR id < $4) ORDER BY id DESC LIMIT $5",
            )
            .bind(t)
            .bind(from_ts)
            .bind(to_ts)
            .bind(before)
            .bind(limit)
            .fetch_all(&pool)
            .await?;
            let event = |r: &sqlx::any::AnyRow| -> Result<GuardrailEvent, sqlx::Error> {
                Ok(GuardrailEvent {
                    id: r.try_get("id")?,
                    ts: r.try_get("ts")?,
                    receipt_id: r.try_get("receipt_id")?,
                    actor: r.try_get("actor")?,
                    model: r.try_get("model")?,
                    check: r.try_get("check_name")?,
                    result: r.try_get("result")?,
                    category: r.try_get("category")?,
                    direction: r.try_get("direction")?,
                })
            };
            Ok(rows.iter().map(event).collect::<Result<_, _>>()?)
        })
        .await
}

#[derive(Debug, Clone, Default, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CacheModelStats {
    pub model: String,
    pub hits: u64,
    pub misses: u64,
    pub bypasses: u64,
    pub saved_tokens: u64,
    pub saved_usd: f64,
}

/// Per model: hits, misses, bypasses and what the hits saved, over receipts in the period.
pub async fn cache_stats(
    store: &Store,
    tenant_id: &str,
    from_ts: Option<String>,
    to_ts: Option<String>,
) -> Result<Vec<CacheModelStats>, StoreError> {
    store.settled().await?;
    let t = tenant_id.to_string();
    store
        .run(move |pool, _| async move {
            // PostgreSQL sums BIGINT as NUMERIC, which the Any driver cannot decode: cast back.
            let rows = sqlx::query(
                "SELECT model, \
                   CAST(SUM(CASE WHEN cache_result = 'HIT' THEN 1 ELSE 0 END) AS BIGINT) AS hits, \
                   CAST(SUM(CASE WHEN cache_result = 'MISS' THEN 1 ELSE 0 END) AS BIGINT) AS misses, \
                   CAST(SUM(CASE WHEN cache_result = 'BYPASS' THEN 1 ELSE 0 END) AS BIGINT) AS bypasses, \
                   CAST(SUM(saved_tokens) AS BIGINT) AS saved_tokens, SUM(saved_usd) AS saved_usd \
                 FROM receipts WHERE tenant_id = $1 AND cache_result <> '' \
                 AND (CAST($2 AS TEXT) IS NULL OR ts >= $2) AND (CAST($3 AS TEXT) IS NULL OR ts <= $3) \
                 GROUP BY model ORDER BY model",
            )
            .bind(t)
            .bind(from_ts)
            .bind(to_ts)
            .fetch_all(&pool)
            .await?;
            let n = |r: &sqlx::any::AnyRow, c: &str| -> Result<u64, sqlx::Error> {
                Ok(r.try_get::<Option<i64>, _>(c)?.unwrap_or(0).max(0) as u64)
            };
            let stats = |r: &sqlx::any::AnyRow| -> Result<CacheModelStats, sqlx::Error> {
                Ok(CacheModelStats {
                    model: r.try_get("model")?,
                    hits: n(r, "hits")?,
                    misses: n(r, "misses")?,
                    bypasses: n(r, "bypasses")?,
                    saved_tokens: n(r, "saved_tokens")?,
                    saved_usd: r.try_get::<Option<f64>, _>("saved_usd")?.unwrap_or(0.0),
                })
            };
            Ok(rows.iter().map(stats).collect::<Result<_, _>>()?)
        })
        .await
}
