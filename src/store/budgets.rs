//! Budget rows: a cap of `amount_usd` per `period` on the spend of a key, a team or a tenant.

use sqlx::any::AnyRow;
use sqlx::Row;

use super::change::Changed;
use super::{now_ts, Store, StoreError};

/// A stored budget; spend is not stored here but read from the ledger when shown.
#[derive(Debug, Clone, PartialEq)]
pub struct Budget {
    pub id: String,
    pub tenant_id: String,
    /// `key`, `team`, `tenant` or `end_user`.
    pub scope: String,
    /// For `end_user`: whose end users, `key:<id>`, `team:<id>` or `tenant:<id>`.
    pub scope_id: String,
    /// For `end_user`: the one end user it caps (None: each end user of `scope_id`).
    pub end_user: Option<String>,
    pub amount_usd: f64,
    /// `monthly` or `total`.
    pub period: String,
    pub created_at: String,
    pub updated_at: String,
}

const COLUMNS: &str = "id, tenant_id, scope, scope_id, end_user, amount_usd, period, created_at, updated_at";

const TABLE: super::rows::Table = super::rows::Table { name: "budgets", columns: COLUMNS };

fn from_row(r: &AnyRow) -> Result<Budget, sqlx::Error> {
    Ok(Budget {
        id: r.try_get("id")?,
        tenant_id: r.try_get("tenant_id")?,
        scope: r.try_get("scope")?,
        scope_id: r.try_get("scope_id")?,
        end_user: r.try_get("end_user")?,
        amount_usd: r.try_get("amount_usd")?,
        period: r.try_get("period")?,
        created_at: r.try_get("created_at")?,
        updated_at: r.try_get("updated_at")?,
    })
}

pub async fn insert(
    store: &Store,
    tenant_id: &str,
    scope: &str,
    scope_id: &str,
    end_user: Option<&str>,
    amount_usd: f64,
    period: &str,
) -> Result<Budget, StoreError> {
    let now = now_ts();
    let b = Budget {
        id: uuid::Uuid::now_v7().to_string(),
        tenant_id: tenant_id.to_string(),
        scope: scope.to_string(),
        scope_id: scope_id.to_string(),
        end_user: end_user.map(str::to_string),
        amount_usd,
        period: period.to_string(),
        created_at: now.clone(),
        updated_at: now,
    };
    let r = b.clone();
    store
        .write(move |tx, _| {
            Box::pin(async move {
                sqlx::query(
                    "INSERT INTO budgets (id, tenant_id, scope, scope_id, amount_usd, period, created_at, updated_at, \
                     end_user) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                )
                .bind(r.id)
                .bind(r.tenant_id)
                .bind(r.scope)
                .bind(r.scope_id)
                .bind(r.amount_usd)
                .bind(r.period)
                .bind(r.created_at)
                .bind(r.updated_at)
                .bind(r.end_user)
                .execute(&mut **tx)
                .await?;
                Ok(Changed::to(b.id.clone(), b))
            })
        })
        .await
}

pub async fn get(store: &Store, tenant_id: &str, id: &str) -> Result<Option<Budget>, StoreError> {
    TABLE.get(store, tenant_id, id, from_row).await
}

/// A page of the tenant's budgets in creation order (ids are UUIDv7).
pub async fn list(store: &Store, tenant_id: &str, after: Option<&str>, limit: i64) -> Result<Vec<Budget>, StoreError> {
    TABLE.page(store, tenant_id, after, limit, from_row).await
}

/// Every budget of every tenant: the source of the snapshot's budget book.
pub async fn all(store: &Store) -> Result<Vec<Budget>, StoreError> {
    TABLE.all(store, from_row).await
}

/// Sets the fields given (None leaves one unchanged); None when the tenant has no such budget.
pub async fn update(
    store: &Store,
    tenant_id: &str,
    id: &str,
    amount_usd: Option<f64>,
    period: Option<&str>,
) -> Result<Option<Budget>, StoreError> {
    let (t, id, period) = (tenant_id.to_string(), id.to_string(), period.map(str::to_string));
    store
        .write(move |tx, _| {
            Box::pin(async move {
                let sql = format!("SELECT {COLUMNS} FROM budgets WHERE tenant_id = $1 AND id = $2");
                let Some(row) =
                    sqlx::query(sqlx::AssertSqlSafe(sql)).bind(&t).bind(&id).fetch_optional(&mut **tx).await?
                else {
                    return Ok(Changed::nothing(None));
                };
                let mut b = from_row(&row)?;
                if let Some(a) = amount_usd {
                    b.amount_usd = a;
                }
                if let Some(p) = period {
                    b.period = p;
                }
                b.updated_at = now_ts();
                sqlx::query("UPDATE budgets SET amount_usd = $1, period = $2, updated_at = $3 WHERE id = $4")
                    .bind(b.amount_usd)
                    .bind(&b.period)
                    .bind(&b.updated_at)
                    .bind(&id)
                    .execute(&mut **tx)
                    .await?;
                Ok(Changed::to(id, Some(b)))
            })
        })
        .await
}

/// False when the tenant has no such budget.
pub async fn delete(store: &Store, tenant_id: &str, id: &str) -> Result<bool, StoreError> {
    TABLE.delete(store, tenant_id, id).await
}
