//! The shared state every service holds: config, storage, the snapshot, crypto, clients.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::checks::budget::Ledger;
use crate::config::Config;
use crate::receipts::signer::Signer;
use crate::receipts::writer::ReceiptQueue;
use crate::secrets::at_rest::MasterKey;
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
    pub tokens: Arc<crate::providers::TokenCache>,
    pub receipts: ReceiptQueue,
    pub signer: Arc<Signer>,
    /// The tenant log's origin prefix (`log.origin_prefix`, else `tollgate-<installId>`).
    pub log_origin: String,
    /// The tenant log's witnesses (`log.witnesses`); `None` when none are configured.
    pub witnesses: Option<Arc<crate::tenant_log::witness::Witnesses>>,
    /// The exact-match answer cache (outlives policy reloads).
    pub cache: Arc<crate::checks::cache::AnswerCache>,
    /// State shared with the other gateway processes (Redis); `None` in one process.
    pub cluster: Option<Arc<crate::checks::shared::Cluster>>,
    /// OpenTelemetry traces; `None` when off (the default).
    pub telemetry: Option<crate::telemetry::Tracing>,
    pub started: Instant,
    /// The gateway's own Unix socket (mode 0600): the management API sends a prompt run through
    /// the gateway's path here, with the caller's key, so it meets the same checks and leaves the
    /// same receipt as any client's call.
    pub local_gateway: std::path::PathBuf,
}

impl App {
    /// Where the gateway's own socket goes: the data directory, or the temp directory when that
    /// path would be too long for a Unix socket (108 bytes on Linux).
    pub fn local_gateway_path(data_dir: &std::path::Path) -> std::path::PathBuf {
        let in_data = data_dir.join("gateway.sock");
        if in_data.as_os_str().len() < 100 {
            in_data
        } else {
            std::env::temp_dir().join(format!("tollgate-{}.sock", std::process::id()))
        }
    }
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
