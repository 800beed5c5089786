//! Receipt rows: the chained append of sealed rows, on every backend, and the reads of the
//! receipt API.
//!
//! The store seals nothing and builds no row itself: an append locks the batch's chain heads,
//! hands them to the receipt domain's sealing step (a [`Seal`]) and executes the [`Record`]s
//! that come back in one transaction, on sqlx ([`append_sealed`]: PostgreSQL, and SQLite
//! through sqlx) or on the receipt writer's own SQLite connection ([`SqliteAppender`]). The
//! receipt journal (`store::journal`) writes the same records to a file first.

use foldhash::HashMap;
use std::sync::{Arc, LazyLock};

use sqlx::any::AnyRow;
use sqlx::Row;

use super::spend::Deltas;
pub use super::value::Value;
use super::{Backend, ChainPool, Store, StoreError};

/// The receipt journal's binary record.
pub(super) mod frame;

/// A tenant's chain head: the newest receipt's `seq` and `thisHash`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub seq: u64,
    pub hash: Arc<str>,
}

/// What the receipt domain decides for every append, as plain values: the hash a tenant's chain
/// starts from, and the spend periods a receipt's cost adds to (from its `ts`).
#[derive(Debug, Clone, Copy)]
pub struct ChainRules {
    /// The head hash of a tenant before its first receipt.
    pub genesis: &'static str,
    pub spend_periods: for<'a> fn(&'a str) -> [&'a str; 2],
}

impl ChainRules {
    /// The head of a tenant before its first receipt.
    pub fn genesis_head(&self) -> Head {
        Head { seq: 0, hash: Arc::from(self.genesis) }
    }
}

/// One batch to append, as the receipt domain seals it (`receipts::rows`): the tenants whose
/// chains it continues, and the sealing step, run once their heads are locked.
pub trait Seal {
    /// The batch's tenants, in the order their heads are locked and handed to [`Seal::seal`]
    /// (tenant id order: concurrent writers lock heads in the same order and cannot deadlock).
    fn tenants(&self) -> impl Iterator<Item = &Arc<str>> + Send;

    /// The batch's records, sealed after `heads` (one per tenant): grouped by tenant, in
    /// [`Seal::tenants`] order, each tenant's in chain order.
    fn seal(&mut self, heads: Vec<Head>) -> Vec<Record>;
}

/// A `receipts` row as row queries read it (every column but the write-only ones): `S` is
/// `String` from a row query, `&str` from a packed page. `checks` is the column's JSON text.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceiptRow<S> {
    pub v: u32,
    pub tenant_id: S,
    pub seq: u64,
    pub receipt_id: S,
    pub request_id: S,
    pub actor: S,
    pub provider: S,
    pub model: S,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cost_usd: f64,
    pub checks: S,
    pub upstream_status: S,
    pub ts: S,
    pub prev_hash: S,
    pub this_hash: S,
    pub signature: S,
    pub key_id: S,
    pub kind: S,
    pub pack_version: S,
    /// The resource an `admin` receipt records an action on (docs/log.md §8); `""` on others.
    pub subject: S,
    /// Microseconds from the request reaching the gateway to the end of its answer (not signed);
    /// None when unknown.
    pub latency_us: Option<u64>,
    /// Emptied by a retention sweep (`pruned_at` set): only `tenant_id`, `seq`, `receipt_id` and
    /// `this_hash` hold their values (`store::retention`).
    pub pruned: bool,
}

/// The columns of `receipts`, in the order a [`Record`] holds their values, the append binds
/// them and a packed page carries them. Every column list (insert, select, packed page) is
/// derived from this one table; the receipt domain builds a record's values in its order.
pub const RECEIPT_COLUMNS: [Column; 26] = {
    const NUMBER: Read = Read::Page(Field::Number);
    const REAL: Read = Read::Page(Field::Real);
    const TEXT: Read = Read::Page(Field::Text);
    const MAYBE_NUMBER: Read = Read::Page(Field::MaybeNumber);
    [
        col("tenant_id", Read::Row),
        col("seq", NUMBER),
        col("receipt_id", TEXT),
        col("v", NUMBER),
        col("request_id", TEXT),
        col("actor", TEXT),
        col("provider", TEXT),
        col("model", TEXT),
        col("prompt_tokens", NUMBER),
        col("completion_tokens", NUMBER),
        col("cost_usd", REAL),
        col("checks", TEXT),
        col("upstream_status", TEXT),
        col("ts", TEXT),
        col("prev_hash", TEXT),
        col("this_hash", TEXT),
        col("signature", TEXT),
        col("key_id", TEXT),
        col("kind", TEXT),
        col("receipt_pack_version", TEXT),
        col("check_names", Read::No),
        col("cache_result", Read::No),
        col("saved_tokens", Read::No),
        col("saved_usd", Read::No),
        // Signed only on `admin` receipts (docs/receipts.md §1); `""` on every other.
        col("subject", TEXT),
        // Unsigned and nullable (migration 0018). In packed pages too, though no chain walk
        // reads it (a few bytes a row): a stored receipt reads the same whichever way it came.
        col("latency_us", MAYBE_NUMBER),
    ]
};

const fn col(name: &'static str, read: Read) -> Column {
    Column { name, read }
}

/// One column of `receipts`: its name and how it is read back.
pub struct Column {
    pub name: &'static str,
    read: Read,
}

/// Where a column is read back.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Read {
    /// Never: written for the `check` filter and the cache report only.
    No,
    /// Into a [`ReceiptRow`] by row queries ([`from_row`]); packed pages leave it out (a page
    /// is one tenant's).
    Row,
    /// By row queries, and in packed pages as this field (see [`seq_range_packed`]).
    Page(Field),
}

/// How a packed page carries a column.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Field {
    /// Decimal text and a `;`.
    Number,
    /// Decimal text, or nothing for NULL (`concat` takes NULL as ''), and a `;`.
    MaybeNumber,
    /// Text that converts back to the same `f64`, and a `;` (SQLite's `quote()` falls back to
    /// 20 digits when 15 do not round-trip; PostgreSQL prints the shortest exact form), so
    /// every recomputed hash sees the stored value.
    Real,
    /// Byte length, a `:` and the bytes, so no value needs escaping and none can be mistaken
    /// for a separator.
    Text,
}

/// Column names joined with `, `: those whose [`Read`] `keep` accepts, in table order.
fn column_list(keep: impl Fn(Read) -> bool) -> String {
    RECEIPT_COLUMNS.iter().filter(|c| keep(c.read)).map(|c| c.name).collect::<Vec<_>>().join(", ")
}

/// What row queries select: every column a [`ReceiptRow`] holds. `pruned_at` is not one of
/// [`RECEIPT_COLUMNS`]: no append writes it (a record's values, and the journal's lines, keep
/// their shape); a retention sweep sets it (`store::retention`).
static COLUMNS: LazyLock<String> = LazyLock::new(|| format!("{}, pruned_at", column_list(|r| r != Read::No)));
pub(super) static INSERT_COLUMNS: LazyLock<String> = LazyLock::new(|| column_list(|_| true));

fn from_row(r: &AnyRow) -> Result<ReceiptRow<String>, sqlx::Error> {
    let n = |c: &str| -> Result<u64, sqlx::Error> { Ok(r.try_get::<i64, _>(c)?.max(0) as u64) };
    Ok(ReceiptRow {
        v: n("v")? as u32,
        tenant_id: r.try_get("tenant_id")?,
        seq: n("seq")?,
        receipt_id: r.try_get("receipt_id")?,
        request_id: r.try_get("request_id")?,
        actor: r.try_get("actor")?,
        provider: r.try_get("provider")?,
        model: r.try_get("model")?,
        prompt_tokens: n("prompt_tokens")?,
        completion_tokens: n("completion_tokens")?,
        cost_usd: r.try_get("cost_usd")?,
        checks: r.try_get("checks")?,
        upstream_status: r.try_get("upstream_status")?,
        ts: r.try_get("ts")?,
        prev_hash: r.try_get("prev_hash")?,
        this_hash: r.try_get("this_hash")?,
        signature: r.try_get("signature")?,
        key_id: r.try_get("key_id")?,
        kind: r.try_get("kind")?,
        pack_version: r.try_get("receipt_pack_version")?,
        subject: r.try_get("subject")?,
        latency_us: r.try_get::<Option<i64>, _>("latency_us")?.map(|v| v.max(0) as u64),
        pruned: r.try_get::<Option<String>, _>("pruned_at")?.is_some(),
    })
}

/// Rows per multi-row INSERT (SQLite allows 32 766 binds per statement). With positional `?`
/// binds on SQLite, larger statements keep paying off; see `benches/receipts.rs`.
const ROWS_PER_INSERT: usize = 128;
const _: () = assert!(ROWS_PER_INSERT * RECEIPT_COLUMNS.len() <= 32_766);

/// Statement sizes a batch is cut into: the largest first, then smaller ones for the rest.
/// Every distinct row count is a distinct statement to prepare and cache; cutting
/// `rows.chunks(128)` gave each batch's remainder its own size, so nearly every batch prepared
/// a new statement of up to 3 000 parameters and churned the connection's statement cache.
/// With these sizes there are four statements per table, prepared once per connection.
const INSERT_SIZES: [usize; 4] = [ROWS_PER_INSERT, 32, 8, 1];

/// Cuts `rows` into slices whose lengths are all in [`INSERT_SIZES`].
fn statement_chunks<T>(mut rows: &[T]) -> impl Iterator<Item = &[T]> {
    std::iter::from_fn(move || {
        let size = INSERT_SIZES.iter().copied().find(|&s| s <= rows.len())?;
        let (head, rest) = rows.split_at(size);
        rows = rest;
        Some(head)
    })
}

/// Appends a batch in one transaction: lock every tenant's chain head (in [`Seal::tenants`]
/// order), seal the batch after them, then write its records (receipts, guardrail events,
/// webhook outbox, spend) and move the heads. On PostgreSQL the head rows are locked
/// (`FOR UPDATE`) so several gateway processes keep one gap-free chain per tenant. Returns how
/// many receipts were written.
///
/// Runs on the calling task, which must run on the database runtime (the receipt writer does).
/// Unlike a spawned task, dropping this future (the writer's commit timeout) abandons the
/// transaction: it is rolled back, not committed later behind the writer's back.
pub async fn append_sealed<S: Seal + Send + Sync>(
    store: &Store,
    rules: ChainRules,
    seal: &mut S,
) -> Result<usize, StoreError> {
    let backend = store.backend();
    let written = match store.chain_pool() {
        ChainPool::Sqlite(pool) => {
            ChainTx::<sqlx::Sqlite>::append(&mut *pool.acquire().await?, backend, rules, seal).await?
        }
        ChainPool::Postgres(pool) => {
            ChainTx::<sqlx::Postgres>::append(&mut *pool.acquire().await?, backend, rules, seal).await?
        }
    };
    Ok(written)
}

/// The append's transaction on the receipt writer's native connection, step by step.
struct ChainTx<'c, DB: sqlx::Database> {
    tx: sqlx::Transaction<'c, DB>,
    backend: Backend,
}

impl<'c, DB> ChainTx<'c, DB>
where
    DB: sqlx::Database,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'e> &'e mut DB::Connection: sqlx::Executor<'e, Database = DB>,
    Arc<str>: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    String: for<'q> sqlx::Encode<'q, DB> + for<'r> sqlx::Decode<'r, DB> + sqlx::Type<DB>,
    i64: for<'q> sqlx::Encode<'q, DB> + for<'r> sqlx::Decode<'r, DB> + sqlx::Type<DB>,
    Option<i64>: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    f64: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    &'static str: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    Vec<u8>: for<'q> sqlx::Encode<'q, DB> + for<'r> sqlx::Decode<'r, DB> + sqlx::Type<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    /// [`append_sealed`] on one connection.
    async fn append<S: Seal + Send + Sync>(
        conn: &'c mut DB::Connection,
        backend: Backend,
        rules: ChainRules,
        seal: &mut S,
    ) -> Result<usize, sqlx::Error> {
        let mut tx = Self::begin(conn, backend).await?;
        let mut heads = Vec::new();
        for tenant in seal.tenants() {
            heads.push(tx.lock_head(tenant.clone(), rules.genesis).await?);
        }
        let records = seal.seal(heads);
        tx.insert_receipts(&records).await?;
        super::tiles::grow_sqlx(&mut tx.tx, growths(&records)).await?;
        tx.insert_events(&records).await?;
        tx.enqueue_outbox(&records).await?;
        tx.insert_attempts(&records).await?;
        tx.apply_spend(&records, rules).await?;
        for r in batch_ends(&records) {
            tx.set_head(r).await?;
        }
        tx.tx.commit().await?;
        Ok(records.len())
    }

    async fn begin(conn: &'c mut DB::Connection, backend: Backend) -> Result<Self, sqlx::Error> {
        // SQLite: take the write lock now, not at the first insert after the head reads.
        let begin: &'static str = match backend {
            Backend::Sqlite => "BEGIN IMMEDIATE",
            Backend::Postgres => "BEGIN",
        };
        let tx = sqlx::Connection::begin_with(conn, sqlx::AssertSqlSafe(begin.to_string())).await?;
        Ok(ChainTx { tx, backend })
    }

    /// The tenant's chain head (created at `genesis` before its first receipt), locked until
    /// commit on PostgreSQL.
    async fn lock_head(&mut self, tenant: Arc<str>, genesis: &'static str) -> Result<Head, sqlx::Error> {
        sqlx::query::<DB>(
            "INSERT INTO chain_heads (tenant_id, seq, this_hash) VALUES ($1, 0, $2) ON CONFLICT (tenant_id) DO NOTHING",
        )
        .bind(tenant.clone())
        .bind(genesis)
        .execute(&mut *self.tx)
        .await?;
        let sql: &'static str = match self.backend {
            Backend::Postgres => "SELECT seq, this_hash FROM chain_heads WHERE tenant_id = $1 FOR UPDATE",
            Backend::Sqlite => "SELECT seq, this_hash FROM chain_heads WHERE tenant_id = $1",
        };
        let row = sqlx::query::<DB>(sql).bind(tenant).fetch_one(&mut *self.tx).await?;
        Ok(Head { seq: row.try_get::<i64, _>(0usize)?.max(0) as u64, hash: row.try_get::<String, _>(1usize)?.into() })
    }

    async fn insert_receipts(&mut self, records: &[Record]) -> Result<(), sqlx::Error> {
        for chunk in statement_chunks(records) {
            let sql = format!(
                "INSERT INTO receipts ({}) VALUES {}",
                *INSERT_COLUMNS,
                values_list(self.backend, chunk.len(), RECEIPT_COLUMNS.len())
            );
            let mut q = sqlx::query::<DB>(sqlx::AssertSqlSafe(sql));
            for value in chunk.iter().flat_map(|r| &r.row) {
                q = bind(q, value);
            }
            q.execute(&mut *self.tx).await?;
        }
        Ok(())
    }

    /// Guardrail redactions and blocks, beside their receipts (categories only, never text).
    async fn insert_events(&mut self, records: &[Record]) -> Result<(), sqlx::Error> {
        const EVENT_COLUMNS: [&str; 10] =
            ["id", "tenant_id", "ts", "receipt_id", "actor", "model", "check_name", "result", "category", "direction"];
        let events: Vec<&Vec<Value>> = records.iter().flat_map(|r| &r.events).collect();
        for chunk in statement_chunks(&events) {
            let sql = format!(
                "INSERT INTO guardrail_events ({}) VALUES {}",
                EVENT_COLUMNS.join(", "),
                values_list(self.backend, chunk.len(), EVENT_COLUMNS.len())
            );
            let mut q = sqlx::query::<DB>(sqlx::AssertSqlSafe(sql));
            for e in chunk {
                // A record leaves `check_name` out: it is always GUARDRAIL.
                let (before, after) = e.split_at(6);
                q = before.iter().fold(q, bind).bind("GUARDRAIL");
                q = after.iter().fold(q, bind);
            }
            q.execute(&mut *self.tx).await?;
        }
        Ok(())
    }

    /// Webhook events the receipts caused, fanned out to their subscribers in this transaction.
    async fn enqueue_outbox(&mut self, records: &[Record]) -> Result<(), sqlx::Error> {
        for values in records.iter().flat_map(|r| &r.outbox) {
            values.iter().fold(sqlx::query::<DB>(super::webhooks::FAN_OUT), bind).execute(&mut *self.tx).await?;
        }
        Ok(())
    }

    /// The attempts of routed requests, beside their receipts.
    async fn insert_attempts(&mut self, records: &[Record]) -> Result<(), sqlx::Error> {
        for values in records.iter().flat_map(|r| &r.attempts) {
            values.iter().fold(sqlx::query::<DB>(ATTEMPT_INSERT), bind).execute(&mut *self.tx).await?;
        }
        Ok(())
    }

    /// Spend moves with its receipts: all of it lands, or none of it.
    async fn apply_spend(&mut self, records: &[Record], rules: ChainRules) -> Result<(), sqlx::Error> {
        let mut spend = Deltas::default();
        let mut users = super::spend::EndUserDeltas::default();
        for r in records {
            r.add_spend(&mut spend, rules.spend_periods);
            r.add_end_user(&mut users, rules.spend_periods);
        }
        super::spend::apply::<DB>(&mut self.tx, spend).await?;
        super::spend::apply_end_users::<DB>(&mut self.tx, users).await
    }

    /// Moves the tenant's head to `last`, its newest record.
    async fn set_head(&mut self, last: &Record) -> Result<(), sqlx::Error> {
        let q = sqlx::query::<DB>("UPDATE chain_heads SET seq = $1, this_hash = $2 WHERE tenant_id = $3")
            .bind(last.seq() as i64);
        bind(bind(q, &last.row[THIS_HASH]), &last.row[TENANT]).execute(&mut *self.tx).await?;
        Ok(())
    }
}

type Query<'q, DB> = sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments>;

/// Binds one value to a sqlx query.
fn bind<'q, DB>(q: Query<'q, DB>, value: &Value) -> Query<'q, DB>
where
    DB: sqlx::Database,
    Arc<str>: for<'e> sqlx::Encode<'e, DB> + sqlx::Type<DB>,
    i64: for<'e> sqlx::Encode<'e, DB> + sqlx::Type<DB>,
    Option<i64>: for<'e> sqlx::Encode<'e, DB> + sqlx::Type<DB>,
    f64: for<'e> sqlx::Encode<'e, DB> + sqlx::Type<DB>,
    &'static str: for<'e> sqlx::Encode<'e, DB> + sqlx::Type<DB>,
{
    match value {
        Value::Int(v) => q.bind(*v),
        Value::Real(v) => q.bind(*v),
        Value::Text(v) => q.bind(v.clone()),
        Value::Static(v) => q.bind(*v),
        // The only nullable column appended is an integer (`latency_us`).
        Value::Null => q.bind(None::<i64>),
    }
}

/// Each tenant's newest record in one sealed batch (whose records come grouped by tenant, each
/// tenant's in chain order): its new head.
pub fn batch_ends(records: &[Record]) -> impl Iterator<Item = &Record> {
    records.chunk_by(|a, b| a.tenant_id() == b.tenant_id()).filter_map(<[Record]>::last)
}

/// The log growths in `records` (a tenant's records in chain order, tenants possibly
/// interleaved) that complete a tile: the tiles they complete are written beside them
/// (`store::tiles`). Only those tenants' leaves are decoded: most batches complete none.
pub(super) fn growths<R: std::borrow::Borrow<Record>>(records: &[R]) -> Vec<super::tiles::Growth> {
    let mut spans: Vec<(&str, u64, u64)> = Vec::new(); // tenant, first seq, last seq
    for r in records.iter().map(std::borrow::Borrow::borrow) {
        match spans.iter_mut().find(|s| s.0 == r.tenant_id()) {
            Some(s) => s.2 = r.seq(),
            None => spans.push((r.tenant_id(), r.seq(), r.seq())),
        }
    }
    let tile = super::tiles::WIDTH;
    spans
        .into_iter()
        .filter(|&(_, first, last)| last / tile > (first - 1) / tile)
        .map(|(tenant, first, _)| {
            let mine = records.iter().map(std::borrow::Borrow::borrow).filter(|r| r.tenant_id() == tenant);
            let leaves = mine.clone().map(|r| super::tiles::leaf_data(r.this_hash())).collect();
            let tenant = mine.map(|r| r.head().0).next().expect("a span has a record");
            super::tiles::Growth { tenant, old: first - 1, leaves }
        })
        .collect()
}

/// Each tenant's newest record among any records (a tenant's records are in chain order): its
/// new head.
fn chain_ends<R: std::borrow::Borrow<Record>>(records: &[R]) -> impl Iterator<Item = &Record> {
    let mut last: HashMap<&str, &Record> = HashMap::default();
    for r in records.iter().map(std::borrow::Borrow::borrow) {
        last.insert(r.tenant_id(), r);
    }
    last.into_values()
}

/// The receipt writer's own SQLite connection: the append transaction of [`append_sealed`],
/// run statement after statement on the calling thread with cached prepared statements,
/// without a hand-off per statement. The receipt writer owns it (`receipts::writer`) and lends
/// it to a request alone in flight.
pub struct SqliteAppender {
    conn: rusqlite::Connection,
    /// How long [`SqliteAppender::append`] waits for a lock held elsewhere.
    busy: std::time::Duration,
    rules: ChainRules,
}

impl SqliteAppender {
    /// Opens `file` (created and migrated by the store already). `busy` is how long a commit
    /// waits for a lock held elsewhere; the connection never checkpoints the WAL itself (see
    /// [`checkpoint_passive`]), so no commit stalls on copying the log into the database.
    pub fn open(
        file: &std::path::Path,
        busy: std::time::Duration,
        rules: ChainRules,
    ) -> Result<SqliteAppender, StoreError> {
        let conn = rusqlite::Connection::open(file)
            .map_err(|e| StoreError::Unavailable(format!("{}: {e}", file.display())))?;
        conn.busy_timeout(busy).map_err(sqlite_err)?;
        conn.execute_batch(
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON; PRAGMA wal_autocheckpoint=0; \
             PRAGMA journal_size_limit=67108864;",
        )
        .map_err(sqlite_err)?;
        conn.set_prepared_statement_cache_capacity(32);
        Ok(SqliteAppender { conn, busy, rules })
    }

    /// Sets how durable this connection's commits are: with [`Durability::Fsync`] every commit
    /// syncs the WAL before it returns (`synchronous=FULL`).
    pub fn with_durability(self, durability: super::Durability) -> Result<SqliteAppender, StoreError> {
        self.conn.execute_batch(durability.sqlite_pragma()).map_err(sqlite_err)?;
        Ok(self)
    }

    /// Checkpoints the frames the background checkpointer left behind (those appended while it
    /// ran), between two batches: no frame can be appended meanwhile, so the checkpoint
    /// completes unless a reader holds an old snapshot, and the next batch starts the WAL over.
    /// Without this step the WAL never started over under steady load (a passive checkpoint
    /// always finds new frames behind it): it grew by ~150 MB/s at 24 000 receipts/s, and
    /// writing into new file blocks (ext4 zeroing them) was 30% of the writer thread's time.
    pub fn finish_checkpoint(&self) -> Result<Checkpointed, StoreError> {
        checkpoint_passive(&self.conn)
    }

    /// [`SqliteAppender::append`] that fails at once (`SQLITE_BUSY`) instead of waiting when
    /// another connection holds the write lock: for callers that must not block (a request
    /// committing its own receipt on a proxy thread), who hand the drafts to the writer then.
    pub fn append_unless_busy(&mut self, seal: &mut impl Seal) -> Result<usize, StoreError> {
        self.conn.busy_timeout(std::time::Duration::ZERO).map_err(sqlite_err)?;
        let appended = self.append(seal);
        self.conn.busy_timeout(self.busy).map_err(sqlite_err)?;
        appended
    }

    /// [`append_sealed`] on this connection: the same rows, events, spend and heads, in one
    /// `BEGIN IMMEDIATE` transaction.
    pub fn append(&mut self, seal: &mut impl Seal) -> Result<usize, StoreError> {
        let rules = self.rules;
        let tx = self.conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(sqlite_err)?;
        let mut heads = Vec::new();
        for tenant in seal.tenants() {
            tx.prepare_cached("INSERT INTO chain_heads (tenant_id, seq, this_hash) VALUES (?1, 0, ?2) ON CONFLICT (tenant_id) DO NOTHING")
                .and_then(|mut st| st.execute(rusqlite::params![&**tenant, rules.genesis]))
                .map_err(sqlite_err)?;
            heads.push(sqlite_head(&tx, tenant)?.unwrap_or_else(|| rules.genesis_head()));
        }
        let records = seal.seal(heads);
        write_records(&tx, &records, rules, || {})?;
        tx.commit().map_err(sqlite_err)?;
        Ok(records.len())
    }

    /// Writes records sealed elsewhere (the receipt journal's) in one `BEGIN IMMEDIATE`
    /// transaction, as they arrive in parts: `next` is called until it returns None (the
    /// journal's applier reads its lines back a few hundred records at a time; replay hands over
    /// one part). The records must continue their tenants' chains (the caller's job: the journal
    /// seals after the heads it keeps, and replay skips what is already stored).
    pub fn apply<R: std::borrow::Borrow<Record>>(
        &mut self,
        mut next: impl FnMut() -> Result<Option<Vec<R>>, StoreError>,
    ) -> Result<(), StoreError> {
        let tx = self.conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(sqlite_err)?;
        // Between statements (≤ 128 receipts, ~0.4 ms) and parts the applier lets a waiting
        // request thread have the core: see `APPLIER_PACE`.
        while let Some(part) = next()? {
            write_records(&tx, &part, self.rules, APPLIER_PACE)?;
            APPLIER_PACE();
        }
        tx.commit().map_err(sqlite_err)
    }

    /// The stored head of `tenant` (None before its first receipt).
    pub fn head(&self, tenant: &str) -> Result<Option<Head>, StoreError> {
        sqlite_head(&self.conn, tenant)
    }
}

/// `tenant`'s chain head as `chain_heads` holds it (None: no row yet).
pub fn sqlite_head(conn: &rusqlite::Connection, tenant: &str) -> Result<Option<Head>, StoreError> {
    use rusqlite::OptionalExtension;
    conn.prepare_cached("SELECT seq, this_hash FROM chain_heads WHERE tenant_id = ?1")
        .and_then(|mut st| {
            st.query_row([tenant], |r| {
                Ok(Head { seq: r.get::<_, i64>(0)?.max(0) as u64, hash: r.get::<_, String>(1)?.into() })
            })
            .optional()
        })
        .map_err(sqlite_err)
}

/// One sealed receipt as the store writes it: its `receipts` row (values in [`RECEIPT_COLUMNS`]
/// order), its guardrail events, its webhook events and the key its cost adds to. The receipt
/// domain builds them (`receipts::rows`); every append path writes them, and the receipt
/// journal holds one per line (`store::journal`), so a record is also what replay writes.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Record {
    #[serde(rename = "r")]
    pub(super) row: Vec<Value>,
    /// `guardrail_events` rows: the values of [`EVENT_INSERT`]'s binds.
    #[serde(rename = "e", default, skip_serializing_if = "Vec::is_empty")]
    events: Vec<Vec<Value>>,
    /// Webhook outbox rows: [`webhooks::OUTBOX_COLUMNS`](super::webhooks) values.
    #[serde(rename = "o", default, skip_serializing_if = "Vec::is_empty")]
    outbox: Vec<Vec<Value>>,
    /// `receipt_attempts` rows ([`ATTEMPT_INSERT`]'s binds): a routed request's upstream tries.
    #[serde(rename = "a", default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<Vec<Value>>,
    /// The virtual key whose spend the receipt's cost adds to.
    #[serde(rename = "k")]
    spend_key: Arc<str>,
}

/// The place of column `name` in [`RECEIPT_COLUMNS`] (and in a record's row), found at compile
/// time: a name that is not there fails the build.
pub const fn column(name: &str) -> usize {
    let mut i = 0;
    while i < RECEIPT_COLUMNS.len() {
        if same(RECEIPT_COLUMNS[i].name, name) {
            return i;
        }
        i += 1;
    }
    panic!("not a column of receipts")
}

/// Whether two strings are equal, at compile time.
pub const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut k = 0;
    while k < a.len() && a[k] == b[k] {
        k += 1;
    }
    k == a.len()
}

/// Where a record's row holds the columns the store reads back from it.
const TENANT: usize = column("tenant_id");
const SEQ: usize = column("seq");
const COST: usize = column("cost_usd");
const TS: usize = column("ts");
const ACTOR: usize = column("actor");
const KIND: usize = column("kind");
const PREV_HASH: usize = column("prev_hash");
const THIS_HASH: usize = column("this_hash");
const SIGNATURE: usize = column("signature");
const KEY_ID: usize = column("key_id");

/// A routed request's attempt beside its receipt (not signed; docs/decisions/routes.md).
const ATTEMPT_INSERT: &str = "INSERT INTO receipt_attempts (receipt_id, n, tenant_id, provider, credential, model, \
                              status, outcome, ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)";

/// How many values an attempt of a record holds.
pub const ATTEMPT_VALUES: usize = 9;

/// How many values a guardrail event of a record holds (every column but `check_name`).
pub const EVENT_VALUES: usize = 9;

/// The columns of a guardrail event, in the order a record's events hold them.
const EVENT_INSERT: &str = "INSERT INTO guardrail_events (id, tenant_id, ts, receipt_id, actor, model, check_name, \
                            result, category, direction) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'GUARDRAIL', ?7, ?8, ?9)";

impl Record {
    /// A record of `row` (values in [`RECEIPT_COLUMNS`] order), its guardrail events
    /// ([`EVENT_VALUES`] values each), its webhook outbox rows and the key its cost adds to.
    pub fn new(row: Vec<Value>, events: Vec<Vec<Value>>, outbox: Vec<Vec<Value>>, spend_key: Arc<str>) -> Record {
        Record { row, events, outbox, attempts: Vec::new(), spend_key }
    }

    fn text(&self, i: usize) -> &str {
        self.row[i].as_text().unwrap_or_default()
    }

    fn int(&self, i: usize) -> i64 {
        match self.row[i] {
            Value::Int(v) => v,
            _ => 0,
        }
    }

    pub fn tenant_id(&self) -> &str {
        self.text(TENANT)
    }

    pub fn seq(&self) -> u64 {
        self.int(SEQ).max(0) as u64
    }

    pub fn prev_hash(&self) -> &str {
        self.text(PREV_HASH)
    }

    pub fn this_hash(&self) -> &str {
        self.text(THIS_HASH)
    }

    /// Whether the record waits for its signature (sealed for the receipt journal, which signs
    /// before the row reaches the database: `receipts::rows::sign_records`).
    pub fn unsigned(&self) -> bool {
        self.text(SIGNATURE).is_empty()
    }

    /// Sets the signature (base64) and the id of the key that made it.
    pub fn set_signature(&mut self, signature: Arc<str>, key_id: Arc<str>) {
        self.row[SIGNATURE] = Value::Text(signature);
        self.row[KEY_ID] = Value::Text(key_id);
    }

    /// The record's row as a row query reads it (not pruned).
    pub fn as_row(&self) -> ReceiptRow<&str> {
        // Each position found at compile time (a `const`), not by a scan of the columns per call.
        macro_rules! at {
            ($name:literal) => {{
                const I: usize = column($name);
                I
            }};
        }
        let latency = match self.row[at!("latency_us")] {
            Value::Int(us) => Some(us.max(0) as u64),
            _ => None,
        };
        ReceiptRow {
            v: self.int(at!("v")).clamp(0, u32::MAX as i64) as u32,
            tenant_id: self.text(at!("tenant_id")),
            seq: self.seq(),
            receipt_id: self.text(at!("receipt_id")),
            request_id: self.text(at!("request_id")),
            actor: self.text(at!("actor")),
            provider: self.text(at!("provider")),
            model: self.text(at!("model")),
            prompt_tokens: self.int(at!("prompt_tokens")).max(0) as u64,
            completion_tokens: self.int(at!("completion_tokens")).max(0) as u64,
            cost_usd: self.cost_usd(),
            checks: self.text(at!("checks")),
            upstream_status: self.text(at!("upstream_status")),
            ts: self.text(at!("ts")),
            prev_hash: self.prev_hash(),
            this_hash: self.this_hash(),
            signature: self.text(at!("signature")),
            key_id: self.text(at!("key_id")),
            kind: self.text(at!("kind")),
            pack_version: self.text(at!("receipt_pack_version")),
            subject: self.text(at!("subject")),
            latency_us: latency,
            pruned: false,
        }
    }

    /// Column `i`'s text, shared.
    fn shared_text(&self, i: usize) -> Arc<str> {
        match &self.row[i] {
            Value::Text(t) => t.clone(),
            other => Arc::from(other.as_text().unwrap_or_default()),
        }
    }

    /// The tenant and its chain head after this record.
    pub fn head(&self) -> (Arc<str>, Head) {
        (self.shared_text(TENANT), Head { seq: self.seq(), hash: self.shared_text(THIS_HASH) })
    }

    fn cost_usd(&self) -> f64 {
        match self.row[COST] {
            Value::Real(v) => v,
            Value::Int(v) => v as f64,
            _ => 0.0,
        }
    }

    /// Adds the receipt's cost to its key's spend in each of its periods.
    fn add_spend<'a>(&'a self, spend: &mut Deltas<'a>, periods: for<'t> fn(&'t str) -> [&'t str; 2]) {
        let cost = self.cost_usd();
        if cost != 0.0 {
            for period in periods(self.text(TS)) {
                spend.add(self.tenant_id(), &self.spend_key, period, cost);
            }
        }
    }

    /// Adds the receipt to its end user's figures (a model or tool call whose actor is
    /// `<keyId>/<endUser>`) in each of its periods.
    fn add_end_user<'a>(
        &'a self,
        out: &mut super::spend::EndUserDeltas<'a>,
        periods: for<'t> fn(&'t str) -> [&'t str; 2],
    ) {
        if !matches!(self.text(KIND), "model_call" | "tool_call") {
            return;
        }
        let Some(user) = self.text(ACTOR).strip_prefix(&*self.spend_key).and_then(|a| a.strip_prefix('/')) else {
            return;
        };
        for period in periods(self.text(TS)) {
            out.add((self.tenant_id(), &self.spend_key, user, period), self.cost_usd(), self.text(TS));
        }
    }

    /// A record as an earlier version journaled it, in today's shape: lines written before the
    /// `subject` column (migration 0014) lack its `""` and the `latency_us` after it; lines
    /// written before `latency_us` (migration 0018, the last column) lack only that, unknown.
    pub fn upgraded(mut self) -> Record {
        if self.row.len() == RECEIPT_COLUMNS.len() - 2 {
            self.row.push(Value::Static(""));
        }
        if self.row.len() == RECEIPT_COLUMNS.len() - 1 {
            self.row.push(Value::Null);
        }
        self
    }

    /// Whether the record has the shape the store writes (a journal line could be anything).
    pub fn well_formed(&self) -> bool {
        self.row.len() == RECEIPT_COLUMNS.len()
            && matches!(self.row[SEQ], Value::Int(s) if s > 0)
            && self.events.iter().all(|e| e.len() == EVENT_VALUES)
            && self.outbox.iter().all(|o| o.len() == super::webhooks::OUTBOX_COLUMNS)
            && self.attempts.iter().all(|a| a.len() == ATTEMPT_VALUES)
    }
}

/// What the journal's applier does between two INSERT statements of one apply: yield the core.
///
/// Why: the applier runs as idle work, yet at 3 000 req/s `perf sched` showed request threads
/// runnable for 0.8–1.0 ms while the applier ran on their core (an apply of ~300 receipts every
/// 100 ms; on this `PREEMPT_NONE` kernel the request thread got the core at the next wake-up on
/// it), and a longer apply period made the p99 worse (2 s: 1.60 ms against 0.94–1.50). A yield
/// between statements bounds such a stint by one statement's work.
const APPLIER_PACE: fn() = std::thread::yield_now;

/// Writes `records` (rows, guardrail events, webhook outbox, spend, each tenant's new head) in
/// the open transaction; `pace` runs between two INSERT statements.
fn write_records<R: std::borrow::Borrow<Record>>(
    tx: &rusqlite::Transaction<'_>,
    records: &[R],
    rules: ChainRules,
    pace: impl Fn(),
) -> Result<(), StoreError> {
    for (i, chunk) in statement_chunks(records).enumerate() {
        if i > 0 {
            pace();
        }
        // `OR FAIL`, not the default `ABORT`: a statement of several rows that may abort makes
        // SQLite copy every page it touches to a statement journal first, to undo the statement
        // alone (~0.9 µs a receipt of the applier's 20 with every check on, perf, session 48).
        // Any error here rolls the whole transaction back anyway.
        let sql = format!(
            "INSERT OR FAIL INTO receipts ({}) VALUES {}",
            *INSERT_COLUMNS,
            values_list(Backend::Sqlite, chunk.len(), RECEIPT_COLUMNS.len())
        );
        let mut st = tx.prepare_cached(&sql).map_err(sqlite_err)?;
        st.execute(rusqlite::params_from_iter(chunk.iter().flat_map(|r| r.borrow().row.iter()))).map_err(sqlite_err)?;
    }
    super::tiles::grow_sqlite(tx, growths(records)).map_err(sqlite_err)?;
    let mut spend = Deltas::default();
    let mut users = super::spend::EndUserDeltas::default();
    for r in records.iter().map(std::borrow::Borrow::borrow) {
        for e in &r.events {
            let mut st = tx.prepare_cached(EVENT_INSERT).map_err(sqlite_err)?;
            st.execute(rusqlite::params_from_iter(e.iter())).map_err(sqlite_err)?;
        }
        for o in &r.outbox {
            super::webhooks::enqueue_sqlite_values(tx, o).map_err(sqlite_err)?;
        }
        for a in &r.attempts {
            static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| ATTEMPT_INSERT.replace('$', "?"));
            let mut st = tx.prepare_cached(&SQL).map_err(sqlite_err)?;
            st.execute(rusqlite::params_from_iter(a.iter())).map_err(sqlite_err)?;
        }
        r.add_spend(&mut spend, rules.spend_periods);
        r.add_end_user(&mut users, rules.spend_periods);
    }
    for ((tenant, key, user, period), (cost, requests, ts)) in users.rows() {
        tx.prepare_cached(super::spend::END_USER_UPSERT)
            .and_then(|mut st| st.execute(rusqlite::params![tenant, key, user, period, cost, requests, ts]))
            .map_err(sqlite_err)?;
    }
    for ((tenant, key, period), cost) in spend.rows() {
        tx.prepare_cached(
            "INSERT INTO key_spend (tenant_id, key_id, period, cost_usd) VALUES (?1, ?2, ?3, ?4) \
             ON CONFLICT (tenant_id, key_id, period) DO UPDATE SET cost_usd = key_spend.cost_usd + excluded.cost_usd",
        )
        .and_then(|mut st| st.execute(rusqlite::params![tenant, key, period, cost]))
        .map_err(sqlite_err)?;
    }
    for r in chain_ends(records) {
        tx.prepare_cached(
            "INSERT INTO chain_heads (tenant_id, seq, this_hash) VALUES (?1, ?2, ?3) \
             ON CONFLICT (tenant_id) DO UPDATE SET seq = excluded.seq, this_hash = excluded.this_hash",
        )
        .and_then(|mut st| st.execute(rusqlite::params![r.tenant_id(), r.seq() as i64, r.this_hash()]))
        .map_err(sqlite_err)?;
    }
    Ok(())
}

/// How far a checkpoint got: frames in the WAL, and how many of them are in the database now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checkpointed {
    pub log: i64,
    pub done: i64,
}

impl Checkpointed {
    /// Every frame is in the database: the next write transaction starts the WAL over from its
    /// beginning (unless a reader still reads an older snapshot from it).
    pub fn complete(self) -> bool {
        self.log <= 0 || self.done >= self.log
    }
}

/// Copies the WAL into the database as far as no reader needs it, without blocking the writer
/// (`PASSIVE`). The receipt writer's connection never checkpoints on commit: with SQLite's
/// automatic checkpoint, the commit that crossed 1 000 pages copied the log and waited for its
/// fsync, ~10 ms during which every answer waiting for its receipt waited too.
pub fn checkpoint_passive(conn: &rusqlite::Connection) -> Result<Checkpointed, StoreError> {
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| Ok(Checkpointed { log: r.get(1)?, done: r.get(2)? }))
        .map_err(sqlite_err)
}

fn sqlite_err(e: rusqlite::Error) -> StoreError {
    match e {
        rusqlite::Error::SqliteFailure(f, _)
            if matches!(f.code, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) =>
        {
            StoreError::Unavailable(format!("the database is locked: {e}"))
        }
        other => StoreError::Other(format!("receipt append: {other}")),
    }
}

/// Filters of the list and export endpoints (all combine with AND).
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub from_ts: Option<String>,
    pub to_ts: Option<String>,
    pub actor: Option<String>,
    pub provider: Option<String>,
    pub model: Option<String>,
    pub check: Option<String>,
    pub upstream_status: Option<String>,
    /// `model_call`, `tool_call` or `admin`.
    pub kind: Option<String>,
    /// Receipts of model and tool calls only, no `admin` ones (compliance evidence: coverage
    /// ignores the admin trail, docs/log.md §8). Read by [`page`] only.
    pub calls_only: bool,
}

/// Pruned receipts (`store::retention`) match no filter: lists and exports skip them.
const FILTER_SQL: &str = "tenant_id = $1 AND pruned_at IS NULL \
     AND (CAST($2 AS TEXT) IS NULL OR ts >= $2) AND (CAST($3 AS TEXT) IS NULL OR ts <= $3) \
     AND (CAST($4 AS TEXT) IS NULL OR actor = $4) AND (CAST($5 AS TEXT) IS NULL OR provider = $5) \
     AND (CAST($6 AS TEXT) IS NULL OR model = $6) AND (CAST($7 AS TEXT) IS NULL OR check_names LIKE $7) \
     AND (CAST($8 AS TEXT) IS NULL OR upstream_status = $8) AND (CAST($9 AS TEXT) IS NULL OR kind = $9)";

type AnyQuery<'q> = sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments>;

/// Binds `$1`..`$9` of [`FILTER_SQL`].
fn bind_filter(q: AnyQuery<'_>, tenant_id: String, f: Filter) -> AnyQuery<'_> {
    let check = like_check(&f.check);
    q.bind(tenant_id)
        .bind(f.from_ts)
        .bind(f.to_ts)
        .bind(f.actor)
        .bind(f.provider)
        .bind(f.model)
        .bind(check)
        .bind(f.upstream_status)
        .bind(f.kind)
}

fn like_check(name: &Option<String>) -> Option<String> {
    // `%` and `_` cannot occur in check names we write; strip them so a filter stays literal.
    name.as_ref().map(|n| format!("%,{},%", n.replace(['%', '_'], "")))
}

/// One page of a tenant's receipts by `seq`: descending below `before`, or ascending above `after`.
pub async fn page(
    store: &Store,
    tenant_id: &str,
    f: &Filter,
    before: Option<u64>,
    after: Option<u64>,
    limit: i64,
) -> Result<Vec<ReceiptRow<String>>, StoreError> {
    store.settled().await?;
    let (t, f) = (tenant_id.to_string(), f.clone());
    store
        .run(move |pool, _| async move {
            let (bound, order) = match (before, after) {
                (Some(b), _) => (format!("AND seq < {b}"), "DESC"),
                (None, Some(a)) => (format!("AND seq > {a}"), "ASC"),
                (None, None) => (String::new(), "DESC"),
            };
            // A literal `kind = 'admin'` lets the planner read the partial index of admin
            // receipts (migration 0014) instead of every receipt of the tenant.
            let admin = match (f.kind.as_deref(), f.calls_only) {
                (Some("admin"), _) => "kind = 'admin' AND ",
                (_, true) => "kind <> 'admin' AND ",
                _ => "",
            };
            let sql = format!(
                "SELECT {} FROM receipts WHERE {admin}{FILTER_SQL} {bound} ORDER BY seq {order} LIMIT $10",
                *COLUMNS
            );
            let rows = bind_filter(sqlx::query(sqlx::AssertSqlSafe(sql)), t, f).bind(limit).fetch_all(&pool).await?;
            Ok(rows.iter().map(from_row).collect::<Result<_, _>>()?)
        })
        .await
}

/// A page of the tenant's receipts (seq descending, below `before`) holding a check named any
/// of `names`: the receipts that prove a compliance control.
pub async fn page_with_any_check(
    store: &Store,
    tenant_id: &str,
    names: &[String],
    before: Option<u64>,
    limit: i64,
) -> Result<Vec<ReceiptRow<String>>, StoreError> {
    store.settled().await?;
    let t = tenant_id.to_string();
    let likes: Vec<Option<String>> = names.iter().map(|n| like_check(&Some(n.clone()))).collect();
    store
        .run(move |pool, _| async move {
            let any = (0..likes.len()).map(|i| format!("check_names LIKE ${}", i + 2)).collect::<Vec<_>>().join(" OR ");
            let any = if any.is_empty() { "1 = 0".to_string() } else { any };
            let bound = before.map(|b| format!("AND seq < {b}")).unwrap_or_default();
            let sql = format!(
                "SELECT {} FROM receipts WHERE tenant_id = $1 AND pruned_at IS NULL AND ({any}) {bound} \
                 ORDER BY seq DESC LIMIT ${}",
                *COLUMNS,
                likes.len() + 2
            );
            let mut q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(t);
            for l in likes {
                q = q.bind(l);
            }
            let rows = q.bind(limit).fetch_all(&pool).await?;
            Ok(rows.iter().map(from_row).collect::<Result<_, _>>()?)
        })
        .await
}

pub async fn by_id(store: &Store, tenant_id: &str, receipt_id: &str) -> Result<Option<ReceiptRow<String>>, StoreError> {
    store.settled().await?;
    let (t, id) = (tenant_id.to_string(), receipt_id.to_string());
    store
        .run(move |pool, _| async move {
            let sql = format!("SELECT {} FROM receipts WHERE tenant_id = $1 AND receipt_id = $2", *COLUMNS);
            let row = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(t).bind(id).fetch_optional(&pool).await?;
            Ok(row.as_ref().map(from_row).transpose()?)
        })
        .await
}

/// Receipts with `from <= seq <= to`, ascending, at most `limit` (for chain walks).
pub async fn seq_range(
    store: &Store,
    tenant_id: &str,
    from: u64,
    to: u64,
    limit: i64,
) -> Result<Vec<ReceiptRow<String>>, StoreError> {
    store.settled().await?;
    let t = tenant_id.to_string();
    store
        .run(move |pool, _| async move {
            let sql = format!(
                "SELECT {} FROM receipts WHERE tenant_id = $1 AND seq >= $2 AND seq <= $3 ORDER BY seq LIMIT $4",
                *COLUMNS
            );
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(t)
                .bind(from as i64)
                .bind(to as i64)
                .bind(limit)
                .fetch_all(&pool)
                .await?;
            Ok(rows.iter().map(from_row).collect::<Result<_, _>>()?)
        })
        .await
}

/// The `concat(...)` arguments that pack one receipt: the [`Read::Page`] columns in table order,
/// then whether it was pruned (a number, `1` or `0`).
fn packed_row(backend: Backend) -> String {
    let parts: Vec<String> = RECEIPT_COLUMNS
        .iter()
        .filter_map(|c| match c.read {
            Read::Page(field) => Some((c.name, field)),
            _ => None,
        })
        .map(|(col, field)| match (field, backend) {
            (Field::Real, Backend::Sqlite) => format!("quote({col}), ';'"),
            (Field::Real, Backend::Postgres) => format!("{col}::text, ';'"),
            (Field::Number | Field::MaybeNumber, _) => format!("{col}, ';'"),
            (Field::Text, _) => format!("octet_length({col}), ':', {col}"),
        })
        .chain(["CASE WHEN pruned_at IS NULL THEN '0' ELSE '1' END, ';'".to_string()])
        .collect();
    parts.join(", ")
}

/// The rows of [`seq_range`] packed by the database into one text value (the `Read::Page`
/// columns, each as its `Field` says): one value back instead of one row per receipt.
/// Per-row driver work (a channel hop between threads, the Any conversion, a copy per column)
/// was most of a chain walk's time. Decode with [`unpack_rows`], off the async runtime.
pub async fn seq_range_packed(
    store: &Store,
    tenant_id: &str,
    from: u64,
    to: u64,
    limit: i64,
) -> Result<String, StoreError> {
    store.settled().await?;
    let t = tenant_id.to_string();
    store
        .run(move |pool, backend| async move {
            // The aggregate takes the ordered subquery's rows as they come (no ORDER BY inside
            // it: sorting a page again would spill megabytes to temporary files); `unpack_rows`
            // sorts a page that is ever out of order.
            let page = format!(
                "FROM (SELECT {} FROM receipts WHERE tenant_id = $1 AND seq >= $2 AND seq <= $3 ORDER BY seq \
                 LIMIT $4) AS r",
                column_list(|r| matches!(r, Read::Page(_))) + ", pruned_at"
            );
            let row = packed_row(backend);
            let sql = match backend {
                Backend::Sqlite => format!("SELECT group_concat(concat({row}), '') AS page {page}"),
                Backend::Postgres => format!("SELECT string_agg(concat({row}), '') AS page {page}"),
            };
            let row = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(t)
                .bind(from as i64)
                .bind(to as i64)
                .bind(limit)
                .fetch_one(&pool)
                .await?;
            Ok(row.try_get::<Option<String>, _>("page")?.unwrap_or_default())
        })
        .await
}

/// Reads a packed page value by value.
struct Unpacker<'a> {
    page: &'a str,
    at: usize,
}

impl<'a> Unpacker<'a> {
    fn bad(&self, what: &str) -> StoreError {
        StoreError::Other(format!("receipt page: {what} at byte {}", self.at))
    }

    fn number(&mut self) -> Result<&'a str, StoreError> {
        let rest = &self.page[self.at..];
        let end = rest.find(';').ok_or_else(|| self.bad("unterminated number"))?;
        self.at += end + 1;
        Ok(&rest[..end])
    }

    fn text(&mut self) -> Result<&'a str, StoreError> {
        let rest = &self.page[self.at..];
        let colon = rest.find(':').ok_or_else(|| self.bad("text without length"))?;
        let len: usize = rest[..colon].parse().map_err(|_| self.bad("bad text length"))?;
        let value = rest.get(colon + 1..colon + 1 + len).ok_or_else(|| self.bad("text past the end"))?;
        self.at += colon + 1 + len;
        Ok(value)
    }

    fn int(&mut self) -> Result<u64, StoreError> {
        let n = self.number()?;
        n.parse::<u64>().map_err(|_| self.bad("bad integer"))
    }

    fn maybe_int(&mut self) -> Result<Option<u64>, StoreError> {
        match self.number()? {
            "" => Ok(None),
            n => n.parse::<u64>().map(Some).map_err(|_| self.bad("bad integer")),
        }
    }

    fn real(&mut self) -> Result<f64, StoreError> {
        let n = self.number()?;
        n.trim().parse().map_err(|_| self.bad("bad cost_usd"))
    }
}

/// Decodes a page from [`seq_range_packed`] into rows of `tenant_id` that borrow from it
/// (CPU-bound: call it on a blocking thread), in `seq` order. Reads the values in
/// `RECEIPT_COLUMNS` order; a unit test round-trips a page through SQLite.
pub fn unpack_rows<'a>(tenant_id: &'a str, page: &'a str) -> Result<Vec<ReceiptRow<&'a str>>, StoreError> {
    let mut u = Unpacker { page, at: 0 };
    let mut out = Vec::new();
    while u.at < page.len() {
        out.push(ReceiptRow {
            seq: u.int()?,
            receipt_id: u.text()?,
            v: u.int()? as u32,
            request_id: u.text()?,
            actor: u.text()?,
            provider: u.text()?,
            model: u.text()?,
            prompt_tokens: u.int()?,
            completion_tokens: u.int()?,
            cost_usd: u.real()?,
            checks: u.text()?,
            upstream_status: u.text()?,
            ts: u.text()?,
            prev_hash: u.text()?,
            this_hash: u.text()?,
            signature: u.text()?,
            key_id: u.text()?,
            kind: u.text()?,
            pack_version: u.text()?,
            subject: u.text()?,
            latency_us: u.maybe_int()?,
            pruned: u.int()? != 0,
            tenant_id,
        });
    }
    if !out.is_sorted_by_key(|r| r.seq) {
        out.sort_by_key(|r| r.seq);
    }
    Ok(out)
}

/// The stored `this_hash` of one seq (the link into a range), if that receipt exists.
pub async fn hash_at(store: &Store, tenant_id: &str, seq: u64) -> Result<Option<String>, StoreError> {
    store.settled().await?;
    text_at(store, tenant_id, seq, "this_hash").await
}

/// One text column of the receipt at `seq`, if that receipt exists.
pub(super) async fn text_at(
    store: &Store,
    tenant_id: &str,
    seq: u64,
    column: &'static str,
) -> Result<Option<String>, StoreError> {
    store.settled().await?;
    let t = tenant_id.to_string();
    store
        .run(move |pool, _| async move {
            let sql = format!("SELECT {column} FROM receipts WHERE tenant_id = $1 AND seq = $2");
            let row = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(t).bind(seq as i64).fetch_optional(&pool).await?;
            Ok(row.map(|r| r.get::<String, _>(0)))
        })
        .await
}

pub async fn count_all(store: &Store) -> Result<i64, StoreError> {
    store.settled().await?;
    store
        .run(|pool, _| async move {
            let row = sqlx::query("SELECT COUNT(*) AS n FROM receipts").fetch_one(&pool).await?;
            Ok(row.try_get::<i64, _>("n")?)
        })
        .await
}

/// Every tenant's chain head `(tenant_id, seq)`.
pub async fn chain_heads(store: &Store) -> Result<Vec<(String, u64)>, StoreError> {
    store.settled().await?;
    store
        .run(|pool, _| async move {
            let rows =
                sqlx::query("SELECT tenant_id, seq FROM chain_heads ORDER BY tenant_id").fetch_all(&pool).await?;
            rows.iter()
                .map(|r| Ok((r.try_get::<String, _>("tenant_id")?, r.try_get::<i64, _>("seq")?.max(0) as u64)))
                .collect::<Result<_, sqlx::Error>>()
                .map_err(StoreError::from)
        })
        .await
}

/// The tenant's chain head `seq` (0 before its first receipt).
pub async fn head_seq(store: &Store, tenant_id: &str) -> Result<u64, StoreError> {
    store.settled().await?;
    let t = tenant_id.to_string();
    store
        .run(move |pool, _| async move {
            let row =
                sqlx::query("SELECT seq FROM chain_heads WHERE tenant_id = $1").bind(t).fetch_optional(&pool).await?;
            Ok(row.map(|r| r.get::<i64, _>("seq").max(0) as u64).unwrap_or(0))
        })
        .await
}

/// The `seq` of the `(n+1)`-th receipt matching `f` in ascending order, if there is one
/// (an export of `n` rows is truncated exactly when it exists).
pub async fn nth_seq(store: &Store, tenant_id: &str, f: &Filter, n: u64) -> Result<Option<u64>, StoreError> {
    store.settled().await?;
    let (t, f) = (tenant_id.to_string(), f.clone());
    store
        .run(move |pool, _| async move {
            let sql = format!("SELECT seq FROM receipts WHERE {FILTER_SQL} ORDER BY seq LIMIT 1 OFFSET $10");
            let row =
                bind_filter(sqlx::query(sqlx::AssertSqlSafe(sql)), t, f).bind(n as i64).fetch_optional(&pool).await?;
            Ok(row.map(|r| r.get::<i64, _>("seq") as u64))
        })
        .await
}

/// `(?,?,…),(?,?,…)` for `rows` rows of `per_row` binds: positional on SQLite (sqlx looks `$n`
/// up among all parameters, quadratic in the row count), numbered on PostgreSQL.
pub(super) fn values_list(backend: Backend, rows: usize, per_row: usize) -> String {
    let mut sql = String::with_capacity(rows * per_row * 4);
    for i in 0..rows {
        if i > 0 {
            sql.push(',');
        }
        sql.push('(');
        for k in 0..per_row {
            if k > 0 {
                sql.push(',');
            }
            match backend {
                Backend::Sqlite => sql.push('?'),
                Backend::Postgres => sql.push_str(&format!("${}", i * per_row + k + 1)),
            }
        }
        sql.push(')');
    }
    sql
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::receipts::canonical::Check;
    use crate::receipts::rows::tests::seal;
    use crate::receipts::rows::{append_batch, signature_b64, Sealing, RULES};
    use crate::receipts::seal::Batch;
    use crate::receipts::signer::Signer;
    use crate::receipts::stored::{by_id, page, seq_range, unpack};
    use crate::receipts::Draft;

    /// Journal lines of earlier versions: before `latency_us` (one value short: unknown) and
    /// before `subject` too (two short); a latency and its null survive the JSON round trip.
    #[test]
    fn journal_lines_of_earlier_versions_read_in_todays_shape() {
        let signer = Signer::from_seed(&[7u8; 32]);
        let drafts = [draft("t", 1), draft("t", 13)];
        let batch = Batch::new(&drafts);
        let records = crate::receipts::rows::records(&batch.seal(vec![Head::genesis()], &signer), &signer.key_id);
        let last = RECEIPT_COLUMNS.len() - 1;
        assert_eq!(records[0].row[last], Value::Int(1037));
        assert_eq!(records[1].row[last], Value::Null, "an admin receipt's latency is unknown");
        for r in &records {
            let line = serde_json::to_string(r).unwrap();
            assert_eq!(&serde_json::from_str::<Record>(&line).unwrap().upgraded(), r, "today's line as it is");
            let mut old: serde_json::Value = serde_json::from_str(&line).unwrap();
            old["r"].as_array_mut().unwrap().pop();
            let before_0018: Record = serde_json::from_value(old.clone()).unwrap();
            assert!(!before_0018.well_formed());
            let upgraded = before_0018.upgraded();
            assert!(upgraded.well_formed());
            assert_eq!(upgraded.row[last], Value::Null);
            assert_eq!(upgraded.row[..last], r.row[..last]);
            old["r"].as_array_mut().unwrap().pop();
            let before_0014 = serde_json::from_value::<Record>(old).unwrap().upgraded();
            assert!(before_0014.well_formed());
            assert_eq!((&before_0014.row[last - 1], &before_0014.row[last]), (&Value::Static(""), &Value::Null));
        }
    }

    /// The applier's pace runs between two INSERT statements of one apply, never before the
    /// first: 300 receipts are 128 + 128 + 32 + 8 + 1 × 4 rows, eight statements, seven yields.
    #[test]
    fn an_apply_paces_between_its_insert_statements() {
        let (dir, url) = temp_sqlite("pace");
        let file = super::super::db_runtime().block_on(async {
            let store = Store::connect(&url).await.unwrap();
            store.migrate().await.unwrap();
            let file = store.sqlite_file().unwrap().to_path_buf();
            store.close().await;
            file
        });
        let signer = Signer::from_seed(&[7u8; 32]);
        let drafts: Vec<Draft> = (0..300).map(|i| draft("t", i)).collect();
        let records =
            crate::receipts::rows::records(&Batch::new(&drafts).seal(vec![Head::genesis()], &signer), &signer.key_id);
        let mut conn = rusqlite::Connection::open(&file).unwrap();
        let tx = conn.transaction().unwrap();
        let paces = std::cell::Cell::new(0);
        write_records(&tx, &records, RULES, || paces.set(paces.get() + 1)).unwrap();
        tx.commit().unwrap();
        assert_eq!(statement_chunks(&records).count(), 8);
        assert_eq!(paces.get(), 7);
        let n: i64 = conn.query_row("SELECT COUNT(*) FROM receipts", [], |r| r.get(0)).unwrap();
        assert_eq!(n, 300, "every receipt written");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn batches_are_cut_into_the_few_cached_statement_sizes() {
        for n in 0..600usize {
            let rows: Vec<usize> = (0..n).collect();
            let chunks: Vec<&[usize]> = statement_chunks(&rows).collect();
            assert!(chunks.iter().all(|c| INSERT_SIZES.contains(&c.len())), "n={n}");
            assert_eq!(chunks.concat(), rows, "every row once, in order (n={n})");
        }
        let sizes: Vec<usize> = statement_chunks(&[0u8; 300]).map(<[u8]>::len).collect();
        assert_eq!(sizes, [128, 128, 32, 8, 1, 1, 1, 1]);
    }

    pub(crate) fn draft(tenant: &str, i: usize) -> Draft {
        use crate::receipts::{CacheSide, GuardEvent, Kind};
        let mut checks = vec![Check { name: "UPSTREAM".into(), result: "PASS".into() }];
        let mut events = Vec::new();
        if i.is_multiple_of(3) {
            checks.insert(0, Check { name: "GUARDRAIL".into(), result: "REDACT".into() });
            events.push(GuardEvent { category: "email".into(), result: "REDACT", direction: "request" });
        }
        Draft {
            tenant_id: tenant.into(),
            receipt_id: uuid::Uuid::now_v7().to_string(),
            request_id: format!("req-{i}"),
            actor: format!("actor-{}", i % 4).into(),
            provider: "openai".into(),
            model: if i.is_multiple_of(2) { "gpt-4o-mini" } else { "gpt-4o" }.into(),
            prompt_tokens: 100 + i as u64,
            completion_tokens: i as u64,
            // 0.1 + 0.2 needs 17 digits to round-trip: the packed page must carry all of them.
            cost_usd: if i.is_multiple_of(5) { 0.0 } else { 0.1 + 0.2 },
            checks,
            upstream_status: crate::receipts::UpstreamStatus::Ok,
            ts: "2026-11-22 19:42:57.049".into(),
            kind: if i.is_multiple_of(13) {
                Kind::Admin
            } else if i.is_multiple_of(7) {
                Kind::ToolCall
            } else {
                Kind::ModelCall
            },
            pack_version: if i.is_multiple_of(2) { "soc2@1".into() } else { String::new() },
            cache: CacheSide { result: "HIT", saved_tokens: i as u64, saved_usd: 0.25 },
            events,
            outbox: if i.is_multiple_of(11) {
                vec![crate::store::webhooks::Event::new(tenant, "guardrail.blocked", serde_json::json!({ "i": i }))]
            } else {
                Vec::new()
            },
            subject: i.is_multiple_of(13).then(|| format!("policy-{i}")),
            // Unknown on admin receipts, as the gateway leaves it.
            latency_us: (!i.is_multiple_of(13)).then_some(1000 + 37 * i as u64),
            attempts: match i.is_multiple_of(3) {
                true => vec![crate::receipts::Attempt {
                    provider: "openai",
                    credential: "default".into(),
                    model: "gpt-4o".into(),
                    status: 503,
                    outcome: "retry",
                    ms: 12,
                }],
                false => Vec::new(),
            },
            key_id: "key-1".into(),
        }
    }

    /// The one column table drives the insert, the row selects and the packed pages: a receipt
    /// appended in two batches reads back equal to what sealing the drafts gives, both ways.
    #[test]
    fn appended_receipts_read_back_as_sealed_through_rows_and_packed_pages() {
        appended_receipts_read_back_as_sealed(Via::Reference);
    }

    /// The receipt writer's own SQLite path ([`SqliteAppender`]) against the sqlx reference
    /// ([`append_batch`]): the same batches read back the same in every respect.
    #[test]
    fn the_sqlite_appender_writes_what_the_reference_append_writes() {
        appended_receipts_read_back_as_sealed(Via::Native);
    }

    /// The receipt journal (`store::journal`), its applier running and the reads waiting for
    /// it: the same rows, events, spend and heads as the reference.
    #[test]
    fn the_journal_and_its_applier_write_what_the_reference_append_writes() {
        appended_receipts_read_back_as_sealed(Via::Journal);
    }

    /// The journal with no applier (a process killed before it ran), a line cut short at its
    /// end, and the next start's replay: the same as the reference, and a second replay adds
    /// nothing.
    #[test]
    fn a_journal_left_behind_is_replayed_at_start_as_the_reference_append_writes() {
        appended_receipts_read_back_as_sealed(Via::Replayed);
    }

    /// An apply that fails part-way (a receipt id already taken, in its second INSERT statement)
    /// leaves nothing of its transaction: `INSERT OR FAIL` keeps the rows the failing statement
    /// inserted before the conflict, and the first statement's, only until the transaction rolls
    /// back.
    #[test]
    fn an_apply_that_fails_part_way_leaves_nothing_of_its_transaction() {
        let (dir, url) = temp_sqlite("receipts");
        super::super::db_runtime().block_on(async {
            let store = Store::connect(&url).await.unwrap();
            store.migrate().await.unwrap();
            let signer = Signer::from_seed(&[7u8; 32]);
            let drafts: Vec<Draft> = (0..200).map(|i| draft("tenant-a", i)).collect();
            let mut records = seal(&mut Sealing::new(&drafts, &signer));
            const ID: usize = column("receipt_id");
            records[150].row[ID] = records[3].row[ID].clone();
            let file = store.sqlite_file().unwrap().to_path_buf();
            let mut appender = SqliteAppender::open(&file, std::time::Duration::from_secs(5), RULES).unwrap();
            let mut part = Some(records.iter().collect::<Vec<&Record>>());
            let err = appender.apply(|| Ok(part.take())).unwrap_err();
            assert!(err.to_string().contains("UNIQUE"), "{err}");
            assert_eq!(count_all(&store).await.unwrap(), 0);
            assert!(appender.head("tenant-a").unwrap().is_none());
            // The same records without the conflict go in whole.
            records[150] = seal(&mut Sealing::new(&drafts, &signer)).swap_remove(150);
            let mut part = Some(records.iter().collect::<Vec<&Record>>());
            appender.apply(|| Ok(part.take())).unwrap();
            assert_eq!(count_all(&store).await.unwrap(), 200);
        });
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A fresh directory for a test database (`<dir>/r.db`) and its URL; the test removes the
    /// directory when done.
    fn temp_sqlite(what: &str) -> (std::path::PathBuf, String) {
        let dir = std::env::temp_dir().join(format!("tollgate-{what}-{}", uuid::Uuid::new_v4().simple()));
        let url = format!("sqlite://{}", dir.join("r.db").display());
        (dir, url)
    }

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Via {
        Reference,
        Native,
        Journal,
        Replayed,
    }

    fn appended_receipts_read_back_as_sealed(via: Via) {
        let (dir, url) = temp_sqlite("receipts");
        super::super::db_runtime().block_on(async {
            let store = Store::connect(&url).await.unwrap();
            store.migrate().await.unwrap();
            let signer = Arc::new(Signer::from_seed(&[7u8; 32]));
            let tenant = |i: usize| if i.is_multiple_of(4) { "tenant-b" } else { "tenant-a" };
            let first: Vec<Draft> = (0..5).map(|i| draft(tenant(i), i)).collect();
            // Over 128 rows of one tenant: several INSERT statements.
            let second: Vec<Draft> = (5..300).map(|i| draft(tenant(i), i)).collect();
            let file = store.sqlite_file().unwrap().to_path_buf();
            let five = std::time::Duration::from_secs(5);
            let sign = || -> super::super::journal::SignRecords {
                let signer = signer.clone();
                Arc::new(move |r: &mut [Record]| crate::receipts::rows::sign_records(r, &signer))
            };
            match via {
                Via::Native => {
                    let mut appender = SqliteAppender::open(&file, five, RULES).unwrap();
                    assert_eq!(appender.append(&mut Sealing::new(&first, &signer)).unwrap(), 5);
                    assert_eq!(appender.append(&mut Sealing::new(&second, &signer)).unwrap(), 295);
                }
                Via::Reference => {
                    assert_eq!(append_batch(&store, first.clone(), signer.clone()).await.unwrap(), 5);
                    assert_eq!(append_batch(&store, second.clone(), signer.clone()).await.unwrap(), 295);
                }
                Via::Journal => {
                    // A period far longer than the test: every read has the records written.
                    // Flushed (`receipts.durability: fsync`): the same records read back.
                    let hour = std::time::Duration::from_secs(3600);
                    let (mut journal, applier, progress) =
                        super::super::journal::open(&file, five, hour, RULES, super::super::Durability::Fsync, sign())
                            .unwrap();
                    store.use_journal(progress);
                    std::thread::spawn(move || applier.run());
                    // Journaled unsigned, signed by the applier: the reference's signatures. In
                    // batches of 60, all taken by one apply in several parts (`journal::PART`),
                    // read back from several segments (`journal::SEGMENT_BYTES`).
                    assert_eq!(journal.append(&mut Sealing::deferred(&first, &signer)).unwrap(), 5);
                    for part in second.chunks(60) {
                        assert_eq!(journal.append(&mut Sealing::deferred(part, &signer)).unwrap(), part.len());
                    }
                }
                Via::Replayed => {
                    let hour = std::time::Duration::from_secs(3600);
                    let (mut journal, applier, _) = super::super::journal::open(
                        &file,
                        five,
                        hour,
                        RULES,
                        super::super::Durability::PageCache,
                        sign(),
                    )
                    .unwrap();
                    // Signed in the journal (as before deferred signing) and not: replay signs
                    // the second batch.
                    assert_eq!(journal.append(&mut Sealing::new(&first, &signer)).unwrap(), 5);
                    assert_eq!(journal.append(&mut Sealing::deferred(&second, &signer)).unwrap(), 295);
                    drop((journal, applier));
                    assert_eq!(count_all(&store).await.unwrap(), 0, "nothing applied");
                    let dir = super::super::journal::dir_of(&file);
                    let segment = std::fs::read_dir(&dir).unwrap().next().unwrap().unwrap().path();
                    // A write cut short by the kill: its request had no answer.
                    let mut f = std::fs::OpenOptions::new().append(true).open(&segment).unwrap();
                    // (A frame of 500 bytes of which 2 were written.)
                    std::io::Write::write_all(&mut f, b"\xf4\x01\x00\x00\x01\x02\x03\x04\x03\x00").unwrap();
                    drop(f);
                    assert_eq!(super::super::journal::replay(&file, five, RULES, &sign()).unwrap(), 300);
                    assert_eq!(
                        super::super::journal::replay(&file, five, RULES, &sign()).unwrap(),
                        0,
                        "the segments are gone"
                    );
                    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
                }
            }

            // Sealing is deterministic: the two batches give what one batch from genesis gives.
            let all: Vec<Draft> = first.into_iter().chain(second).collect();
            let batch = Batch::new(&all);
            let expected = batch.seal(vec![Head::genesis(), Head::genesis()], &signer);
            for chain in expected.chains() {
                let t: &str = chain.tenant_id;
                let rows = seq_range(&store, t, 1, 1000, 1000).await.unwrap();
                let packed = seq_range_packed(&store, t, 1, 1000, 1000).await.unwrap();
                assert_eq!(unpack(t, &packed).unwrap(), rows, "a packed page reads as the rows do");
                let sealed = &expected.rows()[chain.rows.clone()];
                assert_eq!(rows.len(), sealed.len());
                for (stored, row) in rows.iter().zip(sealed) {
                    let bytes = crate::receipts::canonical::receipt_bytes(&stored.receipt);
                    let text = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
                    assert_eq!(text(&bytes), text(expected.canonical(row)), "seq {}", row.seq);
                    assert_eq!(stored.this_hash, *row.this_hash);
                    assert_eq!(stored.signature, *signature_b64(&row.signature));
                    assert_eq!(stored.key_id, signer.key_id);
                    assert_eq!(stored.kind, row.draft.kind.as_str());
                    assert_eq!(stored.pack_version, row.draft.pack_version);
                    assert_eq!(stored.latency_us, row.draft.latency_us, "seq {}: latency, or its null", row.seq);
                    assert_eq!(by_id(&store, t, &row.draft.receipt_id).await.unwrap().as_ref(), Some(stored));
                }
                assert_eq!(head_seq(&store, t).await.unwrap(), chain.head.seq);
                assert_eq!(hash_at(&store, t, chain.head.seq).await.unwrap().as_deref(), Some(&*chain.head.hash));
                let report = crate::receipts::chain::verify(&store, t, 1, chain.head.seq).await.unwrap();
                assert!(report.ok && report.count == chain.head.seq, "{report:?}");

                // The write-only columns: the `check` filter, guardrail events, the cache side.
                let guarded =
                    sealed.iter().filter(|r| r.draft.checks.iter().any(|c| c.name.as_str() == "GUARDRAIL")).count();
                let filter = Filter { check: Some("GUARDRAIL".into()), ..Filter::default() };
                assert_eq!(page(&store, t, &filter, None, None, 1000).await.unwrap().len(), guarded);
                let (tt, rid) = (t.to_string(), sealed[0].draft.receipt_id.clone());
                let (events, cache) = store
                    .run(move |pool, _| async move {
                        let events = sqlx::query("SELECT COUNT(*) FROM guardrail_events WHERE tenant_id = $1")
                            .bind(tt)
                            .fetch_one(&pool)
                            .await?
                            .get::<i64, _>(0);
                        let r = sqlx::query(
                            "SELECT cache_result, saved_tokens, saved_usd FROM receipts WHERE receipt_id = $1",
                        )
                        .bind(rid)
                        .fetch_one(&pool)
                        .await?;
                        let cache = (r.get::<String, _>(0), r.get::<i64, _>(1), r.get::<f64, _>(2));
                        Ok((events, cache))
                    })
                    .await
                    .unwrap();
                assert_eq!(events as usize, guarded);
                let d = sealed[0].draft;
                assert_eq!(cache, (d.cache.result.to_string(), d.cache.saved_tokens as i64, d.cache.saved_usd));
            }

            // Spend moved with the receipts, per key and period.
            let spend = super::super::spend::current(&store, &["total".to_string()]).await.unwrap();
            for chain in expected.chains() {
                let want: f64 = expected.rows()[chain.rows.clone()].iter().map(|r| r.draft.cost_usd).sum();
                let got: f64 = spend.iter().filter(|s| *s.tenant_id == **chain.tenant_id).map(|s| s.cost_usd).sum();
                assert!((want - got).abs() < 1e-9 && want > 0.0, "{}: {want} vs {got}", chain.tenant_id);
            }
        });
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A store on `url`, connected and migrated, on the database runtime.
    fn migrated(url: &str) -> Store {
        super::super::db_runtime().block_on(async {
            let store = Store::connect(url).await.unwrap();
            store.migrate().await.unwrap();
            store
        })
    }

    /// An existing database keeps its page size (a 1 KiB one from an earlier build); README's
    /// offline step rewrites it with the new databases' pages, and its chains, heads and new
    /// appends are as before.
    #[test]
    fn a_1_kib_database_moved_to_the_new_page_size_offline_keeps_its_chain() {
        let dir = std::env::temp_dir().join(format!("tollgate-pages-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("r.db");
        rusqlite::Connection::open(&file)
            .unwrap()
            .execute_batch("PRAGMA page_size=1024; PRAGMA journal_mode=WAL;")
            .unwrap();
        let url = format!("sqlite://{}", file.display());
        let signer = Signer::from_seed(&[7u8; 32]);
        let page_size = || -> u32 {
            rusqlite::Connection::open(&file).unwrap().query_row("PRAGMA page_size", [], |r| r.get(0)).unwrap()
        };
        let drafts = |range: std::ops::Range<usize>| -> Vec<Draft> { range.map(|i| draft("tenant-a", i)).collect() };
        let check = |store: &Store, n: u64| {
            super::super::db_runtime().block_on(async {
                assert_eq!(head_seq(store, "tenant-a").await.unwrap(), n);
                let report = crate::receipts::chain::verify(store, "tenant-a", 1, n).await.unwrap();
                assert!(report.ok && report.count == n, "{report:?}");
            })
        };

        let store = migrated(&url);
        SqliteAppender::open(&file, std::time::Duration::from_secs(5), RULES)
            .unwrap()
            .append(&mut Sealing::new(&drafts(0..40), &signer))
            .unwrap();
        check(&store, 40);
        assert_eq!(page_size(), 1024);
        super::super::db_runtime().block_on(store.close());

        rusqlite::Connection::open(&file).unwrap().execute_batch(super::super::MOVE_TO_NEW_PAGE_SIZE).unwrap();
        assert_eq!(page_size(), super::super::NEW_DATABASE_PAGE_SIZE);
        let store = migrated(&url);
        check(&store, 40);
        SqliteAppender::open(&file, std::time::Duration::from_secs(5), RULES)
            .unwrap()
            .append(&mut Sealing::new(&drafts(40..50), &signer))
            .unwrap();
        check(&store, 50);
        let mode: String =
            rusqlite::Connection::open(&file).unwrap().query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
        assert_eq!(mode, "wal");
        super::super::db_runtime().block_on(store.close());
        let _ = std::fs::remove_dir_all(dir);
    }

    /// The WAL starts over under steady appends: the background checkpointer's passive pass
    /// cannot reach the frames the writer appends while it runs, so the writer finishes the
    /// checkpoint between two batches and its next batch writes from the log's beginning.
    /// Without that step the log (and the file) grew with every batch, forever.
    #[test]
    fn the_writer_finishing_a_checkpoint_starts_the_wal_over() {
        let (dir, url) = temp_sqlite("wal");
        let store = migrated(&url);
        let file = store.sqlite_file().unwrap().to_path_buf();
        let signer = Signer::from_seed(&[7u8; 32]);
        let mut appender = SqliteAppender::open(&file, std::time::Duration::from_secs(5), RULES).unwrap();
        let checkpointer = rusqlite::Connection::open(&file).unwrap();
        let wal = || std::fs::metadata(dir.join("r.db-wal")).map(|m| m.len()).unwrap_or(0);
        let batch = |from: usize| -> Vec<Draft> { (from..from + 8).map(|i| draft("tenant-a", i)).collect() };

        appender.append(&mut Sealing::new(&batch(0), &signer)).unwrap();
        // A reader's snapshot holds the log's start while the writer appends, so the passive
        // pass that follows ends short of the end, as one racing the writer does under load.
        let reader = rusqlite::Connection::open(&file).unwrap();
        reader.execute_batch("BEGIN; SELECT count(*) FROM receipts;").unwrap();
        for round in 1..4 {
            appender.append(&mut Sealing::new(&batch(round * 8), &signer)).unwrap();
        }
        let behind = checkpoint_passive(&checkpointer).unwrap();
        assert!(!behind.complete(), "{behind:?}");
        reader.execute_batch("COMMIT").unwrap();
        // Left alone, the log grows: the next batch goes after the last frame.
        let before = wal();
        appender.append(&mut Sealing::new(&batch(40), &signer)).unwrap();
        let size = wal();
        assert!(size > before, "{size} vs {before}");

        assert!(appender.finish_checkpoint().unwrap().complete());
        appender.append(&mut Sealing::new(&batch(100), &signer)).unwrap();
        let after = checkpoint_passive(&checkpointer).unwrap();
        assert!(after.log < behind.log, "the next batch wrote from the log's beginning: {after:?} vs {behind:?}");
        assert_eq!(wal(), size, "the file was reused, not extended");
        drop((appender, checkpointer, store));
        let _ = std::fs::remove_dir_all(dir);
    }
}
