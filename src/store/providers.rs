//! Provider credential rows. `sealed` is ciphertext (see `sealing`); nothing here is clear text.

use sqlx::any::AnyRow;
use sqlx::Row;

use super::change::Changed;
use super::{now_ts, Store, StoreError};

#[derive(Debug, Clone)]
pub struct CredentialRow {
    pub tenant_id: String,
    pub provider: String,
    pub sealed: String,
    pub key_hint: String,
    pub base_url: Option<String>,
    pub region: Option<String>,
    pub status: String,
    pub updated_at: String,
}

const COLUMNS: &str = "tenant_id, provider, sealed, key_hint, base_url, region, status, updated_at";

fn from_row(r: &AnyRow) -> Result<CredentialRow, sqlx::Error> {
    Ok(CredentialRow {
        tenant_id: r.try_get("tenant_id")?,
        provider: r.try_get("provider")?,
        sealed: r.try_get("sealed")?,
        key_hint: r.try_get("key_hint")?,
        base_url: r.try_get("base_url")?,
        region: r.try_get("region")?,
        status: r.try_get("status")?,
        updated_at: r.try_get("updated_at")?,
    })
}

/// Creates or replaces a tenant's credential for one provider; returns the stored row.
pub async fn upsert(store: &Store, mut row: CredentialRow) -> Result<CredentialRow, StoreError> {
    row.updated_at = now_ts();
    let r = row.clone();
    store
        .write(move |tx, _| {
            Box::pin(async move {
                sqlx::query(
                    "INSERT INTO provider_credentials (tenant_id, provider, sealed, key_hint, base_url, region, status, updated_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
                     ON CONFLICT (tenant_id, provider) DO UPDATE SET sealed = excluded.sealed, \
                     key_hint = excluded.key_hint, base_url = excluded.base_url, region = excluded.region, \
                     status = excluded.status, updated_at = excluded.updated_at",
                )
                .bind(r.tenant_id)
                .bind(r.provider)
                .bind(r.sealed)
                .bind(r.key_hint)
                .bind(r.base_url)
                .bind(r.region)
                .bind(r.status)
                .bind(r.updated_at)
                .execute(&mut **tx)
                .await?;
                Ok(Changed::to(row.provider.clone(), row))
            })
        })
        .await
}

pub async fn all(store: &Store) -> Result<Vec<CredentialRow>, StoreError> {
    store
        .run(|pool, _| async move {
            let sql = format!("SELECT {COLUMNS} FROM provider_credentials ORDER BY tenant_id, provider");
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql)).fetch_all(&pool).await?;
            Ok(rows.iter().map(from_row).collect::<Result<_, _>>()?)
        })
        .await
}

pub async fn for_tenant(store: &Store, tenant_id: &str) -> Result<Vec<CredentialRow>, StoreError> {
    let t = tenant_id.to_string();
    store
        .run(|pool, _| async move {
            let sql = format!("SELECT {COLUMNS} FROM provider_credentials WHERE tenant_id = $1 ORDER BY provider");
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(t).fetch_all(&pool).await?;
            Ok(rows.iter().map(from_row).collect::<Result<_, _>>()?)
        })
        .await
}

/// Records a test's outcome; a failed one writes `provider.test_failed` in the same transaction.
/// The provider tested is the write's subject.
pub async fn set_status(
    store: &Store,
    tenant_id: &str,
    provider: &str,
    status: &str,
    event: Option<super::webhooks::Event>,
) -> Result<(), StoreError> {
    let (t, p, s) = (tenant_id.to_string(), provider.to_string(), status.to_string());
    store
        .write(move |tx, _| {
            Box::pin(async move {
                sqlx::query("UPDATE provider_credentials SET status = $1 WHERE tenant_id = $2 AND provider = $3")
                    .bind(s)
                    .bind(t)
                    .bind(&p)
                    .execute(&mut **tx)
                    .await?;
                if let Some(ev) = &event {
                    super::webhooks::enqueue::<sqlx::Any>(&mut **tx, ev).await?;
                }
                Ok(Changed::to(p, ()))
            })
        })
        .await
}
