//! The reads and deletes every tenant-scoped table shares: one row by id, a page in id order
//! (ids are UUIDv7, so that is creation order), every row, and delete by id. Each resource
//! module keeps its own columns and row mapping and calls these.

use sqlx::any::AnyRow;

use super::change::Changed;
use super::{Store, StoreError};

/// Maps one row to a record.
pub type FromRow<T> = fn(&AnyRow) -> Result<T, sqlx::Error>;

/// A tenant-scoped table: its name and the columns `FromRow` reads.
#[derive(Clone, Copy)]
pub struct Table {
    pub name: &'static str,
    pub columns: &'static str,
}

impl Table {
    /// The tenant's row with this id (another tenant's id is simply not found).
    pub async fn get<T: Send + 'static>(
        self,
        store: &Store,
        tenant_id: &str,
        id: &str,
        from_row: FromRow<T>,
    ) -> Result<Option<T>, StoreError> {
        let (t, id) = (tenant_id.to_string(), id.to_string());
        store
            .run(move |pool, _| async move {
                let sql = format!("SELECT {} FROM {} WHERE tenant_id = $1 AND id = $2", self.columns, self.name);
                let row = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(t).bind(id).fetch_optional(&pool).await?;
                Ok(row.as_ref().map(from_row).transpose()?)
            })
            .await
    }

    /// A page of the tenant's rows after the id cursor `after`, in id order.
    pub async fn page<T: Send + 'static>(
        self,
        store: &Store,
        tenant_id: &str,
        after: Option<&str>,
        limit: i64,
        from_row: FromRow<T>,
    ) -> Result<Vec<T>, StoreError> {
        let (t, after) = (tenant_id.to_string(), after.map(str::to_string));
        store
            .run(move |pool, _| async move {
                let sql = format!(
                    "SELECT {} FROM {} WHERE tenant_id = $1 AND (CAST($2 AS TEXT) IS NULL OR id > $2) \
                     ORDER BY id LIMIT $3",
                    self.columns, self.name
                );
                let rows =
                    sqlx::query(sqlx::AssertSqlSafe(sql)).bind(t).bind(after).bind(limit).fetch_all(&pool).await?;
                Ok(rows.iter().map(from_row).collect::<Result<_, _>>()?)
            })
            .await
    }

    /// Every row of every tenant (sources of the snapshot).
    pub async fn all<T: Send + 'static>(self, store: &Store, from_row: FromRow<T>) -> Result<Vec<T>, StoreError> {
        store
            .run(move |pool, _| async move {
                let sql = format!("SELECT {} FROM {}", self.columns, self.name);
                let rows = sqlx::query(sqlx::AssertSqlSafe(sql)).fetch_all(&pool).await?;
                Ok(rows.iter().map(from_row).collect::<Result<_, _>>()?)
            })
            .await
    }

    /// Deletes the tenant's row with this id; false when there is none. A management write
    /// ([`Store::write`]): the row deleted is its subject.
    pub async fn delete(self, store: &Store, tenant_id: &str, id: &str) -> Result<bool, StoreError> {
        let (t, id) = (tenant_id.to_string(), id.to_string());
        store
            .write(move |tx, _| {
                Box::pin(async move {
                    let sql = format!("DELETE FROM {} WHERE tenant_id = $1 AND id = $2", self.name);
                    let done = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(t).bind(&id).execute(&mut **tx).await?;
                    Ok(if done.rows_affected() == 1 { Changed::to(id, true) } else { Changed::nothing(false) })
                })
            })
            .await
    }
}
