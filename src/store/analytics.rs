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

/// Which model calls a latency report covers: the tenant's in a period, of one model, of one
/// key (its requests and its end users').
#[derive(Debug, Clone, Default)]
pub struct LatencyFilter {
    pub from_ts: Option<String>,
    pub to_ts: Option<String>,
    pub model: Option<String>,
    pub key_id: Option<String>,
}

/// Nearest-rank percentiles of a group of latencies, in microseconds (all zero when `count` is 0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LatencyStats {
    pub count: u64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
}

/// The 1-based rank of percentile `p` among `n` sorted values: `ceil(p/100 × n)` (nearest rank),
/// in integers. The SQL of [`latency_stats`] computes the same.
pub fn nearest_rank(p: u64, n: u64) -> u64 {
    (p * n).div_ceil(100)
}

/// Every model call's latency, ranked within its model and within the whole: only the rows
/// at a percentile's rank come back (at most 4 per group), so the answer's size does not grow
/// with the tenant. The ranks are [`nearest_rank`]'s: `ceil(p × n / 100)` = `(p × n + 99) / 100`.
///
/// Why window functions: one statement on both backends, memory bounded by the database (its
/// sorter spills to disk, the gateway holds a few rows), exact. Measured over 100 000 model
/// calls of one tenant in the period (4 models, rows of a receipt's width, warm cache, this
/// shared 2-core VM): SQLite ~0.25 s of CPU, PostgreSQL ~0.36 s. One `ORDER BY … LIMIT 1
/// OFFSET k` per percentile costs ~0.05 s each on SQLite, so 3 × (models + 1) of them cost more
/// from 2 models on; PostgreSQL's `percentile_disc` (~0.12 s) has no SQLite twin; reading every
/// latency back would hold the whole period in the gateway's memory.
const LATENCY_SQL: &str = "WITH calls AS (SELECT model, latency_us FROM receipts \
     WHERE tenant_id = $1 AND kind = 'model_call' AND pruned_at IS NULL AND latency_us IS NOT NULL \
     AND (CAST($2 AS TEXT) IS NULL OR ts >= $2) AND (CAST($3 AS TEXT) IS NULL OR ts <= $3) \
     AND (CAST($4 AS TEXT) IS NULL OR model = $4) \
     AND (CAST($5 AS TEXT) IS NULL OR actor = $5 \
          OR substr(actor, 1, length(CAST($5 AS TEXT)) + 1) = CAST($5 AS TEXT) || '/')), \
   ranked AS (\
     SELECT model, latency_us, ROW_NUMBER() OVER (PARTITION BY model ORDER BY latency_us) AS rn, \
            COUNT(*) OVER (PARTITION BY model) AS n FROM calls \
     UNION ALL \
     SELECT NULL, latency_us, ROW_NUMBER() OVER (ORDER BY latency_us), COUNT(*) OVER () FROM calls) \
   SELECT model, n, rn, latency_us FROM ranked \
   WHERE rn = (n * 50 + 99) / 100 OR rn = (n * 90 + 99) / 100 OR rn = (n * 99 + 99) / 100 OR rn = n";

/// The latency of the model calls `f` selects: over all of them, and per model (busiest
/// first, then by name). Receipts without a latency (older than migration 0018) are left out.
pub async fn latency_stats(
    store: &Store,
    tenant_id: &str,
    f: LatencyFilter,
) -> Result<(LatencyStats, Vec<(String, LatencyStats)>), StoreError> {
    store.settled().await?;
    let t = tenant_id.to_string();
    let picks = store
        .run(move |pool, _| async move {
            let rows = sqlx::query(LATENCY_SQL)
                .bind(t)
                .bind(f.from_ts)
                .bind(f.to_ts)
                .bind(f.model)
                .bind(f.key_id)
                .fetch_all(&pool)
                .await?;
            let pick = |r: &sqlx::any::AnyRow| -> Result<(Option<String>, u64, u64, u64), sqlx::Error> {
                let n = |c: &str| -> Result<u64, sqlx::Error> { Ok(r.try_get::<i64, _>(c)?.max(0) as u64) };
                Ok((r.try_get("model")?, n("n")?, n("rn")?, n("latency_us")?))
            };
            Ok(rows.iter().map(pick).collect::<Result<Vec<_>, _>>()?)
        })
        .await?;
    Ok(group_picks(picks))
}

/// The picked rows of [`LATENCY_SQL`] (model or None for the whole, count, rank, latency) as
/// each group's percentiles.
fn group_picks(picks: Vec<(Option<String>, u64, u64, u64)>) -> (LatencyStats, Vec<(String, LatencyStats)>) {
    let mut all = LatencyStats::default();
    let mut by_model: Vec<(String, LatencyStats)> = Vec::new();
    for (model, n, rank, us) in picks {
        let stats = match model {
            None => &mut all,
            Some(m) => match by_model.iter().position(|(k, _)| *k == m) {
                Some(i) => &mut by_model[i].1,
                None => {
                    by_model.push((m, LatencyStats::default()));
                    &mut by_model.last_mut().expect("just pushed").1
                }
            },
        };
        stats.count = n;
        for (p, slot) in
            [(50, &mut stats.p50_us), (90, &mut stats.p90_us), (99, &mut stats.p99_us), (100, &mut stats.max_us)]
        {
            if nearest_rank(p, n) == rank {
                *slot = us;
            }
        }
    }
    by_model.sort_by(|a, b| b.1.count.cmp(&a.1.count).then_with(|| a.0.cmp(&b.0)));
    (all, by_model)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::manual_div_ceil)] // `(n * p + 99) / 100` is the SQL's integer form, on purpose
    fn nearest_rank_is_the_ceiling_of_p_percent_of_n() {
        assert_eq!([1, 1, 1, 1].map(|p| nearest_rank(p, 1)), [1, 1, 1, 1]);
        assert_eq!((nearest_rank(50, 10), nearest_rank(90, 10), nearest_rank(99, 10)), (5, 9, 10));
        assert_eq!((nearest_rank(50, 101), nearest_rank(99, 101), nearest_rank(100, 101)), (51, 100, 101));
        for n in 1..500u64 {
            for p in [50, 90, 99, 100] {
                let exact = ((p as f64) / 100.0 * n as f64).ceil() as u64;
                assert_eq!(nearest_rank(p, n), exact, "p{p} of {n}");
                assert_eq!(nearest_rank(p, n), (n * p + 99) / 100, "the SQL's form");
            }
        }
    }

    /// One row may stand at several ranks (n = 1: all four); rows come in any order.
    #[test]
    fn picks_become_each_groups_percentiles() {
        let picks = vec![
            (Some("b".to_string()), 1, 1, 700),
            (None, 3, 3, 900),
            (Some("a".to_string()), 2, 1, 100),
            (None, 3, 2, 700),
            (Some("a".to_string()), 2, 2, 900),
        ];
        let (all, by_model) = group_picks(picks);
        assert_eq!(all, LatencyStats { count: 3, p50_us: 700, p90_us: 900, p99_us: 900, max_us: 900 });
        assert_eq!(
            by_model[0],
            ("a".into(), LatencyStats { count: 2, p50_us: 100, p90_us: 900, p99_us: 900, max_us: 900 })
        );
        assert_eq!(
            by_model[1],
            ("b".into(), LatencyStats { count: 1, p50_us: 700, p90_us: 700, p99_us: 700, max_us: 700 })
        );
    }
}
