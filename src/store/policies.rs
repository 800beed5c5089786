//! Tenant policies created through the API (YAML text plus name and on/off switch).

use serde::Serialize;
use sqlx::any::AnyRow;
use sqlx::Row;

use super::change::Changed;
use super::{now_ts, Store, StoreError};

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRecord {
    pub id: String,
    #[serde(skip)]
    pub tenant_id: String,
    pub name: String,
    pub enabled: bool,
    pub yaml: String,
    pub created_at: String,
    pub updated_at: String,
}

const COLUMNS: &str = "id, tenant_id, name, enabled, yaml, created_at, updated_at";

const TABLE: super::rows::Table = super::rows::Table { name: "policies", columns: COLUMNS };

fn from_row(r: &AnyRow) -> Result<PolicyRecord, sqlx::Error> {
    Ok(PolicyRecord {
        id: r.try_get("id")?,
        tenant_id: r.try_get("tenant_id")?,
        name: r.try_get("name")?,
        enabled: r.try_get::<i64, _>("enabled")? != 0,
        yaml: r.try_get("yaml")?,
        created_at: r.try_get("created_at")?,
        updated_at: r.try_get("updated_at")?,
    })
}

/// What a create or a replace writes.
pub struct PolicyInput {
    pub name: String,
    pub enabled: bool,
    pub yaml: String,
}

pub async fn insert(store: &Store, tenant_id: &str, p: PolicyInput) -> Result<PolicyRecord, StoreError> {
    let now = now_ts();
    let rec = PolicyRecord {
        id: uuid::Uuid::now_v7().to_string(),
        tenant_id: tenant_id.to_string(),
        name: p.name,
        enabled: p.enabled,
        yaml: p.yaml,
        created_at: now.clone(),
        updated_at: now,
    };
    let r = rec.clone();
    store
        .write(move |tx, _| {
            Box::pin(async move {
                sqlx::query(
                    "INSERT INTO policies (id, tenant_id, name, enabled, yaml, created_at, updated_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7)",
                )
                .bind(r.id)
                .bind(r.tenant_id)
                .bind(r.name)
                .bind(i64::from(r.enabled))
                .bind(r.yaml)
                .bind(r.created_at)
                .bind(r.updated_at)
                .execute(&mut **tx)
                .await?;
                Ok(Changed::to(rec.id.clone(), rec))
            })
        })
        .await
}

/// Every enabled policy of every tenant: the source of the compiled policies in the snapshot.
pub async fn all_enabled(store: &Store) -> Result<Vec<PolicyRecord>, StoreError> {
    store
        .run(|pool, _| async move {
            let sql = format!("SELECT {COLUMNS} FROM policies WHERE enabled <> 0 ORDER BY tenant_id, id");
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql)).fetch_all(&pool).await?;
            Ok(rows.iter().map(from_row).collect::<Result<_, _>>()?)
        })
        .await
}

/// A page of the tenant's policies in creation order (ids are UUIDv7).
pub async fn list(
    store: &Store,
    tenant_id: &str,
    after: Option<&str>,
    limit: i64,
) -> Result<Vec<PolicyRecord>, StoreError> {
    TABLE.page(store, tenant_id, after, limit, from_row).await
}

pub async fn get(store: &Store, tenant_id: &str, id: &str) -> Result<Option<PolicyRecord>, StoreError> {
    TABLE.get(store, tenant_id, id, from_row).await
}

/// Replaces name, switch and text of one of the tenant's policies; None when there is none.
pub async fn replace(
    store: &Store,
    tenant_id: &str,
    id: &str,
    p: PolicyInput,
) -> Result<Option<PolicyRecord>, StoreError> {
    let (t, id) = (tenant_id.to_string(), id.to_string());
    store
        .write(move |tx, _| {
            Box::pin(async move {
                let sql = format!("SELECT {COLUMNS} FROM policies WHERE tenant_id = $1 AND id = $2");
                let Some(row) =
                    sqlx::query(sqlx::AssertSqlSafe(sql)).bind(&t).bind(&id).fetch_optional(&mut **tx).await?
                else {
                    return Ok(Changed::nothing(None));
                };
                let mut rec = from_row(&row)?;
                rec.name = p.name;
                rec.enabled = p.enabled;
                rec.yaml = p.yaml;
                rec.updated_at = now_ts();
                sqlx::query(
                    "UPDATE policies SET name = $1, enabled = $2, yaml = $3, updated_at = $4 \
                     WHERE tenant_id = $5 AND id = $6",
                )
                .bind(&rec.name)
                .bind(i64::from(rec.enabled))
                .bind(&rec.yaml)
                .bind(&rec.updated_at)
                .bind(&t)
                .bind(&id)
                .execute(&mut **tx)
                .await?;
                Ok(Changed::to(id, Some(rec)))
            })
        })
        .await
}

/// Deletes one of the tenant's policies; false when there is none.
pub async fn delete(store: &Store, tenant_id: &str, id: &str) -> Result<bool, StoreError> {
    TABLE.delete(store, tenant_id, id).await
}
