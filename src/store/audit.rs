//! The admin trail's side of the store (docs/log.md §8): a management write runs as one
//! transaction that also appends its `admin` receipt to the tenant's log, so the change and
//! its record land together or not at all.
//!
//! The management router opens a [`scope`] around a write's handler with the receipt to
//! append (an [`AdminEntry`], sealed by the receipt domain). The store's write functions run
//! their statements through [`Store::write`], which takes the entry from the scope and, when the
//! change reports what it changed ([`Changed::to`]), appends the receipt in the same
//! transaction. Outside a scope (start-up, the gateway, background work) nothing is appended.
//!
//! With the receipt journal (SQLite's default) the writer seals after chain heads it keeps in
//! memory, so an admin append holds the journal's gate ([`Progress::gate`]): no batch is sealed
//! meanwhile, everything journaled reaches the database first, and the writer reads the
//! tenant's head again afterwards.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::progress::Progress;
use sqlx::Row;

pub use super::change::{Changed, Pending, WriteTx};
use super::receipts::{self, ChainRules, Head, Record};
use super::{begin_write, db_runtime, spawn_db, Backend, Store, StoreError};

/// The `admin` receipt of one management call, sealed once its subject is known (the receipt
/// domain implements it: `receipts::admin`).
pub trait AdminEntry: Send + Sync {
    fn tenant(&self) -> &Arc<str>;
    fn rules(&self) -> ChainRules;
    /// The receipt of the call's action on `subject`, chained after `head`.
    fn seal(&self, head: Head, subject: &str) -> Record;
}

/// One management call's pending admin receipt.
pub struct Slot {
    entry: Mutex<Option<Box<dyn AdminEntry>>>,
    taken: AtomicBool,
}

impl Slot {
    pub fn new(entry: Box<dyn AdminEntry>) -> Arc<Slot> {
        Arc::new(Slot { entry: Mutex::new(Some(entry)), taken: AtomicBool::new(false) })
    }

    /// Whether a write took the entry (appending it, or finding nothing changed).
    pub fn taken(&self) -> bool {
        self.taken.load(Ordering::Acquire)
    }

    fn take(&self) -> Option<Box<dyn AdminEntry>> {
        let entry = self.entry.lock().unwrap_or_else(PoisonError::into_inner).take();
        self.taken.store(true, Ordering::Release);
        entry
    }
}

tokio::task_local! {
    static ADMIN: Arc<Slot>;
}

/// Runs `f` (a management call's handler) with `slot` as the admin receipt its first
/// [`Store::write`] appends.
pub async fn scope<F: Future>(slot: Arc<Slot>, f: F) -> F::Output {
    ADMIN.scope(slot, f).await
}

impl Store {
    /// Runs `change` in one write transaction (on SQLite, `BEGIN IMMEDIATE`) and, inside an
    /// admin [`scope`], appends the call's `admin` receipt to the same transaction when the
    /// change says what it changed. Every write the management API makes goes through here.
    pub async fn write<T, F>(&self, change: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut WriteTx, Backend) -> Pending<'c, Changed<T>> + Send + 'static,
    {
        let entry = ADMIN.try_with(|s| s.take()).ok().flatten();
        let tenant = entry.as_ref().map(|e| e.tenant().clone());
        let (pool, backend) = (self.pool.clone(), self.backend);
        let work = async move {
            let mut tx = begin_write(&pool, backend).await?;
            // The head is locked first, as the receipt writer locks heads before anything else:
            // two transactions never wait for each other's locks in opposite orders.
            let head = match &entry {
                Some(entry) => Some(lock_head(&mut tx, backend, &**entry).await?),
                None => None,
            };
            let changed = change(&mut tx, backend).await?;
            if let (Some(entry), Some(head), Some(subject)) = (&entry, head, &changed.subject) {
                append_admin(&mut tx, backend, entry.seal(head, subject)).await?;
            }
            tx.commit().await?;
            Ok(changed.value)
        };
        match (tenant, self.journal.get()) {
            (Some(tenant), Some(progress)) => gated(progress.clone(), tenant, work).await,
            _ => spawn_db(work).await,
        }
    }

    /// Appends the scope's admin receipt for an action that changes no row of ours (an
    /// evidence read, a checkout at the payment provider): `subject` is what it acted on.
    pub async fn note(&self, subject: String) -> Result<(), StoreError> {
        self.write(move |_, _| Box::pin(async move { Ok(Changed::to(subject, ())) })).await
    }
}

/// `work` (an admin append) while the receipt journal seals nothing: holding its gate, after
/// everything journaled is in the database; the writer then reads `tenant`'s head afresh.
/// On a blocking thread: the gate is the writer thread's plain mutex.
async fn gated<T, W>(progress: Arc<Progress>, tenant: Arc<str>, work: W) -> Result<T, StoreError>
where
    T: Send + 'static,
    W: Future<Output = Result<T, StoreError>> + Send + 'static,
{
    let blocking = tokio::task::spawn_blocking(move || {
        let mut stale = progress.gate.lock().unwrap_or_else(PoisonError::into_inner);
        let out = db_runtime().block_on(async {
            progress.settled().await?;
            work.await
        });
        // Even after a failure: reading the head again is always right.
        stale.push(tenant);
        out
    });
    blocking.await.map_err(|e| StoreError::Other(format!("admin write failed: {e}")))?
}

/// The tenant's chain head (created at genesis before its first receipt), locked until the
/// write commits (PostgreSQL: `FOR UPDATE`; SQLite: the write transaction holds the lock).
async fn lock_head(tx: &mut WriteTx, backend: Backend, entry: &dyn AdminEntry) -> Result<Head, sqlx::Error> {
    let tenant = entry.tenant().to_string();
    sqlx::query(
        "INSERT INTO chain_heads (tenant_id, seq, this_hash) VALUES ($1, 0, $2) ON CONFLICT (tenant_id) DO NOTHING",
    )
    .bind(&tenant)
    .bind(entry.rules().genesis)
    .execute(&mut **tx)
    .await?;
    let sql = match backend {
        Backend::Postgres => "SELECT seq, this_hash FROM chain_heads WHERE tenant_id = $1 FOR UPDATE",
        Backend::Sqlite => "SELECT seq, this_hash FROM chain_heads WHERE tenant_id = $1",
    };
    let row = sqlx::query(sql).bind(tenant).fetch_one(&mut **tx).await?;
    Ok(Head { seq: row.try_get::<i64, _>(0usize)?.max(0) as u64, hash: row.try_get::<String, _>(1usize)?.into() })
}

/// Writes one sealed `admin` receipt (docs/log.md §8) in a management write's own transaction:
/// its row, any log tile it completes, and the tenant's new head. Costs and events are none.
async fn append_admin(tx: &mut WriteTx, backend: Backend, record: Record) -> Result<(), sqlx::Error> {
    let sql = format!(
        "INSERT INTO receipts ({}) VALUES {}",
        *receipts::INSERT_COLUMNS,
        receipts::values_list(backend, 1, receipts::RECEIPT_COLUMNS.len())
    );
    let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
    for value in &record.row {
        q = match value {
            receipts::Value::Int(v) => q.bind(*v),
            receipts::Value::Real(v) => q.bind(*v),
            receipts::Value::Text(v) => q.bind(v.to_string()),
            receipts::Value::Static(v) => q.bind(v.to_string()),
            receipts::Value::Null => q.bind(None::<i64>),
        };
    }
    q.execute(&mut **tx).await?;
    super::tiles::grow_sqlx(tx, receipts::growths(std::slice::from_ref(&record))).await?;
    sqlx::query("UPDATE chain_heads SET seq = $1, this_hash = $2 WHERE tenant_id = $3")
        .bind(record.seq() as i64)
        .bind(record.this_hash().to_string())
        .bind(record.tenant_id().to_string())
        .execute(&mut **tx)
        .await?;
    Ok(())
}
