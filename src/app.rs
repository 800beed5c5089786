//! The shared state every service holds: config, storage, the snapshot, crypto, clients.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::budget::Ledger;
use crate::config::Config;
use crate::receipts::signer::Signer;
use crate::receipts::writer::ReceiptQueue;
use crate::sealing::MasterKey;
use crate::snapshot::SnapshotHandle;
use crate::store::Store;
use crate::upstream::{Timeouts, UpstreamClient};

pub struct App {
    pub config: Arc<Config>,
    pub store: Store,
    pub snapshot: Arc<SnapshotHandle>,
    /// Spend and reservations against budgets; outlives every snapshot.
    pub ledger: Arc<Ledger>,
    pub master: Arc<MasterKey>,
    /// Upstream client of the management API (provider tests); the gateway owns its own pool.
    pub upstream: Arc<UpstreamClient>,
    /// Vertex access tokens, minted once per service account for every request and test.
    pub tokens: Arc<crate::providers::vertex_auth::TokenCache>,
    pub receipts: ReceiptQueue,
    pub signer: Arc<Signer>,
    /// The exact-match answer cache (outlives policy reloads).
    pub cache: Arc<crate::cache::AnswerCache>,
    /// OpenTelemetry traces; `None` when off (the default).
    pub telemetry: Option<crate::telemetry::Tracing>,
    pub started: Instant,
}

impl App {
    pub fn upstream_timeouts(cfg: &Config) -> Timeouts {
        Timeouts {
            connect: Duration::from_millis(cfg.upstream.connect_timeout_ms),
            read: Duration::from_millis(cfg.upstream.read_timeout_ms),
            idle_pool: Duration::from_secs(cfg.upstream.idle_pool_seconds.max(1)),
        }
    }
}
