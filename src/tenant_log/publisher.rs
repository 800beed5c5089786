//! The checkpoint publisher (docs/log.md §2, §6): a background service that every
//! `log.publish_interval_seconds` publishes a checkpoint for each tenant whose log grew
//! ([`checkpoint::current`]) and hands every new checkpoint to [`Publisher::published`], and,
//! when `log.timestamping` is set, has each tenant's newest checkpoint timestamped by the TSA
//! (RFC 3161) at most once per `interval_seconds`.
//!
//! It runs on the background service's own runtime, and the TSA is called on a blocking thread
//! with a timeout, so neither a slow database pass nor a TSA that hangs or is down touches a
//! request. A failed timestamp is logged once per outage, counted
//! (`tollgate_log_timestamp_failures_total{reason}`) and retried at the next interval.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;

use super::checkpoint;
use super::timestamp::{self, Rejected, Roots};
use crate::config::tenant_log::LogSection;
use crate::metrics::METRICS;
use crate::receipts::signer::Signer;
use crate::store::checkpoints::{self, CheckpointRow, LogHead};
use crate::store::{timestamps, Store};

/// A TSA that neither answers nor fails within this is given up on until the next interval.
const TSA_TIMEOUT: Duration = Duration::from_secs(30);
/// A TimeStampResp is a few KiB; more is not one.
const TSR_LIMIT: u64 = 1 << 20;

#[derive(Clone)]
pub struct Publisher(Arc<Inner>);

struct Inner {
    store: Store,
    signer: Arc<Signer>,
    prefix: String,
    every: Duration,
    tsa: Option<Tsa>,
    /// The newest checkpoint size handed to `published`, per tenant (this process).
    handled: Mutex<HashMap<String, u64>>,
}

struct Tsa {
    url: String,
    every: Duration,
    roots: Option<Roots>,
    client: reqwest::blocking::Client,
    /// Failing since the last success: the outage was logged already.
    failing: AtomicBool,
    /// After a failure nothing is asked before this.
    retry_at: Mutex<Option<Instant>>,
}

impl Publisher {
    /// Reads `log.timestamping.ca_file` and builds the TSA's client: an error names the field.
    pub fn new(cfg: &LogSection, store: Store, signer: Arc<Signer>, prefix: String) -> Result<Publisher, String> {
        let tsa = match &cfg.timestamping {
            None => None,
            Some(t) => {
                let roots = match t.ca_file.is_empty() {
                    true => None,
                    false => Some(
                        Roots::read(t.ca_file.as_ref())
                            .map_err(|e| format!("field `log.timestamping.ca_file`: {e}"))?,
                    ),
                };
                let https = t.url.trim_start().starts_with("https:");
                let client = crate::upstream::blocking_client(TSA_TIMEOUT, https)
                    .map_err(|e| format!("field `log.timestamping.url`: {e}"))?;
                Some(Tsa {
                    url: t.url.clone(),
                    every: Duration::from_secs(t.interval_seconds.max(1)),
                    roots,
                    client,
                    failing: AtomicBool::new(false),
                    retry_at: Mutex::new(None),
                })
            }
        };
        let every = Duration::from_secs(cfg.publish_interval_seconds.max(1));
        let handled = Mutex::new(HashMap::new());
        Ok(Publisher(Arc::new(Inner { store, signer, prefix, every, tsa, handled })))
    }

    /// One pass: a checkpoint for each tenant whose log grew, and every checkpoint newer than the
    /// last one handled (published here or on demand by a reader) handed to `published`.
    pub async fn publish_pass(&self) {
        let heads = match checkpoints::heads(&self.0.store).await {
            Ok(h) => h,
            Err(e) => return log::warn!("log publisher: reading the logs' heads failed (retried next interval): {e}"),
        };
        for h in heads {
            let handled = self.0.handled.lock().expect("publisher map").get(&h.tenant).copied();
            let grown = h.checkpoint.is_none_or(|c| c < h.size);
            if !grown && h.checkpoint <= handled {
                continue;
            }
            match self.newest(&h, grown).await {
                Ok(Some(c)) if Some(c.size) > handled => {
                    self.published(&h.tenant, &c).await;
                    self.0.handled.lock().expect("publisher map").insert(h.tenant.clone(), c.size);
                }
                Ok(_) => {}
                Err(e) => log::warn!("log publisher: tenant {}: {e} (retried next interval)", h.tenant),
            }
        }
    }

    /// The tenant's newest checkpoint: published now when its log grew.
    async fn newest(&self, h: &LogHead, grown: bool) -> Result<Option<CheckpointRow>, String> {
        let s = &self.0;
        if grown {
            return checkpoint::current(&s.store, &s.signer, &s.prefix, &h.tenant)
                .await
                .map(Some)
                .map_err(|e| e.message);
        }
        let Some(size) = h.checkpoint else { return Ok(None) };
        checkpoints::at(&s.store, &h.tenant, size).await.map_err(|e| e.to_string())
    }

    /// What follows the publication of a checkpoint — the one place for it. Each checkpoint
    /// newer than the last handled comes here once per process, whoever published it; at start
    /// each tenant's newest once. Witnesses (log.md §5) are to be asked from here.
    async fn published(&self, tenant: &str, c: &CheckpointRow) {
        METRICS.log_checkpoints_published.inc();
        log::debug!("log: checkpoint of tenant {tenant} at size {} published", c.size);
    }

    /// One timestamping pass: each tenant's newest checkpoint, if not stamped and the tenant's
    /// last stamp is an interval old. The first failure ends the pass until the next interval.
    pub async fn stamp_pass(&self) {
        let Some(tsa) = &self.0.tsa else { return };
        if tsa.retry_at.lock().expect("tsa retry").is_some_and(|t| Instant::now() < t) {
            return;
        }
        let heads = match checkpoints::heads(&self.0.store).await {
            Ok(h) => h,
            Err(e) => return log::warn!("log timestamps: reading the logs' heads failed (retried later): {e}"),
        };
        for h in heads.iter().filter(|h| due(h, tsa.every)) {
            match self.stamp(tsa, h).await {
                Ok(()) => {
                    if tsa.failing.swap(false, Ordering::Relaxed) {
                        log::info!("log timestamps: the TSA at {} answers again", tsa.url);
                    }
                }
                Err(e) => return self.stamp_failed(tsa, e),
            }
        }
    }

    fn stamp_failed(&self, tsa: &Tsa, e: Rejected) {
        METRICS.log_timestamp_failures.with_label_values(&[e.reason]).inc();
        *tsa.retry_at.lock().expect("tsa retry") = Some(Instant::now() + tsa.every);
        if tsa.failing.swap(true, Ordering::Relaxed) {
            log::debug!("log timestamps: still failing: {e}");
        } else {
            log::warn!("log timestamps: {e}; retried every {}s, logged again once it answers", tsa.every.as_secs());
        }
    }

    /// Asks the TSA for the newest checkpoint of `h`, checks the answer, keeps it.
    async fn stamp(&self, tsa: &Tsa, h: &LogHead) -> Result<(), Rejected> {
        let store_err = |e: crate::store::StoreError| Rejected { reason: "store", detail: e.to_string() };
        let Some(size) = h.checkpoint else { return Ok(()) };
        let Some(c) = checkpoints::at(&self.0.store, &h.tenant, size).await.map_err(store_err)? else { return Ok(()) };
        let body = timestamp::note_body(&c.note)
            .ok_or_else(|| Rejected { reason: "invalid", detail: "a stored checkpoint is not a signed note".into() })?;
        let req = timestamp::request(&body);
        let (client, url, der) = (tsa.client.clone(), tsa.url.clone(), req.der);
        let tsr = tokio::task::spawn_blocking(move || post(&client, &url, der))
            .await
            .map_err(|e| Rejected { reason: "unreachable", detail: format!("the TSA call failed: {e}") })??;
        let stamp = timestamp::check(&tsr, &body, Some(&req.nonce), tsa.roots.as_ref())
            .map_err(|e| Rejected { detail: format!("{}: {}", tsa.url, e.detail), ..e })?;
        timestamps::insert(&self.0.store, &h.tenant, size, &stamp.gen_time, &B64.encode(&tsr), &tsa.url)
            .await
            .map_err(store_err)?;
        METRICS.log_timestamps.inc();
        log::debug!("log timestamps: tenant {} size {size} stamped at {}", h.tenant, stamp.gen_time);
        Ok(())
    }
}

/// The newest checkpoint is not stamped, and the last stamp (any process's) is an interval old.
fn due(h: &LogHead, every: Duration) -> bool {
    let Some(newest) = h.checkpoint else { return false };
    if h.stamped == Some(newest) {
        return false;
    }
    let last = h.stamped_at.as_deref().and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok());
    last.is_none_or(|t| chrono::Utc::now().signed_duration_since(t).to_std().is_ok_and(|age| age >= every))
}

/// POSTs the request as `application/timestamp-query`; the body of a 2xx answer.
fn post(client: &reqwest::blocking::Client, url: &str, der: Vec<u8>) -> Result<Vec<u8>, Rejected> {
    use std::io::Read;
    let unreachable = |e: &dyn std::fmt::Display| Rejected { reason: "unreachable", detail: format!("{url}: {e}") };
    let resp = client
        .post(url)
        .header("content-type", "application/timestamp-query")
        .body(der)
        .send()
        .map_err(|e| unreachable(&e))?;
    if !resp.status().is_success() {
        return Err(Rejected { reason: "http_status", detail: format!("{url} answered HTTP {}", resp.status()) });
    }
    let mut tsr = Vec::new();
    resp.take(TSR_LIMIT).read_to_end(&mut tsr).map_err(|e| unreachable(&e))?;
    Ok(tsr)
}

#[async_trait]
impl BackgroundService for Publisher {
    /// Two loops, so a TSA that takes its time never delays a publication.
    async fn start(&self, shutdown: ShutdownWatch) {
        let publish = every(self.0.every, shutdown.clone(), || self.publish_pass());
        // Ticks at the publish interval at most: a checkpoint is stamped soon after it is due.
        let tick = self.0.tsa.as_ref().map(|t| t.every.min(self.0.every));
        let stamp = async {
            if let Some(tick) = tick {
                every(tick, shutdown.clone(), || self.stamp_pass()).await
            }
        };
        tokio::join!(publish, stamp);
    }
}

/// Runs `pass` now and then every `period` (a slow pass delays the next) until shutdown.
async fn every<F, Fut>(period: Duration, mut shutdown: ShutdownWatch, pass: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut timer = tokio::time::interval(period);
    timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = timer.tick() => pass().await,
            _ = shutdown.changed() => return,
        }
    }
}
