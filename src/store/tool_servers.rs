//! MCP tool-server rows of a tenant. `sealed_headers` is ciphertext (see `sealing`); the header
//! values are never stored, listed or logged in the clear.

use sqlx::any::AnyRow;
use sqlx::Row;

use super::change::Changed;
use super::{is_unique_violation, now_ts, Store, StoreError};

#[derive(Debug, Clone)]
pub struct ToolServerRow {
    pub tenant_id: String,
    pub name: String,
    pub url: String,
    pub sealed_headers: String,
    /// Comma-separated header names (values are only in `sealed_headers`).
    pub header_names: String,
    pub created_at: String,
}

const COLUMNS: &str = "tenant_id, name, url, sealed_headers, header_names, created_at";

fn from_row(r: &AnyRow) -> Result<ToolServerRow, sqlx::Error> {
    Ok(ToolServerRow {
        tenant_id: r.try_get("tenant_id")?,
        name: r.try_get("name")?,
        url: r.try_get("url")?,
        sealed_headers: r.try_get("sealed_headers")?,
        header_names: r.try_get("header_names")?,
        created_at: r.try_get("created_at")?,
    })
}

/// Registers a server; `Ok(None)` when the tenant already has one of that name.
pub async fn create(store: &Store, mut row: ToolServerRow) -> Result<Option<ToolServerRow>, StoreError> {
    row.created_at = now_ts();
    let r = row.clone();
    store
        .write(move |tx, _| {
            Box::pin(async move {
                let done = sqlx::query(
                    "INSERT INTO tool_servers (tenant_id, name, url, sealed_headers, header_names, created_at) \
                     VALUES ($1, $2, $3, $4, $5, $6)",
                )
                .bind(r.tenant_id)
                .bind(r.name)
                .bind(r.url)
                .bind(r.sealed_headers)
                .bind(r.header_names)
                .bind(r.created_at)
                .execute(&mut **tx)
                .await;
                match done {
                    Ok(_) => Ok(Changed::to(row.name.clone(), Some(row))),
                    Err(e) if is_unique_violation(&e) => Ok(Changed::nothing(None)),
                    Err(e) => Err(e.into()),
                }
            })
        })
        .await
}

pub async fn all(store: &Store) -> Result<Vec<ToolServerRow>, StoreError> {
    store
        .run(|pool, _| async move {
            let sql = format!("SELECT {COLUMNS} FROM tool_servers ORDER BY tenant_id, name");
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql)).fetch_all(&pool).await?;
            Ok(rows.iter().map(from_row).collect::<Result<_, _>>()?)
        })
        .await
}

pub async fn for_tenant(store: &Store, tenant_id: &str) -> Result<Vec<ToolServerRow>, StoreError> {
    let t = tenant_id.to_string();
    store
        .run(|pool, _| async move {
            let sql = format!("SELECT {COLUMNS} FROM tool_servers WHERE tenant_id = $1 ORDER BY name");
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(t).fetch_all(&pool).await?;
            Ok(rows.iter().map(from_row).collect::<Result<_, _>>()?)
        })
        .await
}

/// Removes a server; false when the tenant has none of that name.
pub async fn delete(store: &Store, tenant_id: &str, name: &str) -> Result<bool, StoreError> {
    let (t, n) = (tenant_id.to_string(), name.to_string());
    store
        .write(move |tx, _| {
            Box::pin(async move {
                let done = sqlx::query("DELETE FROM tool_servers WHERE tenant_id = $1 AND name = $2")
                    .bind(t)
                    .bind(&n)
                    .execute(&mut **tx)
                    .await?;
                Ok(if done.rows_affected() > 0 { Changed::to(n, true) } else { Changed::nothing(false) })
            })
        })
        .await
}
