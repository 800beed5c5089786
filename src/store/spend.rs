//! Spend per key and period (`key_spend`): written by the receipt writer in the same transaction
//! as the receipts, read to seed and catch up the in-memory ledger.

use std::collections::BTreeMap;

use sqlx::any::AnyRow;
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

/// What a batch of receipts adds per `(tenant, key_id, end_user, period)`: cost, requests,
/// and the newest receipt's `ts`.
#[derive(Debug, Default)]
pub struct EndUserDeltas<'a>(BTreeMap<EndUserAt<'a>, EndUserSum<'a>>);

/// `(tenant, key_id, end_user, period)`.
pub type EndUserAt<'a> = (&'a str, &'a str, &'a str, &'a str);
/// Cost, requests, newest `ts`.
pub type EndUserSum<'a> = (f64, i64, &'a str);

impl<'a> EndUserDeltas<'a> {
    pub fn add(&mut self, at: EndUserAt<'a>, cost: f64, ts: &'a str) {
        let e = self.0.entry(at).or_insert((0.0, 0, ts));
        if cost.is_finite() {
            e.0 += cost;
        }
        e.1 += 1;
        if ts > e.2 {
            e.2 = ts;
        }
    }

    /// The summed rows, in key order (the order writers lock them in).
    pub fn rows(&self) -> impl Iterator<Item = (&EndUserAt<'a>, &EndUserSum<'a>)> {
        self.0.iter()
    }
}

/// The upsert of one `end_user_spend` row (both backends: `$n` binds, `CASE` for the newest `ts`).
pub const END_USER_UPSERT: &str = "INSERT INTO end_user_spend (tenant_id, key_id, end_user, period, cost_usd, \
     requests, last_seen_at) VALUES ($1, $2, $3, $4, $5, $6, $7) \
     ON CONFLICT (tenant_id, key_id, end_user, period) DO UPDATE SET \
     cost_usd = end_user_spend.cost_usd + excluded.cost_usd, requests = end_user_spend.requests + excluded.requests, \
     last_seen_at = CASE WHEN excluded.last_seen_at > end_user_spend.last_seen_at THEN excluded.last_seen_at \
     ELSE end_user_spend.last_seen_at END";

/// [`EndUserDeltas`] applied on any driver's connection, in key order.
pub async fn apply_end_users<DB>(conn: &mut DB::Connection, deltas: EndUserDeltas<'_>) -> Result<(), sqlx::Error>
where
    DB: sqlx::Database,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    String: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    f64: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    i64: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    for ((tenant, key, user, period), (cost, requests, ts)) in deltas.0 {
        sqlx::query::<DB>(END_USER_UPSERT)
            .bind(tenant.to_string())
            .bind(key.to_string())
            .bind(user.to_string())
            .bind(period.to_string())
            .bind(cost)
            .bind(requests)
            .bind(ts.to_string())
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// One end user's spend in one period, with the team of its key.
#[derive(Debug, Clone, PartialEq)]
pub struct EndUserRow {
    pub tenant_id: String,
    pub key_id: String,
    pub team_id: Option<String>,
    pub end_user: String,
    pub period: String,
    pub cost_usd: f64,
}

/// End-user spend rows of the given periods (seeding end-user budgets; never per request).
pub async fn end_users_current(store: &Store, periods: &[String]) -> Result<Vec<EndUserRow>, StoreError> {
    let select = "SELECT s.tenant_id, s.key_id, k.team_id, s.end_user, s.period, s.cost_usd FROM end_user_spend s \
                  LEFT JOIN api_keys k ON k.id = s.key_id WHERE s.period = $1";
    of_periods(store, periods, select, |r| {
        Ok(EndUserRow {
            tenant_id: r.try_get("tenant_id")?,
            key_id: r.try_get("key_id")?,
            team_id: r.try_get("team_id")?,
            end_user: r.try_get("end_user")?,
            period: r.try_get("period")?,
            cost_usd: r.try_get("cost_usd")?,
        })
    })
    .await
}

/// The rows `select` (its one bind `$1`: a period) gives for each of `periods`, each read by
/// `read`, once the writes before are settled.
async fn of_periods<T: Send + 'static>(
    store: &Store,
    periods: &[String],
    select: &'static str,
    read: fn(&AnyRow) -> Result<T, sqlx::Error>,
) -> Result<Vec<T>, StoreError> {
    store.settled().await?;
    let periods = periods.to_vec();
    store
        .run(move |pool, _| async move {
            let mut out = Vec::new();
            for period in periods {
                for r in sqlx::query(select).bind(period).fetch_all(&pool).await? {
                    out.push(read(&r)?);
                }
            }
            Ok(out)
        })
        .await
}

/// One end user of a key, as `GET /v1/end-users` shows it (all-time figures).
#[derive(Debug, Clone, PartialEq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EndUser {
    pub end_user: String,
    pub key_id: String,
    pub requests: i64,
    pub spent_usd: f64,
    pub last_seen_at: String,
}

/// A page of a tenant's end users (all time), ordered by key then end user; `after` is the
/// previous page's last `(key_id, end_user)`.
pub async fn end_users_page(
    store: &Store,
    tenant_id: &str,
    key_id: Option<&str>,
    after: Option<(String, String)>,
    limit: i64,
) -> Result<Vec<EndUser>, StoreError> {
    store.settled().await?;
    let (t, k) = (tenant_id.to_string(), key_id.map(str::to_string));
    let (ak, au) = after.unzip();
    store
        .run(|pool, _| async move {
            let rows = sqlx::query(
                "SELECT key_id, end_user, requests, cost_usd, last_seen_at FROM end_user_spend \
                 WHERE tenant_id = $1 AND period = 'total' AND (CAST($2 AS TEXT) IS NULL OR key_id = $2) \
                 AND (CAST($3 AS TEXT) IS NULL OR key_id > $3 OR (key_id = $3 AND end_user > $4)) \
                 ORDER BY key_id, end_user LIMIT $5",
            )
            .bind(t)
            .bind(k)
            .bind(ak)
            .bind(au.unwrap_or_default())
            .bind(limit)
            .fetch_all(&pool)
            .await?;
            let mut out = Vec::with_capacity(rows.len());
            for r in rows {
                out.push(EndUser {
                    end_user: r.try_get("end_user")?,
                    key_id: r.try_get("key_id")?,
                    requests: r.try_get("requests")?,
                    spent_usd: r.try_get("cost_usd")?,
                    last_seen_at: r.try_get("last_seen_at")?,
                });
            }
            Ok(out)
        })
        .await
}

/// Spend rows of the given periods (e.g. `total` and this month), with each key's team.
pub async fn current(store: &Store, periods: &[String]) -> Result<Vec<SpendRow>, StoreError> {
    let select = "SELECT s.tenant_id, s.key_id, k.team_id, s.period, s.cost_usd FROM key_spend s \
                  LEFT JOIN api_keys k ON k.id = s.key_id WHERE s.period = $1";
    of_periods(store, periods, select, |r| {
        Ok(SpendRow {
            tenant_id: r.try_get("tenant_id")?,
            key_id: r.try_get("key_id")?,
            team_id: r.try_get("team_id")?,
            period: r.try_get("period")?,
            cost_usd: r.try_get("cost_usd")?,
        })
    })
    .await
}
