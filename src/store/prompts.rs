//! Prompts and their numbered versions. A version's number comes from its prompt's
//! `latest_version`, bumped in the same write transaction as the insert (SQLite's `BEGIN
//! IMMEDIATE`, PostgreSQL's row lock), so concurrent creates are numbered 1, 2, 3, ...

use std::collections::BTreeMap;

use serde::Serialize;
use sqlx::any::AnyRow;
use sqlx::Row;

use super::change::{Changed, WriteTx};
use super::{now_ts, Store, StoreError};

#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PromptRecord {
    pub id: String,
    #[serde(skip)]
    pub tenant_id: String,
    pub name: String,
    pub description: String,
    pub labels: BTreeMap<String, String>,
    pub created_at: String,
}

#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct VersionRecord {
    pub id: String,
    pub prompt_id: String,
    pub version: i64,
    pub content: String,
    pub created_at: String,
}

const COLUMNS: &str = "id, tenant_id, name, description, labels, created_at";
const TABLE: super::rows::Table = super::rows::Table { name: "prompts", columns: COLUMNS };
const VERSION_COLUMNS: &str = "id, prompt_id, version, content, created_at";

fn from_row(r: &AnyRow) -> Result<PromptRecord, sqlx::Error> {
    let labels: String = r.try_get("labels")?;
    Ok(PromptRecord {
        id: r.try_get("id")?,
        tenant_id: r.try_get("tenant_id")?,
        name: r.try_get("name")?,
        description: r.try_get("description")?,
        labels: serde_json::from_str(&labels).unwrap_or_default(),
        created_at: r.try_get("created_at")?,
    })
}

fn version_from_row(r: &AnyRow) -> Result<VersionRecord, sqlx::Error> {
    Ok(VersionRecord {
        id: r.try_get("id")?,
        prompt_id: r.try_get("prompt_id")?,
        version: r.try_get("version")?,
        content: r.try_get("content")?,
        created_at: r.try_get("created_at")?,
    })
}

/// Creates a prompt and its version 1 in one transaction.
pub async fn create(
    store: &Store,
    tenant_id: &str,
    name: String,
    description: String,
    labels: BTreeMap<String, String>,
    content: String,
) -> Result<(PromptRecord, VersionRecord), StoreError> {
    let now = now_ts();
    let prompt = PromptRecord {
        id: uuid::Uuid::now_v7().to_string(),
        tenant_id: tenant_id.to_string(),
        name,
        description,
        labels,
        created_at: now.clone(),
    };
    let version = VersionRecord {
        id: uuid::Uuid::now_v7().to_string(),
        prompt_id: prompt.id.clone(),
        version: 1,
        content,
        created_at: now,
    };
    store
        .write(move |tx, _| {
            Box::pin(async move {
                let (p, v) = (&prompt, &version);
                sqlx::query(
                    "INSERT INTO prompts (id, tenant_id, name, description, labels, latest_version, created_at) \
                     VALUES ($1, $2, $3, $4, $5, 1, $6)",
                )
                .bind(&p.id)
                .bind(&p.tenant_id)
                .bind(&p.name)
                .bind(&p.description)
                .bind(serde_json::to_string(&p.labels).unwrap_or_else(|_| "{}".into()))
                .bind(&p.created_at)
                .execute(&mut **tx)
                .await?;
                insert_version(tx, &p.tenant_id, v).await?;
                Ok(Changed::to(prompt.id.clone(), (prompt, version)))
            })
        })
        .await
}

async fn insert_version(tx: &mut WriteTx, tenant_id: &str, v: &VersionRecord) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO prompt_versions (id, tenant_id, prompt_id, version, content, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(&v.id)
    .bind(tenant_id)
    .bind(&v.prompt_id)
    .bind(v.version)
    .bind(&v.content)
    .bind(&v.created_at)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// The next version of one of the tenant's prompts; None when it has no such prompt. The
/// prompt is the write's subject.
pub async fn add_version(
    store: &Store,
    tenant_id: &str,
    prompt_id: &str,
    content: String,
) -> Result<Option<VersionRecord>, StoreError> {
    let (t, id) = (tenant_id.to_string(), prompt_id.to_string());
    store
        .write(move |tx, _| {
            Box::pin(async move {
                // The bump takes the row's write lock: a concurrent create waits for this commit.
                let row = sqlx::query(
                    "UPDATE prompts SET latest_version = latest_version + 1 WHERE tenant_id = $1 AND id = $2 \
                     RETURNING latest_version",
                )
                .bind(&t)
                .bind(&id)
                .fetch_optional(&mut **tx)
                .await?;
                let Some(row) = row else { return Ok(Changed::nothing(None)) };
                let v = VersionRecord {
                    id: uuid::Uuid::now_v7().to_string(),
                    prompt_id: id.clone(),
                    version: row.try_get("latest_version")?,
                    content,
                    created_at: now_ts(),
                };
                insert_version(tx, &t, &v).await?;
                Ok(Changed::to(id, Some(v)))
            })
        })
        .await
}

pub async fn get(store: &Store, tenant_id: &str, id: &str) -> Result<Option<PromptRecord>, StoreError> {
    TABLE.get(store, tenant_id, id, from_row).await
}

/// A page of the tenant's prompts in creation order.
pub async fn list(
    store: &Store,
    tenant_id: &str,
    after: Option<&str>,
    limit: i64,
) -> Result<Vec<PromptRecord>, StoreError> {
    TABLE.page(store, tenant_id, after, limit, from_row).await
}

/// Every version of one of the tenant's prompts, oldest first (another tenant's: none).
pub async fn versions(store: &Store, tenant_id: &str, prompt_id: &str) -> Result<Vec<VersionRecord>, StoreError> {
    let (t, id) = (tenant_id.to_string(), prompt_id.to_string());
    store
        .run(|pool, _| async move {
            let sql = format!(
                "SELECT {VERSION_COLUMNS} FROM prompt_versions WHERE tenant_id = $1 AND prompt_id = $2 ORDER BY version"
            );
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(t).bind(id).fetch_all(&pool).await?;
            Ok(rows.iter().map(version_from_row).collect::<Result<_, _>>()?)
        })
        .await
}

/// One version, by its id, of one of the tenant's prompts.
pub async fn version(
    store: &Store,
    tenant_id: &str,
    prompt_id: &str,
    version_id: &str,
) -> Result<Option<VersionRecord>, StoreError> {
    let (t, p, v) = (tenant_id.to_string(), prompt_id.to_string(), version_id.to_string());
    store
        .run(|pool, _| async move {
            let sql = format!(
                "SELECT {VERSION_COLUMNS} FROM prompt_versions WHERE tenant_id = $1 AND prompt_id = $2 AND id = $3"
            );
            let row = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(t).bind(p).bind(v).fetch_optional(&pool).await?;
            Ok(row.as_ref().map(version_from_row).transpose()?)
        })
        .await
}
