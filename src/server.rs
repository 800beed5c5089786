//! Builds the one Pingora `Server` and its services: gateway, management, metrics, background.

use std::net::TcpListener;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use pingora::server::configuration::ServerConf;
use pingora::server::{Server, ShutdownWatch};
use pingora::services::background::{background_service, BackgroundService};
use pingora::services::listening::Service;

use crate::app::App;
use crate::checks::budget::Ledger;
use crate::config::Config;
use crate::gateway::Gateway;
use crate::management::ManagementApp;
use crate::providers::pricing::Pricing;
use crate::receipts::signer::Signer;
use crate::receipts::writer::{ReceiptQueue, ReceiptWriter};
use crate::secrets::at_rest::MasterKey;
use crate::snapshot::{Snapshot, SnapshotHandle};
use crate::store::{self, Store};
use crate::upstream::UpstreamClient;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    Config(#[from] crate::config::ConfigError),
    #[error("{0}")]
    Store(#[from] crate::store::StoreError),
    #[error("{0}")]
    Seal(#[from] crate::secrets::at_rest::AtRestError),
    #[error("{0}")]
    Signer(#[from] crate::receipts::signer::SignerError),
    #[error("cannot listen on {addr} ({what}): {err}")]
    Listen { addr: String, what: &'static str, err: std::io::Error },
    #[error("pingora: {0}")]
    Pingora(String),
    #[error("telemetry: {0}")]
    Telemetry(String),
}

/// The shared state plus the receipt writer, started by [`build`].
pub struct Prepared {
    pub app: Arc<App>,
    writer: ReceiptWriter,
}

/// Connects, migrates, opens secrets and builds the first snapshot: everything `serve` needs
/// before it listens. Database work runs on the database runtime.
pub fn prepare(cfg: Config) -> Result<Prepared, StartError> {
    let cfg = Arc::new(cfg);
    let rt = store::db_runtime();
    let store = open_store(&cfg)?;
    let master =
        Arc::new(MasterKey::load(std::env::var("TOLLGATE_MASTER_KEY").ok().as_deref(), &cfg.master_key_path())?);
    let pricing = Arc::new(Pricing::from_config(&cfg)?);
    let snapshot = Arc::new(SnapshotHandle::new(Snapshot::empty(cfg.clone(), pricing), store.clone(), master.clone()));
    // File policies apply from the first request, not from the watcher's first tick.
    snapshot.files.scan();
    rt.block_on(snapshot.rebuild())?;
    let ledger = Arc::new(rt.block_on(Ledger::load(&store))?);
    let signer = Arc::new(Signer::load_or_create(&cfg.signing_key_path())?);
    rt.block_on(crate::receipts::signer::register(&store, &signer))?;
    let (receipts, writer) = receipt_writer(&cfg, &store, &signer)?;
    let cache =
        Arc::new(crate::checks::cache::AnswerCache::new(cfg.limits.cache_max_bytes, cfg.limits.cache_max_entry_bytes));
    let cluster = crate::checks::shared::Cluster::connect(&cfg.cluster, cfg.limits.cache_max_entry_bytes)
        .map_err(|e| StartError::Config(crate::config::ConfigError::Invalid(e)))?;
    if let Some(c) = &cluster {
        rt.block_on(c.first_check(&store, &snapshot));
    }
    let telemetry = crate::telemetry::Tracing::from_config(&cfg.telemetry).map_err(StartError::Telemetry)?;
    let upstream = Arc::new(UpstreamClient::new(App::upstream_timeouts(&cfg), &cfg.upstream.ca_file));
    let tokens = Arc::new(crate::providers::TokenCache::new(upstream.clone(), Default::default()));
    let log_origin = rt.block_on(crate::tenant_log::checkpoint::origin_prefix(&store, &cfg.log.origin_prefix))?;
    let witnesses = crate::tenant_log::witness::Witnesses::from_config(&cfg.log)
        .map_err(|e| StartError::Config(crate::config::ConfigError::Invalid(e)))?;
    let local_gateway = App::local_gateway_path(&cfg.storage.data_dir);
    let app = Arc::new(App {
        log_origin,
        witnesses,
        upstream,
        tokens,
        config: cfg,
        store,
        snapshot,
        ledger,
        master,
        receipts,
        signer,
        cache,
        cluster,
        telemetry,
        started: Instant::now(),
        local_gateway,
    });
    Ok(Prepared { app, writer })
}

/// The database, migrated, the log tiles of older receipts built, the first tenant made on an
/// empty one, and this binary's baseline pack set recorded (receipts stamped with it resolve).
fn open_store(cfg: &Config) -> Result<Store, StartError> {
    let rt = store::db_runtime();
    let store = rt.block_on(Store::connect_with(&cfg.database_url(), cfg.receipts.durability))?;
    rt.block_on(store.migrate())?;
    let built = rt.block_on(store::tiles::backfill(&store))?;
    if built > 0 {
        log::info!("built {built} log tiles of receipts written before them (docs/log.md)");
    }
    rt.block_on(bootstrap_first_tenant(&store))?;
    let baseline = crate::compliance::pack::baseline_set();
    rt.block_on(crate::compliance::pack_sets::record(&store, crate::store::packs::BASELINE_TENANT, baseline))?;
    Ok(store)
}

/// The receipt writer and its queue, as `receipts:` says.
fn receipt_writer(
    cfg: &Config,
    store: &Store,
    signer: &Arc<Signer>,
) -> Result<(ReceiptQueue, ReceiptWriter), StartError> {
    let commit_timeout = std::time::Duration::from_millis(cfg.receipts.commit_timeout_ms.max(1));
    let checkpoint_every = std::time::Duration::from_millis(cfg.receipts.wal_checkpoint_ms);
    let journal = cfg.receipts.journal.then(|| std::time::Duration::from_millis(cfg.receipts.journal_apply_ms.max(1)));
    if journal.is_some() && store.sqlite_file().is_none() {
        log::warn!("receipts.journal applies to SQLite only; on PostgreSQL every batch commits to the database");
    }
    if cfg.receipts.durability == store::Durability::Fsync {
        log::info!("receipts.durability: fsync: every receipt batch is on stable storage before its answers end");
    }
    let options = crate::receipts::writer::Options { commit_timeout, checkpoint_every, journal };
    Ok(crate::receipts::writer::channel_with(store.clone(), signer.clone(), options)?)
}

/// On an empty database: tenant `default` and one manager key, printed once to stderr.
async fn bootstrap_first_tenant(store: &Store) -> Result<(), StartError> {
    if store::tenants::count(store).await? > 0 {
        return Ok(());
    }
    let tenant = store::tenants::create(store, "default").await?;
    let key = crate::keys::issue(store, &tenant.id, "manager", "bootstrap manager key").await?;
    eprintln!(
        "tollgate: first start: created tenant `default` ({}) and a manager key.\n\
         tollgate: manager key (shown once, store it now): {}",
        tenant.id, key.0
    );
    Ok(())
}

/// Fails fast with a clear message instead of Pingora's 30 bind retries and a panic.
fn check_port(addr: &crate::config::ListenAddr, what: &'static str) -> Result<(), StartError> {
    TcpListener::bind(addr.0).map(drop).map_err(|err| StartError::Listen { addr: addr.to_string(), what, err })
}

pub fn build(prepared: Prepared) -> Result<Server, StartError> {
    let Prepared { app, writer } = prepared;
    let cfg = app.config.clone();
    check_port(&cfg.listen.gateway, "gateway")?;
    check_port(&cfg.listen.management, "management")?;
    check_port(&cfg.listen.metrics, "metrics")?;
    let data = cfg.storage.data_dir.display().to_string();
    let conf = ServerConf {
        threads: cfg.server.threads,
        grace_period_seconds: Some(cfg.server.grace_period_seconds),
        graceful_shutdown_timeout_seconds: Some(cfg.server.graceful_shutdown_timeout_seconds),
        pid_file: format!("{data}/tollgate.pid"),
        upgrade_sock: format!("{data}/tollgate_upgrade.sock"),
        ..Default::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    add_listeners(&mut server, &app)?;
    // The writer lives on the database runtime: Pingora's shutdown cannot cancel it mid-batch.
    writer.spawn().map_err(|e| StartError::Pingora(format!("cannot start the receipt writer: {e}")))?;
    add_background(&mut server, app)?;
    Ok(server)
}

/// A TCP listener whose connections have no L4 read buffer: Pingora's HTTP/1 reads into its own
/// header and body buffers, and its default 64 KiB read buffer stayed allocated (zeroed, so
/// resident) for as long as a client kept its connection open. Session 47: 300 idle keep-alive
/// connections held ~100 KiB each, in bare Pingora (6 → 35 MiB) as in Tollgate (27 → 58 MiB);
/// at 1 000 busy connections Tollgate peaked at 170–176 MiB against the issue's 150.
fn unbuffered_reads(addr: &str) -> pingora::listeners::ListenerConfig {
    pingora::listeners::ListenerConfig::tcp(addr).l4_buffer(pingora::listeners::L4BufferSettings::default().read(0))
}

/// The gateway (TCP or TLS, and the owner-only local socket), management and metrics services.
fn add_listeners(server: &mut Server, app: &Arc<App>) -> Result<(), StartError> {
    let cfg = &app.config;
    let tls = (!cfg.listen.tls_cert_file.is_empty()).then(|| (&cfg.listen.tls_cert_file, &cfg.listen.tls_key_file));
    let tls_err = |e: pingora::BError| StartError::Pingora(format!("TLS listener: {e}"));

    let mut gateway = pingora::proxy::http_proxy_service(&server.configuration, Gateway::new(app.clone()));
    match tls {
        Some((cert, key)) => gateway.add_tls(&cfg.listen.gateway.to_string(), cert, key).map_err(tls_err)?,
        None => gateway.add_listener(unbuffered_reads(&cfg.listen.gateway.to_string())),
    }
    // Owner only: the socket bypasses no check (a key is still needed), but nothing else on the
    // machine has a reason to use it.
    use std::os::unix::fs::PermissionsExt;
    let local = app.local_gateway.display().to_string();
    gateway.add_uds(&local, Some(std::fs::Permissions::from_mode(0o600)));
    server.add_service(gateway);

    let management = ManagementApp::new(app.clone());
    if cfg.console.enabled {
        server.add_service(background_service("console sessions", management.session_sweep()));
    }
    let mut mgmt = Service::new("management".to_string(), management);
    match tls {
        Some((cert, key)) => mgmt.add_tls(&cfg.listen.management.to_string(), cert, key).map_err(tls_err)?,
        None => mgmt.add_tcp(&cfg.listen.management.to_string()),
    }
    server.add_service(mgmt);

    let mut prom = pingora_prometheus::prometheus_http_service();
    prom.add_tcp(&cfg.listen.metrics.to_string());
    server.add_service(prom);
    Ok(())
}

fn add_background(server: &mut Server, app: Arc<App>) -> Result<(), StartError> {
    server.add_service(background_service("policy files", PolicyWatcher { app: app.clone() }));
    let publisher = crate::tenant_log::publisher::Publisher::new(
        &app.config.log,
        app.store.clone(),
        app.signer.clone(),
        app.log_origin.clone(),
    )
    .map_err(|e| StartError::Config(crate::config::ConfigError::Invalid(e)))?;
    server.add_service(background_service("log publisher", publisher));
    if app.config.storage.chain_audit_seconds > 0 {
        server.add_service(background_service("chain auditor", ChainAuditor { app: app.clone() }));
    }
    let webhooks = crate::webhooks::Sender::new(
        app.config.webhooks.clone(),
        app.store.clone(),
        app.master.clone(),
        app.upstream.clone(),
    );
    server.add_service(background_service("webhook sender", webhooks));
    if app.witnesses.is_some() {
        server.add_service(background_service("witnesses", WitnessSender { app: app.clone() }));
    }
    server.add_service(background_service("log retention", RetentionSweeper { app: app.clone() }));
    if app.store.backend() == store::Backend::Postgres {
        server.add_service(background_service("change notices", crate::notices::Listener { app: app.clone() }));
    }
    server.add_service(background_service("shutdown", EarlyExit { app: app.clone() }));
    if let Some(cluster) = app.cluster.clone() {
        let (store, snapshot) = (app.store.clone(), app.snapshot.clone());
        server.add_service(background_service("shared state", SharedStateWatch { cluster, store, snapshot }));
    }
    server.add_service(background_service("snapshot refresh", Refresher { app }));
    Ok(())
}

/// Runs the server until SIGTERM (or SIGINT) has been handled, then waits (bounded) for the
/// receipts still queued, so a request cut off at the end of the grace period keeps its receipt
/// if it was handed over.
pub fn run(server: Server, app: Arc<App>) -> ! {
    server.run(pingora::server::RunArgs::default());
    let limit = std::time::Duration::from_secs(app.config.server.graceful_shutdown_timeout_seconds.max(1));
    let drained = store::db_runtime().block_on(crate::receipts::writer::drained(&app.receipts.stats, limit));
    exit_after_shutdown(&app, drained)
}

fn exit_after_shutdown(app: &App, drained: bool) -> ! {
    let s = &app.receipts.stats;
    let (written, depth) = (s.written.load(Ordering::Relaxed), s.depth.load(Ordering::Relaxed));
    if drained {
        log::info!("shutdown: drained, written={written}");
    } else {
        log::error!("shutdown: {depth} receipts still queued after the shutdown timeout, written={written}");
    }
    // Every request has ended its span by now (a request holds the writer's drain open until its
    // context is dropped, after `logging`): the batch still queued goes out before the exit.
    if let Some(t) = &app.telemetry {
        t.shutdown(Duration::from_secs(app.config.server.graceful_shutdown_timeout_seconds.max(1)));
    }
    let _ = std::fs::remove_file(&app.local_gateway);
    log::logger().flush();
    std::process::exit(0)
}

/// Pingora sleeps the whole grace period after SIGTERM even when nothing is left to do; this
/// ends the process as soon as no gateway request is in flight and every receipt is written.
struct EarlyExit {
    app: Arc<App>,
}

#[async_trait]
impl BackgroundService for EarlyExit {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        if shutdown.changed().await.is_err() || !*shutdown.borrow() {
            return;
        }
        let grace = std::time::Duration::from_secs(self.app.config.server.grace_period_seconds);
        if crate::receipts::writer::drained(&self.app.receipts.stats, grace).await {
            exit_after_shutdown(&self.app, true);
        }
    }
}

/// Keeps the shared state's health current and its budget spend loaded (`cluster::Cluster::watch`).
struct SharedStateWatch {
    cluster: Arc<crate::checks::shared::Cluster>,
    store: Store,
    snapshot: Arc<SnapshotHandle>,
}

#[async_trait]
impl BackgroundService for SharedStateWatch {
    async fn start(&self, shutdown: ShutdownWatch) {
        self.cluster.clone().watch(self.store.clone(), self.snapshot.clone(), shutdown).await
    }
}

/// Re-reads keys, credentials, teams and budgets and catches the ledger up with spend (changes
/// made by other processes sharing the database), and flushes keys' last-use times. On
/// PostgreSQL, change notices (`crate::notices`) bring other processes' changes in at once; this
/// is the safety net for a notice lost while the listener reconnected.
struct Refresher {
    app: Arc<App>,
}

impl Refresher {
    async fn tick(&self) {
        if let Err(e) = self.app.snapshot.rebuild().await {
            log::warn!("snapshot refresh failed, keeping the current one: {e}");
        }
        if let Err(e) = self.app.ledger.refresh(&self.app.store).await {
            log::warn!("spend refresh failed, keeping the in-memory figures: {e}");
        }
        let snap = self.app.snapshot.load();
        let mut used = Vec::new();
        for k in snap.keys() {
            let last = k.state.last_used_ms.load(Ordering::Relaxed);
            if last > k.state.flushed_ms.load(Ordering::Relaxed) {
                k.state.flushed_ms.store(last, Ordering::Relaxed);
                if let Some(t) = chrono::DateTime::from_timestamp_millis(last) {
                    used.push((k.record.id.clone(), t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()));
                }
            }
        }
        if let Err(e) = store::keys::touch(&self.app.store, used).await {
            log::warn!("recording key last use failed: {e}");
        }
    }
}

/// Walks receipt blocks not yet in the verified-span memo (`compliance::auditor`), so
/// attestations over them are warm.
struct ChainAuditor {
    app: Arc<App>,
}

/// Sends published checkpoints to the log's witnesses (`tenant_log::witness`).
struct WitnessSender {
    app: Arc<App>,
}

#[async_trait]
impl BackgroundService for WitnessSender {
    async fn start(&self, shutdown: ShutdownWatch) {
        let Some(w) = self.app.witnesses.clone() else { return };
        w.run(&self.app.store, &self.app.upstream, || *shutdown.borrow()).await;
    }
}

#[async_trait]
impl BackgroundService for ChainAuditor {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let period = Duration::from_secs(self.app.config.storage.chain_audit_seconds.max(1));
        let key = crate::compliance::memo::MemoKey::from_master(&self.app.master);
        let mut auditor = crate::compliance::auditor::Auditor::default();
        let mut wait = period;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(wait) => {
                    let started = std::time::Instant::now();
                    let walked = match auditor.pass(&self.app.store, &key).await {
                        Ok(n) => Some(n),
                        Err(e) => {
                            log::warn!("chain audit pass failed (retried next interval): {e}");
                            None
                        }
                    };
                    // A full pass means more blocks may be waiting: catch up after a pause.
                    wait = crate::compliance::auditor::next_wait(walked, started.elapsed(), period);
                }
                _ = shutdown.changed() => return,
            }
        }
    }
}

/// Applies every tenant's log retention once a day (docs/log.md §7), the first time a minute
/// after start (not at once: a restart loop should not sweep each time). Several processes on
/// one database may each sweep: a sweep is idempotent.
struct RetentionSweeper {
    app: Arc<App>,
}

#[async_trait]
impl BackgroundService for RetentionSweeper {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut wait = Duration::from_secs(60);
        loop {
            tokio::select! {
                _ = tokio::time::sleep(wait) => {
                    let floor = self.app.config.log.retention_floor_days;
                    match crate::tenant_log::retention::sweep(&self.app.store, floor, chrono::Utc::now()).await {
                        Ok(swept) => log::debug!("log retention: swept {} tenants", swept.len()),
                        Err(e) => log::warn!("log retention sweep failed (retried at the next one): {e}"),
                    }
                    wait = crate::tenant_log::retention::SWEEP_EVERY;
                }
                _ = shutdown.changed() => return,
            }
        }
    }
}

#[async_trait]
impl BackgroundService for Refresher {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let period = Duration::from_millis(self.app.config.storage.snapshot_refresh_ms.max(100));
        let mut timer = tokio::time::interval(period);
        timer.tick().await;
        loop {
            tokio::select! {
                _ = timer.tick() => self.tick().await,
                _ = shutdown.changed() => {
                    self.tick().await;
                    return;
                }
            }
        }
    }
}

/// Polls the policy directory; on any change (files added, edited, broken, fixed, removed)
/// rebuilds the snapshot so the new set is in force for the next request.
struct PolicyWatcher {
    app: Arc<App>,
}

impl PolicyWatcher {
    async fn tick(&self) {
        let files = self.app.snapshot.files.clone();
        // Directory reads are blocking file I/O: keep them off the service's async workers.
        let changed = tokio::task::spawn_blocking(move || files.scan()).await.unwrap_or(false);
        if changed {
            if let Err(e) = self.app.snapshot.rebuild().await {
                log::warn!("policy files changed but the snapshot rebuild failed (the refresh retries): {e}");
            }
        }
    }
}

#[async_trait]
impl BackgroundService for PolicyWatcher {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let period = Duration::from_millis(self.app.config.policies.watch_ms.max(50));
        let mut timer = tokio::time::interval(period);
        timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        timer.tick().await;
        loop {
            tokio::select! {
                _ = timer.tick() => self.tick().await,
                _ = shutdown.changed() => return,
            }
        }
    }
}
