//! Compliance packs: tenant packs in force, their raw YAML by hash, and every pack set ever in
//! force, so an old `receiptPackVersion` stamp still resolves after a pack changed.
//!
//! Tenant id `''` holds the baseline packs and the baseline-only set of the binaries that ran
//! against this database.

use sqlx::Row;

use super::change::Changed;
use super::{now_ts, Store, StoreError};

pub const BASELINE_TENANT: &str = "";

/// A tenant pack in force, with its YAML.
#[derive(Debug, Clone)]
pub struct PackRow {
    pub tenant_id: String,
    pub framework: String,
    pub pack_hash: String,
    pub yaml: String,
}

/// Stores the YAML (once per hash) and puts the pack in force for `framework` (the write's
/// subject). Returns true when the tenant had no pack of that framework before.
pub async fn put(store: &Store, tenant_id: &str, framework: &str, hash: &str, yaml: &str) -> Result<bool, StoreError> {
    let (t, f, h, y) = (tenant_id.to_string(), framework.to_string(), hash.to_string(), yaml.to_string());
    store
        .write(move |tx, _| {
            Box::pin(async move {
                let now = now_ts();
                sqlx::query(
                    "INSERT INTO pack_blobs (tenant_id, pack_hash, yaml, created_at) VALUES ($1, $2, $3, $4) \
                     ON CONFLICT (tenant_id, pack_hash) DO NOTHING",
                )
                .bind(&t)
                .bind(&h)
                .bind(&y)
                .bind(&now)
                .execute(&mut **tx)
                .await?;
                let existed = sqlx::query("SELECT 1 FROM compliance_packs WHERE tenant_id = $1 AND framework = $2")
                    .bind(&t)
                    .bind(&f)
                    .fetch_optional(&mut **tx)
                    .await?
                    .is_some();
                sqlx::query(
                    "INSERT INTO compliance_packs (tenant_id, framework, pack_hash, updated_at) VALUES ($1, $2, $3, $4) \
                     ON CONFLICT (tenant_id, framework) DO UPDATE SET pack_hash = excluded.pack_hash, \
                     updated_at = excluded.updated_at",
                )
                .bind(&t)
                .bind(&f)
                .bind(&h)
                .bind(&now)
                .execute(&mut **tx)
                .await?;
                Ok(Changed::to(f, !existed))
            })
        })
        .await
}

/// Takes the tenant's pack of `framework` out of force; false when there was none. The YAML
/// stays, so receipts stamped while it was in force still resolve.
pub async fn delete(store: &Store, tenant_id: &str, framework: &str) -> Result<bool, StoreError> {
    let (t, f) = (tenant_id.to_string(), framework.to_string());
    store
        .write(move |tx, _| {
            Box::pin(async move {
                let r = sqlx::query("DELETE FROM compliance_packs WHERE tenant_id = $1 AND framework = $2")
                    .bind(t)
                    .bind(&f)
                    .execute(&mut **tx)
                    .await?;
                Ok(if r.rows_affected() > 0 { Changed::to(f, true) } else { Changed::nothing(false) })
            })
        })
        .await
}

/// Every tenant pack in force, ordered by tenant and framework: the source of the snapshot.
pub async fn all_current(store: &Store) -> Result<Vec<PackRow>, StoreError> {
    store
        .run(|pool, _| async move {
            let rows = sqlx::query(
                "SELECT p.tenant_id, p.framework, p.pack_hash, b.yaml FROM compliance_packs p \
                 JOIN pack_blobs b ON b.tenant_id = p.tenant_id AND b.pack_hash = p.pack_hash \
                 ORDER BY p.tenant_id, p.framework",
            )
            .fetch_all(&pool)
            .await?;
            rows.iter()
                .map(|r| {
                    Ok(PackRow {
                        tenant_id: r.try_get("tenant_id")?,
                        framework: r.try_get("framework")?,
                        pack_hash: r.try_get("pack_hash")?,
                        yaml: r.try_get("yaml")?,
                    })
                })
                .collect::<Result<_, sqlx::Error>>()
                .map_err(StoreError::from)
        })
        .await
}

/// Stores pack YAML by hash (`blobs`: hash, yaml); existing hashes are left as they are.
pub async fn record_blobs(store: &Store, tenant_id: &str, blobs: Vec<(String, String)>) -> Result<(), StoreError> {
    if blobs.is_empty() {
        return Ok(());
    }
    let t = tenant_id.to_string();
    store
        .run(|pool, backend| async move {
            let mut tx = super::begin_write(&pool, backend).await?;
            let now = now_ts();
            for (hash, yaml) in blobs {
                sqlx::query(
                    "INSERT INTO pack_blobs (tenant_id, pack_hash, yaml, created_at) VALUES ($1, $2, $3, $4) \
                     ON CONFLICT (tenant_id, pack_hash) DO NOTHING",
                )
                .bind(&t)
                .bind(hash)
                .bind(yaml)
                .bind(&now)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
            Ok(())
        })
        .await
}

/// Records a pack set (idempotent).
pub async fn record_set(store: &Store, tenant_id: &str, version: &str, members_json: &str) -> Result<(), StoreError> {
    let (t, v, m) = (tenant_id.to_string(), version.to_string(), members_json.to_string());
    store
        .run(|pool, _| async move {
            sqlx::query(
                "INSERT INTO pack_sets (tenant_id, version, members, created_at) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (tenant_id, version) DO NOTHING",
            )
            .bind(t)
            .bind(v)
            .bind(m)
            .bind(now_ts())
            .execute(&pool)
            .await?;
            Ok(())
        })
        .await
}

/// The members (JSON) of the tenant's pack set `version`, or of the baseline set of that version.
pub async fn set_members(store: &Store, tenant_id: &str, version: &str) -> Result<Option<String>, StoreError> {
    own_or_baseline(store, "SELECT members FROM pack_sets WHERE version = $1", tenant_id, version).await
}

/// The YAML of pack `hash` as the tenant (or, for baseline packs, any binary) stored it.
pub async fn blob(store: &Store, tenant_id: &str, hash: &str) -> Result<Option<String>, StoreError> {
    own_or_baseline(store, "SELECT yaml FROM pack_blobs WHERE pack_hash = $1", tenant_id, hash).await
}

/// The one text column of `select` (a query on `$1` = `key`), from the tenant's row if it has
/// one, else from the baseline tenant's.
async fn own_or_baseline(
    store: &Store,
    select: &'static str,
    tenant_id: &str,
    key: &str,
) -> Result<Option<String>, StoreError> {
    let (t, k) = (tenant_id.to_string(), key.to_string());
    store
        .run(move |pool, _| async move {
            let sql = format!("{select} AND (tenant_id = $2 OR tenant_id = '') ORDER BY tenant_id DESC LIMIT 1");
            let row = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(k).bind(t).fetch_optional(&pool).await?;
            Ok(row.map(|r| r.try_get::<String, _>(0)).transpose()?)
        })
        .await
}
