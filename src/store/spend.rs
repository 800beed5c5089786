//! Spend per key and period (`key_spend`): written by the receipt writer in the same transaction
//! as the receipts, read to seed and catch up the in-memory ledger.

use std::collections::BTreeMap;

use sqlx::Row;

use super::{Store, StoreError};

/// One key's spend in one period, with the team the key belongs to (None for keys without a
/// team and for rows whose key row is gone).
#[derive(Debug, Clone, PartialEq)]
pub struct SpendRow {
    pub tenant_id: String,
    pub key_id: String,
    pub team_id: Option<String>,
    pub period: String,
    pub cost_usd: f64,
}

/// Spend to add, summed per `(tenant, key_id, period)` row.
#[derive(Debug, Default)]
pub struct Deltas<'a>(BTreeMap<(&'a str, &'a str, &'a str), f64>);

impl<'a> Deltas<'a> {
    /// The summed rows, in key order (the order writers lock them in).
    pub fn rows(&self) -> impl Iterator<Item = (&(&'a str, &'a str, &'a str), &f64)> {
        self.0.iter()
    }

    pub fn add(&mut self, tenant: &'a str, key_id: &'a str, period: &'a str, cost: f64) {
        if cost.is_finite() && cost != 0.0 {
            *self.0.entry((tenant, key_id, period)).or_default() += cost;
        }
    }
}

/// Adds each `(tenant, key_id, period, cost)` to `key_spend` on the caller's connection (inside
/// its transaction). Deltas are summed per row first and applied in key order, so concurrent
/// writers on PostgreSQL lock rows in the same order and cannot deadlock.
pub async fn add_in_tx(
    conn: &mut sqlx::AnyConnection,
    deltas: &[(String, String, String, f64)],
) -> Result<(), sqlx::Error> {
    let mut sums = Deltas::default();
    for (tenant, key, period, cost) in deltas {
        sums.add(tenant, key, period, *cost);
    }
    apply::<sqlx::Any>(conn, sums).await
}

/// [`add_in_tx`] on any driver's connection (the receipt writer's native one).
pub async fn apply<DB>(conn: &mut DB::Connection, deltas: Deltas<'_>) -> Result<(), sqlx::Error>
where
    DB: sqlx::Database,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    String: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    f64: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    for ((tenant, key, period), cost) in deltas.0 {
        sqlx::query::<DB>(
            "INSERT INTO key_spend (tenant_id, key_id, period, cost_usd) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (tenant_id, key_id, period) DO UPDATE SET cost_usd = key_spend.cost_usd + excluded.cost_usd",
        )
        .bind(tenant.to_string())
        .bind(key.to_string())
        .bind(period.to_string())
        .bind(cost)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// Spend rows of the given periods (e.g. `total` and this month), with each key's team.
pub async fn current(store: &Store, periods: &[String]) -> Result<Vec<SpendRow>, StoreError> {
    store.settled().await?;
    let periods = periods.to_vec();
    store
        .run(|pool, _| async move {
            let mut out = Vec::new();
            for period in periods {
                let rows = sqlx::query(
                    "SELECT s.tenant_id, s.key_id, k.team_id, s.period, s.cost_usd FROM key_spend s \
                     LEFT JOIN api_keys k ON k.id = s.key_id WHERE s.period = $1",
                )
                .bind(period)
                .fetch_all(&pool)
                .await?;
                for r in rows {
                    out.push(SpendRow {
                        tenant_id: r.try_get("tenant_id")?,
                        key_id: r.try_get("key_id")?,
                        team_id: r.try_get("team_id")?,
                        period: r.try_get("period")?,
                        cost_usd: r.try_get("cost_usd")?,
                    });
                }
            }
            Ok(out)
        })
        .await
}
