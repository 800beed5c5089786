//! Retention and legal hold of the tenant log (docs/log.md §7), as rows: each tenant's retention
//! (`log_retention`), its holds (`log_holds`), and the sweep's one write — emptying the contents
//! of old receipts in a window of seqs, keeping what the log is made of (`tenant_id`, `seq`,
//! `receipt_id`, `this_hash`). Which receipts are old, and when to sweep, is the domain's
//! (`tenant_log::retention`).

use sqlx::Row;

use super::change::Changed;
use super::{Backend, Store, StoreError};

/// A tenant's retention: `days` None = keep forever; `pruned_through` = the highest seq a sweep
/// pruned (0: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Retention {
    pub days: Option<u64>,
    pub pruned_through: u64,
}

/// The tenant's retention (the default when it never set one).
pub async fn get(store: &Store, tenant: &str) -> Result<Retention, StoreError> {
    let t = tenant.to_string();
    store
        .run(move |pool, _| async move {
            let row = sqlx::query("SELECT days, pruned_through FROM log_retention WHERE tenant_id = $1")
                .bind(t)
                .fetch_optional(&pool)
                .await?;
            let Some(row) = row else { return Ok(Retention::default()) };
            let days: Option<i64> = row.try_get(0)?;
            let through: i64 = row.try_get(1)?;
            Ok(Retention { days: days.map(|d| d.max(0) as u64), pruned_through: through.max(0) as u64 })
        })
        .await
}

/// Sets the tenant's retention (None = keep forever); what was pruned stays pruned. The tenant
/// is the write's subject.
pub async fn set_days(store: &Store, tenant: &str, days: Option<u64>, now: String) -> Result<Retention, StoreError> {
    let t = tenant.to_string();
    store
        .write(move |tx, _| {
            Box::pin(async move {
                sqlx::query(
                    "INSERT INTO log_retention (tenant_id, days, updated_at) VALUES ($1, $2, $3) \
                     ON CONFLICT (tenant_id) DO UPDATE SET days = excluded.days, updated_at = excluded.updated_at",
                )
                .bind(&t)
                .bind(days.map(|d| d as i64))
                .bind(now)
                .execute(&mut **tx)
                .await?;
                Ok(Changed::to(t, ()))
            })
        })
        .await?;
    get(store, tenant).await
}

/// Every tenant with a retention set: `(tenant, days)`.
pub async fn tenants(store: &Store) -> Result<Vec<(String, u64)>, StoreError> {
    store
        .run(|pool, _| async move {
            let rows =
                sqlx::query("SELECT tenant_id, days FROM log_retention WHERE days IS NOT NULL ORDER BY tenant_id")
                    .fetch_all(&pool)
                    .await?;
            rows.iter()
                .map(|r| Ok((r.try_get::<String, _>(0)?, r.try_get::<i64, _>(1)?.max(0) as u64)))
                .collect::<Result<_, sqlx::Error>>()
                .map_err(StoreError::from)
        })
        .await
}

/// A legal hold: no sweep touches a receipt with `from_seq <= seq <= to_seq`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HoldRow {
    pub id: String,
    pub from_seq: u64,
    pub to_seq: u64,
    pub reason: String,
    pub created_at: String,
    /// The id of the key that placed it.
    pub created_by: String,
}

const HOLD_COLUMNS: &str = "id, from_seq, to_seq, reason, created_at, created_by";

fn hold_of(r: &sqlx::any::AnyRow) -> Result<HoldRow, sqlx::Error> {
    Ok(HoldRow {
        id: r.try_get(0)?,
        from_seq: r.try_get::<i64, _>(1)?.max(0) as u64,
        to_seq: r.try_get::<i64, _>(2)?.max(0) as u64,
        reason: r.try_get(3)?,
        created_at: r.try_get(4)?,
        created_by: r.try_get(5)?,
    })
}

/// Places a hold. On PostgreSQL the insert waits for a sweep window in progress (it holds
/// `log_holds` in share mode), so a hold placed is in force for every window after it.
pub async fn create_hold(store: &Store, tenant: &str, h: HoldRow) -> Result<HoldRow, StoreError> {
    let t = tenant.to_string();
    store
        .write(move |tx, _| {
            Box::pin(async move {
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "INSERT INTO log_holds (tenant_id, {HOLD_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7)"
                )))
                .bind(t)
                .bind(h.id.clone())
                .bind(h.from_seq as i64)
                .bind(h.to_seq as i64)
                .bind(h.reason.clone())
                .bind(h.created_at.clone())
                .bind(h.created_by.clone())
                .execute(&mut **tx)
                .await?;
                Ok(Changed::to(h.id.clone(), h))
            })
        })
        .await
}

/// The tenant's holds, oldest first (ids are UUID v7, time-ordered), those after the id
/// `after` (a cursor) when given, at most `limit`.
pub async fn holds(store: &Store, tenant: &str, after: Option<&str>, limit: i64) -> Result<Vec<HoldRow>, StoreError> {
    let (t, after) = (tenant.to_string(), after.unwrap_or_default().to_string());
    store
        .run(move |pool, _| async move {
            let sql =
                format!("SELECT {HOLD_COLUMNS} FROM log_holds WHERE tenant_id = $1 AND id > $2 ORDER BY id LIMIT $3");
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(t).bind(after).bind(limit).fetch_all(&pool).await?;
            rows.iter().map(hold_of).collect::<Result<_, _>>().map_err(StoreError::from)
        })
        .await
}

/// Releases a hold of the tenant; false when it has none of that id.
pub async fn delete_hold(store: &Store, tenant: &str, id: &str) -> Result<bool, StoreError> {
    let (t, id) = (tenant.to_string(), id.to_string());
    store
        .write(move |tx, _| {
            Box::pin(async move {
                let done = sqlx::query("DELETE FROM log_holds WHERE tenant_id = $1 AND id = $2")
                    .bind(t)
                    .bind(&id)
                    .execute(&mut **tx)
                    .await?;
                Ok(if done.rows_affected() > 0 { Changed::to(id, true) } else { Changed::nothing(false) })
            })
        })
        .await
}

/// A receipt a sweep may prune, among those of the tenant ($1) with `$2 <= seq <= $3`: kept so
/// far, older than the cutoff ($4, receipt ts form; a pruned receipt's `ts` is empty) and under
/// no hold. Written against `receipts` unaliased, so the update and the event delete share it.
const PRUNABLE: &str = "receipts.tenant_id = $1 AND receipts.seq >= $2 AND receipts.seq <= $3 \
     AND receipts.pruned_at IS NULL AND receipts.ts > '' AND receipts.ts < $4 \
     AND NOT EXISTS (SELECT 1 FROM log_holds h WHERE h.tenant_id = receipts.tenant_id \
     AND h.from_seq <= receipts.seq AND receipts.seq <= h.to_seq)";

/// What a pruned receipt keeps: `tenant_id`, `seq`, `receipt_id`, `this_hash` (the leaf). Every
/// other signed member, the signature and the side channels become empty or zero.
const EMPTIED: &str = "v = 0, request_id = '', actor = '', provider = '', model = '', prompt_tokens = 0, \
     completion_tokens = 0, cost_usd = 0, checks = '[]', check_names = '', upstream_status = '', ts = '', \
     prev_hash = '', signature = '', key_id = '', kind = '', receipt_pack_version = '', cache_result = '', \
     saved_tokens = 0, saved_usd = 0, latency_us = NULL";

/// The lowest and highest seq of the tenant's kept receipts older than `cutoff` (receipt ts
/// form), held ones included: the range a sweep walks in windows.
pub async fn old_bounds(store: &Store, tenant: &str, cutoff: &str) -> Result<Option<(u64, u64)>, StoreError> {
    store.settled().await?;
    let (t, c) = (tenant.to_string(), cutoff.to_string());
    store
        .run(move |pool, _| async move {
            let row = sqlx::query(
                "SELECT MIN(seq) AS lo, MAX(seq) AS hi FROM receipts WHERE tenant_id = $1 AND ts > '' AND ts < $2",
            )
            .bind(t)
            .bind(c)
            .fetch_one(&pool)
            .await?;
            let (lo, hi): (Option<i64>, Option<i64>) = (row.try_get("lo")?, row.try_get("hi")?);
            Ok(lo.zip(hi).map(|(lo, hi)| (lo.max(0) as u64, hi.max(0) as u64)))
        })
        .await
}

/// Prunes the prunable receipts of the tenant with `from <= seq <= to` (older than `cutoff`, under
/// no hold) in one transaction: their guardrail events go, their rows are emptied and stamped
/// `pruned_at = now`, and the tenant's `pruned_through` moves up. Returns how many it pruned; a
/// receipt pruned already is not touched again (a sweep is idempotent).
pub async fn prune_window(
    store: &Store,
    tenant: &str,
    (from, to): (u64, u64),
    cutoff: &str,
    now: String,
) -> Result<u64, StoreError> {
    let (t, c) = (tenant.to_string(), cutoff.to_string());
    store
        .run(move |pool, backend| async move {
            let mut tx = super::begin_write(&pool, backend).await?;
            if backend == Backend::Postgres {
                // A hold placed meanwhile waits for this window's commit (SQLite's write lock
                // already orders the two).
                sqlx::query("LOCK TABLE log_holds IN SHARE MODE").execute(&mut *tx).await?;
            }
            let events = format!(
                "DELETE FROM guardrail_events WHERE tenant_id = $1 AND receipt_id IN \
                 (SELECT receipt_id FROM receipts WHERE {PRUNABLE})"
            );
            // A routed request's attempts name providers and models: emptied with the receipt.
            let attempts = format!(
                "DELETE FROM receipt_attempts WHERE tenant_id = $1 AND receipt_id IN \
                 (SELECT receipt_id FROM receipts WHERE {PRUNABLE})"
            );
            let update = format!("UPDATE receipts SET {EMPTIED}, pruned_at = $5 WHERE {PRUNABLE}");
            let bind = |sql: String| {
                sqlx::query(sqlx::AssertSqlSafe(sql)).bind(t.clone()).bind(from as i64).bind(to as i64).bind(c.clone())
            };
            bind(events).execute(&mut *tx).await?;
            bind(attempts).execute(&mut *tx).await?;
            let pruned = bind(update).bind(now).execute(&mut *tx).await?.rows_affected();
            if pruned > 0 {
                raise_pruned_through(&mut tx, &t, (from, to)).await?;
            }
            tx.commit().await?;
            Ok(pruned)
        })
        .await
}

/// Moves the tenant's `pruned_through` up to the highest pruned seq of the window, in the
/// window's transaction.
async fn raise_pruned_through(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    tenant: &str,
    (from, to): (u64, u64),
) -> Result<(), sqlx::Error> {
    const HIGHEST: &str =
        "(SELECT MAX(seq) FROM receipts WHERE tenant_id = $1 AND seq >= $2 AND seq <= $3 AND pruned_at IS NOT NULL)";
    let sql = format!(
        "UPDATE log_retention SET pruned_through = {HIGHEST} WHERE tenant_id = $1 AND pruned_through < {HIGHEST}"
    );
    sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(tenant.to_string())
        .bind(from as i64)
        .bind(to as i64)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// `(seq, this_hash)` of the tenant's pruned receipts with `from <= seq <= to`, ascending, at
/// most `limit`: the leaves an evidence bundle lists for the receipts it cannot show.
pub async fn pruned_leaves(
    store: &Store,
    tenant: &str,
    from: u64,
    to: u64,
    limit: i64,
) -> Result<Vec<(u64, String)>, StoreError> {
    store.settled().await?;
    let t = tenant.to_string();
    store
        .run(move |pool, _| async move {
            let rows = sqlx::query(
                "SELECT seq, this_hash FROM receipts WHERE tenant_id = $1 AND seq >= $2 AND seq <= $3 \
                 AND pruned_at IS NOT NULL ORDER BY seq LIMIT $4",
            )
            .bind(t)
            .bind(from as i64)
            .bind(to as i64)
            .bind(limit)
            .fetch_all(&pool)
            .await?;
            rows.iter()
                .map(|r| Ok((r.try_get::<i64, _>(0)?.max(0) as u64, r.try_get::<String, _>(1)?)))
                .collect::<Result<_, sqlx::Error>>()
                .map_err(StoreError::from)
        })
        .await
}
