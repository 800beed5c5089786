//! Budget requests: a key asks for more room on a budget; a manager approves or denies once.

use serde::Serialize;
use sqlx::any::AnyRow;
use sqlx::Row;

use super::change::Changed;
use super::{now_ts, Store, StoreError};

#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BudgetRequest {
    pub id: String,
    #[serde(skip)]
    pub tenant_id: String,
    pub budget_id: String,
    pub amount_usd: f64,
    pub reason: String,
    /// `pending`, `approved` or `denied`.
    pub status: String,
    /// Id of the key that asked.
    pub requested_by: String,
    pub created_at: String,
    pub decided_at: Option<String>,
    /// Id of the manager key that decided.
    pub decided_by: Option<String>,
}

const COLUMNS: &str =
    "id, tenant_id, budget_id, amount_usd, reason, status, requested_by, created_at, decided_at, decided_by";

fn from_row(r: &AnyRow) -> Result<BudgetRequest, sqlx::Error> {
    Ok(BudgetRequest {
        id: r.try_get("id")?,
        tenant_id: r.try_get("tenant_id")?,
        budget_id: r.try_get("budget_id")?,
        amount_usd: r.try_get("amount_usd")?,
        reason: r.try_get("reason")?,
        status: r.try_get("status")?,
        requested_by: r.try_get("requested_by")?,
        created_at: r.try_get("created_at")?,
        decided_at: r.try_get("decided_at")?,
        decided_by: r.try_get("decided_by")?,
    })
}

/// A request's ids, amount and state for its webhook events (not its free-text reason).
fn event_data(r: &BudgetRequest) -> serde_json::Value {
    serde_json::json!({
        "budgetRequestId": r.id, "budgetId": r.budget_id, "amountUsd": r.amount_usd, "status": r.status,
        "requestedBy": r.requested_by, "decidedBy": r.decided_by,
    })
}

/// How a decision went.
#[derive(Debug)]
pub enum Decided {
    Done(BudgetRequest),
    NotFound,
    /// Already approved or denied (the current status).
    AlreadyDecided(String),
    /// Approval of a request whose budget was deleted meanwhile.
    BudgetGone,
}

pub async fn insert(
    store: &Store,
    tenant_id: &str,
    budget_id: &str,
    amount_usd: f64,
    reason: &str,
    requested_by: &str,
) -> Result<BudgetRequest, StoreError> {
    let req = BudgetRequest {
        id: uuid::Uuid::now_v7().to_string(),
        tenant_id: tenant_id.to_string(),
        budget_id: budget_id.to_string(),
        amount_usd,
        reason: reason.to_string(),
        status: "pending".to_string(),
        requested_by: requested_by.to_string(),
        created_at: now_ts(),
        decided_at: None,
        decided_by: None,
    };
    let r = req.clone();
    let event = super::webhooks::Event::new(&r.tenant_id, "budget_request.created", event_data(&r));
    store
        .write(move |tx, _| {
            Box::pin(async move {
                sqlx::query(
                    "INSERT INTO budget_requests (id, tenant_id, budget_id, amount_usd, reason, status, requested_by, \
                     created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                )
                .bind(r.id)
                .bind(r.tenant_id)
                .bind(r.budget_id)
                .bind(r.amount_usd)
                .bind(r.reason)
                .bind(r.status)
                .bind(r.requested_by)
                .bind(r.created_at)
                .execute(&mut **tx)
                .await?;
                super::webhooks::enqueue::<sqlx::Any>(&mut **tx, &event).await?;
                Ok(Changed::to(req.id.clone(), req))
            })
        })
        .await
}

/// A page of the tenant's requests in creation order; `only` restricts to one requesting key.
pub async fn list(
    store: &Store,
    tenant_id: &str,
    only: Option<&str>,
    after: Option<&str>,
    limit: i64,
) -> Result<Vec<BudgetRequest>, StoreError> {
    let (t, only, after) = (tenant_id.to_string(), only.map(str::to_string), after.map(str::to_string));
    store
        .run(|pool, _| async move {
            let sql = format!(
                "SELECT {COLUMNS} FROM budget_requests WHERE tenant_id = $1 \
                 AND (CAST($2 AS TEXT) IS NULL OR requested_by = $2) AND (CAST($3 AS TEXT) IS NULL OR id > $3) \
                 ORDER BY id LIMIT $4"
            );
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(t)
                .bind(only)
                .bind(after)
                .bind(limit)
                .fetch_all(&pool)
                .await?;
            Ok(rows.iter().map(from_row).collect::<Result<_, _>>()?)
        })
        .await
}

/// Moves a pending request to `approved` or `denied`. Approval raises the budget's amount by the
/// request's in the same transaction; the status guard in the `UPDATE` makes a concurrent
/// second decision lose.
pub async fn decide(
    store: &Store,
    tenant_id: &str,
    id: &str,
    approve: bool,
    decided_by: &str,
) -> Result<Decided, StoreError> {
    let (t, id, by) = (tenant_id.to_string(), id.to_string(), decided_by.to_string());
    store
        .write(move |tx, _| {
            Box::pin(async move {
                // In a savepoint of the write: a decision not made (its budget gone after the
                // request moved) is undone, and the write commits nothing of it.
                let mut attempt = sqlx::Connection::begin(&mut **tx).await?;
                let decided = decide_in(&mut attempt, &t, &id, approve, &by).await?;
                if let Decided::Done(_) = decided {
                    attempt.commit().await?;
                    return Ok(Changed::to(id, decided));
                }
                attempt.rollback().await?;
                Ok(Changed::nothing(decided))
            })
        })
        .await
}

/// [`decide`]'s statements, on its write transaction's connection.
async fn decide_in(
    conn: &mut sqlx::AnyConnection,
    t: &str,
    id: &str,
    approve: bool,
    by: &str,
) -> Result<Decided, StoreError> {
    let status = if approve { "approved" } else { "denied" };
    let now = now_ts();
    let moved = sqlx::query(
        "UPDATE budget_requests SET status = $1, decided_at = $2, decided_by = $3 \
         WHERE tenant_id = $4 AND id = $5 AND status = 'pending'",
    )
    .bind(status)
    .bind(&now)
    .bind(by)
    .bind(t)
    .bind(id)
    .execute(&mut *conn)
    .await?;
    let sql = format!("SELECT {COLUMNS} FROM budget_requests WHERE tenant_id = $1 AND id = $2");
    let Some(row) = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(t).bind(id).fetch_optional(&mut *conn).await? else {
        return Ok(Decided::NotFound);
    };
    let req = from_row(&row)?;
    if moved.rows_affected() != 1 {
        return Ok(Decided::AlreadyDecided(req.status));
    }
    if approve {
        let raised = sqlx::query(
            "UPDATE budgets SET amount_usd = amount_usd + $1, updated_at = $2 WHERE tenant_id = $3 AND id = $4",
        )
        .bind(req.amount_usd)
        .bind(&now)
        .bind(t)
        .bind(&req.budget_id)
        .execute(&mut *conn)
        .await?;
        if raised.rows_affected() != 1 {
            return Ok(Decided::BudgetGone);
        }
    }
    let mut decided = req;
    decided.status = status.to_string();
    decided.decided_at = Some(now.clone());
    decided.decided_by = Some(by.to_string());
    let kind = if approve { "budget_request.approved" } else { "budget_request.denied" };
    let event = super::webhooks::Event::new(t, kind, event_data(&decided));
    super::webhooks::enqueue::<sqlx::Any>(conn, &event).await?;
    Ok(Decided::Done(decided))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{budgets, db_runtime, temp_sqlite, tenants};

    /// An approval whose budget was deleted meanwhile changes nothing: the request stays
    /// pending (its move is undone), and it can still be decided.
    #[test]
    fn an_approval_whose_budget_is_gone_leaves_the_request_pending() {
        let (store, dir) = temp_sqlite("budget-gone");
        db_runtime().block_on(async {
            let t = tenants::create(&store, "t").await.unwrap().id;
            let b = budgets::insert(&store, &t, "tenant", &t, None, 10.0, "monthly").await.unwrap();
            let r = insert(&store, &t, &b.id, 5.0, "more", "k").await.unwrap();
            assert!(budgets::delete(&store, &t, &b.id).await.unwrap());
            assert!(matches!(decide(&store, &t, &r.id, true, "m").await.unwrap(), Decided::BudgetGone));
            let rows = list(&store, &t, None, None, 10).await.unwrap();
            assert_eq!((rows[0].status.as_str(), rows[0].decided_by.as_deref()), ("pending", None));
            assert!(matches!(decide(&store, &t, &r.id, false, "m").await.unwrap(), Decided::Done(_)));
            let again = decide(&store, &t, &r.id, true, "m").await.unwrap();
            assert!(matches!(again, Decided::AlreadyDecided(ref s) if s == "denied"), "{again:?}");
            assert!(matches!(decide(&store, &t, "nope", true, "m").await.unwrap(), Decided::NotFound));
        });
        let _ = std::fs::remove_dir_all(&dir);
    }
}
