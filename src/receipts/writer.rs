//! The receipt writer: a Pingora background service fed by a bounded queue.
//!
//! The request path only hands a [`Draft`] to the queue from the `logging` phase (no database
//! call). The writer takes whatever is queued (up to [`MAX_BATCH`]) and appends it in one
//! transaction (`store::receipts::append_batch`): seq, prevHash, JCS, SHA-256, Ed25519.
//! A full queue makes `logging` wait (back-pressure), never drops. A failed batch is retried
//! until it lands. On SIGTERM the writer keeps draining until no gateway request is still in
//! flight and the queue is empty, then returns.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use tokio::sync::mpsc;

use super::signer::Signer;
use super::Draft;
use crate::metrics::METRICS;
use crate::store::{self, Store};

pub const QUEUE_CAPACITY: usize = 65_536;
pub const MAX_BATCH: usize = 1024;
/// How long the writer gathers a batch after its first receipt. Every batch pays a fixed
/// price (a transaction, the chain head, spend rows, a dozen hand-offs to the SQLite thread);
/// at 5 ms a busy gateway wrote ~30 receipts a batch, at 20 ms ~100, for a few µs less CPU
/// per request. Nobody waits on it: receipts become readable at most this much later.
const LINGER: Duration = Duration::from_millis(20);

#[derive(Debug, Default)]
pub struct WriterStats {
    /// Drafts handed over and not yet written.
    pub depth: AtomicI64,
    pub written: AtomicU64,
    /// Queue-to-commit time of the newest batch's oldest draft.
    pub lag_ms: AtomicI64,
    /// Gateway requests between `new_ctx` and the end of `logging`.
    pub in_flight: AtomicI64,
    /// Consecutive failed attempts of the current batch (0 = healthy).
    pub failing: AtomicI64,
}

/// The request path's handle: clone-free, shared by the gateway.
pub struct ReceiptQueue {
    tx: mpsc::Sender<(Draft, Instant)>,
    pub stats: Arc<WriterStats>,
}

impl ReceiptQueue {
    pub async fn submit(&self, draft: Draft) {
        self.stats.depth.fetch_add(1, Ordering::Relaxed);
        METRICS.receipt_queue_depth.inc();
        if self.tx.send((draft, Instant::now())).await.is_err() {
            // Only after the writer has exited (process shutting down past its grace period).
            self.stats.depth.fetch_sub(1, Ordering::Relaxed);
            METRICS.receipt_queue_depth.dec();
            log::error!("receipt writer has stopped; a receipt could not be queued");
        }
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
    rx: Mutex<Option<mpsc::Receiver<(Draft, Instant)>>>,
    store: Store,
    signer: Arc<Signer>,
    stats: Arc<WriterStats>,
}

pub fn channel(store: Store, signer: Arc<Signer>) -> (ReceiptQueue, ReceiptWriter) {
    let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
    let stats = Arc::new(WriterStats::default());
    (ReceiptQueue { tx, stats: stats.clone() }, ReceiptWriter { rx: Mutex::new(Some(rx)), store, signer, stats })
}

impl ReceiptWriter {
    async fn write(&self, batch: Vec<(Draft, Instant)>) {
        let oldest = batch.iter().map(|(_, t)| *t).min().unwrap_or_else(Instant::now);
        let n = batch.len();
        let drafts: std::sync::Arc<[Draft]> = batch.into_iter().map(|(d, _)| d).collect();
        let mut backoff = Duration::from_millis(50);
        loop {
            let started = Instant::now();
            match store::receipts::append_batch(&self.store, drafts.clone(), self.signer.clone()).await {
                Ok(_) => {
                    METRICS.receipt_write_seconds.observe(started.elapsed().as_secs_f64());
                    METRICS.receipt_batch_size.observe(n as f64);
                    METRICS.receipts_written.inc_by(n as u64);
                    METRICS.receipt_queue_depth.sub(n as i64);
                    self.stats.depth.fetch_sub(n as i64, Ordering::Relaxed);
                    self.stats.written.fetch_add(n as u64, Ordering::Relaxed);
                    self.stats.lag_ms.store(oldest.elapsed().as_millis() as i64, Ordering::Relaxed);
                    self.stats.failing.store(0, Ordering::Relaxed);
                    return;
                }
                Err(e) => {
                    let attempts = self.stats.failing.fetch_add(1, Ordering::Relaxed) + 1;
                    log::error!("receipt batch of {n} failed (attempt {attempts}), retrying in {backoff:?}: {e}");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
    }
}

/// Moves what is queued into `batch`, up to [`MAX_BATCH`].
fn drain(rx: &mut mpsc::Receiver<(Draft, Instant)>, batch: &mut Vec<(Draft, Instant)>) {
    while batch.len() < MAX_BATCH {
        match rx.try_recv() {
            Ok(item) => batch.push(item),
            Err(_) => return,
        }
    }
}

#[async_trait]
impl BackgroundService for ReceiptWriter {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let Some(mut rx) = self.rx.lock().ok().and_then(|mut r| r.take()) else {
            log::error!("receipt writer started twice");
            return;
        };
        let mut closing = false;
        loop {
            let first = if closing {
                match rx.try_recv() {
                    Ok(item) => item,
                    Err(mpsc::error::TryRecvError::Empty) => {
                        if self.stats.in_flight.load(Ordering::Relaxed) <= 0 {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        continue;
                    }
                    Err(mpsc::error::TryRecvError::Disconnected) => break,
                }
            } else {
                tokio::select! {
                    r = rx.recv() => match r {
                        Some(item) => item,
                        None => break,
                    },
                    _ = shutdown.changed() => {
                        closing = true;
                        continue;
                    }
                }
            };
            let mut batch = Vec::with_capacity(64);
            batch.push(first);
            // Gather for a few ms: every batch pays a fixed price (a transaction, the chain
            // head, spend rows), so under load fewer, larger batches cost far less CPU per
            // receipt. Sleeping instead of waiting on the queue also spares a thread wake-up per
            // request. Nobody waits on this: the answers have already gone out.
            drain(&mut rx, &mut batch);
            if !closing && batch.len() < MAX_BATCH {
                tokio::time::sleep(LINGER).await;
                drain(&mut rx, &mut batch);
            }
            self.write(batch).await;
        }
        log::info!("receipt writer stopped: {} written", self.stats.written.load(Ordering::Relaxed));
    }
}
