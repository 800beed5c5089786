//! Change notices: another process sharing the PostgreSQL database changed keys, limits,
//! policies, providers, teams, budgets or tool servers, so this one rebuilds its snapshot now
//! instead of at the next periodic refresh (`storage.snapshot_refresh_ms`, which stays as the
//! safety net).
//!
//! Senders: [`crate::snapshot::SnapshotHandle::changed`] after every management change, and the
//! CLI after it makes a tenant or key. The payload is the sender's instance id; a process skips
//! its own notices (it rebuilt already).
//!
//! The listener holds one connection of its own (sqlx `PgListener`) and hands notices to a
//! rebuild loop through a `Notify`: a burst of notices while a rebuild runs collapses into one
//! more rebuild, and a notice arriving during a rebuild always causes another (that rebuild may
//! have read before the change committed). A lost connection reconnects with backoff. After
//! each connection (the first too) the snapshot is rebuilt once: notices sent before LISTEN took
//! effect (since the start-up snapshot, or while the connection was down) reached nobody.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use sqlx::postgres::PgListener;
use tokio::sync::Notify;

use crate::app::App;
use crate::metrics::METRICS;
use crate::store::notices::CHANNEL;

/// The background service; started only on PostgreSQL.
pub struct Listener {
    pub app: Arc<App>,
}

#[async_trait]
impl BackgroundService for Listener {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let wake = Notify::new();
        tokio::select! {
            _ = self.listen(&wake) => {}
            _ = self.rebuild_on(&wake) => {}
            _ = shutdown.changed() => {}
        }
    }
}

impl Listener {
    /// Receives notices for as long as the process runs, reconnecting by itself.
    async fn listen(&self, wake: &Notify) {
        let url = self.app.config.database_url();
        let me = self.app.snapshot.instance.as_str();
        let mut backoff = Duration::from_millis(100);
        let mut first = true;
        loop {
            let mut listener = match connect(&url).await {
                Ok(l) => l,
                Err(e) => {
                    log::warn!("change notices: cannot listen ({e}); retrying in {} ms", backoff.as_millis());
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                    continue;
                }
            };
            // Changes committed before LISTEN took effect sent their notices to nobody: after the
            // first connection, those since the start-up snapshot; after a reconnection, those
            // while it was down.
            if !first {
                log::info!("change notices: listening again");
            }
            wake.notify_one();
            first = false;
            backoff = Duration::from_millis(100);
            loop {
                match listener.try_recv().await {
                    Ok(Some(n)) if n.payload() == me => {}
                    Ok(Some(_)) => {
                        METRICS.change_notices.with_label_values(&["received"]).inc();
                        wake.notify_one();
                    }
                    // The connection dropped and was re-established: notices may have been missed.
                    Ok(None) => wake.notify_one(),
                    Err(e) => {
                        log::warn!("change notices: connection lost ({e}); reconnecting");
                        break;
                    }
                }
            }
        }
    }

    async fn rebuild_on(&self, wake: &Notify) {
        loop {
            wake.notified().await;
            if let Err(e) = self.app.snapshot.rebuild().await {
                log::warn!("snapshot rebuild after a change notice failed (the refresh retries): {e}");
            }
        }
    }
}

async fn connect(url: &str) -> Result<PgListener, sqlx::Error> {
    let mut l = PgListener::connect(url).await?;
    l.listen(CHANNEL).await?;
    Ok(l)
}
