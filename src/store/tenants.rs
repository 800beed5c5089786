//! Tenant rows.

use sqlx::Row;

use super::{now_ts, Store, StoreError};

#[derive(Debug, Clone)]
pub struct Tenant {
    pub id: String,
    pub name: String,
}

pub async fn create(store: &Store, name: &str) -> Result<Tenant, StoreError> {
    let t = Tenant { id: uuid::Uuid::now_v7().to_string(), name: name.to_string() };
    let (id, name) = (t.id.clone(), t.name.clone());
    store
        .run(|pool, _| async move {
            sqlx::query("INSERT INTO tenants (id, name, created_at) VALUES ($1, $2, $3)")
                .bind(id)
                .bind(name)
                .bind(now_ts())
                .execute(&pool)
                .await?;
            Ok(())
        })
        .await?;
    Ok(t)
}

pub async fn count(store: &Store) -> Result<i64, StoreError> {
    store
        .run(|pool, _| async move {
            let row = sqlx::query("SELECT COUNT(*) AS n FROM tenants").fetch_one(&pool).await?;
            Ok(row.try_get::<i64, _>("n")?)
        })
        .await
}

pub async fn by_name(store: &Store, name: &str) -> Result<Option<Tenant>, StoreError> {
    let name = name.to_string();
    store
        .run(|pool, _| async move {
            let row =
                sqlx::query("SELECT id, name FROM tenants WHERE name = $1").bind(name).fetch_optional(&pool).await?;
            Ok(row.map(|r| Tenant { id: r.get("id"), name: r.get("name") }))
        })
        .await
}

pub async fn exists(store: &Store, id: &str) -> Result<bool, StoreError> {
    let id = id.to_string();
    store
        .run(|pool, _| async move {
            let row = sqlx::query("SELECT id FROM tenants WHERE id = $1").bind(id).fetch_optional(&pool).await?;
            Ok(row.is_some())
        })
        .await
}

/// Every tenant (file policies may name a tenant by id or by name).
pub async fn all(store: &Store) -> Result<Vec<Tenant>, StoreError> {
    store
        .run(|pool, _| async move {
            let rows = sqlx::query("SELECT id, name FROM tenants ORDER BY id").fetch_all(&pool).await?;
            Ok(rows.iter().map(|r| Tenant { id: r.get("id"), name: r.get("name") }).collect())
        })
        .await
}
