//! Prometheus metrics (`tollgate_` prefix) in the process-wide default registry, which the
//! Pingora Prometheus service serves. Registered once per process.

use std::sync::LazyLock;

use prometheus::{
    register_counter_vec, register_histogram, register_histogram_vec, register_int_counter, register_int_counter_vec,
    register_int_gauge, register_int_gauge_vec, CounterVec, Histogram, HistogramVec, IntCounter, IntCounterVec,
    IntGauge, IntGaugeVec,
};

pub struct Metrics {
    pub requests: IntCounterVec,
    pub latency: HistogramVec,
    pub upstream_latency: HistogramVec,
    pub tokens: IntCounterVec,
    pub cost: CounterVec,
    pub errors: IntCounterVec,
    pub management_requests: IntCounterVec,
    pub receipts_written: IntCounter,
    pub receipt_commits: IntCounterVec,
    pub receipt_queue_depth: IntGauge,
    /// Receipts in the journal the applier has not written to the database yet (SQLite with
    /// `receipts.journal`): the applier reads them back from the journal's segments.
    pub receipt_journal_pending: IntGauge,
    pub receipt_batch_size: Histogram,
    pub receipt_write_seconds: Histogram,
    pub checks: IntCounterVec,
    pub guardrail_events: IntCounterVec,
    pub cache_saved_usd: CounterVec,
    pub attestation_signatures_verified: IntCounter,
    pub attestation_memo_blocks: IntCounter,
    pub attestation_memo_spans_written: IntCounter,
    pub tool_calls: IntCounterVec,
    pub webhook_deliveries: IntCounterVec,
    /// Witness exchanges that kept no cosignature, by witness and reason (docs/log.md §5).
    pub witness_failures: IntCounterVec,
    pub change_notices: IntCounterVec,
    pub log_checkpoints_published: IntCounter,
    pub log_timestamps: IntCounter,
    pub log_timestamp_failures: IntCounterVec,
    /// Upstream attempts of routed requests, by provider, target and outcome.
    pub upstream_attempts: IntCounterVec,
    /// Each route target's breaker: 0 closed, 1 half-open, 2 open.
    pub target_state: IntGaugeVec,
}

const LATENCY_BUCKETS: &[f64] =
    &[0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

pub static METRICS: LazyLock<Metrics> = LazyLock::new(|| Metrics {
    upstream_attempts: register_int_counter_vec!(
        "tollgate_upstream_attempts_total",
        "Upstream attempts of routed requests by provider, target (provider/credential/model) and outcome",
        &["provider", "target", "outcome"]
    )
    .expect("register tollgate_upstream_attempts_total"),
    target_state: register_int_gauge_vec!(
        "tollgate_target_state",
        "Route target breaker state: 0 closed (operational), 1 half-open (degraded), 2 open (outage)",
        &["route", "provider", "credential", "model"]
    )
    .expect("register tollgate_target_state"),
    requests: register_int_counter_vec!(
        "tollgate_requests_total",
        "Gateway requests by route, provider and HTTP status",
        &["route", "provider", "status"]
    )
    .expect("register tollgate_requests_total"),
    latency: register_histogram_vec!(
        "tollgate_request_duration_seconds",
        "Gateway request latency, first byte in to last byte out",
        &["route", "provider"],
        LATENCY_BUCKETS.to_vec()
    )
    .expect("register tollgate_request_duration_seconds"),
    upstream_latency: register_histogram_vec!(
        "tollgate_upstream_header_seconds",
        "Time from sending the upstream request to its response header",
        &["provider"],
        LATENCY_BUCKETS.to_vec()
    )
    .expect("register tollgate_upstream_header_seconds"),
    tokens: register_int_counter_vec!(
        "tollgate_tokens_total",
        "Tokens by provider, model and direction (prompt|completion)",
        &["provider", "model", "direction"]
    )
    .expect("register tollgate_tokens_total"),
    cost: register_counter_vec!("tollgate_cost_usd_total", "Cost in USD by provider and model", &["provider", "model"])
        .expect("register tollgate_cost_usd_total"),
    errors: register_int_counter_vec!(
        "tollgate_errors_total",
        "Errors answered, by error type and port",
        &["type", "port"]
    )
    .expect("register tollgate_errors_total"),
    management_requests: register_int_counter_vec!(
        "tollgate_management_requests_total",
        "Management API requests by method and status",
        &["method", "status"]
    )
    .expect("register tollgate_management_requests_total"),
    receipts_written: register_int_counter!("tollgate_receipts_written_total", "Receipts appended to the chains")
        .expect("register tollgate_receipts_written_total"),
    receipt_commits: register_int_counter_vec!(
        "tollgate_receipt_commits_total",
        "Receipts an answer waited for, by who committed them: the request (own) or the writer, and why",
        &["by"]
    )
    .expect("register tollgate_receipt_commits_total"),
    receipt_queue_depth: register_int_gauge!("tollgate_receipt_queue_depth", "Receipts queued and not yet written")
        .expect("register tollgate_receipt_queue_depth"),
    receipt_journal_pending: register_int_gauge!(
        "tollgate_receipt_journal_pending",
        "Receipts journaled and not yet written to the database"
    )
    .expect("register tollgate_receipt_journal_pending"),
    receipt_batch_size: register_histogram!(
        "tollgate_receipt_batch_size",
        "Receipts per append transaction",
        vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0]
    )
    .expect("register tollgate_receipt_batch_size"),
    receipt_write_seconds: register_histogram!(
        "tollgate_receipt_write_seconds",
        "Time to seal and append one batch",
        LATENCY_BUCKETS.to_vec()
    )
    .expect("register tollgate_receipt_write_seconds"),
    checks: register_int_counter_vec!(
        "tollgate_checks_total",
        "Check results recorded on receipts, by check name and result",
        &["check", "result"]
    )
    .expect("register tollgate_checks_total"),
    guardrail_events: register_int_counter_vec!(
        "tollgate_guardrail_events_total",
        "Guardrail findings that flagged, redacted or blocked, by category, result and direction",
        &["category", "result", "direction"]
    )
    .expect("register tollgate_guardrail_events_total"),
    cache_saved_usd: register_counter_vec!(
        "tollgate_cache_saved_usd_total",
        "Provider cost avoided by cache hits, by model",
        &["model"]
    )
    .expect("register tollgate_cache_saved_usd_total"),
    attestation_signatures_verified: register_int_counter!(
        "tollgate_attestation_signatures_verified_total",
        "Receipt signatures checked with Ed25519 by attestation, evidence-bundle and chain-audit walks"
    )
    .expect("register tollgate_attestation_signatures_verified_total"),
    attestation_memo_blocks: register_int_counter!(
        "tollgate_attestation_memo_blocks_total",
        "Receipt blocks whose signatures the verified-span memo vouched for (no Ed25519 check)"
    )
    .expect("register tollgate_attestation_memo_blocks_total"),
    attestation_memo_spans_written: register_int_counter!(
        "tollgate_attestation_memo_spans_written_total",
        "Verified-span memo rows recorded after walks (attestation, bundle, chain audit)"
    )
    .expect("register tollgate_attestation_memo_spans_written_total"),
    tool_calls: register_int_counter_vec!(
        "tollgate_tool_calls_total",
        "MCP tools/call requests by tool server, tool and result (ok, tool_error, error, timeout, blocked)",
        &["server", "tool", "result"]
    )
    .expect("register tollgate_tool_calls_total"),
    webhook_deliveries: register_int_counter_vec!(
        "tollgate_webhook_deliveries_total",
        "Webhook delivery attempts by result (delivered, retry, given_up)",
        &["result"]
    )
    .expect("register tollgate_webhook_deliveries_total"),
    witness_failures: register_int_counter_vec!(
        "tollgate_witness_failures_total",
        "Witness exchanges that kept no cosignature, by witness and reason",
        &["witness", "reason"]
    )
    .expect("register tollgate_witness_failures_total"),
    change_notices: register_int_counter_vec!(
        "tollgate_change_notices_total",
        "PostgreSQL change notices sent after a management change, and received from other processes",
        &["direction"]
    )
    .expect("register tollgate_change_notices_total"),
    log_checkpoints_published: register_int_counter!(
        "tollgate_log_checkpoints_published_total",
        "Checkpoints handed to the publisher's `published` step (log.md §2)"
    )
    .expect("register tollgate_log_checkpoints_published_total"),
    log_timestamps: register_int_counter!(
        "tollgate_log_timestamps_total",
        "RFC 3161 timestamps of checkpoints checked and kept (log.md §6)"
    )
    .expect("register tollgate_log_timestamps_total"),
    log_timestamp_failures: register_int_counter_vec!(
        "tollgate_log_timestamp_failures_total",
        "Timestamp requests that gave nothing to keep: unreachable, http_status, refused, invalid, untrusted",
        &["reason"]
    )
    .expect("register tollgate_log_timestamp_failures_total"),
});

/// Request-path handles of the labelled metrics, cached per worker thread by label values.
///
/// `with_label_values` hashes the values and takes the vector's read lock on every call; the
/// gateway made 6 calls per request (a dozen with checks on), and the lock's reader count is
/// one cache line both worker threads write. A cached handle is the same child the vector
/// holds (a shared atomic), so what is counted and what is scraped do not change. A thread
/// caches the label sets it has seen, as the vector itself does.
pub mod local {
    use std::cell::RefCell;
    use std::collections::HashMap;

    use foldhash::fast::RandomState;
    use prometheus::{Counter, Histogram, IntCounter};

    use super::METRICS;

    /// A closed word with a fixed label text (a check's name or result): the receipts'
    /// vocabulary implements it, so this module needs no domain type.
    pub trait Label: Copy {
        fn label(self) -> &'static str;
    }

    type Map<K, V> = HashMap<K, V, RandomState>;

    struct ByModel {
        prompt: IntCounter,
        completion: IntCounter,
        cost: Counter,
    }

    #[derive(Default)]
    struct Handles {
        requests: Map<(&'static str, &'static str, u16), IntCounter>,
        latency: Map<(&'static str, &'static str), Histogram>,
        upstream_latency: Map<&'static str, Histogram>,
        checks: Map<(&'static str, &'static str), IntCounter>,
        by_model: Map<&'static str, Map<String, ByModel>>,
    }

    thread_local! {
        static HANDLES: RefCell<Handles> = RefCell::new(Handles::default());
    }

    fn with<R>(f: impl FnOnce(&mut Handles) -> R) -> R {
        HANDLES.with(|h| f(&mut h.borrow_mut()))
    }

    /// `tollgate_requests_total` and `tollgate_request_duration_seconds` for one request.
    pub fn request(route: &'static str, provider: &'static str, status: u16, seconds: f64) {
        with(|h| {
            h.requests
                .entry((route, provider, status))
                .or_insert_with(|| {
                    let code = http::StatusCode::from_u16(status).ok();
                    let status = code.as_ref().map_or("0", http::StatusCode::as_str);
                    METRICS.requests.with_label_values(&[route, provider, status])
                })
                .inc();
            h.latency
                .entry((route, provider))
                .or_insert_with(|| METRICS.latency.with_label_values(&[route, provider]))
                .observe(seconds);
        })
    }

    /// `tollgate_upstream_header_seconds`.
    pub fn upstream_latency(provider: &'static str, seconds: f64) {
        with(|h| {
            h.upstream_latency
                .entry(provider)
                .or_insert_with(|| METRICS.upstream_latency.with_label_values(&[provider]))
                .observe(seconds)
        })
    }

    /// `tollgate_checks_total` for one recorded check result.
    pub fn check(name: impl Label, result: impl Label) {
        let (name, result) = (name.label(), result.label());
        with(|h| {
            h.checks.entry((name, result)).or_insert_with(|| METRICS.checks.with_label_values(&[name, result])).inc()
        })
    }

    /// `tollgate_tokens_total` (both directions) and `tollgate_cost_usd_total` for one answer.
    pub fn usage(provider: &'static str, model: &str, prompt: u64, completion: u64, cost_usd: f64) {
        with(|h| {
            let models = h.by_model.entry(provider).or_default();
            let m = match models.get(model) {
                Some(m) => m,
                None => models.entry(model.to_string()).or_insert_with(|| ByModel {
                    prompt: METRICS.tokens.with_label_values(&[provider, model, "prompt"]),
                    completion: METRICS.tokens.with_label_values(&[provider, model, "completion"]),
                    cost: METRICS.cost.with_label_values(&[provider, model]),
                }),
            };
            m.prompt.inc_by(prompt);
            m.completion.inc_by(completion);
            m.cost.inc_by(cost_usd);
        })
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn cached_handles_count_into_the_registered_vectors() {
            let before = METRICS.requests.with_label_values(&["test_route", "test_provider", "418"]).get();
            let seen = METRICS.latency.with_label_values(&["test_route", "test_provider"]).get_sample_count();
            for _ in 0..3 {
                request("test_route", "test_provider", 418, 0.01);
            }
            // Another thread has its own handles onto the same children.
            std::thread::spawn(|| request("test_route", "test_provider", 418, 0.01)).join().unwrap();
            assert_eq!(METRICS.requests.with_label_values(&["test_route", "test_provider", "418"]).get(), before + 4);
            assert_eq!(
                METRICS.latency.with_label_values(&["test_route", "test_provider"]).get_sample_count(),
                seen + 4
            );

            // A pair no request records, so no other test moves this counter.
            let c = || METRICS.checks.with_label_values(&["UPSTREAM", "HIT"]).get();
            let n = c();
            use crate::receipts::{CheckName, CheckResult};
            check(CheckName::Upstream, CheckResult::Hit);
            check(CheckName::Upstream, CheckResult::Hit);
            assert_eq!(c(), n + 2);

            let t = |d: &str| METRICS.tokens.with_label_values(&["test_provider", "test-model", d]).get();
            let (p, q) = (t("prompt"), t("completion"));
            usage("test_provider", "test-model", 11, 7, 0.5);
            usage("test_provider", "test-model", 1, 1, 0.25);
            assert_eq!((t("prompt"), t("completion")), (p + 12, q + 8));
            assert!(METRICS.cost.with_label_values(&["test_provider", "test-model"]).get() >= 0.75);
        }
    }
}
