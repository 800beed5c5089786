//! Provider credential rows. `sealed` is ciphertext (see `sealing`); nothing here is clear text.

use sqlx::any::AnyRow;
use sqlx::Row;

use super::change::Changed;
use super::{now_ts, Store, StoreError};

#[derive(Debug, Clone)]
pub struct CredentialRow {
    pub tenant_id: String,
    pub provider: String,
    /// `default` (the seed's one credential per provider, in `provider_credentials`) or a
    /// named credential (`provider_named_credentials`).
    pub name: String,
    pub sealed: String,
    pub key_hint: String,
    pub base_url: Option<String>,
    pub region: Option<String>,
    pub status: String,
    pub updated_at: String,
}

const COLUMNS: &str = "tenant_id, provider, 'default' AS name, sealed, key_hint, base_url, region, status, updated_at";
const NAMED_COLUMNS: &str = "tenant_id, provider, name, sealed, key_hint, base_url, region, status, updated_at";

/// The name of the credential `PUT /v1/providers/{provider}` sets.
pub const DEFAULT: &str = "default";

fn from_row(r: &AnyRow) -> Result<CredentialRow, sqlx::Error> {
    Ok(CredentialRow {
        tenant_id: r.try_get("tenant_id")?,
        provider: r.try_get("provider")?,
        name: r.try_get("name")?,
        sealed: r.try_get("sealed")?,
        key_hint: r.try_get("key_hint")?,
        base_url: r.try_get("base_url")?,
        region: r.try_get("region")?,
        status: r.try_get("status")?,
        updated_at: r.try_get("updated_at")?,
    })
}

/// What an upsert of either table sets on conflict.
macro_rules! credential_update {
    () => {
        " DO UPDATE SET sealed = excluded.sealed, key_hint = excluded.key_hint, base_url = excluded.base_url, \
         region = excluded.region, status = excluded.status, updated_at = excluded.updated_at"
    };
}

const UPSERT_DEFAULT: &str = concat!(
    "INSERT INTO provider_credentials (tenant_id, provider, sealed, key_hint, base_url, region, status, updated_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (tenant_id, provider)",
    credential_update!()
);

const UPSERT_NAMED: &str = concat!(
    "INSERT INTO provider_named_credentials (tenant_id, provider, name, sealed, key_hint, base_url, region, status, \
     updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (tenant_id, provider, name)",
    credential_update!()
);

/// Creates or replaces a tenant's credential for one provider; returns the stored row. The
/// `default` credential lives in `provider_credentials` (the write's subject is the provider),
/// the named ones in `provider_named_credentials` (subject `provider/name`).
pub async fn upsert(store: &Store, mut row: CredentialRow) -> Result<CredentialRow, StoreError> {
    row.updated_at = now_ts();
    let named = row.name != DEFAULT;
    let subject = if named { format!("{}/{}", row.provider, row.name) } else { row.provider.clone() };
    let r = row.clone();
    store
        .write(move |tx, _| {
            Box::pin(async move {
                let q = match named {
                    true => sqlx::query(UPSERT_NAMED).bind(r.tenant_id).bind(r.provider).bind(r.name),
                    false => sqlx::query(UPSERT_DEFAULT).bind(r.tenant_id).bind(r.provider),
                };
                q.bind(r.sealed)
                    .bind(r.key_hint)
                    .bind(r.base_url)
                    .bind(r.region)
                    .bind(r.status)
                    .bind(r.updated_at)
                    .execute(&mut **tx)
                    .await?;
                Ok(Changed::to(subject, row))
            })
        })
        .await
}

pub async fn all(store: &Store) -> Result<Vec<CredentialRow>, StoreError> {
    store
        .run(|pool, _| async move {
            let sql = format!(
                "SELECT {COLUMNS} FROM provider_credentials UNION ALL \
                 SELECT {NAMED_COLUMNS} FROM provider_named_credentials ORDER BY 1, 2, 3"
            );
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql)).fetch_all(&pool).await?;
            Ok(rows.iter().map(from_row).collect::<Result<_, _>>()?)
        })
        .await
}

pub async fn for_tenant(store: &Store, tenant_id: &str) -> Result<Vec<CredentialRow>, StoreError> {
    let t = tenant_id.to_string();
    store
        .run(|pool, _| async move {
            let sql = format!(
                "SELECT {COLUMNS} FROM provider_credentials WHERE tenant_id = $1 UNION ALL \
                 SELECT {NAMED_COLUMNS} FROM provider_named_credentials WHERE tenant_id = $2 ORDER BY 2, 3"
            );
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(t.clone()).bind(t).fetch_all(&pool).await?;
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

/// Deletes one credential; None when the tenant had none of that name. The subject is
/// `provider/name`.
pub async fn delete(store: &Store, tenant_id: &str, provider: &str, name: &str) -> Result<Option<()>, StoreError> {
    let (t, p, n) = (tenant_id.to_string(), provider.to_string(), name.to_string());
    store
        .write(move |tx, _| {
            Box::pin(async move {
                let done = if n == DEFAULT {
                    sqlx::query("DELETE FROM provider_credentials WHERE tenant_id = $1 AND provider = $2")
                        .bind(t)
                        .bind(p.clone())
                        .execute(&mut **tx)
                        .await?
                } else {
                    sqlx::query(
                        "DELETE FROM provider_named_credentials WHERE tenant_id = $1 AND provider = $2 AND name = $3",
                    )
                    .bind(t)
                    .bind(p.clone())
                    .bind(n.clone())
                    .execute(&mut **tx)
                    .await?
                };
                Ok(match done.rows_affected() {
                    0 => Changed::nothing(None),
                    _ => Changed::to(format!("{p}/{n}"), Some(())),
                })
            })
        })
        .await
}
