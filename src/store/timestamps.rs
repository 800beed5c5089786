//! RFC 3161 timestamps of published checkpoints (`log_timestamps`, docs/log.md §6): the TSA's
//! answer as received, with the checkpoint it stamps.

use sqlx::Row;

use super::{Store, StoreError};

/// A stored timestamp and the checkpoint note it stamps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimestampRow {
    pub size: u64,
    /// The checkpoint's signed note.
    pub note: String,
    /// The token's genTime, RFC 3339 UTC.
    pub gen_time: String,
    /// Base64 of the DER `TimeStampResp` as the TSA sent it.
    pub tsr: String,
}

/// Keeps the timestamp of the checkpoint `(tenant, size)` unless it has one (another process
/// stamped it first): true when this one was kept.
pub async fn insert(
    store: &Store,
    tenant: &str,
    size: u64,
    gen_time: &str,
    tsr: &str,
    tsa_url: &str,
) -> Result<bool, StoreError> {
    let (t, g, r, u) = (tenant.to_string(), gen_time.to_string(), tsr.to_string(), tsa_url.to_string());
    store
        .run(move |pool, _| async move {
            let done = sqlx::query(
                "INSERT INTO log_timestamps (tenant_id, size, gen_time, tsr, tsa_url, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (tenant_id, size) DO NOTHING",
            )
            .bind(t)
            .bind(size as i64)
            .bind(g)
            .bind(r)
            .bind(u)
            .bind(super::now_ts())
            .execute(&pool)
            .await?;
            Ok(done.rows_affected() == 1)
        })
        .await
}

const SELECT: &str = "SELECT t.size, c.note, t.gen_time, t.tsr FROM log_timestamps t \
    JOIN log_checkpoints c ON c.tenant_id = t.tenant_id AND c.size = t.size";

fn from_row(r: &sqlx::any::AnyRow) -> Result<TimestampRow, sqlx::Error> {
    Ok(TimestampRow {
        size: r.try_get::<i64, _>(0)?.max(0) as u64,
        note: r.try_get(1)?,
        gen_time: r.try_get(2)?,
        tsr: r.try_get(3)?,
    })
}

/// The newest timestamps of `tenant` first, those of checkpoints smaller than `below` (a
/// cursor) when given.
pub async fn page(
    store: &Store,
    tenant: &str,
    below: Option<u64>,
    limit: i64,
) -> Result<Vec<TimestampRow>, StoreError> {
    let t = tenant.to_string();
    store
        .run(move |pool, _| async move {
            let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
                "{SELECT} WHERE t.tenant_id = $1 AND t.size < $2 ORDER BY t.size DESC LIMIT $3"
            )))
            .bind(t)
            .bind(below.map_or(i64::MAX, |b| b as i64))
            .bind(limit)
            .fetch_all(&pool)
            .await?;
            rows.iter().map(from_row).collect::<Result<Vec<_>, _>>().map_err(StoreError::from)
        })
        .await
}

/// The newest timestamp of a checkpoint of `tenant` at least `min_size` large, if any.
pub async fn newest_from(store: &Store, tenant: &str, min_size: u64) -> Result<Option<TimestampRow>, StoreError> {
    let t = tenant.to_string();
    store
        .run(move |pool, _| async move {
            let row = sqlx::query(sqlx::AssertSqlSafe(format!(
                "{SELECT} WHERE t.tenant_id = $1 AND t.size >= $2 ORDER BY t.size DESC LIMIT 1"
            )))
            .bind(t)
            .bind(min_size as i64)
            .fetch_optional(&pool)
            .await?;
            row.as_ref().map(from_row).transpose().map_err(StoreError::from)
        })
        .await
}
