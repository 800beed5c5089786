//! The receipt journal (SQLite, `receipts.journal: true`): a receipt is committed when its
//! sealed record is written to an append-only file, and reaches the database later, in large
//! batches, off the request path.
//!
//! Why: committing each small batch to SQLite rewrites the tail pages of the receipts table, its
//! three indexes, the chain head and the spend row into the WAL (~8 frames of 2 KiB for a
//! single receipt, session 26), and the checkpoint copies and flushes them; on these VMs the
//! flushes stall every process's writes (single-client p99 +3 ms over bare Pingora). A journal
//! record is ~1 KB, one `write` a batch; the database then takes hundreds of receipts a
//! transaction and checkpoints rarely.
//!
//! - [`JournalWriter`]: the writer's side. It keeps every tenant's chain head in memory (read
//!   from the database the first time a tenant is seen), seals a batch after them (chained and
//!   hashed: `seq`, `prevHash` and `thisHash` fix each receipt; the writer leaves the signature
//!   to the applier), appends the records as frames (`store::receipts::frame`) to the current segment with one
//!   `write`, and tells the applier where they are. A `write` that returned is in the page
//!   cache: a SIGKILL cannot lose it. Like SQLite's WAL with `synchronous=NORMAL`, nothing is
//!   flushed: a power cut can. With `receipts.durability: fsync` the `write` is followed by one
//!   `fdatasync` of the segment before the batch counts as committed (group commit: every
//!   receipt of the batch waits for the same flush), a new segment's directory entry is flushed
//!   before its first record, and the applier's database commits are flushed too
//!   (`synchronous=FULL`) before the segments they empty are deleted.
//! - [`Applier`]: a thread with the database's write connection. It reads the handed-over
//!   batches' records back from their segment, signs their records ([`SignRecords`]) and writes
//!   them every `receipts.journal_apply_ms` (or at once when a reader asks), checkpoints the
//!   WAL itself between two applies, and deletes the segments whose records are all in the
//!   database.
//! - [`Progress`]: how many records were journaled and how many applied. Every read of receipts,
//!   guardrail events or spend first waits until everything journaled before the read began is
//!   applied ([`Progress::settled`], called through `Store::settled`), so a receipt is readable
//!   the moment its answer ends, as without the journal.
//! - [`replay`]: at start, before the writer runs, the records of any segment left behind (a
//!   crash, a kill) that the database does not hold yet are signed and written, and the
//!   segments deleted.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use foldhash::HashMap;

pub use super::progress::Progress;
use super::progress::{now_ms, Flush};
use super::receipts::frame::{self, Frame};
use super::receipts::{sqlite_head, ChainRules, Head, Record, Seal, SqliteAppender};
use super::{Durability, StoreError};

/// A segment is closed and a new one started past this size; the applier deletes closed
/// segments once their records are applied. Small in unit tests, whose batches then span
/// several segments.
const SEGMENT_BYTES: u64 = if cfg!(test) { 16 << 10 } else { 32 << 20 };

/// The applier writes at once, without waiting for its period, from this many pending records.
const APPLY_AT: usize = 8192;

/// The applier checkpoints the WAL after an apply at most this often. Each checkpoint copies
/// the pages applied since the last one into the database and flushes it; on these VMs frequent
/// flushes stall every process's writes (session 26: a neighbour flushing every 5 ms raised bare
/// Pingora's single-client p99 from 0.3 to 1.9 ms, every 500 ms to 0.43 ms).
const CHECKPOINT_EVERY: Duration = Duration::from_millis(500);

/// The applier runs as batch work instead of idle work from this many pending records.
const BOOST_AT: usize = 4096;

/// Back-pressure: while this many journaled records wait for the database, commits wait (up to
/// the commit timeout) instead of growing the journal without bound.
const MAX_UNAPPLIED: u64 = 1 << 18;

/// Records per transaction when replaying.
const REPLAY_BATCH: usize = 4096;

/// The journal's directory beside the database file: `<db>.receipts/`. (Not `<db>-journal`:
/// that is SQLite's rollback journal.)
pub fn dir_of(db_file: &Path) -> PathBuf {
    let mut name = db_file.as_os_str().to_owned();
    name.push(".receipts");
    PathBuf::from(name)
}

/// Claims the database for this process's receipt writer, for as long as the returned file is
/// open: exclusively with the journal (the chain heads it seals after live in this process's
/// memory, so no other process may append), shared without (processes that append through
/// SQLite's own lock can share the file, as before). A process that cannot have its claim does
/// not start.
pub fn claim(db_file: &Path, exclusive: bool) -> Result<std::fs::File, StoreError> {
    let mut name = db_file.as_os_str().to_owned();
    name.push(".receipts.lock");
    let path = PathBuf::from(name);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| io_err(&path, e))?;
    let claimed = if exclusive { file.try_lock() } else { file.try_lock_shared() };
    match claimed {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(StoreError::Unavailable(format!(
            "{}: another gateway process writes receipts to this database{}",
            db_file.display(),
            if exclusive { "" } else { " with the receipt journal (receipts.journal), which it must do alone" }
        ))),
        Err(std::fs::TryLockError::Error(e)) => Err(io_err(&path, e)),
    }
}

/// The segment this version writes: records as frames (`store::receipts::frame`).
fn segment_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:012}.{FRAMES}"))
}

/// The extension of segments of frames; `.jsonl` segments hold JSON lines, as versions before
/// session 50 wrote them (read at start only: a replay after an upgrade).
const FRAMES: &str = "rec";
const LINES: &str = "jsonl";

fn extension(path: &Path) -> Option<&str> {
    path.extension().and_then(|e| e.to_str())
}

/// The segments in `dir`, oldest first.
fn segments(dir: &Path) -> Result<Vec<(u64, PathBuf)>, StoreError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err(dir, e)),
    };
    let mut found = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| io_err(dir, e))?.path();
        let is_segment = matches!(extension(&path), Some(FRAMES | LINES));
        let n = path.file_stem().and_then(|n| n.to_str()).filter(|_| is_segment).and_then(|n| n.parse::<u64>().ok());
        if let Some(n) = n {
            found.push((n, path));
        }
    }
    found.sort();
    Ok(found)
}

fn io_err(path: &Path, e: std::io::Error) -> StoreError {
    StoreError::Unavailable(format!("receipt journal {}: {e}", path.display()))
}

/// Flushes a directory's entries (a file created or deleted in it) to stable storage.
fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| io_err(dir, e))
}

/// Deletes the segments numbered below `below`.
fn delete_below(dir: &Path, below: u64) {
    match segments(dir) {
        Ok(all) => {
            for (_, path) in all.into_iter().filter(|(n, _)| *n < below) {
                if let Err(e) = std::fs::remove_file(&path) {
                    log::warn!("receipt journal: cannot delete {}: {e}", path.display());
                }
            }
        }
        Err(e) => log::warn!("{e}"),
    }
}

/// Reads a segment's records, of either format. A last record cut short is a write cut short by
/// a crash (its request never had an answer): left out when `newest` is the newest segment, an
/// error anywhere else, as is anything that is not a record.
pub fn read_segment(path: &Path, newest: bool) -> Result<Vec<Record>, StoreError> {
    if extension(path) == Some(LINES) {
        return read_lines(path, newest);
    }
    let bytes = std::fs::read(path).map_err(|e| io_err(path, e))?;
    let mut records = Vec::new();
    let mut at = 0;
    loop {
        match frame::decode(&bytes[at..]).well_formed() {
            Frame::Record(r, len) => {
                records.push(r);
                at += len;
            }
            Frame::Bad(e) => return Err(bad_frame(path, at, &e)),
            Frame::End => return Ok(records),
            Frame::Cut if newest => {
                log::warn!("receipt journal {}: the record at byte {at} was cut short; left out", path.display());
                return Ok(records);
            }
            Frame::Cut => return Err(bad_frame(path, at, "cut short")),
        }
    }
}

fn bad_frame(path: &Path, at: usize, e: &str) -> StoreError {
    StoreError::Other(format!("receipt journal {}: the record at byte {at}: {e}", path.display()))
}

/// Reads a segment of JSON lines (an earlier version's). A last line without its newline is
/// a write cut short, as a frame cut short is in [`read_segment`].
fn read_lines(path: &Path, newest: bool) -> Result<Vec<Record>, StoreError> {
    let file = std::fs::File::open(path).map_err(|e| io_err(path, e))?;
    let mut reader = std::io::BufReader::new(file);
    let mut records = Vec::new();
    let mut line = Vec::new();
    let mut number = 0;
    loop {
        line.clear();
        let n = reader.read_until(b'\n', &mut line).map_err(|e| io_err(path, e))?;
        if n == 0 {
            return Ok(records);
        }
        number += 1;
        if line.last() != Some(&b'\n') {
            if newest {
                log::warn!("receipt journal {}: line {number} was cut short; left out", path.display());
                return Ok(records);
            }
            return Err(StoreError::Other(format!("receipt journal {}: line {number} is cut short", path.display())));
        }
        match record_of(&line) {
            Ok(r) => records.push(r),
            Err(e) => return Err(StoreError::Other(format!("receipt journal {}: line {number}: {e}", path.display()))),
        }
    }
}

/// A journal line's record (lines of an older version upgraded), or why it is not one.
fn record_of(line: &[u8]) -> Result<Record, String> {
    match serde_json::from_slice::<Record>(line).map(Record::upgraded) {
        Ok(r) if r.well_formed() => Ok(r),
        Ok(_) => Err("not a receipt".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// Writes to the database every journaled record it does not hold yet, then deletes the
/// segments. A record at or below its tenant's stored head is there already (records are applied
/// in chain order, a tenant's in one transaction with its head); the next one must continue the
/// head exactly, or the journal and the database disagree and the gateway does not start.
/// Returns how many records were written.
pub fn replay(db_file: &Path, busy: Duration, rules: ChainRules, sign: &SignRecords) -> Result<usize, StoreError> {
    let dir = dir_of(db_file);
    let all = segments(&dir)?;
    if all.is_empty() {
        return Ok(0);
    }
    // Flushed whatever this run's durability: the segments are deleted right after, and a
    // replay is rare (a start after a crash).
    let mut conn = SqliteAppender::open(db_file, busy, rules)?.with_durability(Durability::Fsync)?;
    let mut heads: HashMap<String, Head> = HashMap::default();
    let mut todo: Vec<Record> = Vec::new();
    let newest = all.last().map(|(n, _)| *n);
    for (n, path) in &all {
        for r in read_segment(path, Some(*n) == newest)? {
            let head = match heads.get(r.tenant_id()) {
                Some(h) => h.clone(),
                None => conn.head(r.tenant_id())?.unwrap_or_else(|| rules.genesis_head()),
            };
            if r.seq() <= head.seq {
                heads.insert(r.tenant_id().to_string(), head);
                continue;
            }
            if r.seq() != head.seq + 1 || r.prev_hash() != &*head.hash {
                return Err(StoreError::Other(format!(
                    "receipt journal {}: tenant {} receipt seq {} does not continue the stored chain (head seq {}); \
                     move the directory {} aside to start without it",
                    path.display(),
                    r.tenant_id(),
                    r.seq(),
                    head.seq,
                    dir.display()
                )));
            }
            heads.insert(r.tenant_id().to_string(), Head { seq: r.seq(), hash: r.this_hash().into() });
            todo.push(r);
        }
    }
    for chunk in todo.chunks_mut(REPLAY_BATCH) {
        sign(chunk);
        let mut part = Some(chunk.iter().collect::<Vec<&Record>>());
        conn.apply(|| Ok(part.take()))?;
    }
    let below = newest.map_or(0, |n| n + 1);
    delete_below(&dir, below);
    if !todo.is_empty() {
        log::warn!("receipt journal: {} receipts written to the database at start (left by the last run)", todo.len());
    }
    Ok(todo.len())
}

/// Signs the records a batch was journaled with unsigned (`receipts::rows::sign_records` with
/// the gateway's signing key): the applier calls it before their rows reach the database, replay
/// before it writes them. Records signed already are left as they are.
pub type SignRecords = Arc<dyn Fn(&mut [Record]) + Send + Sync>;

/// What the writer hands the applier: records in journal order, under a lock the applier
/// takes once an apply. The writer wakes the applier only when the first records of a period
/// arrive (or enough for an apply at once), not for every batch: with a wake-up per batch the
/// single client's p99 was ~0.4 ms worse (the applier woke beside the request's threads).
///
/// Scheduling: the applier is idle work (`SCHED_IDLE`) while it keeps up, so a request thread
/// that wakes on its core takes the core at once (as `SCHED_BATCH` the single client's p99 was
/// +0.86 to +0.97 ms over bare Pingora, as idle work +0.17 ms: the request waited out the
/// applier's slice). When it falls [`BOOST_AT`] records behind, or a reader waits for it, the
/// thread that sees it makes the applier batch work (full weight) until it has caught up: under
/// full load an idle thread could starve.
#[derive(Debug, Default)]
struct Handoff {
    state: Mutex<Pending>,
    wake: Condvar,
    /// The applier thread's id (0 until it runs).
    applier: AtomicI32,
}

/// Where handed-over journal records are: `len` bytes at `offset` of segment `segment`, written
/// before they were handed over. Consecutive batches of a segment are merged up to
/// [`READ_BYTES`]: the applier reads them back with one `pread`.
#[derive(Debug, Clone, Copy)]
struct Batch {
    segment: u64,
    offset: u64,
    len: usize,
}

/// At most this many bytes of consecutive batches are read back at once (a larger batch is read
/// alone): ~100 receipts. At a single client's pace each batch is one receipt, and a
/// `pread` each cost the applier up to a few µs a receipt more (its CPU a request 51.3 → 52.0 and
/// 45.5 → 51.9 µs against holding the lines, session 46).
const READ_BYTES: usize = 64 << 10;

/// Batches handed over by the writer, oldest first.
///
/// Why where the records are and not their bytes or the [`Record`]s: flat out the applier trails by
/// thousands of records (peaks of 8 000 at 32 clients and 33 000 at 1 000, session 45), and a
/// pending record held in the heap took ~1.4 KiB as values, ~550–800 bytes as its journal line (JSON then),
/// and the heap kept the high-water mark for the allocator's purge delay. The records are in the
/// segment, written a moment ago and still in the page cache: reading them back is a copy out of
/// the kernel, and a pending batch costs the applier 24 bytes. Parsing them again is the
/// applier's work, off the request path.
type Batches = Vec<Batch>;

#[derive(Debug, Default)]
struct Pending {
    records: Batches,
    count: usize,
    /// When the oldest pending records are due for the database.
    due: Option<Instant>,
    /// A reader waits: apply now.
    flush: bool,
    /// The writer's side is gone: apply what is left and stop.
    closed: bool,
    /// The applier runs as batch work, not idle work (see [`Handoff`]).
    boosted: bool,
}

impl Flush for Handoff {
    fn flush(&self) {
        let mut p = self.lock();
        p.flush = true;
        self.boost(&mut p);
        self.wake.notify_one();
    }
}

impl Handoff {
    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn push(&self, batch: Batch, n: usize, every: Duration) {
        let mut p = self.lock();
        p.count += n;
        match p.records.last_mut() {
            // Right after the previous batch in its segment: one read for both, up to a bound.
            Some(last)
                if last.segment == batch.segment
                    && last.offset + last.len as u64 == batch.offset
                    && last.len + batch.len <= READ_BYTES =>
            {
                last.len += batch.len
            }
            _ => p.records.push(batch),
        }
        let first = p.due.is_none();
        if first {
            p.due = Some(Instant::now() + every);
        }
        if p.count >= BOOST_AT {
            self.boost(&mut p);
        }
        if first || p.count >= APPLY_AT {
            self.wake.notify_one();
        }
    }

    /// Makes the applier batch work (it is behind, or someone waits for it).
    fn boost(&self, p: &mut Pending) {
        let tid = self.applier.load(Ordering::Relaxed);
        if !p.boosted && tid != 0 {
            p.boosted = true;
            crate::process::sched::set_idle(tid, false);
        }
    }

    /// Called by the applier after an apply: back to idle work when little is left and nobody
    /// waits.
    fn settle_down(&self) {
        let mut p = self.lock();
        if p.boosted && p.count < BOOST_AT && !p.flush {
            p.boosted = false;
            crate::process::sched::set_idle(0, true);
        }
    }

    fn close(&self) {
        self.lock().closed = true;
        self.wake.notify_one();
    }

    /// Waits until records are due (their period passed, a reader waits, enough of them, or
    /// the writer is gone) and takes them all; None when the writer is gone and nothing is left.
    fn take(&self) -> Option<(Batches, usize)> {
        let mut p = self.lock();
        loop {
            let now = Instant::now();
            if !p.records.is_empty() && (p.flush || p.closed || p.count >= APPLY_AT || p.due.is_some_and(|d| now >= d))
            {
                p.flush = false;
                p.due = None;
                let count = std::mem::take(&mut p.count);
                return Some((std::mem::take(&mut p.records), count));
            }
            if p.records.is_empty() {
                p.flush = false;
                if p.closed {
                    return None;
                }
                p = self.wake.wait(p).unwrap_or_else(std::sync::PoisonError::into_inner);
            } else {
                let wait = p.due.map_or(Duration::ZERO, |d| d.saturating_duration_since(now));
                p = self.wake.wait_timeout(p, wait).unwrap_or_else(std::sync::PoisonError::into_inner).0;
            }
        }
    }

    /// Puts records that could not be applied back in front, due again after `backoff`.
    fn put_back(&self, mut records: Batches, count: usize, backoff: Duration) {
        let mut p = self.lock();
        records.append(&mut p.records);
        p.records = records;
        p.count += count;
        p.due = Some(Instant::now() + backoff);
    }
}

/// The writer's side of the journal: chain heads in memory, the current segment, the applier's
/// queue.
pub struct JournalWriter {
    dir: PathBuf,
    segment: u64,
    file: std::fs::File,
    size: u64,
    /// The write failed part way: start a new segment before the next one.
    broken: bool,
    heads: HashMap<Arc<str>, Head>,
    rules: ChainRules,
    /// A read connection for the head of a tenant seen for the first time.
    reader: rusqlite::Connection,
    buf: Vec<u8>,
    handoff: Arc<Handoff>,
    progress: Arc<Progress>,
    /// `receipts.journal_apply_ms`.
    every: Duration,
    /// `receipts.durability`: whether each write is flushed before the batch counts.
    durability: Durability,
}

impl Drop for JournalWriter {
    fn drop(&mut self) {
        self.handoff.close();
    }
}

/// Opens the journal of `db_file` (after [`replay`]): the writer's side, the applier (not
/// started) and the shared progress. `timeout` is the commit timeout: how long readers wait
/// for the applier, and how long it may fail before commits are refused. `durability` is
/// `receipts.durability`.
pub fn open(
    db_file: &Path,
    timeout: Duration,
    apply_every: Duration,
    rules: ChainRules,
    durability: Durability,
    sign: SignRecords,
) -> Result<(JournalWriter, Applier, Arc<Progress>), StoreError> {
    let dir = dir_of(db_file);
    std::fs::create_dir_all(&dir).map_err(|e| io_err(&dir, e))?;
    if durability == Durability::Fsync {
        // The journal's own directory entry, beside the database.
        sync_dir(dir.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")))?;
    }
    let segment = segments(&dir)?.last().map_or(1, |(n, _)| n + 1);
    let (file, size) = open_segment(&dir, segment, durability)?;
    let reader = rusqlite::Connection::open(db_file)
        .map_err(|e| StoreError::Unavailable(format!("{}: {e}", db_file.display())))?;
    let handoff = Arc::new(Handoff::default());
    let progress = Arc::new(Progress::new(handoff.clone(), timeout));
    let applier = Applier {
        handoff: handoff.clone(),
        conn: SqliteAppender::open(db_file, timeout, rules)?.with_durability(durability)?,
        dir: dir.clone(),
        segments: SegmentReader { dir: dir.clone(), open: None, buf: Vec::new() },
        progress: progress.clone(),
        sign,
    };
    let writer = JournalWriter {
        dir,
        segment,
        file,
        size,
        broken: false,
        heads: HashMap::default(),
        rules,
        reader,
        buf: Vec::new(),
        handoff,
        progress: progress.clone(),
        every: apply_every,
        durability,
    };
    Ok((writer, applier, progress))
}

/// Opens (creates) segment `n`; with [`Durability::Fsync`] its directory entry is flushed before
/// any record is written to it, so a flushed record can always be found again.
fn open_segment(dir: &Path, n: u64, durability: Durability) -> Result<(std::fs::File, u64), StoreError> {
    let path = segment_path(dir, n);
    let file = std::fs::OpenOptions::new().create(true).append(true).open(&path).map_err(|e| io_err(&path, e))?;
    let size = file.metadata().map_err(|e| io_err(&path, e))?.len();
    if durability == Durability::Fsync {
        sync_dir(dir)?;
    }
    Ok((file, size))
}

impl JournalWriter {
    /// Seals a batch after the heads this writer keeps and journals its records: when it returns
    /// Ok they are committed. Refused while the applier has been failing for longer than the
    /// commit timeout (the database takes no receipts: answers would outrun what readers can
    /// see).
    pub fn append(&mut self, seal: &mut impl Seal) -> Result<usize, StoreError> {
        self.append_with(seal, true)
    }

    /// [`JournalWriter::append`] that fails at once instead of waiting while an admin append
    /// holds the gate (`store::audit`): for a request committing its own receipt on a proxy
    /// thread, which hands the draft to the writer then.
    pub fn append_unless_busy(&mut self, seal: &mut impl Seal) -> Result<usize, StoreError> {
        self.append_with(seal, false)
    }

    fn append_with(&mut self, seal: &mut impl Seal, wait: bool) -> Result<usize, StoreError> {
        if let Some(failing) = self.progress.failing_for().filter(|f| *f > self.progress.timeout) {
            return Err(StoreError::Unavailable(format!(
                "the database has taken no receipts for {failing:?} (the journal holds them)"
            )));
        }
        self.wait_for_room()?;
        // No admin append (`store::audit`) writes to the database while this batch is sealed
        // after the heads below and journaled.
        let progress = self.progress.clone();
        let mut stale = match progress.gate.try_lock() {
            Ok(stale) => stale,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) if wait => {
                progress.gate.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
            }
            Err(std::sync::TryLockError::WouldBlock) => {
                return Err(StoreError::Unavailable("an admin write holds the receipt journal".into()))
            }
        };
        for tenant in stale.drain(..) {
            self.heads.remove(&tenant);
        }
        let mut heads = Vec::new();
        for tenant in seal.tenants() {
            let head = match self.heads.get(tenant) {
                Some(h) => h.clone(),
                None => sqlite_head(&self.reader, tenant)?.unwrap_or_else(|| self.rules.genesis_head()),
            };
            heads.push(head);
        }
        let records = seal.seal(heads);
        self.buf.clear();
        for r in &records {
            frame::encode(r, &mut self.buf);
        }
        let offset = self.write()?;
        for (tenant, head) in super::receipts::batch_ends(&records).map(Record::head) {
            self.heads.insert(tenant, head);
        }
        let n = records.len();
        let batch = Batch { segment: self.segment, offset, len: self.buf.len() };
        self.handoff.push(batch, n, self.every);
        // After the send: a reader that sees this count finds its records queued before its
        // flush request.
        self.progress.journaled.fetch_add(n as u64, Ordering::AcqRel);
        Ok(n)
    }

    /// Waits while the database is [`MAX_UNAPPLIED`] records behind (it never is while the
    /// applier keeps up: at ~15 000 receipts a second it took 13 % of a core, session 27).
    fn wait_for_room(&self) -> Result<(), StoreError> {
        let deadline = Instant::now() + self.progress.timeout;
        while self.progress.pending() > MAX_UNAPPLIED {
            if Instant::now() >= deadline {
                return Err(StoreError::Unavailable(format!(
                    "the database is {} receipts behind the journal",
                    self.progress.pending()
                )));
            }
            self.handoff.flush();
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }

    /// Appends the buffer to the current segment (a new one when it is full or a write broke)
    /// and, with [`Durability::Fsync`], flushes it: one `fdatasync` for the whole batch. Returns
    /// the offset it was written at.
    fn write(&mut self) -> Result<u64, StoreError> {
        if self.broken || self.size >= SEGMENT_BYTES {
            let (file, size) = open_segment(&self.dir, self.segment + 1, self.durability)?;
            (self.file, self.size, self.segment, self.broken) = (file, size, self.segment + 1, false);
        }
        if let Err(e) = self.file.write_all(&self.buf) {
            // A part may have gone in: cut it off, or leave the segment behind for a new one.
            self.broken = self.file.set_len(self.size).is_err();
            return Err(io_err(&segment_path(&self.dir, self.segment), e));
        }
        if self.durability == Durability::Fsync {
            if let Err(e) = self.file.sync_data() {
                // After a failed flush the kernel's copy of the segment is no longer to be
                // trusted: cut the batch off and go on in a new segment (the batch is retried).
                let _ = self.file.set_len(self.size);
                self.broken = true;
                return Err(io_err(&segment_path(&self.dir, self.segment), e));
            }
        }
        let offset = self.size;
        self.size += self.buf.len() as u64;
        Ok(offset)
    }
}

/// The database's side of the journal: a thread with the write connection.
pub struct Applier {
    handoff: Arc<Handoff>,
    conn: SqliteAppender,
    dir: PathBuf,
    segments: SegmentReader,
    progress: Arc<Progress>,
    sign: SignRecords,
}

impl Applier {
    /// Runs until the writer's side is dropped, then writes what is left. Between two applies
    /// (at most every [`CHECKPOINT_EVERY`]) it checkpoints the WAL: nothing else writes, so the
    /// checkpoint completes and the log starts over.
    pub fn run(mut self) {
        // Idle work while it keeps up (see `Handoff`).
        crate::process::sched::set_idle(0, true);
        self.handoff.applier.store(crate::process::sched::thread_id(), Ordering::Relaxed);
        let mut checkpointed = Instant::now();
        let mut backoff = Duration::from_millis(20);
        // Segments below this one are deleted: the directory is listed only when a newer
        // segment's records were applied (once every 32 MiB), not every apply.
        let mut deleted_below = 0;
        while let Some((records, count)) = self.handoff.take() {
            crate::metrics::METRICS.receipt_journal_pending.set(self.progress.pending() as i64);
            let mut parts =
                Parts { batches: &records, next: 0, segments: &mut self.segments, sign: &self.sign, started: false };
            match self.conn.apply(|| parts.next()) {
                Ok(()) => {
                    self.progress.applied.send_modify(|a| *a += count as u64);
                    crate::metrics::METRICS.receipt_journal_pending.set(self.progress.pending() as i64);
                    self.progress.failing_since_ms.store(0, Ordering::Relaxed);
                    backoff = Duration::from_millis(20);
                    let newest = records.last().map_or(0, |b| b.segment);
                    if newest > deleted_below {
                        delete_below(&self.dir, newest);
                        deleted_below = newest;
                    }
                    if checkpointed.elapsed() >= CHECKPOINT_EVERY {
                        checkpointed = Instant::now();
                        if let Err(e) = self.conn.finish_checkpoint() {
                            log::warn!("WAL checkpoint failed: {e}");
                        }
                    }
                    self.handoff.settle_down();
                }
                Err(e) => {
                    log::error!("receipt journal: {count} receipts not written to the database yet: {e}");
                    let since = now_ms();
                    let _ =
                        self.progress.failing_since_ms.compare_exchange(0, since, Ordering::Relaxed, Ordering::Relaxed);
                    self.handoff.put_back(records, count, backoff);
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
            }
        }
        if let Err(e) = self.conn.finish_checkpoint() {
            log::warn!("WAL checkpoint failed: {e}");
        }
        log::info!("receipt journal applier stopped");
    }
}

/// Records per part of an apply: the applier holds one part's records at a time, read back
/// from their frames and signed (a few hundred KiB, not the whole backlog's). Smaller in unit
/// tests, whose applies are a few hundred records.
const PART: usize = if cfg!(test) { 50 } else { 256 };

/// The applier's reads of handed-over batches from their segments: the open segment and a
/// buffer, kept from one apply to the next.
struct SegmentReader {
    dir: PathBuf,
    open: Option<(u64, std::fs::File)>,
    buf: Vec<u8>,
}

impl SegmentReader {
    /// The batch's frames, read back from its segment.
    fn read(&mut self, batch: Batch) -> Result<&[u8], StoreError> {
        use std::os::unix::fs::FileExt;
        let path = segment_path(&self.dir, batch.segment);
        let file = match &mut self.open {
            Some((n, file)) if *n == batch.segment => file,
            open => {
                let file = std::fs::File::open(&path).map_err(|e| io_err(&path, e))?;
                &open.insert((batch.segment, file)).1
            }
        };
        self.buf.resize(batch.len, 0);
        file.read_exact_at(&mut self.buf, batch.offset).map_err(|e| io_err(&path, e))?;
        Ok(&self.buf)
    }
}

/// Receipts parsed and signed between two yields of the applier: about one batch under load
/// (7–9 receipts).
const SIGN_GROUP: usize = 8;

/// The handed-over batches' records, a part at a time.
struct Parts<'a> {
    batches: &'a Batches,
    next: usize,
    segments: &'a mut SegmentReader,
    sign: &'a SignRecords,
    started: bool,
}

impl Parts<'_> {
    /// The next whole reads' records, at least [`PART`] of them while any are left, read back
    /// and signed; None after the last.
    fn next(&mut self) -> Result<Option<Vec<Record>>, StoreError> {
        let mut part = Vec::new();
        while part.len() < PART {
            let Some(batch) = self.batches.get(self.next) else { break };
            self.next += 1;
            let mut frames = self.segments.read(*batch)?;
            while !frames.is_empty() {
                if self.started {
                    // Idle work, but a yield between groups bounds a stint off the request
                    // threads' cores by a few receipts' parsing and signatures.
                    std::thread::yield_now();
                }
                self.started = true;
                let start = part.len();
                while part.len() - start < SIGN_GROUP && !frames.is_empty() {
                    // Frames this process wrote a moment ago: one that does not read back is a
                    // bug, reported and retried like a failed apply, never dropped.
                    let Frame::Record(r, len) = frame::decode(frames).well_formed() else {
                        return Err(StoreError::Other("receipt journal: a record written does not read back".into()));
                    };
                    part.push(r);
                    frames = &frames[len..];
                }
                (self.sign)(&mut part[start..]);
            }
        }
        Ok((!part.is_empty()).then_some(part))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receipts::rows::{Sealing, RULES};
    use crate::receipts::signer::Signer;
    use crate::store::receipts::tests::draft;

    /// Signs with the key the tests seal with.
    fn sign() -> SignRecords {
        let signer = Signer::from_seed(&[7u8; 32]);
        Arc::new(move |r: &mut [Record]| crate::receipts::rows::sign_records(r, &signer))
    }

    fn migrated_db() -> (PathBuf, PathBuf) {
        let dir = std::env::temp_dir().join(format!("tollgate-journal-{}", uuid::Uuid::new_v4().simple()));
        let file = dir.join("r.db");
        let url = format!("sqlite://{}", file.display());
        super::super::db_runtime().block_on(async {
            let store = super::super::Store::connect(&url).await.unwrap();
            store.migrate().await.unwrap();
            store.close().await;
        });
        (dir, file)
    }

    /// With the journal a process holds the database alone; without it processes share it; the
    /// two kinds never mix; a claim ends with its file.
    #[test]
    fn the_journal_claims_the_database_alone_and_the_direct_commit_shares_it() {
        let (dir, file) = migrated_db();
        let shared = claim(&file, false).unwrap();
        let also_shared = claim(&file, false).expect("processes without the journal share the file");
        let refused = claim(&file, true).unwrap_err().to_string();
        assert!(refused.contains("another gateway process writes receipts"), "{refused}");
        drop((shared, also_shared));
        let alone = claim(&file, true).unwrap();
        assert!(claim(&file, true).is_err());
        let refused = claim(&file, false).unwrap_err().to_string();
        assert!(refused.contains("with the receipt journal"), "{refused}");
        drop(alone);
        claim(&file, false).unwrap();
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A journal whose records do not continue the stored chain (here: sealed after a head the
    /// database never had) stops the start, names the directory, and writes nothing.
    #[test]
    fn replay_refuses_a_journal_that_does_not_continue_the_stored_chain() {
        let (dir, file) = migrated_db();
        let signer = Signer::from_seed(&[7u8; 32]);
        let five = Duration::from_secs(5);
        let (mut journal, applier, _) =
            open(&file, five, Duration::from_secs(3600), RULES, Durability::PageCache, sign()).unwrap();
        journal.heads.insert("tenant-a".into(), Head { seq: 41, hash: "ab".repeat(32).into() });
        journal.append(&mut Sealing::new(&[draft("tenant-a", 1), draft("tenant-a", 2)], &signer)).unwrap();
        drop((journal, applier));
        let err = replay(&file, five, RULES, &sign()).unwrap_err().to_string();
        assert!(err.contains("receipt seq 42 does not continue the stored chain (head seq 0)"), "{err}");
        assert!(err.contains(&dir_of(&file).display().to_string()), "{err}");
        let conn = SqliteAppender::open(&file, five, RULES).unwrap();
        assert_eq!(conn.head("tenant-a").unwrap(), None, "nothing written");
        assert_eq!(segments(&dir_of(&file)).unwrap().len(), 1, "the journal is kept for the operator");
        let _ = std::fs::remove_dir_all(dir);
    }
}
