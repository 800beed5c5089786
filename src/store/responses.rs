//! Response ownership rows (`gateway::stored::Owners`): who created a stored OpenAI response
//! or one of its output items.

use std::sync::Arc;

use sqlx::Row;

use super::{now_ts, Store, StoreError};

/// Rows per multi-row INSERT (3 binds a row), and ids per `IN (…)` lookup.
const ROWS_PER_STATEMENT: usize = 256;

/// Records `(id, tenant)` pairs; an id already recorded keeps its first owner.
pub async fn claim(store: &Store, claims: Vec<(String, Arc<str>)>) -> Result<(), StoreError> {
    if claims.is_empty() {
        return Ok(());
    }
    store
        .run(move |pool, _| async move {
            let now = now_ts();
            for chunk in claims.chunks(ROWS_PER_STATEMENT) {
                let mut sql = String::from("INSERT INTO response_owners (id, tenant_id, created_at) VALUES ");
                for i in 0..chunk.len() {
                    let b = i * 3;
                    if i > 0 {
                        sql.push(',');
                    }
                    sql.push_str(&format!("(${}, ${}, ${})", b + 1, b + 2, b + 3));
                }
                sql.push_str(" ON CONFLICT (id) DO NOTHING");
                let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
                for (id, tenant) in chunk {
                    q = q.bind(id.clone()).bind(tenant.to_string()).bind(now.clone());
                }
                q.execute(&pool).await?;
            }
            Ok(())
        })
        .await
}

/// The owners of those of `ids` that are recorded: `(id, tenant_id)`.
pub async fn owners(store: &Store, ids: Vec<String>) -> Result<Vec<(String, String)>, StoreError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    store
        .run(move |pool, _| async move {
            let mut out = Vec::new();
            for chunk in ids.chunks(ROWS_PER_STATEMENT) {
                let marks: Vec<String> = (1..=chunk.len()).map(|i| format!("${i}")).collect();
                let sql = format!("SELECT id, tenant_id FROM response_owners WHERE id IN ({})", marks.join(", "));
                let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
                for id in chunk {
                    q = q.bind(id.clone());
                }
                for r in q.fetch_all(&pool).await? {
                    out.push((r.try_get("id")?, r.try_get("tenant_id")?));
                }
            }
            Ok(out)
        })
        .await
}
