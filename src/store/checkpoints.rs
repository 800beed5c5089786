//! Published checkpoints of the tenant log (`log_checkpoints`) and the install id that names
//! the log's default origin (`log_install`).

use sqlx::Row;

use super::{Store, StoreError};

/// A checkpoint as published (defined beside the kept heads, which hold one, so that the
/// store's root module can hold them without a circle through this file).
pub use super::log_heads::CheckpointRow;

/// This database's install id, made by the first process that asks (several processes on one
/// PostgreSQL database read the same one).
pub async fn install_id(store: &Store) -> Result<String, StoreError> {
    let fresh = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
    store
        .run(move |pool, _| async move {
            sqlx::query("INSERT INTO log_install (one, install_id) VALUES (1, $1) ON CONFLICT (one) DO NOTHING")
                .bind(fresh)
                .execute(&pool)
                .await?;
            let row = sqlx::query("SELECT install_id FROM log_install WHERE one = 1").fetch_one(&pool).await?;
            Ok(row.try_get::<String, _>(0)?)
        })
        .await
}

/// Stores `c` unless a checkpoint of that size is stored already (another process published
/// it first), and returns the one stored and whether it is `c` stored by this call.
pub async fn publish(store: &Store, tenant: &str, c: CheckpointRow) -> Result<(CheckpointRow, bool), StoreError> {
    let t = tenant.to_string();
    store
        .run(move |pool, _| async move {
            let inserted = sqlx::query(
                "INSERT INTO log_checkpoints (tenant_id, size, root, note, key_id, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (tenant_id, size) DO NOTHING",
            )
            .bind(t.clone())
            .bind(c.size as i64)
            .bind(c.root.clone())
            .bind(c.note.clone())
            .bind(c.key_id.clone())
            .bind(c.created_at.clone())
            .execute(&pool)
            .await?
            .rows_affected();
            if inserted == 1 {
                return Ok((c, true));
            }
            let row = sqlx::query(sqlx::AssertSqlSafe(format!("{SELECT} WHERE tenant_id = $1 AND size = $2")))
                .bind(t)
                .bind(c.size as i64)
                .fetch_one(&pool)
                .await?;
            Ok((from_row(&row)?, false))
        })
        .await
}

const SELECT: &str = "SELECT size, root, note, key_id, created_at FROM log_checkpoints";

fn from_row(r: &sqlx::any::AnyRow) -> Result<CheckpointRow, sqlx::Error> {
    Ok(CheckpointRow {
        size: r.try_get::<i64, _>(0)?.max(0) as u64,
        root: r.try_get(1)?,
        note: r.try_get(2)?,
        key_id: r.try_get(3)?,
        created_at: r.try_get(4)?,
    })
}

/// The newest checkpoints of `tenant` first, those smaller than `below` (a cursor) when given.
pub async fn page(
    store: &Store,
    tenant: &str,
    below: Option<u64>,
    limit: i64,
) -> Result<Vec<CheckpointRow>, StoreError> {
    let t = tenant.to_string();
    store
        .run(move |pool, _| async move {
            let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
                "{SELECT} WHERE tenant_id = $1 AND size < $2 ORDER BY size DESC LIMIT $3"
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

/// Where a tenant's log stands for the publisher: its size (the chain head), its newest
/// checkpoint's size, and its newest timestamp: the size it stamps and when it was kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogHead {
    pub tenant: String,
    pub size: u64,
    pub checkpoint: Option<u64>,
    pub stamped: Option<u64>,
    pub stamped_at: Option<String>,
}

/// Every tenant with receipts. One index lookup per tenant for each `MAX` (the primary keys
/// lead with `tenant_id`), so the cost follows the tenants, not the checkpoints kept.
pub async fn heads(store: &Store) -> Result<Vec<LogHead>, StoreError> {
    store
        .run(move |pool, _| async move {
            let rows = sqlx::query(
                "SELECT h.tenant_id, h.seq, \
                 (SELECT MAX(c.size) FROM log_checkpoints c WHERE c.tenant_id = h.tenant_id), \
                 (SELECT MAX(t.size) FROM log_timestamps t WHERE t.tenant_id = h.tenant_id), \
                 (SELECT t.created_at FROM log_timestamps t WHERE t.tenant_id = h.tenant_id \
                  ORDER BY t.size DESC LIMIT 1) \
                 FROM chain_heads h ORDER BY h.tenant_id",
            )
            .fetch_all(&pool)
            .await?;
            let size = |r: &sqlx::any::AnyRow, i: usize| -> Result<Option<u64>, sqlx::Error> {
                Ok(r.try_get::<Option<i64>, _>(i)?.map(|v| v.max(0) as u64))
            };
            rows.iter()
                .map(|r| {
                    Ok(LogHead {
                        tenant: r.try_get(0)?,
                        size: size(r, 1)?.unwrap_or(0),
                        checkpoint: size(r, 2)?,
                        stamped: size(r, 3)?,
                        stamped_at: r.try_get(4)?,
                    })
                })
                .collect::<Result<Vec<_>, sqlx::Error>>()
                .map_err(StoreError::from)
        })
        .await
}

/// The checkpoint of `tenant` at `size`, if it was published.
pub async fn at(store: &Store, tenant: &str, size: u64) -> Result<Option<CheckpointRow>, StoreError> {
    let t = tenant.to_string();
    store
        .run(move |pool, _| async move {
            let row = sqlx::query(sqlx::AssertSqlSafe(format!("{SELECT} WHERE tenant_id = $1 AND size = $2")))
                .bind(t)
                .bind(size as i64)
                .fetch_optional(&pool)
                .await?;
            row.as_ref().map(from_row).transpose().map_err(StoreError::from)
        })
        .await
}

/// Every tenant's newest published checkpoint.
pub async fn newest_per_tenant(store: &Store) -> Result<Vec<(String, CheckpointRow)>, StoreError> {
    store
        .run(|pool, _| async move {
            let sql = "SELECT c.tenant_id, c.size, c.root, c.note, c.key_id, c.created_at FROM log_checkpoints c \
                 JOIN (SELECT tenant_id, MAX(size) AS size FROM log_checkpoints GROUP BY tenant_id) n \
                 ON n.tenant_id = c.tenant_id AND n.size = c.size";
            let rows = sqlx::query(sql).fetch_all(&pool).await?;
            rows.iter()
                .map(|r| {
                    let row = CheckpointRow {
                        size: r.try_get::<i64, _>(1)?.max(0) as u64,
                        root: r.try_get(2)?,
                        note: r.try_get(3)?,
                        key_id: r.try_get(4)?,
                        created_at: r.try_get(5)?,
                    };
                    Ok((r.try_get::<String, _>(0)?, row))
                })
                .collect::<Result<Vec<_>, sqlx::Error>>()
                .map_err(StoreError::from)
        })
        .await
}

/// The newest checkpoint size `witness` cosigned of `tenant`'s log (0: none).
pub async fn witnessed_size(store: &Store, tenant: &str, witness: &str) -> Result<u64, StoreError> {
    let (t, w) = (tenant.to_string(), witness.to_string());
    store
        .run(move |pool, _| async move {
            let row = sqlx::query("SELECT size FROM log_witness_state WHERE tenant_id = $1 AND witness = $2")
                .bind(t)
                .bind(w)
                .fetch_optional(&pool)
                .await?;
            Ok(row.map_or(0, |r| r.get::<i64, _>(0).max(0) as u64))
        })
        .await
}

/// Keeps a verified cosignature of checkpoint `size` and moves the witness's state to it.
pub async fn add_cosignature(
    store: &Store,
    tenant: &str,
    size: u64,
    witness: &str,
    line: &str,
) -> Result<(), StoreError> {
    let (t, w, l, now) = (tenant.to_string(), witness.to_string(), line.to_string(), super::now_ts());
    store
        .run(move |pool, _| async move {
            let mut tx = pool.begin().await?;
            sqlx::query(
                "INSERT INTO log_cosignatures (tenant_id, size, witness, line) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (tenant_id, size, witness) DO UPDATE SET line = excluded.line",
            )
            .bind(t.clone())
            .bind(size as i64)
            .bind(w.clone())
            .bind(l)
            .execute(&mut *tx)
            .await?;
            sqlx::query(
                "INSERT INTO log_witness_state (tenant_id, witness, size, cosigned_at) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (tenant_id, witness) DO UPDATE SET size = excluded.size, cosigned_at = excluded.cosigned_at \
                 WHERE log_witness_state.size < excluded.size",
            )
            .bind(t)
            .bind(w)
            .bind(size as i64)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(())
        })
        .await
}

/// The kept cosignature lines of checkpoint `size`, in witness name order.
pub async fn cosignatures(store: &Store, tenant: &str, size: u64) -> Result<Vec<String>, StoreError> {
    let t = tenant.to_string();
    store
        .run(move |pool, _| async move {
            let rows =
                sqlx::query("SELECT line FROM log_cosignatures WHERE tenant_id = $1 AND size = $2 ORDER BY witness")
                    .bind(t)
                    .bind(size as i64)
                    .fetch_all(&pool)
                    .await?;
            Ok(rows.iter().map(|r| r.get::<String, _>(0)).collect())
        })
        .await
}
