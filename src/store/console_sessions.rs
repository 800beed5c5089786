//! The web console's session rows (migrations 0017, 0019): found by the hash of the cookie's id,
//! never by the id itself.

use sqlx::any::AnyRow;
use sqlx::Row;

use super::change::Changed;
use super::{Store, StoreError};

#[derive(Debug, Clone, PartialEq)]
pub struct SessionRow {
    /// Lowercase hex SHA-256 of the session id.
    pub id_hash: String,
    pub tenant_id: String,
    /// The signed-in key's `key_hash`; None for a single sign-on session.
    pub key_hash: Option<String>,
    /// The key, encrypted at rest; None for a single sign-on session.
    pub key_sealed: Option<String>,
    /// The key id, or the identity provider's subject.
    pub subject: String,
    pub role: String,
    pub csrf: String,
    pub created_ms: i64,
    pub seen_ms: i64,
    /// A single sign-on session's own key (made at its first prompt run): its id, and the key
    /// encrypted at rest. None until then, and for a key session.
    pub run_key_id: Option<String>,
    pub run_key_sealed: Option<String>,
}

const COLUMNS: &str =
    "id_hash, tenant_id, key_hash, key_sealed, subject, role, csrf, created_ms, seen_ms, run_key_id, run_key_sealed";

fn from_row(r: &AnyRow) -> Result<SessionRow, sqlx::Error> {
    Ok(SessionRow {
        id_hash: r.try_get("id_hash")?,
        tenant_id: r.try_get("tenant_id")?,
        key_hash: r.try_get("key_hash")?,
        key_sealed: r.try_get("key_sealed")?,
        subject: r.try_get("subject")?,
        role: r.try_get("role")?,
        csrf: r.try_get("csrf")?,
        created_ms: r.try_get("created_ms")?,
        seen_ms: r.try_get("seen_ms")?,
        run_key_id: r.try_get("run_key_id")?,
        run_key_sealed: r.try_get("run_key_sealed")?,
    })
}

pub async fn insert(store: &Store, row: SessionRow) -> Result<(), StoreError> {
    store
        .write(move |tx, _| {
            Box::pin(async move {
                let sql = format!(
                    "INSERT INTO console_sessions ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
                );
                sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(row.id_hash)
                    .bind(row.tenant_id)
                    .bind(row.key_hash)
                    .bind(row.key_sealed)
                    .bind(row.subject)
                    .bind(row.role)
                    .bind(row.csrf)
                    .bind(row.created_ms)
                    .bind(row.seen_ms)
                    .bind(row.run_key_id)
                    .bind(row.run_key_sealed)
                    .execute(&mut **tx)
                    .await?;
                Ok(Changed::nothing(()))
            })
        })
        .await
}

pub async fn get(store: &Store, id_hash: &str) -> Result<Option<SessionRow>, StoreError> {
    let id = id_hash.to_string();
    store
        .run(|pool, _| async move {
            let sql = format!("SELECT {COLUMNS} FROM console_sessions WHERE id_hash = $1");
            let row = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(id).fetch_optional(&pool).await?;
            Ok(row.map(|r| from_row(&r)).transpose()?)
        })
        .await
}

/// Marks the session used at `now_ms` (its idle expiry starts again).
pub async fn touch(store: &Store, id_hash: &str, now_ms: i64) -> Result<(), StoreError> {
    let id = id_hash.to_string();
    store
        .write(move |tx, _| {
            Box::pin(async move {
                sqlx::query("UPDATE console_sessions SET seen_ms = $1 WHERE id_hash = $2")
                    .bind(now_ms)
                    .bind(id)
                    .execute(&mut **tx)
                    .await?;
                Ok(Changed::nothing(()))
            })
        })
        .await
}

/// Ends one session (sign-out, expiry, a revoked key).
pub async fn delete(store: &Store, id_hash: &str) -> Result<(), StoreError> {
    let id = id_hash.to_string();
    store
        .write(move |tx, _| {
            Box::pin(async move {
                sqlx::query("DELETE FROM console_sessions WHERE id_hash = $1").bind(id).execute(&mut **tx).await?;
                Ok(Changed::nothing(()))
            })
        })
        .await
}

/// Removes every expired session (created before `created_before_ms` or idle since
/// `seen_before_ms`) that has no key of its own; one that has is ended by [`expired_with_keys`]'s
/// caller, its key revoked first.
pub async fn sweep(store: &Store, created_before_ms: i64, seen_before_ms: i64) -> Result<(), StoreError> {
    store
        .write(move |tx, _| {
            Box::pin(async move {
                sqlx::query(
                    "DELETE FROM console_sessions WHERE (created_ms < $1 OR seen_ms < $2) AND run_key_id IS NULL",
                )
                .bind(created_before_ms)
                .bind(seen_before_ms)
                .execute(&mut **tx)
                .await?;
                Ok(Changed::nothing(()))
            })
        })
        .await
}

/// Up to `limit` expired sessions that have a key of their own (to revoke, then delete).
pub async fn expired_with_keys(
    store: &Store,
    created_before_ms: i64,
    seen_before_ms: i64,
    limit: i64,
) -> Result<Vec<SessionRow>, StoreError> {
    store
        .run(|pool, _| async move {
            let sql = format!(
                "SELECT {COLUMNS} FROM console_sessions WHERE (created_ms < $1 OR seen_ms < $2) \
                 AND run_key_id IS NOT NULL ORDER BY seen_ms LIMIT $3"
            );
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(created_before_ms)
                .bind(seen_before_ms)
                .bind(limit)
                .fetch_all(&pool)
                .await?;
            Ok(rows.iter().map(from_row).collect::<Result<Vec<_>, _>>()?)
        })
        .await
}

/// Gives a session its own key, unless it already has one (a run in another tab made it
/// meanwhile) or it has ended: whether the key was set.
pub async fn set_run_key(store: &Store, id_hash: &str, key_id: String, sealed: String) -> Result<bool, StoreError> {
    let id = id_hash.to_string();
    store
        .write(move |tx, _| {
            Box::pin(async move {
                let done = sqlx::query(
                    "UPDATE console_sessions SET run_key_id = $1, run_key_sealed = $2 \
                     WHERE id_hash = $3 AND run_key_id IS NULL",
                )
                .bind(key_id)
                .bind(sealed)
                .bind(id)
                .execute(&mut **tx)
                .await?;
                Ok(Changed::nothing(done.rows_affected() == 1))
            })
        })
        .await
}
