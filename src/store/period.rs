//! Reads that resolve an attestation period to a seq range and walk its leaves.

use sqlx::Row;

use super::{Store, StoreError};

/// The lowest and highest `seq` of the tenant's receipts with `from <= ts <= to` (receipt ts form).
pub async fn seq_bounds_by_ts(
    store: &Store,
    tenant_id: &str,
    from_ts: &str,
    to_ts: &str,
) -> Result<Option<(u64, u64)>, StoreError> {
    store.settled().await?;
    let (t, f, to) = (tenant_id.to_string(), from_ts.to_string(), to_ts.to_string());
    store
        .run(move |pool, _| async move {
            let row = sqlx::query(
                "SELECT MIN(seq) AS lo, MAX(seq) AS hi FROM receipts WHERE tenant_id = $1 AND ts >= $2 AND ts <= $3",
            )
            .bind(t)
            .bind(f)
            .bind(to)
            .fetch_one(&pool)
            .await?;
            let lo: Option<i64> = row.try_get("lo")?;
            let hi: Option<i64> = row.try_get("hi")?;
            Ok(lo.zip(hi).map(|(lo, hi)| (lo.max(0) as u64, hi.max(0) as u64)))
        })
        .await
}

/// The highest `seq` with `ts < before` (0 when there is none): where an empty period sits.
/// Pruned receipts (their `ts` emptied, `store::retention`) have no time and are left out.
pub async fn last_seq_before(store: &Store, tenant_id: &str, before_ts: &str) -> Result<u64, StoreError> {
    store.settled().await?;
    let (t, b) = (tenant_id.to_string(), before_ts.to_string());
    store
        .run(move |pool, _| async move {
            let row = sqlx::query("SELECT MAX(seq) AS hi FROM receipts WHERE tenant_id = $1 AND ts > '' AND ts < $2")
                .bind(t)
                .bind(b)
                .fetch_one(&pool)
                .await?;
            Ok(row.try_get::<Option<i64>, _>("hi")?.unwrap_or(0).max(0) as u64)
        })
        .await
}

/// The stored `ts` of one seq, if that receipt exists and was not pruned (its `ts` emptied).
pub async fn ts_at(store: &Store, tenant_id: &str, seq: u64) -> Result<Option<String>, StoreError> {
    store.settled().await?;
    Ok(super::receipts::text_at(store, tenant_id, seq, "ts").await?.filter(|ts| !ts.is_empty()))
}

/// `(seq, this_hash)` of receipts with `from <= seq <= to`, ascending, at most `limit`: the
/// Merkle leaves of a period, without the rest of each row.
pub async fn leaves(
    store: &Store,
    tenant_id: &str,
    from: u64,
    to: u64,
    limit: i64,
) -> Result<Vec<(u64, String)>, StoreError> {
    store.settled().await?;
    let t = tenant_id.to_string();
    store
        .run(move |pool, _| async move {
            let rows = sqlx::query(
                "SELECT seq, this_hash FROM receipts WHERE tenant_id = $1 AND seq >= $2 AND seq <= $3 ORDER BY seq \
                 LIMIT $4",
            )
            .bind(t)
            .bind(from as i64)
            .bind(to as i64)
            .bind(limit)
            .fetch_all(&pool)
            .await?;
            rows.iter()
                .map(|r| Ok((r.try_get::<i64, _>("seq")?.max(0) as u64, r.try_get::<String, _>("this_hash")?)))
                .collect::<Result<_, sqlx::Error>>()
                .map_err(StoreError::from)
        })
        .await
}
