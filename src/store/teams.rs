//! Team rows. Names are unique per tenant (a database constraint, so two concurrent creates
//! cannot both win).

use serde::Serialize;
use sqlx::any::AnyRow;
use sqlx::Row;

use super::change::{Changed, WriteTx};
use super::{is_unique_violation, now_ts, nullable_real, Store, StoreError};

#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Team {
    pub id: String,
    pub tenant_id: String,
    pub name: String,
    pub budget_pool_usd: Option<f64>,
    pub created_at: String,
    pub updated_at: String,
}

const COLUMNS: &str = "id, tenant_id, name, budget_pool_usd, created_at, updated_at";

const TABLE: super::rows::Table = super::rows::Table { name: "teams", columns: COLUMNS };

fn from_row(r: &AnyRow) -> Result<Team, sqlx::Error> {
    Ok(Team {
        id: r.try_get("id")?,
        tenant_id: r.try_get("tenant_id")?,
        name: r.try_get("name")?,
        budget_pool_usd: r.try_get("budget_pool_usd")?,
        created_at: r.try_get("created_at")?,
        updated_at: r.try_get("updated_at")?,
    })
}

/// The result of a write that may collide with another team's name.
#[derive(Debug)]
pub enum Saved {
    Team(Team),
    NameTaken,
    NotFound,
}

/// The result of deleting a team.
#[derive(Debug, PartialEq)]
pub enum Deleted {
    Done,
    NotFound,
    /// Live keys still belong to the team (how many).
    HasKeys(i64),
}

pub async fn create(store: &Store, tenant_id: &str, name: &str, pool_usd: Option<f64>) -> Result<Saved, StoreError> {
    let now = now_ts();
    let team = Team {
        id: uuid::Uuid::now_v7().to_string(),
        tenant_id: tenant_id.to_string(),
        name: name.to_string(),
        budget_pool_usd: pool_usd,
        created_at: now.clone(),
        updated_at: now,
    };
    let t = team.clone();
    let (pool_value, pool_set) = nullable_real(t.budget_pool_usd);
    store
        .write(move |tx, _| {
            Box::pin(async move {
                let done = sqlx::query(
                    "INSERT INTO teams (id, tenant_id, name, budget_pool_usd, created_at, updated_at) \
                     VALUES ($1, $2, $3, CASE WHEN $7 = 1 THEN $4 END, $5, $6)",
                )
                .bind(t.id)
                .bind(t.tenant_id)
                .bind(t.name)
                .bind(pool_value)
                .bind(t.created_at)
                .bind(t.updated_at)
                .bind(pool_set)
                .execute(&mut **tx)
                .await;
                match done {
                    Ok(_) => Ok(Changed::to(team.id.clone(), Saved::Team(team))),
                    Err(e) if is_unique_violation(&e) => Ok(Changed::nothing(Saved::NameTaken)),
                    Err(e) => Err(e.into()),
                }
            })
        })
        .await
}

pub async fn get(store: &Store, tenant_id: &str, id: &str) -> Result<Option<Team>, StoreError> {
    TABLE.get(store, tenant_id, id, from_row).await
}

/// A page of the tenant's teams in creation order (ids are UUIDv7).
pub async fn list(store: &Store, tenant_id: &str, after: Option<&str>, limit: i64) -> Result<Vec<Team>, StoreError> {
    TABLE.page(store, tenant_id, after, limit, from_row).await
}

/// Every team of every tenant: the source of the snapshot's team names and pools.
pub async fn all(store: &Store) -> Result<Vec<Team>, StoreError> {
    TABLE.all(store, from_row).await
}

/// Renames the team and, when `pool_usd` is given, sets (`Some(Some)`) or clears (`Some(None)`)
/// its budget pool.
pub async fn update(
    store: &Store,
    tenant_id: &str,
    id: &str,
    name: &str,
    pool_usd: Option<Option<f64>>,
) -> Result<Saved, StoreError> {
    let (t, id, name) = (tenant_id.to_string(), id.to_string(), name.to_string());
    store
        .write(move |tx, _| {
            Box::pin(async move {
                Ok(match update_in(tx, &t, &id, name, pool_usd).await? {
                    Saved::Team(team) => Changed::to(id, Saved::Team(team)),
                    other => Changed::nothing(other),
                })
            })
        })
        .await
}

/// [`update`]'s statements, in its write transaction.
async fn update_in(
    tx: &mut WriteTx,
    t: &str,
    id: &str,
    name: String,
    pool_usd: Option<Option<f64>>,
) -> Result<Saved, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM teams WHERE tenant_id = $1 AND id = $2");
    let Some(row) = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(t).bind(id).fetch_optional(&mut **tx).await? else {
        return Ok(Saved::NotFound);
    };
    let mut team = from_row(&row)?;
    team.name = name;
    if let Some(p) = pool_usd {
        team.budget_pool_usd = p;
    }
    team.updated_at = now_ts();
    let (pool_value, pool_set) = nullable_real(team.budget_pool_usd);
    let done = sqlx::query(
        "UPDATE teams SET name = $1, budget_pool_usd = CASE WHEN $5 = 1 THEN $2 END, updated_at = $3 \
         WHERE id = $4",
    )
    .bind(&team.name)
    .bind(pool_value)
    .bind(&team.updated_at)
    .bind(id)
    .bind(pool_set)
    .execute(&mut **tx)
    .await;
    match done {
        Ok(_) => Ok(Saved::Team(team)),
        Err(e) if is_unique_violation(&e) => Ok(Saved::NameTaken),
        Err(e) => Err(e.into()),
    }
}

/// Deletes a team no live key belongs to. Its members stay, without a team; its budgets go,
/// since nothing can be charged to a team that no longer exists.
pub async fn delete(store: &Store, tenant_id: &str, id: &str) -> Result<Deleted, StoreError> {
    let (t, id) = (tenant_id.to_string(), id.to_string());
    store
        .write(move |tx, _| {
            Box::pin(async move {
                Ok(match delete_in(tx, &t, &id).await? {
                    Deleted::Done => Changed::to(id, Deleted::Done),
                    other => Changed::nothing(other),
                })
            })
        })
        .await
}

/// [`delete`]'s statements, in its write transaction.
async fn delete_in(tx: &mut WriteTx, t: &str, id: &str) -> Result<Deleted, StoreError> {
    let found = sqlx::query("SELECT id FROM teams WHERE tenant_id = $1 AND id = $2")
        .bind(t)
        .bind(id)
        .fetch_optional(&mut **tx)
        .await?;
    if found.is_none() {
        return Ok(Deleted::NotFound);
    }
    let keys: i64 =
        sqlx::query("SELECT COUNT(*) AS n FROM api_keys WHERE tenant_id = $1 AND team_id = $2 AND revoked_at IS NULL")
            .bind(t)
            .bind(id)
            .fetch_one(&mut **tx)
            .await?
            .try_get("n")?;
    if keys > 0 {
        return Ok(Deleted::HasKeys(keys));
    }
    sqlx::query("UPDATE team_members SET team_id = NULL WHERE tenant_id = $1 AND team_id = $2")
        .bind(t)
        .bind(id)
        .execute(&mut **tx)
        .await?;
    sqlx::query("DELETE FROM budgets WHERE tenant_id = $1 AND scope = 'team' AND scope_id = $2")
        .bind(t)
        .bind(id)
        .execute(&mut **tx)
        .await?;
    sqlx::query("DELETE FROM teams WHERE tenant_id = $1 AND id = $2").bind(t).bind(id).execute(&mut **tx).await?;
    Ok(Deleted::Done)
}
