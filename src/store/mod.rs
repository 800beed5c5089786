//! Storage: one sqlx `AnyPool` over SQLite (embedded default, WAL) or PostgreSQL.
//!
//! Queries are runtime queries (`query`/`query_as` with `$n` binds, which both backends accept),
//! one function per query in the submodule of the resource it serves.
//!
//! The receipt writer appends through a second, native pool of the same database
//! ([`ChainPool`]): its batches bind tens of values per receipt, and the `Any` driver copies each
//! text value twice on its way to SQLite, which cost more CPU per receipt than SQLite's own insert.
//!
//! Pingora gives each service its own tokio runtime. A pooled PostgreSQL connection belongs to
//! the reactor of the runtime that opened it, so all database work runs on one dedicated runtime
//! that lives as long as the process ([`Store::run`]); callers on any service runtime await it.

pub mod analytics;
pub mod audit;
pub mod budget_requests;
pub mod budgets;
pub mod change;
pub mod checkpoints;
pub mod console_sessions;
mod error;
pub mod journal;
pub mod keys;
pub mod log_heads;
pub mod members;
pub mod notices;
pub mod packs;
pub mod period;
pub mod policies;
pub mod progress;
pub mod prompts;
pub mod providers;
pub mod receipts;
pub mod responses;
pub mod retention;
pub mod routes;
pub mod rows;
pub mod spans;
pub mod spend;
pub mod teams;
pub mod tenants;
pub mod tiles;
pub mod timestamps;
pub mod tool_servers;
mod value;
pub mod webhooks;

use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use sqlx::any::AnyPoolOptions;
use sqlx::AnyPool;

pub use error::StoreError;
use progress::Progress;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// When a commit counts as done (`receipts.durability`): in the operating system's page cache
/// (a process crash cannot lose it, a power loss or kernel crash can), or on stable storage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Durability {
    /// SQLite `synchronous=NORMAL` and the receipt journal's `write` without a flush: a
    /// commit survives a crash of the process, not of the machine.
    #[default]
    PageCache,
    /// Every commit is flushed (`fdatasync`; SQLite `synchronous=FULL`; PostgreSQL
    /// `synchronous_commit=on`, pinned) before it counts, so it survives a power loss.
    Fsync,
}

impl Durability {
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::PageCache => "page-cache",
            Durability::Fsync => "fsync",
        }
    }

    /// SQLite's `PRAGMA synchronous` for this durability (WAL mode: FULL syncs the log at every
    /// commit, NORMAL only at checkpoints).
    pub fn sqlite_pragma(self) -> &'static str {
        match self {
            Durability::PageCache => "PRAGMA synchronous=NORMAL",
            Durability::Fsync => "PRAGMA synchronous=FULL",
        }
    }
}

#[derive(Clone)]
pub struct Store {
    pool: AnyPool,
    backend: Backend,
    durability: Durability,
    chain: ChainPool,
    /// The SQLite database file (None on PostgreSQL), for the receipt writer's own connection.
    sqlite_file: Option<std::path::PathBuf>,
    /// With the receipt journal on: how far its records are in the database (readers wait).
    journal: std::sync::Arc<OnceLock<std::sync::Arc<Progress>>>,
    /// Each tenant's newest checkpoint and the right edge of its tree, kept by
    /// `tenant_log::checkpoint` (`log_heads`).
    log_heads: std::sync::Arc<log_heads::KeptHeads>,
}

/// The native pool the receipt writer appends through (one connection on SQLite, where there
/// is one writer anyway). Native drivers take shared `Arc<str>` values without copying them.
#[derive(Clone)]
pub enum ChainPool {
    Sqlite(sqlx::SqlitePool),
    Postgres(sqlx::PgPool),
}

static SQLITE_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");
static POSTGRES_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

/// The process-wide runtime that owns every database connection.
pub fn db_runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("tollgate-db")
            // Its threads (and the SQLite threads they start) are background work: crate::process::sched.
            .on_thread_start(crate::process::sched::mark_batch_thread)
            .enable_all()
            .build()
            .expect("cannot start the database runtime")
    })
}

/// The page size of a new SQLite database (an existing one keeps its own): 8 KiB. With the
/// receipt journal (`receipts.journal`, the default) receipts reach the database in the
/// applier's large transactions (hundreds of receipts every 20 ms, off the request path), where
/// bigger pages mean fewer WAL frames (two `pwrite`s each) for the same rows. Measured flat out
/// with every check on (`CHECKS=1 PAGE=... benches/load.sh`, session 29, one VM, same binary):
/// the applier's CPU per receipt 7.6-8.8 us at 2 KiB, 6.6-7.1 at 4 KiB, 5.5-6.6 at 8 KiB,
/// 6.0-6.5 at 16 KiB; the single client's added p99 the same at 2 and 8 KiB (+0.13 / +0.17 ms).
/// The smaller sizes of earlier sessions (1 KiB, then 2 KiB) were chosen when every small batch
/// committed to SQLite itself, which only `receipts.journal: false` still does
/// (docs/decisions.md, "Receipts").
pub const NEW_DATABASE_PAGE_SIZE: u32 = 8192;
/// [`NEW_DATABASE_PAGE_SIZE`] as the statement (sqlx takes only `'static` SQL); a unit test ties
/// the two.
const NEW_DATABASE_PAGE_SIZE_PRAGMA: &str = "PRAGMA page_size=8192";
/// Rewrites an existing SQLite database with [`NEW_DATABASE_PAGE_SIZE`] pages, offline (the
/// gateway stopped): the page size of a WAL database changes only through a rollback-journal
/// `VACUUM`. Nothing reads SQLite's `rowid`s, which `VACUUM` may renumber. README, "Receipts".
pub const MOVE_TO_NEW_PAGE_SIZE: &str =
    "PRAGMA journal_mode=DELETE; PRAGMA page_size=8192; VACUUM; PRAGMA journal_mode=WAL;";

impl Store {
    /// Connects (creating the SQLite file and its directory when needed). Runs on the db runtime.
    pub async fn connect(url: &str) -> Result<Store, StoreError> {
        Self::connect_with(url, Durability::PageCache).await
    }

    /// [`Store::connect`] whose commits are as durable as `durability` says, on every
    /// connection (the receipt writer's own ones take it from [`Store::durability`]).
    pub async fn connect_with(url: &str, durability: Durability) -> Result<Store, StoreError> {
        let url = url.to_string();
        spawn_db(async move { Self::connect_inner(&url, durability).await }).await
    }

    async fn connect_inner(url: &str, durability: Durability) -> Result<Store, StoreError> {
        sqlx::any::install_default_drivers();
        let backend = if url.starts_with("sqlite:") { Backend::Sqlite } else { Backend::Postgres };
        let url = match backend {
            Backend::Sqlite => sqlite_url(url)?,
            Backend::Postgres => url.to_string(),
        };
        let unavailable =
            |e: sqlx::Error| StoreError::Unavailable(crate::secrets::redact_credentials(&url, &e.to_string()));
        let pool = any_pool(backend, durability).connect(&url).await.map_err(unavailable)?;
        let (chain, sqlite_file) = chain_pool(&url, backend, durability).await.map_err(unavailable)?;
        if backend == Backend::Postgres && durability == Durability::Fsync {
            refuse_unflushed_postgres(&pool).await?;
        }
        Ok(Store {
            pool,
            backend,
            durability,
            chain,
            sqlite_file,
            journal: Default::default(),
            log_heads: Default::default(),
        })
    }

    /// How durable a commit is (`receipts.durability`).
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// Closes every pooled connection (waits for those in use to come back): for tests that
    /// work on the file itself afterwards (the gateway's connections end with the process).
    #[cfg(test)]
    pub async fn close(&self) {
        self.pool.close().await;
        match &self.chain {
            ChainPool::Sqlite(p) => p.close().await,
            ChainPool::Postgres(p) => p.close().await,
        }
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The SQLite database file (None on PostgreSQL).
    pub fn sqlite_file(&self) -> Option<&std::path::Path> {
        self.sqlite_file.as_deref()
    }

    /// Makes every read of receipts, guardrail events and spend wait for the receipt journal
    /// ([`Store::settled`]).
    pub fn use_journal(&self, progress: std::sync::Arc<Progress>) {
        let _ = self.journal.set(progress);
    }

    /// Returns once every receipt committed before the call is in the database: at once without
    /// the receipt journal; with it, after the journal's applier has written them (`journal`).
    /// Every read of receipts, guardrail events or spend starts with it.
    pub async fn settled(&self) -> Result<(), StoreError> {
        match self.journal.get() {
            Some(p) => p.settled().await,
            None => Ok(()),
        }
    }

    /// Each tenant's newest checkpoint known to this process and its tree's right edge.
    pub fn log_heads(&self) -> &log_heads::KeptHeads {
        &self.log_heads
    }

    /// The receipt writer's pool (see [`ChainPool`]).
    pub fn chain_pool(&self) -> ChainPool {
        self.chain.clone()
    }

    pub async fn migrate(&self) -> Result<(), StoreError> {
        self.run(|pool, backend| async move {
            let m = match backend {
                Backend::Sqlite => &SQLITE_MIGRATIONS,
                Backend::Postgres => &POSTGRES_MIGRATIONS,
            };
            m.run(&pool).await.map_err(StoreError::from)
        })
        .await
    }

    /// Runs database work on the database runtime and awaits its result from any runtime.
    pub async fn run<F, Fut, T>(&self, f: F) -> Result<T, StoreError>
    where
        F: FnOnce(AnyPool, Backend) -> Fut,
        Fut: Future<Output = Result<T, StoreError>> + Send + 'static,
        T: Send + 'static,
    {
        spawn_db(f(self.pool.clone(), self.backend)).await
    }

    /// A cheap liveness probe for `/status`.
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.run(|pool, _| async move {
            sqlx::query("SELECT 1").execute(&pool).await?;
            Ok(())
        })
        .await
    }
}

/// A SQLite URL ready to connect: its directory created, the file created on first connect
/// (`mode=rwc`). An in-memory database is refused: every pooled connection would open its own
/// empty one.
fn sqlite_url(url: &str) -> Result<String, StoreError> {
    let mut url = url.to_string();
    let path = url.trim_start_matches("sqlite://").trim_start_matches("sqlite:");
    let path = path.split('?').next().unwrap_or(path).to_string();
    if let Some(dir) = std::path::Path::new(&path).parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir)
                .map_err(|e| StoreError::Unavailable(format!("cannot create {}: {e}", dir.display())))?;
        }
    }
    if url.contains(":memory:") {
        return Err(StoreError::Unavailable(
            "an in-memory SQLite database is not supported: give a file path (sqlite://PATH)".into(),
        ));
    }
    if !url.contains("mode=") {
        url.push_str(if url.contains('?') { "&mode=rwc" } else { "?mode=rwc" });
    }
    Ok(url)
}

/// `receipts.durability: fsync` on a PostgreSQL server that does not flush its log (`fsync=off`):
/// no session setting can make its commits durable, so the gateway does not start.
async fn refuse_unflushed_postgres(pool: &AnyPool) -> Result<(), StoreError> {
    use sqlx::Row;
    let fsync: String = sqlx::query("SHOW fsync").fetch_one(pool).await?.try_get(0usize)?;
    if fsync == "off" {
        return Err(StoreError::Unavailable(
            "receipts.durability is fsync, but the PostgreSQL server runs with fsync=off: its commits never reach \
             stable storage; turn fsync on in postgresql.conf or use receipts.durability: page-cache"
                .into(),
        ));
    }
    Ok(())
}

/// PostgreSQL with `receipts.durability: fsync`: every session of ours commits with
/// `synchronous_commit=on` (the server's default), whatever a role or database setting says, so
/// a commit returns only once its WAL is flushed.
const PIN_SYNCHRONOUS_COMMIT: &str = "SET synchronous_commit = on";

/// The options of the shared pool every query but the receipt append uses.
fn any_pool(backend: Backend, durability: Durability) -> AnyPoolOptions {
    AnyPoolOptions::new()
        .max_connections(if backend == Backend::Sqlite { 4 } else { 10 })
        .acquire_timeout(Duration::from_secs(5))
        .after_connect(move |conn, _| {
            Box::pin(async move {
                if backend == Backend::Sqlite {
                    // WAL lets readers run beside the one writer; busy_timeout waits out
                    // the writer instead of failing with SQLITE_BUSY.
                    for pragma in [
                        // Only a new database takes it (before its first table); see
                        // [`NEW_DATABASE_PAGE_SIZE`].
                        NEW_DATABASE_PAGE_SIZE_PRAGMA,
                        "PRAGMA journal_mode=WAL",
                        durability.sqlite_pragma(),
                        "PRAGMA busy_timeout=10000",
                        "PRAGMA foreign_keys=ON",
                    ] {
                        sqlx::query(pragma).execute(&mut *conn).await?;
                    }
                } else if durability == Durability::Fsync {
                    sqlx::query(PIN_SYNCHRONOUS_COMMIT).execute(&mut *conn).await?;
                }
                Ok(())
            })
        })
}

/// The receipt writer's native pool ([`ChainPool`]) and, on SQLite, the database file.
async fn chain_pool(
    url: &str,
    backend: Backend,
    durability: Durability,
) -> Result<(ChainPool, Option<std::path::PathBuf>), sqlx::Error> {
    match backend {
        Backend::Sqlite => {
            use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
            let synchronous = match durability {
                Durability::PageCache => SqliteSynchronous::Normal,
                Durability::Fsync => SqliteSynchronous::Full,
            };
            let options = url
                .parse::<SqliteConnectOptions>()?
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(synchronous)
                .busy_timeout(Duration::from_secs(10))
                .foreign_keys(true);
            let file = options.get_filename().to_path_buf();
            let pool = SqlitePoolOptions::new()
                .max_connections(1)
                .acquire_timeout(Duration::from_secs(5))
                .connect_with(options)
                .await?;
            Ok((ChainPool::Sqlite(pool), Some(file)))
        }
        Backend::Postgres => {
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(2)
                .acquire_timeout(Duration::from_secs(5))
                .after_connect(move |conn, _| {
                    Box::pin(async move {
                        if durability == Durability::Fsync {
                            sqlx::query(PIN_SYNCHRONOUS_COMMIT).execute(&mut *conn).await?;
                        }
                        Ok(())
                    })
                })
                .connect(url)
                .await?;
            Ok((ChainPool::Postgres(pool), None))
        }
    }
}

async fn spawn_db<Fut, T>(fut: Fut) -> Result<T, StoreError>
where
    Fut: Future<Output = Result<T, StoreError>> + Send + 'static,
    T: Send + 'static,
{
    db_runtime().spawn(fut).await.map_err(|e| StoreError::Other(format!("database task failed: {e}")))?
}

/// A write refused by a unique constraint (both backends report it through the same kind).
pub fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.is_unique_violation())
}

/// Binds for a nullable `REAL`/`DOUBLE PRECISION` column, written in SQL as
/// `CASE WHEN $present = 1 THEN $value END`.
///
/// sqlx 0.9's Any driver maps a NULL `f64` to a NULL `f32` (`AnyArguments::convert_into` swaps
/// the two), so on PostgreSQL a statement first prepared with a NULL caches a float4 parameter
/// and every later non-NULL `f64` on that connection fails with "incorrect binary data format".
/// Binding a value that is never NULL keeps the parameter float8.
pub fn nullable_real(v: Option<f64>) -> (f64, i64) {
    (v.unwrap_or(0.0), i64::from(v.is_some()))
}

/// Begins a transaction that will write. On SQLite it takes the write lock up front
/// (`BEGIN IMMEDIATE`, waiting out `busy_timeout`): a deferred transaction that reads first and
/// writes later fails at once with SQLITE_BUSY when another connection (the receipt writer)
/// holds the lock, since waiting could deadlock.
pub async fn begin_write(
    pool: &AnyPool,
    backend: Backend,
) -> Result<sqlx::Transaction<'static, sqlx::Any>, sqlx::Error> {
    match backend {
        Backend::Sqlite => pool.begin_with("BEGIN IMMEDIATE").await,
        Backend::Postgres => pool.begin().await,
    }
}

/// Now as RFC 3339 UTC with milliseconds: the one timestamp format of the database.
pub fn now_ts() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

/// For unit tests: a new SQLite store, connected and migrated, in a temp directory of its own
/// (returned, for the caller to remove).
#[cfg(test)]
pub(crate) fn temp_sqlite(label: &str) -> (Store, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("tollgate-{label}-{}", uuid::Uuid::new_v4().simple()));
    let url = format!("sqlite://{}", dir.join("t.db").display());
    let store = db_runtime().block_on(async {
        let store = Store::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
        store
    });
    (store, dir)
}

#[cfg(test)]
mod tests {
    use sqlx::{Connection, Row};

    /// A new database takes [`super::NEW_DATABASE_PAGE_SIZE`]; one created before keeps its own.
    #[tokio::test]
    async fn a_new_database_takes_the_page_size_and_an_existing_one_keeps_its_own() {
        let dir = std::env::temp_dir().join(format!("tollgate-page-size-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let page_size = |file: std::path::PathBuf| {
            rusqlite::Connection::open(file).unwrap().query_row("PRAGMA page_size", [], |r| r.get::<_, u32>(0)).unwrap()
        };
        let new = dir.join("new.db");
        super::Store::connect(&format!("sqlite://{}", new.display())).await.unwrap().migrate().await.unwrap();
        assert_eq!(page_size(new), super::NEW_DATABASE_PAGE_SIZE);

        let old = dir.join("old.db");
        rusqlite::Connection::open(&old)
            .unwrap()
            .execute_batch("PRAGMA page_size=4096; PRAGMA journal_mode=WAL; CREATE TABLE t (x);")
            .unwrap();
        super::Store::connect(&format!("sqlite://{}", old.display())).await.unwrap().migrate().await.unwrap();
        assert_eq!(page_size(old), 4096);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `.cargo/config.toml` builds the bundled SQLite without allocation statistics, which
    /// would otherwise take a global mutex on every SQLite malloc and free.
    #[tokio::test]
    async fn bundled_sqlite_is_built_without_memory_statistics() {
        let mut conn = sqlx::SqliteConnection::connect("sqlite::memory:").await.unwrap();
        let options: Vec<String> = sqlx::query("PRAGMA compile_options")
            .fetch_all(&mut conn)
            .await
            .unwrap()
            .iter()
            .map(|r| r.get::<String, _>(0))
            .collect();
        assert!(
            options.iter().any(|o| o == "DEFAULT_MEMSTATUS=0"),
            "LIBSQLITE3_FLAGS from .cargo/config.toml did not reach the SQLite build \
             (is LIBSQLITE3_FLAGS set in the environment?): {options:?}"
        );
    }
}
