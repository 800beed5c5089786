//! A tenant's model routes (`PUT /v1/routes/{model}`): the route's JSON as the API took it.

use sqlx::Row;

use super::change::Changed;
use super::{now_ts, Store, StoreError};

#[derive(Debug, Clone)]
pub struct RouteRow {
    pub tenant_id: String,
    pub model: String,
    /// The route as JSON (`config::RouteSpec`).
    pub spec: String,
    pub updated_at: String,
}

fn from_row(r: &sqlx::any::AnyRow) -> Result<RouteRow, sqlx::Error> {
    Ok(RouteRow {
        tenant_id: r.try_get("tenant_id")?,
        model: r.try_get("model")?,
        spec: r.try_get("spec")?,
        updated_at: r.try_get("updated_at")?,
    })
}

/// Every tenant's routes (for the snapshot).
pub async fn all(store: &Store) -> Result<Vec<RouteRow>, StoreError> {
    store
        .run(|pool, _| async move {
            let sql = "SELECT tenant_id, model, spec, updated_at FROM model_routes ORDER BY tenant_id, model";
            let rows = sqlx::query(sql).fetch_all(&pool).await?;
            Ok(rows.iter().map(from_row).collect::<Result<_, _>>()?)
        })
        .await
}

/// One tenant's routes, by model.
pub async fn for_tenant(store: &Store, tenant_id: &str) -> Result<Vec<RouteRow>, StoreError> {
    let t = tenant_id.to_string();
    store
        .run(|pool, _| async move {
            let sql = "SELECT tenant_id, model, spec, updated_at FROM model_routes WHERE tenant_id = $1 ORDER BY model";
            let rows = sqlx::query(sql).bind(t).fetch_all(&pool).await?;
            Ok(rows.iter().map(from_row).collect::<Result<_, _>>()?)
        })
        .await
}

/// Creates or replaces the tenant's route for `model`; the model is the write's subject.
pub async fn put(store: &Store, tenant_id: &str, model: &str, spec: String) -> Result<RouteRow, StoreError> {
    let row = RouteRow { tenant_id: tenant_id.into(), model: model.into(), spec, updated_at: now_ts() };
    let r = row.clone();
    store
        .write(move |tx, _| {
            Box::pin(async move {
                sqlx::query(
                    "INSERT INTO model_routes (tenant_id, model, spec, updated_at) VALUES ($1, $2, $3, $4) \
                     ON CONFLICT (tenant_id, model) DO UPDATE SET spec = excluded.spec, updated_at = excluded.updated_at",
                )
                .bind(r.tenant_id)
                .bind(r.model)
                .bind(r.spec)
                .bind(r.updated_at)
                .execute(&mut **tx)
                .await?;
                Ok(Changed::to(row.model.clone(), row))
            })
        })
        .await
}

/// Deletes the tenant's route for `model`; None when it had none.
pub async fn delete(store: &Store, tenant_id: &str, model: &str) -> Result<Option<()>, StoreError> {
    let (t, m) = (tenant_id.to_string(), model.to_string());
    store
        .write(move |tx, _| {
            Box::pin(async move {
                let done = sqlx::query("DELETE FROM model_routes WHERE tenant_id = $1 AND model = $2")
                    .bind(t)
                    .bind(m.clone())
                    .execute(&mut **tx)
                    .await?;
                Ok(match done.rows_affected() {
                    0 => Changed::nothing(None),
                    _ => Changed::to(m, Some(())),
                })
            })
        })
        .await
}

/// One attempt of a routed request, as `GET /v1/receipts/{id}` shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AttemptRow {
    pub provider: String,
    pub credential: String,
    pub model: String,
    pub status: i64,
    pub outcome: String,
    pub ms: i64,
}

/// The attempts stored beside a receipt of the tenant's, in order (empty for a request that
/// had no route).
pub async fn attempts(store: &Store, tenant_id: &str, receipt_id: &str) -> Result<Vec<AttemptRow>, StoreError> {
    let (t, r) = (tenant_id.to_string(), receipt_id.to_string());
    store
        .run(|pool, _| async move {
            let rows = sqlx::query(
                "SELECT provider, credential, model, status, outcome, ms FROM receipt_attempts \
                 WHERE receipt_id = $1 AND tenant_id = $2 ORDER BY n",
            )
            .bind(r)
            .bind(t)
            .fetch_all(&pool)
            .await?;
            let one = |r: &sqlx::any::AnyRow| -> Result<AttemptRow, sqlx::Error> {
                Ok(AttemptRow {
                    provider: r.try_get("provider")?,
                    credential: r.try_get("credential")?,
                    model: r.try_get("model")?,
                    status: r.try_get("status")?,
                    outcome: r.try_get("outcome")?,
                    ms: r.try_get("ms")?,
                })
            };
            Ok(rows.iter().map(one).collect::<Result<_, _>>()?)
        })
        .await
}
