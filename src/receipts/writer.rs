//! The receipt writer: group commit of receipts, the way databases commit their log.
//!
//! A request hands its [`Draft`] to the queue and, by default, awaits its batch's commit before
//! it sends the last bytes of its answer ([`ReceiptQueue::commit`]): when a client has its whole
//! answer, its receipt is in the database (docs/API.md, "No answer without its receipt").
//!
//! The writer runs on the database runtime, not on a Pingora runtime, so Pingora's shutdown never
//! cancels it mid-batch. It takes whatever is queued (up to [`MAX_BATCH`]) and appends it in one
//! transaction (`receipts::rows::append_batch`): seq, prevHash, JCS, SHA-256, Ed25519. There is
//! no fixed linger: the next batch starts as soon as the previous commit ends, so an idle gateway
//! adds one commit to an answer and a busy one batches by itself (what arrives during a commit
//! is the next batch).
//!
//! A batch that cannot be committed within `receipts.commit_timeout_ms` is given up: its waiting
//! requests are told ([`CommitError`]) and answer 503 or end their stream with an error event,
//! never cleanly. Drafts nobody waits for (`receipts.commit: after_answer`) are retried until they
//! land, as their answers have already gone.
//!
//! On SQLite the commit is, by default, a `write` to the receipt journal (`store::journal`,
//! `receipts.journal`): the batch is sealed after chain heads kept in memory and appended to a
//! file, and a thread of its own writes the journal to the database in large transactions;
//! every read of receipts waits for it. With `receipts.journal: false` each batch commits to
//! the database itself, as PostgreSQL's always do.
//!
//! On SQLite, a request among few in flight (at most [`FEW_IN_FLIGHT`] with the journal, alone
//! without; nothing queued, the writer's connection free) commits its receipt itself on its own
//! thread, with the writer's connection, instead of handing it over: the leader of a group of
//! one, as in a database's group commit. At light and moderate load an answer then waits for no
//! thread hand-over (two wake-ups of a parked thread per request).

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use super::rows::{Sealing, RULES};
use super::signer::Signer;
use super::Draft;
use crate::metrics::METRICS;
use crate::store::{self, Store};

pub const QUEUE_CAPACITY: usize = 65_536;
pub use super::seal::MAX_BATCH;

/// The receipt writer's time slice (the kernel's smallest; `sched::set_slice` says why). Session
/// 35, flat out, interleaved runs of the default (1.4 ms here), 0.1, 0.25 and 0.5 ms: per-round
/// ratios to bare Pingora 0.71–0.80x, 0.76–0.82x, 0.71–0.91x, 0.70–0.86x; 0.1 ms the steadiest.
const WRITER_SLICE: Duration = Duration::from_micros(100);

/// With the receipt journal, a request commits its own receipt while at most this many are in
/// flight (nothing queued, the connection free): an append is then one sealed line and one
/// `write`, and handing it to the writer thread costs two wake-ups of a parked thread, each a
/// cross-CPU wake-up on these VMs (`perf bench sched pipe`: 24–42 µs a round trip across the two
/// vCPUs, 2 µs on one). Session 41, 3 000 req/s open loop, three interleaved rounds: p50 added
/// over bare Pingora +0.157/+0.195/+0.205 ms at 1 (the old "alone in flight"), +0.108/+0.115/
/// +0.110 at 4, +0.084/+0.137/+0.104 at 8; p99 added +0.67/+0.64/+1.34 → +0.56/+0.22/+0.76 at
/// 4. Flat out at 32 clients the writer still batches (no change within the noise: 17 406/17 242
/// req/s at 1, 16 451/17 894 at 4), and 4 closed-loop clients run as fast as before (12 293/11 721
/// → 12 333/12 327 req/s). Without the journal each commit is a database transaction (~7 WAL
/// frames) and only a request alone in flight commits its own ([`SOLO`]).
const FEW_IN_FLIGHT: i64 = 4;

/// Without the journal: a request commits its own receipt only when alone in flight.
const SOLO: i64 = 1;

/// Who committed a receipt its request waited for (`tollgate_receipt_commits_total{by}`): the
/// request itself, or the writer thread, and then why not the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum By {
    Own,
    /// No own commits on this store (PostgreSQL, or `receipts.durability: fsync`).
    Writer,
    WriterManyInFlight,
    WriterQueued,
    WriterCheckpoint,
    WriterConnectionBusy,
    WriterOwnFailed,
}

const BY_LABELS: [&str; 7] = [
    "own",
    "writer",
    "writer_many_in_flight",
    "writer_queued",
    "writer_checkpoint",
    "writer_connection_busy",
    "writer_own_failed",
];

/// The counters of [`By`], resolved once (no label lookup per request).
static COMMITS_BY: std::sync::LazyLock<[prometheus::IntCounter; 7]> =
    std::sync::LazyLock::new(|| BY_LABELS.map(|by| METRICS.receipt_commits.with_label_values(&[by])));

#[derive(Debug, Default)]
pub struct WriterStats {
    /// Drafts handed over and not yet written (or given up).
    pub depth: AtomicI64,
    pub written: AtomicU64,
    /// Queue-to-commit time of the newest batch's oldest draft.
    pub lag_ms: AtomicI64,
    /// Gateway requests between `new_ctx` and the end of `logging`.
    pub in_flight: AtomicI64,
    /// Consecutive failed attempts of the current batch (0 = healthy).
    pub failing: AtomicI64,
    /// Receipts given up since start (their clients got no clean answer).
    pub given_up: AtomicU64,
    /// With the receipt journal: how far its records are in the database.
    pub journal: std::sync::OnceLock<Arc<store::journal::Progress>>,
}

impl WriterStats {
    /// Counts `n` receipts committed by an append that started at `started`, the oldest of them
    /// queued at `oldest`.
    fn committed(&self, n: usize, started: Instant, oldest: Instant) {
        METRICS.receipt_write_seconds.observe(started.elapsed().as_secs_f64());
        METRICS.receipt_batch_size.observe(n as f64);
        METRICS.receipts_written.inc_by(n as u64);
        self.written.fetch_add(n as u64, Ordering::Relaxed);
        self.lag_ms.store(oldest.elapsed().as_millis() as i64, Ordering::Relaxed);
        self.failing.store(0, Ordering::Relaxed);
    }
}

/// Why a receipt was not committed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CommitError {
    #[error("the receipt writer has stopped")]
    Stopped,
    #[error("the receipt could not be committed within {0:?}: {1}")]
    Failed(Duration, String),
}

/// One queued receipt and, when its request waits for the commit, where to say how it went.
struct Item {
    draft: Draft,
    queued: Instant,
    waiter: Option<Waiter>,
}

type Waiter = oneshot::Sender<Result<(), CommitError>>;

/// The request path's handle, shared by the gateway.
pub struct ReceiptQueue {
    tx: mpsc::Sender<Item>,
    pub stats: Arc<WriterStats>,
    /// SQLite: the writer's connection, for a request among few in flight to commit its own receipt.
    appender: Option<Arc<Appender>>,
}

/// Where the SQLite writer commits: the database itself, or the receipt journal
/// (`receipts.journal`, see `store::journal`).
enum Sink {
    Database(store::receipts::SqliteAppender),
    Journal(store::journal::JournalWriter),
}

impl Sink {
    fn append(&mut self, drafts: &[Draft], signer: &Signer) -> Result<usize, store::StoreError> {
        match self {
            Sink::Database(c) => c.append(&mut Sealing::new(drafts, signer)),
            Sink::Journal(j) => j.append(&mut Sealing::deferred(drafts, signer)),
        }
    }

    /// Like [`Sink::append`], but fails at once where the database's write lock is held
    /// elsewhere, or where an admin write holds the journal's gate (`store::audit`).
    fn append_unless_busy(&mut self, drafts: &[Draft], signer: &Signer) -> Result<usize, store::StoreError> {
        match self {
            Sink::Database(c) => c.append_unless_busy(&mut Sealing::new(drafts, signer)),
            Sink::Journal(j) => j.append_unless_busy(&mut Sealing::deferred(drafts, signer)),
        }
    }

    /// The database's sink finishes a checkpoint the checkpointer asked for; the journal's
    /// applier checkpoints by itself.
    fn finish_checkpoint(&self) -> Result<(), store::StoreError> {
        match self {
            Sink::Database(c) => c.finish_checkpoint().map(drop),
            Sink::Journal(_) => Ok(()),
        }
    }
}

/// The SQLite sink the receipts are committed to: the writer thread's, lent to a request
/// among few in flight.
struct Appender {
    /// This process's claim on the database (`store::journal::claim`), held for its life.
    _claim: std::fs::File,
    conn: Mutex<Sink>,
    signer: Arc<Signer>,
    /// Set by the background checkpointer when the writer should finish a checkpoint before its
    /// next batch (see [`checkpoints`]).
    tail_due: AtomicBool,
    /// A request commits its own receipt while at most this many are in flight:
    /// [`FEW_IN_FLIGHT`] with the journal, [`SOLO`] without.
    inline_up_to: i64,
}

impl ReceiptQueue {
    /// Commits `draft` and returns when it is committed (or given up): on the calling thread
    /// when few requests are in flight ([`ReceiptQueue::commit_here`]), else queued for the
    /// writer.
    pub async fn commit(&self, draft: Draft) -> Result<(), CommitError> {
        let Some(draft) = self.commit_here(draft) else { return Ok(()) };
        let (tx, rx) = oneshot::channel();
        self.enqueue(draft, Some(tx)).await?;
        rx.await.unwrap_or(Err(CommitError::Stopped))
    }

    /// Queues `draft` without waiting for its commit (`receipts.commit: after_answer`). A full
    /// queue still makes the caller wait (back-pressure), never drops.
    pub async fn submit(&self, draft: Draft) {
        if self.enqueue(draft, None).await.is_err() {
            log::error!("receipt writer has stopped; a receipt could not be queued");
        }
    }

    /// Appends `draft` alone, on this thread, when few requests are in flight (the appender's
    /// `inline_up_to`: see [`FEW_IN_FLIGHT`]) and nothing is queued; gives it back (for the queue)
    /// otherwise, or when the attempt fails (the writer retries it). It blocks the calling
    /// thread for one append (a signature and a `write` with the journal) but never waits for a
    /// lock: the writer's connection is taken only if free, and a database lock held elsewhere
    /// fails the attempt at once. With many requests in flight their receipts are better
    /// batched: when any idle moment of the writer was enough, single-receipt commits on the
    /// proxy threads split the batches and flat-out throughput fell from 0.66x to 0.35x bare
    /// Pingora's (session 21, without the journal), and by ~10 % with it (session 41).
    fn commit_here(&self, draft: Draft) -> Option<Draft> {
        let by = match self.own_commit(&draft) {
            Ok(()) => By::Own,
            Err(why) => why,
        };
        COMMITS_BY[by as usize].inc();
        (by != By::Own).then_some(draft)
    }

    /// Commits `draft` on this thread, or says why not (see [`ReceiptQueue::commit_here`]).
    fn own_commit(&self, draft: &Draft) -> Result<(), By> {
        let Some(appender) = &self.appender else { return Err(By::Writer) };
        if self.stats.in_flight.load(Ordering::Relaxed) > appender.inline_up_to {
            return Err(By::WriterManyInFlight);
        }
        if self.stats.depth.load(Ordering::Relaxed) != 0 {
            return Err(By::WriterQueued);
        }
        if appender.tail_due.load(Ordering::Relaxed) {
            return Err(By::WriterCheckpoint);
        }
        let Ok(mut conn) = appender.conn.try_lock() else { return Err(By::WriterConnectionBusy) };
        let started = Instant::now();
        match conn.append_unless_busy(std::slice::from_ref(draft), &appender.signer) {
            Ok(n) => {
                drop(conn);
                self.stats.committed(n, started, started);
                Ok(())
            }
            Err(e) => {
                log::debug!("receipt not committed on the request's thread ({e}); queued for the writer");
                Err(By::WriterOwnFailed)
            }
        }
    }

    async fn enqueue(&self, draft: Draft, waiter: Option<Waiter>) -> Result<(), CommitError> {
        self.stats.depth.fetch_add(1, Ordering::Relaxed);
        METRICS.receipt_queue_depth.inc();
        if self.tx.send(Item { draft, queued: Instant::now(), waiter }).await.is_err() {
            self.stats.depth.fetch_sub(1, Ordering::Relaxed);
            METRICS.receipt_queue_depth.dec();
            return Err(CommitError::Stopped);
        }
        Ok(())
    }

    /// Counts a gateway request as in flight until the guard drops.
    pub fn in_flight(&self) -> InFlight {
        self.stats.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(self.stats.clone())
    }
}

pub struct InFlight(Arc<WriterStats>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

pub struct ReceiptWriter {
    rx: mpsc::Receiver<Item>,
    store: Store,
    signer: Arc<Signer>,
    stats: Arc<WriterStats>,
    commit_timeout: Duration,
    /// SQLite: the background checkpoint's period (zero: none).
    checkpoint_every: Duration,
    appender: Option<Arc<Appender>>,
    /// With the receipt journal: the thread-to-be that writes its records to the database.
    /// (In a mutex only to keep the writer `Sync` for its PostgreSQL task: taken once.)
    applier: Mutex<Option<store::journal::Applier>>,
}

/// The request path's queue and the writer behind it (not started: [`ReceiptWriter::spawn`]).
/// On SQLite it opens the writer's own connection.
pub fn channel(
    store: Store,
    signer: Arc<Signer>,
    commit_timeout: Duration,
    checkpoint_every: Duration,
) -> Result<(ReceiptQueue, ReceiptWriter), store::StoreError> {
    channel_with(store, signer, Options { commit_timeout, checkpoint_every, journal: None })
}

/// How the writer commits.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// `receipts.commit_timeout_ms`.
    pub commit_timeout: Duration,
    /// SQLite: the background checkpoint's period (zero: none); not used with the journal.
    pub checkpoint_every: Duration,
    /// SQLite: commit to the receipt journal, applied to the database at this period
    /// (`receipts.journal`, `receipts.journal_apply_ms`).
    pub journal: Option<Duration>,
}

/// [`channel`] with every option. On SQLite it first writes what a previous run's journal holds
/// and the database does not (`store::journal::replay`), whether or not this run journals.
pub fn channel_with(
    store: Store,
    signer: Arc<Signer>,
    o: Options,
) -> Result<(ReceiptQueue, ReceiptWriter), store::StoreError> {
    let (commit_timeout, checkpoint_every) = (o.commit_timeout, o.checkpoint_every);
    let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
    let stats = Arc::new(WriterStats::default());
    let mut applier = None;
    let durability = store.durability();
    let appender = match store.sqlite_file() {
        Some(file) => {
            let claim = store::journal::claim(file, o.journal.is_some())?;
            let sign: store::journal::SignRecords = {
                let signer = signer.clone();
                Arc::new(move |records: &mut [store::receipts::Record]| super::rows::sign_records(records, &signer))
            };
            store::journal::replay(file, commit_timeout, RULES, &sign)?;
            let conn = match o.journal {
                Some(every) => {
                    let (writer, app, progress) =
                        store::journal::open(file, commit_timeout, every, RULES, durability, sign)?;
                    store.use_journal(progress.clone());
                    let _ = stats.journal.set(progress);
                    applier = Some(app);
                    Sink::Journal(writer)
                }
                None => Sink::Database(
                    store::receipts::SqliteAppender::open(file, commit_timeout, RULES)?.with_durability(durability)?,
                ),
            };
            let inline_up_to = if matches!(conn, Sink::Journal(_)) { FEW_IN_FLIGHT } else { SOLO };
            Some(Arc::new(Appender {
                _claim: claim,
                conn: Mutex::new(conn),
                signer: signer.clone(),
                tail_due: AtomicBool::new(false),
                inline_up_to,
            }))
        }
        None => None,
    };
    // With `receipts.durability: fsync` no request commits on its own thread: the flush (0.1 to
    // several ms) would hold the proxy thread and every connection it serves.
    let inline = appender.clone().filter(|_| durability == store::Durability::PageCache);
    let queue = ReceiptQueue { tx, stats: stats.clone(), appender: inline };
    let writer = ReceiptWriter {
        rx,
        store,
        signer,
        stats,
        commit_timeout,
        checkpoint_every,
        appender,
        applier: Mutex::new(applier),
    };
    Ok((queue, writer))
}

/// One batch taken from the queue.
struct Taken {
    drafts: Arc<[Draft]>,
    waiters: Vec<Option<Waiter>>,
    oldest: Instant,
}

impl ReceiptWriter {
    /// Starts the writer; it runs until every queue handle is dropped. On SQLite it is a thread
    /// of its own with its own connection (the whole append runs there, statement after
    /// statement), plus a thread that checkpoints the WAL in the background; on PostgreSQL a
    /// task on the database runtime.
    pub fn spawn(mut self) -> std::io::Result<()> {
        let (Some(file), Some(appender)) =
            (self.store.sqlite_file().map(std::path::Path::to_path_buf), self.appender.clone())
        else {
            store::db_runtime().spawn(self.run());
            return Ok(());
        };
        let every = self.checkpoint_every;
        let shared = appender.clone();
        let applier = self.applier.get_mut().unwrap_or_else(PoisonError::into_inner).take();
        std::thread::Builder::new().name("tollgate-receipts".into()).spawn(move || {
            // Every answer waits for this thread's commit: it runs soon after it wakes and is
            // not preempted by every thread that wakes (the measurement is at `set_slice`).
            crate::process::sched::set_slice(WRITER_SLICE);
            self.run_sqlite(&shared)
        })?;
        if let Some(applier) = applier {
            // The applier checkpoints between its own transactions: no checkpointer thread.
            std::thread::Builder::new().name("tollgate-journal".into()).spawn(move || applier.run())?;
            return Ok(());
        }
        if !every.is_zero() {
            std::thread::Builder::new()
                .name("tollgate-checkpoint".into())
                .spawn(move || checkpoints(&file, every, &appender.tail_due))?;
        }
        Ok(())
    }

    /// Everything queued behind `first`, up to [`MAX_BATCH`].
    fn take(&mut self, first: Item) -> Taken {
        let mut items = vec![first];
        while items.len() < MAX_BATCH {
            match self.rx.try_recv() {
                Ok(item) => items.push(item),
                Err(_) => break,
            }
        }
        let oldest = items.iter().map(|i| i.queued).min().unwrap_or_else(Instant::now);
        let mut waiters = Vec::with_capacity(items.len());
        let drafts = items
            .into_iter()
            .map(|i| {
                waiters.push(i.waiter);
                i.draft
            })
            .collect();
        Taken { drafts, waiters, oldest }
    }

    async fn run(mut self) {
        while let Some(first) = self.rx.recv().await {
            let batch = self.take(first);
            self.write(batch).await;
        }
        log::info!("receipt writer stopped: {} written", self.stats.written.load(Ordering::Relaxed));
    }

    fn run_sqlite(mut self, appender: &Appender) {
        while let Some(first) = self.rx.blocking_recv() {
            // A request committing its own receipt holds the connection for one append at most.
            let mut conn = appender.conn.lock().unwrap_or_else(PoisonError::into_inner);
            if appender.tail_due.swap(false, Ordering::Relaxed) {
                if let Err(e) = conn.finish_checkpoint() {
                    log::warn!("WAL checkpoint failed: {e}");
                }
            }
            // Let whatever else is runnable on this core go first (requests about to queue
            // their drafts); alone on its core the writer goes on at once. Under load batches
            // grew from ~7 to ~9 receipts, and an idle gateway waits for nothing. (Session 33,
            // without it: no less CPU a receipt, flat out 0.49–0.54x against 0.52–0.55x.)
            std::thread::yield_now();
            let mut batch = self.take(first);
            let mut retry = Retry::new(self.commit_timeout);
            loop {
                let started = Instant::now();
                // A lock held elsewhere fails the attempt after the commit timeout (busy_timeout).
                let err = match conn.append(&batch.drafts, &self.signer) {
                    Ok(_) => break self.committed(batch, started),
                    Err(e) => e.to_string(),
                };
                match self.failed(&mut batch, &mut retry, &err) {
                    Some(pause) => std::thread::sleep(pause),
                    None => break,
                }
            }
        }
        log::info!("receipt writer stopped: {} written", self.stats.written.load(Ordering::Relaxed));
    }

    /// Commits one batch, retrying with backoff until the commit timeout; then gives up the
    /// drafts whose requests wait (they answer without a clean ending) and keeps retrying the
    /// others, whose answers have already gone.
    async fn write(&self, mut batch: Taken) {
        let mut retry = Retry::new(self.commit_timeout);
        loop {
            let started = Instant::now();
            // On this task, not spawned: a timed-out attempt is dropped and rolled back.
            let attempt = super::rows::append_batch_here(&self.store, &batch.drafts, &self.signer);
            let err = match tokio::time::timeout_at(retry.deadline.into(), attempt).await {
                Ok(Ok(_)) => return self.committed(batch, started),
                Ok(Err(e)) => e.to_string(),
                Err(_) => "timed out".to_string(),
            };
            match self.failed(&mut batch, &mut retry, &err) {
                Some(pause) => tokio::time::sleep(pause).await,
                None => return,
            }
        }
    }

    fn committed(&self, batch: Taken, started: Instant) {
        let n = batch.drafts.len();
        self.stats.committed(n, started, batch.oldest);
        self.done(n);
        for w in batch.waiters.into_iter().flatten() {
            let _ = w.send(Ok(()));
        }
    }

    /// After a failed attempt: how long to pause before the next one, or None when nothing is
    /// left to retry (every draft had a waiting request, and they have been told).
    fn failed(&self, batch: &mut Taken, retry: &mut Retry, err: &str) -> Option<Duration> {
        let attempts = self.stats.failing.fetch_add(1, Ordering::Relaxed) + 1;
        log::error!("receipt batch of {} failed (attempt {attempts}): {err}", batch.drafts.len());
        if Instant::now() + retry.backoff >= retry.deadline {
            let waiters = std::mem::take(&mut batch.waiters);
            (batch.drafts, batch.waiters) = self.give_up_waiting(&batch.drafts, waiters, err);
            if batch.drafts.is_empty() {
                return None;
            }
            retry.deadline = Instant::now() + self.commit_timeout;
        }
        let pause = retry.backoff;
        retry.backoff = (retry.backoff * 2).min(Duration::from_secs(2));
        Some(pause)
    }

    /// Tells every waiting request that its receipt was not committed and drops its draft: its
    /// client gets no clean answer, and nothing is billed. Returns the drafts nobody waits for.
    fn give_up_waiting(
        &self,
        drafts: &[Draft],
        waiters: Vec<Option<Waiter>>,
        err: &str,
    ) -> (Arc<[Draft]>, Vec<Option<Waiter>>) {
        let mut kept = Vec::new();
        for (draft, waiter) in drafts.iter().zip(waiters) {
            match waiter {
                Some(w) => {
                    let _ = w.send(Err(CommitError::Failed(self.commit_timeout, err.to_string())));
                }
                None => kept.push(draft.clone()),
            }
        }
        let dropped = drafts.len() - kept.len();
        if dropped > 0 {
            self.done(dropped);
            self.stats.given_up.fetch_add(dropped as u64, Ordering::Relaxed);
            log::error!(
                "gave up {dropped} receipts after {:?}; their requests end without a clean answer",
                self.commit_timeout
            );
        }
        let waiters = kept.iter().map(|_| None).collect();
        (kept.into(), waiters)
    }

    fn done(&self, n: usize) {
        METRICS.receipt_queue_depth.sub(n as i64);
        self.stats.depth.fetch_sub(n as i64, Ordering::Relaxed);
    }
}

/// The retry schedule of one batch.
struct Retry {
    deadline: Instant,
    backoff: Duration,
}

impl Retry {
    fn new(timeout: Duration) -> Retry {
        Retry { deadline: Instant::now() + timeout, backoff: Duration::from_millis(20) }
    }
}

/// WAL size from which the writer finishes a checkpoint itself (makes the WAL start over): the
/// three fsyncs it takes hold up the requests waiting for the next batch (~2.5 ms here). Under
/// steady light load the passive checkpoints never reach the end of the log (a commit lands
/// while they fsync), so it grows by every commit's frames: at 1 024 frames a single client
/// (~7 frames a receipt) met a finish every ~150 requests, and its p99 was +1.7 ms over bare
/// Pingora. At 32 MiB it is every ~4 700 at 1 KiB pages, ~2 300 at 2 KiB (the default). Below
/// the WAL's size limit (`journal_size_limit`, 64 MiB), so the file is reused, not grown.
const TAIL_BYTES: i64 = 32 << 20;

/// Every `every` (`receipts.wal_checkpoint_ms`), a passive checkpoint of the WAL on a connection
/// of its own (the writer's never checkpoints on commit: `SqliteAppender::open`). It copies the
/// bulk without blocking the writer; when it could not reach the end (the writer appended
/// meanwhile) and the log is long enough to matter, it asks the writer to finish between two
/// batches (`tail_due`), so the WAL starts over instead of growing. Runs for the life of the
/// process.
fn checkpoints(file: &std::path::Path, every: Duration, tail_due: &AtomicBool) {
    let conn = match rusqlite::Connection::open(file) {
        Ok(c) => c,
        Err(e) => {
            log::error!("WAL checkpointer: cannot open {}: {e}", file.display());
            return;
        }
    };
    let page: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0)).unwrap_or(4096).max(512);
    let tail_frames = TAIL_BYTES / page;
    loop {
        std::thread::sleep(every);
        match store::receipts::checkpoint_passive(&conn) {
            Ok(c) if c.log >= tail_frames => tail_due.store(true, Ordering::Relaxed),
            Ok(_) => {}
            Err(e) => log::warn!("WAL checkpoint failed: {e}"),
        }
    }
}

/// Waits until no gateway request is in flight and every queued receipt is written or given up
/// (and, with the journal, in the database), checking every few ms; false when `limit` passed
/// first.
pub async fn drained(stats: &WriterStats, limit: Duration) -> bool {
    let until = Instant::now() + limit;
    loop {
        let applied = stats.journal.get().is_none_or(|p| p.caught_up());
        if stats.in_flight.load(Ordering::Relaxed) <= 0 && stats.depth.load(Ordering::Relaxed) <= 0 && applied {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::receipts::tests::draft;

    /// With the receipt journal the bar is [`FEW_IN_FLIGHT`]: with four requests in flight one
    /// still commits its own receipt (one sealed line, no hand-over); with five, or a draft
    /// queued, it is handed back for the writer's batch. (The journal's database side is applied
    /// by a thread not started here: `written` counts what the journal took.)
    #[test]
    fn with_the_journal_a_request_among_few_in_flight_commits_its_own_receipt() {
        let (store, dir) = store::temp_sqlite("writer-few");
        let signer = Arc::new(Signer::from_seed(&[7u8; 32]));
        let options = Options {
            commit_timeout: Duration::from_secs(5),
            checkpoint_every: Duration::ZERO,
            journal: Some(Duration::from_millis(20)),
        };
        let (queue, writer) = channel_with(store.clone(), signer, options).unwrap();
        let written = || queue.stats.written.load(Ordering::Relaxed);

        let guards: Vec<InFlight> = (0..FEW_IN_FLIGHT).map(|_| queue.in_flight()).collect();
        assert!(queue.commit_here(draft("tenant-a", 1)).is_none(), "four in flight: committed on this thread");
        assert_eq!(written(), 1);

        let counted = |by: By| COMMITS_BY[by as usize].get();
        let (own, many) = (counted(By::Own), counted(By::WriterManyInFlight));
        let fifth = queue.in_flight();
        let back = queue.commit_here(draft("tenant-a", 2));
        assert_eq!(back.map(|d| d.request_id), Some("req-2".to_string()), "five in flight: for the writer");
        assert!(counted(By::WriterManyInFlight) > many, "the hand-over is counted with its reason");
        drop(fifth);

        queue.stats.depth.store(1, Ordering::Relaxed);
        assert!(queue.commit_here(draft("tenant-a", 3)).is_some(), "a draft queued: for the writer");
        queue.stats.depth.store(0, Ordering::Relaxed);
        assert_eq!(written(), 1, "nothing handed back was written");
        assert!(queue.commit_here(draft("tenant-a", 4)).is_none());
        assert_eq!(written(), 2);
        assert!(counted(By::Own) > own, "the own commit is counted");
        drop((guards, queue, writer, store));
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Without the journal a request commits its own receipt only when alone in flight: with no
    /// writer running, it is in the database when `commit_here` returns. With another request
    /// in flight, or a draft queued, it is handed back for the writer's batch, and nothing is
    /// written.
    #[test]
    fn without_the_journal_a_request_alone_in_flight_commits_its_own_receipt() {
        let (store, dir) = store::temp_sqlite("writer");
        let signer = Arc::new(Signer::from_seed(&[7u8; 32]));
        let (queue, writer) = channel(store.clone(), signer, Duration::from_secs(5), Duration::ZERO).unwrap();
        let count = || store::db_runtime().block_on(store::receipts::count_all(&store)).unwrap();

        let _first = queue.in_flight();
        assert!(queue.commit_here(draft("tenant-a", 1)).is_none(), "committed on this thread");
        assert_eq!(count(), 1);
        assert_eq!(queue.stats.written.load(Ordering::Relaxed), 1);

        let second = queue.in_flight();
        let back = queue.commit_here(draft("tenant-a", 2));
        assert_eq!(back.map(|d| d.request_id), Some("req-2".to_string()), "two in flight: for the writer");
        drop(second);

        queue.stats.depth.store(1, Ordering::Relaxed);
        assert!(queue.commit_here(draft("tenant-a", 3)).is_some(), "a draft queued: for the writer");
        queue.stats.depth.store(0, Ordering::Relaxed);

        let held = writer.appender.as_ref().unwrap().conn.lock().unwrap();
        assert!(queue.commit_here(draft("tenant-a", 4)).is_some(), "the writer appending: for the writer");
        drop(held);
        assert_eq!(count(), 1, "nothing handed back was written");

        let last = draft("tenant-a", 5);
        let id = last.receipt_id.clone();
        assert!(queue.commit_here(last).is_none());
        let head = store::db_runtime()
            .block_on(crate::receipts::stored::by_id(&store, "tenant-a", &id))
            .unwrap()
            .expect("stored");
        assert_eq!(head.receipt.seq, 2, "chained after the first");
        drop((queue, writer, store));
        let _ = std::fs::remove_dir_all(dir);
    }
}
