//! Virtual key rows. The secret itself is never stored: only its SHA-256.

use serde::Serialize;
use sqlx::any::AnyRow;
use sqlx::Row;

use super::change::Changed;
use super::{now_ts, nullable_real, Store, StoreError};

/// A key as the management API shows it (the secret is never part of it).
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyRecord {
    pub id: String,
    #[serde(skip)]
    pub tenant_id: String,
    #[serde(skip)]
    pub key_hash: String,
    pub label: String,
    pub key_class: String,
    pub role: String,
    pub team_id: Option<String>,
    pub budget_usd: Option<f64>,
    pub spent_usd: f64,
    pub rpm_limit: Option<i64>,
    pub tpm_limit: Option<i64>,
    /// Requests per minute of each end user of this key (docs/decisions/end-users.md).
    pub end_user_rpm_limit: Option<i64>,
    /// Tokens per minute of each end user of this key.
    pub end_user_tpm_limit: Option<i64>,
    pub key_hint: String,
    pub created_at: String,
    pub last_used_at: Option<String>,
}

impl KeyRecord {
    /// A developer key of `tenant_id` with no limits, for fixtures in tests and benchmarks.
    pub fn fixture(id: &str, tenant_id: &str) -> KeyRecord {
        KeyRecord {
            id: id.into(),
            tenant_id: tenant_id.into(),
            key_hash: String::new(),
            label: String::new(),
            key_class: "interactive".into(),
            role: "developer".into(),
            team_id: None,
            budget_usd: None,
            spent_usd: 0.0,
            rpm_limit: None,
            tpm_limit: None,
            end_user_rpm_limit: None,
            end_user_tpm_limit: None,
            key_hint: String::new(),
            created_at: String::new(),
            last_used_at: None,
        }
    }
}

const COLUMNS: &str = "id, tenant_id, key_hash, label, key_class, role, team_id, budget_usd, \
     spent_usd, rpm_limit, tpm_limit, end_user_rpm_limit, end_user_tpm_limit, key_hint, created_at, last_used_at";

fn from_row(r: &AnyRow) -> Result<KeyRecord, sqlx::Error> {
    Ok(KeyRecord {
        id: r.try_get("id")?,
        tenant_id: r.try_get("tenant_id")?,
        key_hash: r.try_get("key_hash")?,
        label: r.try_get("label")?,
        key_class: r.try_get("key_class")?,
        role: r.try_get("role")?,
        team_id: r.try_get("team_id")?,
        budget_usd: r.try_get("budget_usd")?,
        spent_usd: r.try_get("spent_usd")?,
        rpm_limit: r.try_get("rpm_limit")?,
        tpm_limit: r.try_get("tpm_limit")?,
        end_user_rpm_limit: r.try_get("end_user_rpm_limit")?,
        end_user_tpm_limit: r.try_get("end_user_tpm_limit")?,
        key_hint: r.try_get("key_hint")?,
        created_at: r.try_get("created_at")?,
        last_used_at: r.try_get("last_used_at")?,
    })
}

pub struct NewKey {
    pub tenant_id: String,
    pub key_hash: String,
    pub key_hint: String,
    pub label: String,
    pub key_class: String,
    pub role: String,
    pub team_id: Option<String>,
    pub budget_usd: Option<f64>,
}

pub async fn insert(store: &Store, k: NewKey) -> Result<KeyRecord, StoreError> {
    let rec = KeyRecord {
        id: uuid::Uuid::now_v7().to_string(),
        tenant_id: k.tenant_id,
        key_hash: k.key_hash,
        label: k.label,
        key_class: k.key_class,
        role: k.role,
        team_id: k.team_id,
        budget_usd: k.budget_usd,
        spent_usd: 0.0,
        rpm_limit: None,
        tpm_limit: None,
        end_user_rpm_limit: None,
        end_user_tpm_limit: None,
        key_hint: k.key_hint,
        created_at: now_ts(),
        last_used_at: None,
    };
    let r = rec.clone();
    let (budget_value, budget_set) = nullable_real(r.budget_usd);
    // The event carries the record's ids and amounts, never the secret nor its hash or hint.
    let event = super::webhooks::Event::new(
        &r.tenant_id,
        "key.created",
        serde_json::json!({
            "keyId": r.id, "label": r.label, "keyClass": r.key_class, "role": r.role,
            "teamId": r.team_id, "budgetUsd": r.budget_usd, "createdAt": r.created_at,
        }),
    );
    store
        .write(move |tx, _| {
            Box::pin(async move {
                sqlx::query(
                    "INSERT INTO api_keys (id, tenant_id, key_hash, key_hint, label, key_class, role, \
                     team_id, budget_usd, spent_usd, created_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, CASE WHEN $11 = 1 THEN $9 END, 0, $10)",
                )
                .bind(r.id)
                .bind(r.tenant_id)
                .bind(r.key_hash)
                .bind(r.key_hint)
                .bind(r.label)
                .bind(r.key_class)
                .bind(r.role)
                .bind(r.team_id)
                .bind(budget_value)
                .bind(r.created_at)
                .bind(budget_set)
                .execute(&mut **tx)
                .await?;
                super::webhooks::enqueue::<sqlx::Any>(&mut **tx, &event).await?;
                Ok(Changed::to(rec.id.clone(), rec))
            })
        })
        .await
}

/// Every live key of every tenant: the source of the in-memory snapshot.
pub async fn all_active(store: &Store) -> Result<Vec<KeyRecord>, StoreError> {
    store
        .run(|pool, _| async move {
            let sql = format!("SELECT {COLUMNS} FROM api_keys WHERE revoked_at IS NULL");
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql)).fetch_all(&pool).await?;
            Ok(rows.iter().map(from_row).collect::<Result<_, _>>()?)
        })
        .await
}

/// A page of a tenant's live keys in creation order; `only` restricts to one key id.
pub async fn list(
    store: &Store,
    tenant_id: &str,
    only: Option<&str>,
    after: Option<&str>,
    limit: i64,
) -> Result<Vec<KeyRecord>, StoreError> {
    let (t, only, after) = (tenant_id.to_string(), only.map(str::to_string), after.map(str::to_string));
    store
        .run(|pool, _| async move {
            let sql = format!(
                "SELECT {COLUMNS} FROM api_keys WHERE tenant_id = $1 AND revoked_at IS NULL \
                 AND (CAST($2 AS TEXT) IS NULL OR id = $2) AND (CAST($3 AS TEXT) IS NULL OR id > $3) ORDER BY id LIMIT $4"
            );
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(t).bind(only).bind(after).bind(limit).fetch_all(&pool).await?;
            Ok(rows.iter().map(from_row).collect::<Result<_, _>>()?)
        })
        .await
}

/// Whether the tenant has a live (not revoked) key with this id.
pub async fn is_live(store: &Store, tenant_id: &str, id: &str) -> Result<bool, StoreError> {
    let (t, id) = (tenant_id.to_string(), id.to_string());
    store
        .run(|pool, _| async move {
            let row = sqlx::query("SELECT id FROM api_keys WHERE tenant_id = $1 AND id = $2 AND revoked_at IS NULL")
                .bind(t)
                .bind(id)
                .fetch_optional(&pool)
                .await?;
            Ok(row.is_some())
        })
        .await
}

/// Revokes a live key of the tenant; false when there is none (unknown, other tenant, revoked).
/// `key.revoked` is written in the same transaction.
pub async fn revoke(store: &Store, tenant_id: &str, id: &str) -> Result<bool, StoreError> {
    let (t, id) = (tenant_id.to_string(), id.to_string());
    store
        .write(move |tx, _| {
            Box::pin(async move {
                let now = now_ts();
                let done = sqlx::query(
                    "UPDATE api_keys SET revoked_at = $1 WHERE tenant_id = $2 AND id = $3 AND revoked_at IS NULL",
                )
                .bind(&now)
                .bind(&t)
                .bind(&id)
                .execute(&mut **tx)
                .await?;
                if done.rows_affected() != 1 {
                    return Ok(Changed::nothing(false));
                }
                let event =
                    super::webhooks::Event::new(&t, "key.revoked", serde_json::json!({"keyId": id, "revokedAt": now}));
                super::webhooks::enqueue::<sqlx::Any>(&mut **tx, &event).await?;
                Ok(Changed::to(id, true))
            })
        })
        .await
}

/// A change of a key's limits: per field, None leaves it unchanged, Some(None) clears it.
#[derive(Debug, Clone, Copy, Default)]
pub struct LimitsPatch {
    pub rpm: Option<Option<i64>>,
    pub tpm: Option<Option<i64>>,
    pub end_user_rpm: Option<Option<i64>>,
    pub end_user_tpm: Option<Option<i64>>,
}

/// `(set, value, not null)` binds of one patched field.
fn flag(v: Option<Option<i64>>) -> (i64, i64, i64) {
    (i64::from(v.is_some()), v.flatten().unwrap_or(0), i64::from(v.flatten().is_some()))
}

/// Sets the limits given (None leaves a field unchanged; Some(None) clears it).
pub async fn set_limits(
    store: &Store,
    tenant_id: &str,
    id: &str,
    patch: LimitsPatch,
) -> Result<Option<KeyRecord>, StoreError> {
    let (t, id) = (tenant_id.to_string(), id.to_string());
    store
        .write(move |tx, _| {
            Box::pin(async move {
                // The update first, then the read, both in the write transaction (on SQLite it
                // holds the write lock from its start).
                let mut q = sqlx::query(
                    "UPDATE api_keys SET \
                     rpm_limit = CASE WHEN $1 = 1 THEN (CASE WHEN $3 = 1 THEN $2 ELSE NULL END) ELSE rpm_limit END, \
                     tpm_limit = CASE WHEN $4 = 1 THEN (CASE WHEN $6 = 1 THEN $5 ELSE NULL END) ELSE tpm_limit END, \
                     end_user_rpm_limit = CASE WHEN $7 = 1 THEN (CASE WHEN $9 = 1 THEN $8 ELSE NULL END) \
                       ELSE end_user_rpm_limit END, \
                     end_user_tpm_limit = CASE WHEN $10 = 1 THEN (CASE WHEN $12 = 1 THEN $11 ELSE NULL END) \
                       ELSE end_user_tpm_limit END \
                     WHERE tenant_id = $13 AND id = $14 AND revoked_at IS NULL",
                );
                for field in [patch.rpm, patch.tpm, patch.end_user_rpm, patch.end_user_tpm] {
                    let (set, value, not_null) = flag(field);
                    q = q.bind(set).bind(value).bind(not_null);
                }
                q.bind(&t).bind(&id).execute(&mut **tx).await?;
                let sql =
                    format!("SELECT {COLUMNS} FROM api_keys WHERE tenant_id = $1 AND id = $2 AND revoked_at IS NULL");
                let row = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(&t).bind(&id).fetch_optional(&mut **tx).await?;
                Ok(match row.as_ref().map(from_row).transpose()? {
                    Some(rec) => Changed::to(id, Some(rec)),
                    None => Changed::nothing(None),
                })
            })
        })
        .await
}

/// Records last use for a batch of keys (flushed from memory by a background task).
pub async fn touch(store: &Store, used: Vec<(String, String)>) -> Result<(), StoreError> {
    if used.is_empty() {
        return Ok(());
    }
    store
        .run(|pool, backend| async move {
            let mut tx = super::begin_write(&pool, backend).await?;
            for (id, ts) in used {
                sqlx::query("UPDATE api_keys SET last_used_at = $1 WHERE id = $2")
                    .bind(ts)
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            Ok(())
        })
        .await
}
