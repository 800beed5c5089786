//! Verified-span memo rows (`compliance::memo`): read before a walk, written after it.

use sqlx::Row;

use super::{Store, StoreError};

/// One memo row: a block of a tenant's chain whose signatures were verified, and the digest
/// that vouches for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    pub block_start: u64,
    pub block_len: u64,
    /// Lowercase hex HMAC-SHA256.
    pub digest: String,
    /// The block's distinct key ids, sorted, comma-separated.
    pub key_ids: String,
}

/// Rows per multi-row INSERT (6 binds a row).
const ROWS_PER_INSERT: usize = 256;

/// The tenant's memo rows for blocks starting in `[from, to]`, ascending.
pub async fn in_range(store: &Store, tenant_id: &str, from: u64, to: u64) -> Result<Vec<Span>, StoreError> {
    let t = tenant_id.to_string();
    store
        .run(move |pool, _| async move {
            let rows = sqlx::query(
                "SELECT block_start, block_len, digest, key_ids FROM verified_spans WHERE tenant_id = $1 AND \
                 block_start >= $2 AND block_start <= $3 ORDER BY block_start",
            )
            .bind(t)
            .bind(from.min(i64::MAX as u64) as i64)
            .bind(to.min(i64::MAX as u64) as i64)
            .fetch_all(&pool)
            .await?;
            rows.iter()
                .map(|r| {
                    Ok(Span {
                        block_start: r.try_get::<i64, _>("block_start")?.max(0) as u64,
                        block_len: r.try_get::<i64, _>("block_len")?.max(0) as u64,
                        digest: r.try_get("digest")?,
                        key_ids: r.try_get("key_ids")?,
                    })
                })
                .collect::<Result<_, sqlx::Error>>()
                .map_err(StoreError::from)
        })
        .await
}

/// Records spans (replacing a row for the same block, e.g. one that no longer matched).
pub async fn save(store: &Store, tenant_id: &str, spans: Vec<Span>) -> Result<usize, StoreError> {
    if spans.is_empty() {
        return Ok(0);
    }
    let t = tenant_id.to_string();
    let n = spans.len();
    store
        .run(move |pool, backend| async move {
            let now = super::now_ts();
            let mut tx = super::begin_write(&pool, backend).await?;
            for chunk in spans.chunks(ROWS_PER_INSERT) {
                let mut sql = String::from(
                    "INSERT INTO verified_spans (tenant_id, block_start, block_len, digest, key_ids, created_at) VALUES ",
                );
                for i in 0..chunk.len() {
                    let b = i * 6;
                    if i > 0 {
                        sql.push(',');
                    }
                    sql.push_str(&format!("(${}, ${}, ${}, ${}, ${}, ${})", b + 1, b + 2, b + 3, b + 4, b + 5, b + 6));
                }
                sql.push_str(
                    " ON CONFLICT (tenant_id, block_start) DO UPDATE SET block_len = excluded.block_len, digest = \
                     excluded.digest, key_ids = excluded.key_ids, created_at = excluded.created_at",
                );
                let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
                for s in chunk {
                    q = q
                        .bind(t.clone())
                        .bind(s.block_start as i64)
                        .bind(s.block_len as i64)
                        .bind(s.digest.clone())
                        .bind(s.key_ids.clone())
                        .bind(now.clone());
                }
                q.execute(&mut *tx).await?;
            }
            tx.commit().await?;
            Ok(n)
        })
        .await
}

/// Forgets the tenant's memo rows (the next walk verifies every signature again).
pub async fn clear(store: &Store, tenant_id: &str) -> Result<u64, StoreError> {
    let t = tenant_id.to_string();
    store
        .run(move |pool, _| async move {
            let done = sqlx::query("DELETE FROM verified_spans WHERE tenant_id = $1").bind(t).execute(&pool).await?;
            Ok(done.rows_affected())
        })
        .await
}
