//! Outbound webhooks: the event vocabulary, Standard Webhooks signing, which URLs may be called,
//! the retry schedule, and the background sender that drains the outbox (`store::webhooks`).
//!
//! Delivery is at least once: a row is leased, POSTed, and only then marked delivered, so a
//! process that dies in between sends it again after the lease (receivers deduplicate on
//! `webhook-id`). Two live processes never hold the same row: the claim is one statement that
//! leases rows no other lease holds (and, on PostgreSQL, skips rows another claim has locked).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use bytes::Bytes;
use hmac::{Hmac, Mac};
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use sha2::Sha256;

use crate::config::WebhooksSection;
use crate::metrics::METRICS;
use crate::secrets::at_rest::MasterKey;
use crate::store::webhooks::{self as outbox, Claimed, Outcome};
use crate::store::Store;
use crate::upstream::{BaseUrl, UpstreamClient};

/// Every event type an endpoint can subscribe to.
pub const EVENTS: [&str; 10] = [
    "budget.threshold_reached",
    "budget.exceeded",
    "budget_request.created",
    "budget_request.approved",
    "budget_request.denied",
    "guardrail.blocked",
    "key.created",
    "key.revoked",
    "provider.test_failed",
    "chain.verification_failed",
];

/// The signing secret's prefix (Standard Webhooks): the HMAC key is the base64 after it.
pub const SECRET_PREFIX: &str = "whsec_";

/// A new signing secret: `whsec_` + base64 of 32 random bytes, and the raw key.
pub fn new_secret() -> (String, [u8; 32]) {
    let mut key = [0u8; 32];
    getrandom::getrandom(&mut key).expect("the OS random source failed");
    (format!("{SECRET_PREFIX}{}", B64.encode(key)), key)
}

/// The sealing context of an endpoint's secret: a sealed value copied to another row does not open.
pub fn secret_context(tenant_id: &str, endpoint_id: &str) -> String {
    format!("webhook-secret:{tenant_id}:{endpoint_id}")
}

/// `v1,<base64 HMAC-SHA256(key, "{id}.{timestamp}.{body}")>`: the `webhook-signature` value.
pub fn sign(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("v1,{}", B64.encode(mac.finalize().into_bytes()))
}

/// Whether an address is one a tenant must not make this server call unless the operator
/// allowed it: loopback, private, link-local, unspecified, shared, documentation, multicast.
pub fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_documentation()
                || v4.is_multicast()
                || o[0] == 0
                || (o[0] == 100 && (64..128).contains(&o[1]))
                || o[0] >= 240
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_private(IpAddr::V4(v4));
            }
            let s = v6.segments();
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00
                || (s[0] & 0xffc0) == 0xfe80
        }
    }
}

/// A parsed endpoint URL: where to connect and the request target (path and query).
pub struct Url {
    pub base: BaseUrl,
    pub target: String,
}

/// Parses an endpoint URL: `http` or `https`, a host, no credentials, no fragment.
pub fn parse_url(s: &str) -> Result<Url, String> {
    if s.len() > 2048 {
        return Err("must be at most 2048 characters".into());
    }
    if s.contains('#') || s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("must be an absolute http(s) URL without spaces or a fragment".into());
    }
    let uri: http::Uri = s.parse().map_err(|_| format!("`{s}` is not a URL"))?;
    let tls = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => return Err("must start with http:// or https://".into()),
    };
    let authority = uri.authority().ok_or("has no host")?;
    if authority.as_str().contains('@') {
        return Err("must not carry credentials (user:password@)".into());
    }
    let host = authority.host().trim_start_matches('[').trim_end_matches(']').to_string();
    if host.is_empty() {
        return Err("has no host".into());
    }
    let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let target = uri.path_and_query().map(|p| p.as_str()).filter(|p| !p.is_empty()).unwrap_or("/").to_string();
    Ok(Url { base: BaseUrl { tls, host, port, prefix: String::new() }, target })
}

/// Refuses a host that is, or resolves to, a non-public address (unless allowed). Checked at
/// creation and again before each attempt, since DNS can change between the two. A name that
/// does not resolve fails an attempt, but not a creation (`must_resolve` false): DNS may be
/// down for a moment, or the name not yet published.
pub async fn check_host(host: &str, port: u16, allow_private: bool, must_resolve: bool) -> Result<(), String> {
    if allow_private {
        return Ok(());
    }
    let refused = || {
        format!(
            "`{host}` is a loopback, private or link-local address; such endpoints need \
             webhooks.allow_private_urls (TOLLGATE_WEBHOOK_ALLOW_PRIVATE_URLS=true)"
        )
    };
    if host.eq_ignore_ascii_case("localhost") || host.to_ascii_lowercase().ends_with(".localhost") {
        return Err(refused());
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        return if is_private(ip) { Err(refused()) } else { Ok(()) };
    }
    let looked_up = tokio::time::timeout(Duration::from_secs(5), tokio::net::lookup_host((host, port)))
        .await
        .map_err(|_| format!("`{host}` did not resolve in time"))
        .and_then(|r| r.map_err(|e| format!("`{host}` does not resolve: {e}")));
    let addrs = match looked_up {
        Ok(a) => a,
        Err(_) if !must_resolve => return Ok(()),
        Err(e) => return Err(e),
    };
    let mut any = false;
    for a in addrs {
        any = true;
        if is_private(a.ip()) {
            return Err(refused());
        }
    }
    if any || !must_resolve {
        Ok(())
    } else {
        Err(format!("`{host}` does not resolve"))
    }
}

/// The delay before attempt `attempts + 1` after `attempts` failed ones: `base * 2^(n-1)`
/// capped at `max`, then 75-100% of it (jitter spreads retries of many events; the floor keeps
/// each delay longer than the one before).
pub fn backoff(cfg: &WebhooksSection, attempts: u32, jitter: f64) -> Duration {
    let n = attempts.saturating_sub(1).min(32);
    let nominal = cfg.retry_base_ms.saturating_mul(1u64 << n).min(cfg.retry_max_ms);
    let factor = 0.75 + 0.25 * jitter.clamp(0.0, 1.0);
    Duration::from_millis((nominal as f64 * factor) as u64)
}

fn random_unit() -> f64 {
    let mut b = [0u8; 8];
    getrandom::getrandom(&mut b).expect("the OS random source failed");
    (u64::from_le_bytes(b) >> 11) as f64 / (1u64 << 53) as f64
}

/// Rows claimed per pass; a full pass is followed by another at once.
const BATCH: i64 = 32;

/// The background sender.
pub struct Sender(Arc<Outbox>);

/// What delivering needs: the outbox's rows, the key that opens endpoint secrets, a client.
struct Outbox {
    cfg: WebhooksSection,
    store: Store,
    master: Arc<MasterKey>,
    upstream: Arc<UpstreamClient>,
}

impl Sender {
    pub fn new(cfg: WebhooksSection, store: Store, master: Arc<MasterKey>, upstream: Arc<UpstreamClient>) -> Sender {
        Sender(Arc::new(Outbox { cfg, store, master, upstream }))
    }
}

#[async_trait]
impl BackgroundService for Sender {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let poll = Duration::from_millis(self.0.cfg.poll_ms.max(10));
        loop {
            let claimed = self.pass().await;
            if claimed < BATCH as usize {
                tokio::select! {
                    _ = tokio::time::sleep(poll) => {}
                    _ = shutdown.changed() => return,
                }
            } else if *shutdown.borrow() {
                return;
            }
        }
    }
}

impl Sender {
    /// One claim and its deliveries, concurrently; returns how many rows it claimed.
    async fn pass(&self) -> usize {
        let cfg = &self.0.cfg;
        let now = chrono::Utc::now().timestamp_millis();
        // The lease outlives the attempt (its timeout plus the outcome's write) by a margin.
        let lease = now + (cfg.timeout_ms as i64) * 2 + 30_000;
        let rows = match outbox::claim(&self.0.store, now, lease, BATCH).await {
            Ok(rows) => rows,
            Err(e) => {
                log::warn!("webhook sender: claiming due deliveries failed (retried): {e}");
                return 0;
            }
        };
        let n = rows.len();
        let mut set = tokio::task::JoinSet::new();
        for row in rows {
            let out = self.0.clone();
            set.spawn(async move { deliver(&out, row).await });
        }
        while set.join_next().await.is_some() {}
        n
    }
}

/// One attempt of one row, and its outcome recorded.
async fn deliver(out: &Outbox, row: Claimed) {
    let cfg = &out.cfg;
    let target = match outbox::target(&out.store, &row.endpoint_id).await {
        Ok(Some(t)) => t,
        // Deleted meanwhile (its rows went with it): nothing to send, nothing to record.
        Ok(None) => return,
        Err(e) => {
            log::warn!("webhook sender: endpoint lookup failed: {e}");
            return;
        }
    };
    let result = attempt(out, &row, &target).await;
    let outcome = match result {
        Ok(status) if (200..300).contains(&status) => Outcome::Delivered { status },
        other => {
            let (status, error) = match other {
                Ok(s) => (Some(s), format!("HTTP {s}")),
                Err(e) => (None, e),
            };
            if row.attempts >= i64::from(cfg.max_attempts) {
                log::warn!(
                    "webhook {} to endpoint {} given up after {} attempts: {error}",
                    row.event_id,
                    row.endpoint_id,
                    row.attempts
                );
                Outcome::GaveUp { status, error }
            } else {
                let delay = backoff(cfg, row.attempts as u32, random_unit());
                let next_ms = chrono::Utc::now().timestamp_millis() + delay.as_millis() as i64;
                log::info!(
                    "webhook {} to endpoint {} failed (attempt {}): {error}; next in {} ms",
                    row.event_id,
                    row.endpoint_id,
                    row.attempts,
                    delay.as_millis()
                );
                Outcome::Retry { status, error, next_ms }
            }
        }
    };
    let label = match &outcome {
        Outcome::Delivered { .. } => "delivered",
        Outcome::Retry { .. } => "retry",
        Outcome::GaveUp { .. } => "given_up",
    };
    METRICS.webhook_deliveries.with_label_values(&[label]).inc();
    if let Err(e) = outbox::finish(&out.store, &row.event_id, &row.endpoint_id, outcome).await {
        // The lease runs out and the row is attempted again: at least once, never lost.
        log::warn!("webhook sender: recording the outcome of {} failed: {e}", row.event_id);
    }
}

/// POSTs the row; the answer's status, or why there was none. Never logs the secret.
async fn attempt(out: &Outbox, row: &Claimed, target: &outbox::Target) -> Result<i64, String> {
    let cfg = &out.cfg;
    let url = parse_url(&target.url)?;
    check_host(&url.base.host, url.base.port, cfg.allow_private_urls, true).await?;
    let key = out
        .master
        .decrypt(&target.secret_sealed, &secret_context(&target.tenant_id, &row.endpoint_id))
        .map_err(|e| e.to_string())?;
    let ts = chrono::Utc::now().timestamp();
    let signature = sign(&key, &row.event_id, ts, row.payload.as_bytes());
    let headers = [
        ("content-type", "application/json".to_string()),
        ("user-agent", "Tollgate-Webhooks/1".to_string()),
        ("webhook-id", row.event_id.clone()),
        ("webhook-timestamp", ts.to_string()),
        ("webhook-signature", signature),
    ];
    let body = Bytes::from(row.payload.clone());
    let call = async {
        let mut resp =
            out.upstream.send(&url.base, "POST", &url.target, &headers, body).await.map_err(|e| e.to_string())?;
        let status = resp.header().status.as_u16();
        // The answer's body is not used; read a little so the connection can be reused.
        let _ = resp.read_all(64 << 10).await;
        resp.release().await;
        Ok::<i64, String>(i64::from(status))
    };
    match tokio::time::timeout(Duration::from_millis(cfg.timeout_ms), call).await {
        Ok(r) => r,
        Err(_) => Err(format!("no answer within {} ms", cfg.timeout_ms)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_matches_the_standard_webhooks_example() {
        // The example of the Standard Webhooks specification (and its reference libraries).
        let key = B64.decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            sign(&key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn backoff_grows_and_stays_within_its_jitter() {
        let cfg = WebhooksSection { retry_base_ms: 1000, retry_max_ms: 60_000, ..Default::default() };
        assert_eq!(backoff(&cfg, 1, 1.0), Duration::from_millis(1000));
        assert_eq!(backoff(&cfg, 1, 0.0), Duration::from_millis(750));
        assert_eq!(backoff(&cfg, 2, 1.0), Duration::from_millis(2000));
        // The shortest next delay is longer than the longest previous one.
        assert!(backoff(&cfg, 3, 0.0) > backoff(&cfg, 2, 1.0));
        assert_eq!(backoff(&cfg, 30, 1.0), Duration::from_millis(60_000));
    }

    #[test]
    fn urls_and_addresses() {
        let u = parse_url("https://hooks.example.com:8443/in?x=1").unwrap();
        assert_eq!(
            (u.base.tls, u.base.host.as_str(), u.base.port, u.target.as_str()),
            (true, "hooks.example.com", 8443, "/in?x=1")
        );
        assert_eq!(parse_url("http://h").unwrap().target, "/");
        assert!(parse_url("ftp://h/").is_err());
        assert!(parse_url("http://u:p@h/").is_err());
        assert!(parse_url("http://h/#f").is_err());
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "192.168.0.1",
            "169.254.169.254",
            "::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "100.64.0.1",
        ] {
            assert!(is_private(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["8.8.8.8", "2606:4700::1111"] {
            assert!(!is_private(ip.parse().unwrap()), "{ip}");
        }
    }
}
