//! The tenant log's interior hashes, stored as C2SP tlog-tiles of height 8 (log.md §1), in the
//! transaction that commits the receipts they cover.
//!
//! Only **full** tiles are rows (`log_tiles`: 256 hashes and the root of the subtree they span).
//! A partial tile is read from what it is made of: at level 0 the leaves (`receipts.this_hash`,
//! kept by retention), above it the roots of the full tiles one level down. So most appends
//! write nothing here; one in 256 of a tenant's receipts completes a level-0 tile (one range
//! read of at most 255 `this_hash` values and one 8 KiB insert), one in 65 536 a level-1 tile.
//!
//! The steps are plain values, like the receipt rows: [`needs`] says what an append must read
//! of what is stored, [`build`] makes the tile rows from that and the new leaves, and each
//! backend (sqlx in [`grow_sqlx`], the writer's rusqlite connection in [`grow_sqlite`]) only
//! executes them. Hashes are RFC 9162's (`tlog_tiles`, the port of Go's `sumdb/tlog`).

use std::sync::Arc;

use sqlx::Row;
use tlog_tiles::tile::Tile;
use tlog_tiles::tlog::{record_hash, Hash};

use super::{Store, StoreError};

/// Hashes per full tile (tile height 8).
pub const WIDTH: u64 = 256;

/// 32 raw bytes: a leaf's data (a receipt's `thisHash`) or a tree hash.
pub type Bytes32 = [u8; 32];

/// A full tile: its 256 hashes as served, and the hash of the subtree they span (the tile's
/// entry one level up).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TileRow {
    pub level: u8,
    pub index: u64,
    pub hashes: Vec<u8>,
    pub root: Bytes32,
}

/// Stored hashes an append must read: at `level` 0 the leaves `[from, to)` (their data, the
/// receipts with `seq` `from + 1 ..= to`), above it the roots of the full tiles of `level - 1`
/// with indexes `[from, to)`. These are the stored part of the first tile each level completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Need {
    pub level: u8,
    pub from: u64,
    pub to: u64,
}

/// What a tenant's log growing from `old` to `new` leaves must read first (at most one range
/// of at most 255 hashes per level, and only at the levels where a tile completes).
pub fn needs(old: u64, new: u64) -> Vec<Need> {
    let mut out = Vec::new();
    let (mut o, mut n, mut level) = (old, new, 0u8);
    while n / WIDTH > o / WIDTH {
        let start = o / WIDTH * WIDTH;
        if start < o {
            out.push(Need { level, from: start, to: o });
        }
        (o, n, level) = (o / WIDTH, n / WIDTH, level + 1);
    }
    out
}

/// The full tiles completed by appending `leaves` (leaf data, in order) to a log of `old`
/// leaves, given what [`needs`] asked for (`stored[i]` answers `needs(..)[i]`, leaf data at
/// level 0 and tile roots above).
pub fn build(old: u64, leaves: &[Bytes32], stored: &[Vec<Bytes32>]) -> Vec<TileRow> {
    let plan = needs(old, old + leaves.len() as u64);
    let mut rows = Vec::new();
    // The new hashes at the current level, starting at index `o`.
    let mut o = old;
    let full_leaves = ((old + leaves.len() as u64) / WIDTH * WIDTH).saturating_sub(old) as usize;
    let mut items: Vec<Hash> = leaves[..full_leaves.min(leaves.len())].iter().map(|l| record_hash(l)).collect();
    for level in 0u8.. {
        let n = o + items.len() as u64;
        if n / WIDTH == o / WIDTH {
            break;
        }
        let start = o / WIDTH * WIDTH;
        let mut run: Vec<Hash> = Vec::with_capacity((n - start) as usize);
        if let Some(i) = plan.iter().position(|p| p.level == level) {
            let got = stored.get(i).map_or(&[][..], Vec::as_slice);
            if got.len() as u64 != plan[i].to - plan[i].from {
                // Rows missing below (a database written before the tiles, not backfilled yet):
                // a tile from a shifted run would be wrong, and a missing one is rebuilt by
                // `backfill` at the next start.
                log::warn!(
                    "log tiles: level {level} expected {} stored hashes, read {}",
                    plan[i].to - plan[i].from,
                    got.len()
                );
                break;
            }
            let hash = |b: &Bytes32| if level == 0 { record_hash(b) } else { Hash(*b) };
            run.extend(got.iter().map(hash));
        }
        run.extend(items);
        let mut next = Vec::new();
        for (k, chunk) in run.chunks_exact(WIDTH as usize).enumerate() {
            let hashes: Vec<u8> = chunk.iter().flat_map(|h| h.0).collect();
            let root = Tile::subtree_hash(&hashes).0;
            rows.push(TileRow { level, index: start / WIDTH + k as u64, hashes, root });
            next.push(Hash(root));
        }
        (items, o) = (next, o / WIDTH);
    }
    rows
}

/// One tenant's log growing in an append: from `old` leaves by the leaves' data, in order.
pub struct Growth {
    pub tenant: Arc<str>,
    pub old: u64,
    pub leaves: Vec<Bytes32>,
}

impl Growth {
    fn completes_a_tile(&self) -> bool {
        (self.old + self.leaves.len() as u64) / WIDTH > self.old / WIDTH
    }
}

/// A stored `this_hash` (64 hex digits) as leaf data. A malformed one (never written by the
/// product) reads as zeros, which no proof over it will then verify.
pub fn leaf_data(this_hash: &str) -> Bytes32 {
    let mut out = [0u8; 32];
    let _ = hex::decode_to_slice(this_hash, &mut out);
    out
}

fn bytes32(v: &[u8]) -> Bytes32 {
    let mut out = [0u8; 32];
    if v.len() == 32 {
        out.copy_from_slice(v);
    }
    out
}

const INSERT_TILE: &str = "INSERT INTO log_tiles (tenant_id, level, idx, hashes, root) VALUES ($1, $2, $3, $4, $5) \
     ON CONFLICT (tenant_id, level, idx) DO NOTHING";
const SELECT_LEAVES: &str =
    "SELECT this_hash FROM receipts WHERE tenant_id = $1 AND seq > $2 AND seq <= $3 ORDER BY seq";
const SELECT_ROOTS: &str =
    "SELECT root FROM log_tiles WHERE tenant_id = $1 AND level = $2 AND idx >= $3 AND idx < $4 ORDER BY idx";

/// Writes the tiles the `growths` complete, in the caller's sqlx transaction (after their
/// receipts are inserted).
pub async fn grow_sqlx<DB>(tx: &mut sqlx::Transaction<'_, DB>, growths: Vec<Growth>) -> Result<(), sqlx::Error>
where
    DB: sqlx::Database,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'e> &'e mut DB::Connection: sqlx::Executor<'e, Database = DB>,
    String: for<'q> sqlx::Encode<'q, DB> + for<'r> sqlx::Decode<'r, DB> + sqlx::Type<DB>,
    i64: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    Vec<u8>: for<'q> sqlx::Encode<'q, DB> + for<'r> sqlx::Decode<'r, DB> + sqlx::Type<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    for Growth { tenant, old, leaves } in growths.into_iter().filter(Growth::completes_a_tile) {
        let plan = needs(old, old + leaves.len() as u64);
        let mut stored = Vec::with_capacity(plan.len());
        for need in &plan {
            let (sql, level) =
                if need.level == 0 { (SELECT_LEAVES, None) } else { (SELECT_ROOTS, Some(need.level - 1)) };
            let mut q = sqlx::query::<DB>(sql).bind(tenant.to_string());
            if let Some(l) = level {
                q = q.bind(i64::from(l));
            }
            let rows = q.bind(need.from as i64).bind(need.to as i64).fetch_all(&mut **tx).await?;
            let read = |r: &DB::Row| -> Result<Bytes32, sqlx::Error> {
                Ok(if level.is_none() {
                    leaf_data(&r.try_get::<String, _>(0usize)?)
                } else {
                    bytes32(&r.try_get::<Vec<u8>, _>(0usize)?)
                })
            };
            stored.push(rows.iter().map(read).collect::<Result<Vec<_>, _>>()?);
        }
        for t in build(old, &leaves, &stored) {
            sqlx::query::<DB>(INSERT_TILE)
                .bind(tenant.to_string())
                .bind(i64::from(t.level))
                .bind(t.index as i64)
                .bind(t.hashes)
                .bind(t.root.to_vec())
                .execute(&mut **tx)
                .await?;
        }
    }
    Ok(())
}

/// [`grow_sqlx`] on the receipt writer's rusqlite transaction.
pub fn grow_sqlite(tx: &rusqlite::Transaction<'_>, growths: Vec<Growth>) -> Result<(), rusqlite::Error> {
    for Growth { tenant, old, leaves } in growths.into_iter().filter(Growth::completes_a_tile) {
        let plan = needs(old, old + leaves.len() as u64);
        let mut stored = Vec::with_capacity(plan.len());
        for need in &plan {
            let (from, to) = (need.from as i64, need.to as i64);
            let got: Vec<Bytes32> = if need.level == 0 {
                let mut st = tx.prepare_cached(&positional(SELECT_LEAVES))?;
                let rows = st.query_map(rusqlite::params![&*tenant, from, to], |r| r.get::<_, String>(0))?;
                rows.map(|h| h.map(|h| leaf_data(&h))).collect::<Result<_, _>>()?
            } else {
                let mut st = tx.prepare_cached(&positional(SELECT_ROOTS))?;
                let level = i64::from(need.level - 1);
                let rows = st.query_map(rusqlite::params![&*tenant, level, from, to], |r| r.get::<_, Vec<u8>>(0))?;
                rows.map(|h| h.map(|h| bytes32(&h))).collect::<Result<_, _>>()?
            };
            stored.push(got);
        }
        let mut st = tx.prepare_cached(&positional(INSERT_TILE))?;
        for t in build(old, &leaves, &stored) {
            st.execute(rusqlite::params![&*tenant, i64::from(t.level), t.index as i64, t.hashes, t.root.to_vec()])?;
        }
    }
    Ok(())
}

/// `$n` binds as rusqlite's `?n`.
fn positional(sql: &str) -> String {
    sql.replace('$', "?")
}

/// A full tile's 256 hashes, if it is stored.
pub async fn full_tile(store: &Store, tenant: &str, level: u8, index: u64) -> Result<Option<Vec<u8>>, StoreError> {
    store.settled().await?;
    let t = tenant.to_string();
    store
        .run(move |pool, _| async move {
            let row = sqlx::query("SELECT hashes FROM log_tiles WHERE tenant_id = $1 AND level = $2 AND idx = $3")
                .bind(t)
                .bind(i64::from(level))
                .bind(index as i64)
                .fetch_optional(&pool)
                .await?;
            Ok(row.map(|r| r.get::<Vec<u8>, _>(0)))
        })
        .await
}

/// The data of leaves `[from, to)` (the `this_hash` of receipts `from + 1 ..= to`), in order.
pub async fn leaves(store: &Store, tenant: &str, from: u64, to: u64) -> Result<Vec<Bytes32>, StoreError> {
    store.settled().await?;
    let t = tenant.to_string();
    store
        .run(move |pool, _| async move {
            let rows = sqlx::query(SELECT_LEAVES).bind(t).bind(from as i64).bind(to as i64).fetch_all(&pool).await?;
            Ok(rows.iter().map(|r| leaf_data(&r.get::<String, _>(0))).collect())
        })
        .await
}

/// The `seq` and leaf data of the tenant's receipts from `seq` `first` on, in order, at most
/// `limit` of them: the leaves committed since a size known before (one range read).
pub async fn leaves_from(
    store: &Store,
    tenant: &str,
    first: u64,
    limit: u64,
) -> Result<Vec<(u64, Bytes32)>, StoreError> {
    store.settled().await?;
    let t = tenant.to_string();
    store
        .run(move |pool, _| async move {
            let rows = sqlx::query(
                "SELECT seq, this_hash FROM receipts WHERE tenant_id = $1 AND seq >= $2 ORDER BY seq LIMIT $3",
            )
            .bind(t)
            .bind(first as i64)
            .bind(limit as i64)
            .fetch_all(&pool)
            .await?;
            Ok(rows.iter().map(|r| (r.get::<i64, _>(0).max(0) as u64, leaf_data(&r.get::<String, _>(1)))).collect())
        })
        .await
}

/// The roots of the full tiles of `level` with indexes `[from, to)`, in order: the hashes of
/// a partial tile one level up.
pub async fn roots(store: &Store, tenant: &str, level: u8, from: u64, to: u64) -> Result<Vec<Bytes32>, StoreError> {
    store.settled().await?;
    let t = tenant.to_string();
    store
        .run(move |pool, _| async move {
            let rows = sqlx::query(SELECT_ROOTS)
                .bind(t)
                .bind(i64::from(level))
                .bind(from as i64)
                .bind(to as i64)
                .fetch_all(&pool)
                .await?;
            Ok(rows.iter().map(|r| bytes32(&r.get::<Vec<u8>, _>(0))).collect())
        })
        .await
}

/// Builds the tiles of receipts written before the tiles existed (migration `0010_log`), and
/// any a lost race left out: for every tenant, from the first leaf some level's stored tiles do
/// not cover, in steps of 64 Ki leaves. Runs at start, after the migrations (`server`);
/// idempotent (a tile already stored is left as it is).
pub async fn backfill(store: &Store) -> Result<u64, StoreError> {
    let mut built = 0;
    for (tenant, head) in heads(store).await? {
        let mut covered = covered(store, &tenant, head).await?;
        while covered + WIDTH <= head {
            let to = (covered + WIDTH * WIDTH).min(head);
            let new = leaves(store, &tenant, covered, to).await?;
            let mut stored = Vec::new();
            for need in needs(covered, to) {
                stored.push(match need.level {
                    0 => leaves(store, &tenant, need.from, need.to).await?,
                    l => roots(store, &tenant, l - 1, need.from, need.to).await?,
                });
            }
            built += insert_rows(store, &tenant, build(covered, &new, &stored)).await?;
            covered = to / WIDTH * WIDTH;
        }
    }
    Ok(built)
}

/// Every tenant's log size (its chain head's `seq`).
async fn heads(store: &Store) -> Result<Vec<(String, u64)>, StoreError> {
    store.settled().await?;
    store
        .run(|pool, _| async move {
            let rows = sqlx::query("SELECT tenant_id, seq FROM chain_heads").fetch_all(&pool).await?;
            Ok(rows.iter().map(|r| (r.get::<String, _>(0), r.get::<i64, _>(1).max(0) as u64)).collect())
        })
        .await
}

/// How many leaves every level's stored tiles cover (tiles are made in order), the least of
/// them over the levels a log of `head` leaves has full tiles at.
async fn covered(store: &Store, tenant: &str, head: u64) -> Result<u64, StoreError> {
    let t = tenant.to_string();
    let counts: Vec<(u64, u64)> = store
        .run(move |pool, _| async move {
            let rows = sqlx::query("SELECT level, COUNT(*) FROM log_tiles WHERE tenant_id = $1 GROUP BY level")
                .bind(t)
                .fetch_all(&pool)
                .await?;
            Ok(rows.iter().map(|r| (r.get::<i64, _>(0).max(0) as u64, r.get::<i64, _>(1).max(0) as u64)).collect())
        })
        .await?;
    let mut least = head;
    let mut span = WIDTH; // leaves under one tile of the level
    for level in 0u64.. {
        if span > head {
            break;
        }
        let count = counts.iter().find(|(l, _)| *l == level).map_or(0, |(_, c)| *c);
        least = least.min(count.saturating_mul(span));
        span = span.saturating_mul(WIDTH);
    }
    Ok(least / WIDTH * WIDTH)
}

/// Inserts tile rows (those already stored are left); returns how many were new.
async fn insert_rows(store: &Store, tenant: &str, rows: Vec<TileRow>) -> Result<u64, StoreError> {
    let t = tenant.to_string();
    store
        .run(move |pool, _| async move {
            let mut tx = pool.begin().await?;
            let mut new = 0;
            for r in rows {
                new += sqlx::query(INSERT_TILE)
                    .bind(t.clone())
                    .bind(i64::from(r.level))
                    .bind(r.index as i64)
                    .bind(r.hashes)
                    .bind(r.root.to_vec())
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
            }
            tx.commit().await?;
            Ok(new)
        })
        .await
}

#[cfg(test)]
mod tests;
