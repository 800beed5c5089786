//! How far the receipt journal's records are in the database (`store::journal`): what every
//! read of receipts, guardrail events and spend waits on (`Store::settled`).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::StoreError;

/// Asks the journal's applier to write what it holds now, not at its next period.
pub trait Flush: Send + Sync + std::fmt::Debug {
    fn flush(&self);
}

/// Journaled and applied counts, shared by the writer, the applier and the readers.
#[derive(Debug)]
pub struct Progress {
    pub(super) journaled: AtomicU64,
    pub(super) applied: tokio::sync::watch::Sender<u64>,
    /// Asks the applier to write now.
    flush: Arc<dyn Flush>,
    /// When the applier's current failure began (ms since the Unix epoch; 0: it is not failing).
    pub(super) failing_since_ms: AtomicI64,
    /// How long a reader waits for the applier before it is told the database is unavailable.
    pub(super) timeout: Duration,
    /// Held by the journal's writer while it seals and journals a batch, and by an admin append
    /// (`store::audit`) while it writes to the database itself: the tenants whose heads moved
    /// behind the writer's back, for it to read again.
    pub(super) gate: std::sync::Mutex<Vec<std::sync::Arc<str>>>,
}

impl Progress {
    /// Nothing journaled yet; `flush` reaches the applier; readers wait up to `timeout`.
    pub(super) fn new(flush: Arc<dyn Flush>, timeout: Duration) -> Progress {
        let (applied, _) = tokio::sync::watch::channel(0u64);
        Progress {
            journaled: AtomicU64::new(0),
            applied,
            flush,
            failing_since_ms: AtomicI64::new(0),
            timeout,
            gate: Default::default(),
        }
    }

    /// Every record journaled is applied.
    pub fn caught_up(&self) -> bool {
        *self.applied.borrow() >= self.journaled.load(Ordering::Acquire)
    }

    /// Waits until every record journaled before this call is in the database: asks the applier
    /// to write now instead of at its next period.
    pub async fn settled(&self) -> Result<(), StoreError> {
        let target = self.journaled.load(Ordering::Acquire);
        let mut applied = self.applied.subscribe();
        if *applied.borrow() >= target {
            return Ok(());
        }
        self.flush.flush();
        let waited = tokio::time::timeout(self.timeout, applied.wait_for(|&a| a >= target)).await.map(|r| r.is_ok());
        match waited {
            Ok(true) => Ok(()),
            _ => Err(StoreError::Unavailable(
                "receipts are committed to the journal but the database has not taken them yet".into(),
            )),
        }
    }

    /// Records journaled and not yet in the database.
    pub fn pending(&self) -> u64 {
        self.journaled.load(Ordering::Acquire).saturating_sub(*self.applied.borrow())
    }

    /// How long the applier has been failing (None: it is not).
    pub fn failing_for(&self) -> Option<Duration> {
        let since = self.failing_since_ms.load(Ordering::Relaxed);
        (since > 0).then(|| Duration::from_millis((now_ms() - since).max(0) as u64))
    }
}

pub(super) fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}
