//! Webhook endpoints, their subscriptions and the durable outbox (`webhook_deliveries`).
//!
//! An event is written by [`enqueue`] (or [`enqueue_sqlite`] on the receipt writer's own SQLite
//! connection) inside the transaction of the change that caused it: one `INSERT ... SELECT` fans
//! it out to every endpoint of the tenant subscribed to its type, so an event nobody listens to
//! costs one index probe and stores nothing. The sender ([`claim`], [`finish`]) leases due rows;
//! on PostgreSQL the claim also skips rows another process has locked (`FOR UPDATE SKIP LOCKED`),
//! so several processes on one database deliver each row once.

use serde::Serialize;
use sqlx::any::AnyRow;
use sqlx::Row;

use super::change::Changed;
use super::value::Value;
use super::{now_ts, Backend, Store, StoreError};

/// One event, ready to be fanned out: the body is final (`{type, timestamp, data}`) and the same
/// bytes go to every endpoint on every attempt.
#[derive(Debug, Clone)]
pub struct Event {
    /// The `webhook-id` header (a UUIDv7): receivers deduplicate on it.
    pub id: String,
    pub tenant_id: String,
    pub kind: &'static str,
    pub payload: String,
    pub created_ms: i64,
    pub created_at: String,
}

impl Event {
    /// `data` carries ids and amounts only: never a secret, a key or prompt text.
    pub fn new(tenant_id: &str, kind: &'static str, data: serde_json::Value) -> Event {
        let now = chrono::Utc::now();
        let created_at = now.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string();
        let body = serde_json::json!({"type": kind, "timestamp": created_at, "data": data});
        Event {
            id: format!("msg_{}", uuid::Uuid::now_v7().simple()),
            tenant_id: tenant_id.to_string(),
            kind,
            payload: body.to_string(),
            created_ms: now.timestamp_millis(),
            created_at,
        }
    }
}

pub(super) const FAN_OUT: &str =
    "INSERT INTO webhook_deliveries (event_id, endpoint_id, tenant_id, event_type, payload, status, \
     attempts, next_attempt_ms, lease_until_ms, created_ms, created_at) \
     SELECT $1, s.endpoint_id, $2, $3, $4, 'pending', 0, $5, 0, $5, $6 FROM webhook_subscriptions s \
     WHERE s.tenant_id = $2 AND s.event = $3";

/// Writes `ev` into the outbox on the caller's connection, inside its transaction.
pub async fn enqueue<DB>(conn: &mut DB::Connection, ev: &Event) -> Result<(), sqlx::Error>
where
    DB: sqlx::Database,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    String: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    i64: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    sqlx::query::<DB>(FAN_OUT)
        .bind(ev.id.clone())
        .bind(ev.tenant_id.clone())
        .bind(ev.kind.to_string())
        .bind(ev.payload.clone())
        .bind(ev.created_ms)
        .bind(ev.created_at.clone())
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// How many values [`outbox_values`] gives an event.
pub const OUTBOX_COLUMNS: usize = 6;

/// An event's outbox values, in the order of [`FAN_OUT`]'s binds (how the receipt journal holds
/// the events a receipt caused).
pub fn outbox_values(ev: &Event) -> Vec<Value> {
    vec![
        Value::Text(ev.id.as_str().into()),
        Value::Text(ev.tenant_id.as_str().into()),
        Value::Static(ev.kind),
        Value::Text(ev.payload.as_str().into()),
        Value::Int(ev.created_ms),
        Value::Text(ev.created_at.as_str().into()),
    ]
}

/// [`enqueue`] on the receipt writer's own SQLite connection (rusqlite), from
/// [`outbox_values`].
pub(super) fn enqueue_sqlite_values(tx: &rusqlite::Transaction<'_>, values: &[Value]) -> rusqlite::Result<()> {
    static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| FAN_OUT.replace('$', "?"));
    tx.prepare_cached(&SQL)?.execute(rusqlite::params_from_iter(values.iter()))?;
    Ok(())
}

/// Writes `events` in one transaction of their own: for events whose cause is not a database
/// write of ours (a failed provider test's status is, see `providers::set_status`).
pub async fn enqueue_now(store: &Store, events: Vec<Event>) -> Result<(), StoreError> {
    if events.is_empty() {
        return Ok(());
    }
    store
        .run(|pool, backend| async move {
            let mut tx = super::begin_write(&pool, backend).await?;
            for ev in &events {
                enqueue::<sqlx::Any>(&mut tx, ev).await?;
            }
            tx.commit().await?;
            Ok(())
        })
        .await
}

/// An endpoint as the API shows it: never its secret.
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Endpoint {
    pub id: String,
    pub url: String,
    /// The event types it receives.
    pub events: Vec<String>,
    pub created_at: String,
}

fn endpoint_from_row(r: &AnyRow) -> Result<Endpoint, sqlx::Error> {
    let events: String = r.try_get("events")?;
    Ok(Endpoint {
        id: r.try_get("id")?,
        url: r.try_get("url")?,
        events: serde_json::from_str(&events).unwrap_or_default(),
        created_at: r.try_get("created_at")?,
    })
}

/// Stores an endpoint and its subscriptions in one transaction.
pub async fn insert(
    store: &Store,
    tenant_id: &str,
    id: &str,
    url: &str,
    events: &[String],
    secret_sealed: &str,
) -> Result<Endpoint, StoreError> {
    let ep = Endpoint { id: id.to_string(), url: url.to_string(), events: events.to_vec(), created_at: now_ts() };
    let (e, t, sealed) = (ep.clone(), tenant_id.to_string(), secret_sealed.to_string());
    store
        .write(move |tx, _| {
            Box::pin(async move {
                sqlx::query(
                    "INSERT INTO webhook_endpoints (id, tenant_id, url, events, secret_sealed, created_at) \
                     VALUES ($1, $2, $3, $4, $5, $6)",
                )
                .bind(&e.id)
                .bind(&t)
                .bind(&e.url)
                .bind(serde_json::to_string(&e.events).unwrap_or_default())
                .bind(sealed)
                .bind(&e.created_at)
                .execute(&mut **tx)
                .await?;
                for ev in &e.events {
                    sqlx::query(
                        "INSERT INTO webhook_subscriptions (tenant_id, event, endpoint_id) VALUES ($1, $2, $3)",
                    )
                    .bind(&t)
                    .bind(ev)
                    .bind(&e.id)
                    .execute(&mut **tx)
                    .await?;
                }
                Ok(Changed::to(ep.id.clone(), ep))
            })
        })
        .await
}

/// A page of the tenant's endpoints in creation order.
pub async fn list(
    store: &Store,
    tenant_id: &str,
    after: Option<&str>,
    limit: i64,
) -> Result<Vec<Endpoint>, StoreError> {
    let (t, after) = (tenant_id.to_string(), after.map(str::to_string));
    store
        .run(|pool, _| async move {
            let rows = sqlx::query(
                "SELECT id, url, events, created_at FROM webhook_endpoints WHERE tenant_id = $1 \
                 AND (CAST($2 AS TEXT) IS NULL OR id > $2) ORDER BY id LIMIT $3",
            )
            .bind(t)
            .bind(after)
            .bind(limit)
            .fetch_all(&pool)
            .await?;
            Ok(rows.iter().map(endpoint_from_row).collect::<Result<_, _>>()?)
        })
        .await
}

/// Deletes an endpoint of the tenant with its subscriptions and undelivered rows; false when the
/// tenant has none with this id.
pub async fn delete(store: &Store, tenant_id: &str, id: &str) -> Result<bool, StoreError> {
    let (t, id) = (tenant_id.to_string(), id.to_string());
    store
        .write(move |tx, _| {
            Box::pin(async move {
                // Children first: the cascade is declared too, this does not rely on it.
                sqlx::query("DELETE FROM webhook_deliveries WHERE tenant_id = $1 AND endpoint_id = $2")
                    .bind(&t)
                    .bind(&id)
                    .execute(&mut **tx)
                    .await?;
                sqlx::query("DELETE FROM webhook_subscriptions WHERE tenant_id = $1 AND endpoint_id = $2")
                    .bind(&t)
                    .bind(&id)
                    .execute(&mut **tx)
                    .await?;
                let done = sqlx::query("DELETE FROM webhook_endpoints WHERE tenant_id = $1 AND id = $2")
                    .bind(&t)
                    .bind(&id)
                    .execute(&mut **tx)
                    .await?;
                Ok(if done.rows_affected() == 1 { Changed::to(id, true) } else { Changed::nothing(false) })
            })
        })
        .await
}

/// Where a delivery stands: `pending` (to be attempted, or retried), `delivered` (a 2xx answer),
/// `failed` (given up after `webhooks.max_attempts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryStatus {
    Pending,
    Delivered,
    Failed,
}

impl DeliveryStatus {
    pub const ALL: [DeliveryStatus; 3] = [DeliveryStatus::Pending, DeliveryStatus::Delivered, DeliveryStatus::Failed];

    /// The word stored in `webhook_deliveries.status` (and shown by the API).
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "pending",
            DeliveryStatus::Delivered => "delivered",
            DeliveryStatus::Failed => "failed",
        }
    }

    pub fn parse(word: &str) -> Option<DeliveryStatus> {
        DeliveryStatus::ALL.into_iter().find(|s| s.as_str() == word)
    }
}

/// One outbox row as the API shows it: where its delivery stands, never its payload (which the
/// receiver has) nor anything of the endpoint's secret.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Delivery {
    /// The `webhook-id` header of every attempt (`msg_...`): what a receiver deduplicates on.
    pub event_id: String,
    pub event_type: String,
    pub status: DeliveryStatus,
    /// Attempts made so far (an attempt under way counts).
    pub attempts: i64,
    /// The HTTP status of the last answer; null before any answer (or when none came).
    pub last_status: Option<i64>,
    /// Why the last attempt failed (`HTTP 500`, `no answer within 10000 ms`, ...); null once
    /// delivered and before the first attempt.
    pub last_error: Option<String>,
    pub created_at: String,
    pub delivered_at: Option<String>,
    /// When the next attempt is due; null unless `pending`.
    pub next_attempt_at: Option<String>,
}

fn delivery_from_row(r: &AnyRow) -> Result<Delivery, sqlx::Error> {
    let word: String = r.try_get("status")?;
    let status = DeliveryStatus::parse(&word)
        .ok_or_else(|| sqlx::Error::Decode(format!("unknown webhook delivery status `{word}`").into()))?;
    let next_ms: i64 = r.try_get("next_attempt_ms")?;
    let next = (status == DeliveryStatus::Pending)
        .then(|| chrono::DateTime::from_timestamp_millis(next_ms))
        .flatten()
        .map(|t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string());
    Ok(Delivery {
        event_id: r.try_get("event_id")?,
        event_type: r.try_get("event_type")?,
        status,
        attempts: r.try_get("attempts")?,
        last_status: r.try_get("last_status")?,
        last_error: r.try_get("last_error")?,
        created_at: r.try_get("created_at")?,
        delivered_at: r.try_get("delivered_at")?,
        next_attempt_at: next,
    })
}

/// A page of one endpoint's deliveries, newest first (event ids are UUIDv7, so they sort by
/// time), optionally of one status, after the event id `before`; None when the tenant has no
/// endpoint with this id (another tenant's is not found either).
pub async fn deliveries(
    store: &Store,
    tenant_id: &str,
    endpoint_id: &str,
    status: Option<DeliveryStatus>,
    before: Option<&str>,
    limit: i64,
) -> Result<Option<Vec<Delivery>>, StoreError> {
    let (t, ep, before) = (tenant_id.to_string(), endpoint_id.to_string(), before.map(str::to_string));
    store
        .run(move |pool, _| async move {
            let owned = sqlx::query("SELECT 1 FROM webhook_endpoints WHERE tenant_id = $1 AND id = $2")
                .bind(&t)
                .bind(&ep)
                .fetch_optional(&pool)
                .await?;
            if owned.is_none() {
                return Ok(None);
            }
            let rows = sqlx::query(
                "SELECT event_id, event_type, status, attempts, last_status, last_error, created_at, delivered_at, \
                 next_attempt_ms FROM webhook_deliveries WHERE tenant_id = $1 AND endpoint_id = $2 \
                 AND (CAST($3 AS TEXT) IS NULL OR status = $3) AND (CAST($4 AS TEXT) IS NULL OR event_id < $4) \
                 ORDER BY event_id DESC LIMIT $5",
            )
            .bind(t)
            .bind(ep)
            .bind(status.map(|s| s.as_str().to_string()))
            .bind(before)
            .bind(limit)
            .fetch_all(&pool)
            .await?;
            Ok(Some(rows.iter().map(delivery_from_row).collect::<Result<_, _>>()?))
        })
        .await
}

/// Where and how to send: the endpoint's URL and sealed secret.
#[derive(Debug, Clone)]
pub struct Target {
    pub tenant_id: String,
    pub url: String,
    pub secret_sealed: String,
}

/// The endpoint behind a claimed row; None when it was deleted meanwhile.
pub async fn target(store: &Store, endpoint_id: &str) -> Result<Option<Target>, StoreError> {
    let id = endpoint_id.to_string();
    store
        .run(|pool, _| async move {
            let row = sqlx::query("SELECT tenant_id, url, secret_sealed FROM webhook_endpoints WHERE id = $1")
                .bind(id)
                .fetch_optional(&pool)
                .await?;
            Ok(match row {
                Some(r) => Some(Target {
                    tenant_id: r.try_get("tenant_id")?,
                    url: r.try_get("url")?,
                    secret_sealed: r.try_get("secret_sealed")?,
                }),
                None => None,
            })
        })
        .await
}

/// A row the sender leased.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub event_id: String,
    pub endpoint_id: String,
    pub tenant_id: String,
    pub payload: String,
    /// Including the one about to be made.
    pub attempts: i64,
}

/// Leases up to `limit` due rows until `lease_until_ms`, counting the attempt now (a process
/// that dies mid-delivery has used it up). A row whose lease is still running is not due.
pub async fn claim(store: &Store, now_ms: i64, lease_until_ms: i64, limit: i64) -> Result<Vec<Claimed>, StoreError> {
    store
        .run(move |pool, backend| async move {
            // A read first: the idle sender must not take SQLite's write lock every poll (the
            // receipt writer would wait for it), nor write-lock anything on PostgreSQL.
            let due = sqlx::query(
                "SELECT 1 FROM webhook_deliveries WHERE status = 'pending' AND next_attempt_ms <= $1 \
                 AND lease_until_ms <= $1 LIMIT 1",
            )
            .bind(now_ms)
            .fetch_optional(&pool)
            .await?;
            if due.is_none() {
                return Ok(Vec::new());
            }
            let lock = match backend {
                Backend::Postgres => " FOR UPDATE SKIP LOCKED",
                Backend::Sqlite => "",
            };
            let sql = format!(
                "UPDATE webhook_deliveries SET lease_until_ms = $1, attempts = attempts + 1 \
                 WHERE lease_until_ms <= $2 AND status = 'pending' AND (event_id, endpoint_id) IN \
                 (SELECT event_id, endpoint_id FROM webhook_deliveries WHERE status = 'pending' \
                 AND next_attempt_ms <= $2 AND lease_until_ms <= $2 ORDER BY next_attempt_ms LIMIT $3{lock}) \
                 RETURNING event_id, endpoint_id, tenant_id, payload, attempts"
            );
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(lease_until_ms)
                .bind(now_ms)
                .bind(limit)
                .fetch_all(&pool)
                .await?;
            let mut out = Vec::with_capacity(rows.len());
            for r in rows {
                out.push(Claimed {
                    event_id: r.try_get("event_id")?,
                    endpoint_id: r.try_get("endpoint_id")?,
                    tenant_id: r.try_get("tenant_id")?,
                    payload: r.try_get("payload")?,
                    attempts: r.try_get("attempts")?,
                });
            }
            Ok(out)
        })
        .await
}

/// How an attempt ended.
#[derive(Debug, Clone)]
pub enum Outcome {
    Delivered {
        status: i64,
    },
    /// Due again at `next_ms`.
    Retry {
        status: Option<i64>,
        error: String,
        next_ms: i64,
    },
    /// No attempt left.
    GaveUp {
        status: Option<i64>,
        error: String,
    },
}

/// Records an attempt's outcome and ends the lease.
pub async fn finish(store: &Store, event_id: &str, endpoint_id: &str, outcome: Outcome) -> Result<(), StoreError> {
    let (ev, ep) = (event_id.to_string(), endpoint_id.to_string());
    store
        .run(move |pool, _| async move {
            let (status, code, error, next): (&str, Option<i64>, Option<String>, i64) = match outcome {
                Outcome::Delivered { status } => ("delivered", Some(status), None, 0),
                Outcome::Retry { status, error, next_ms } => ("pending", status, Some(error), next_ms),
                Outcome::GaveUp { status, error } => ("failed", status, Some(error), 0),
            };
            let delivered_at = (status == "delivered").then(now_ts);
            sqlx::query(
                "UPDATE webhook_deliveries SET status = $1, last_status = $2, last_error = $3, \
                 next_attempt_ms = CASE WHEN $4 > 0 THEN $4 ELSE next_attempt_ms END, lease_until_ms = 0, \
                 delivered_at = $5 WHERE event_id = $6 AND endpoint_id = $7",
            )
            .bind(status)
            .bind(code)
            .bind(error)
            .bind(next)
            .bind(delivered_at)
            .bind(ev)
            .bind(ep)
            .execute(&pool)
            .await?;
            Ok(())
        })
        .await
}

/// What `/status` shows: endpoints, undelivered rows, endpoints whose last attempt failed, the
/// oldest undelivered row's creation time, and rows given up.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub endpoints: i64,
    pub pending: i64,
    pub failing_endpoints: i64,
    pub oldest_pending_ms: Option<i64>,
    pub given_up: i64,
}

pub async fn stats(store: &Store) -> Result<Stats, StoreError> {
    store
        .run(|pool, _| async move {
            let endpoints: i64 =
                sqlx::query("SELECT COUNT(*) FROM webhook_endpoints").fetch_one(&pool).await?.try_get(0)?;
            let row = sqlx::query("SELECT COUNT(*), MIN(created_ms) FROM webhook_deliveries WHERE status = 'pending'")
                .fetch_one(&pool)
                .await?;
            let (pending, oldest): (i64, Option<i64>) = (row.try_get(0)?, row.try_get(1)?);
            let failing: i64 = sqlx::query(
                "SELECT COUNT(DISTINCT endpoint_id) FROM webhook_deliveries \
                 WHERE status = 'pending' AND last_error IS NOT NULL",
            )
            .fetch_one(&pool)
            .await?
            .try_get(0)?;
            let given_up: i64 = sqlx::query("SELECT COUNT(*) FROM webhook_deliveries WHERE status = 'failed'")
                .fetch_one(&pool)
                .await?
                .try_get(0)?;
            Ok(Stats { endpoints, pending, failing_endpoints: failing, oldest_pending_ms: oldest, given_up })
        })
        .await
}
