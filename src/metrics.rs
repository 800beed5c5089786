//! Prometheus metrics (`tollgate_` prefix) in the process-wide default registry, which the
//! Pingora Prometheus service serves. Registered once per process.

use std::sync::LazyLock;

use prometheus::{
    register_counter_vec, register_histogram, register_histogram_vec, register_int_counter, register_int_counter_vec,
    register_int_gauge, CounterVec, Histogram, HistogramVec, IntCounter, IntCounterVec, IntGauge,
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
    pub receipt_queue_depth: IntGauge,
    pub receipt_batch_size: Histogram,
    pub receipt_write_seconds: Histogram,
    pub checks: IntCounterVec,
    pub guardrail_events: IntCounterVec,
    pub cache_saved_usd: CounterVec,
    pub attestation_signatures_verified: IntCounter,
    pub attestation_memo_blocks: IntCounter,
    pub attestation_memo_spans_written: IntCounter,
}

const LATENCY_BUCKETS: &[f64] =
    &[0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

pub static METRICS: LazyLock<Metrics> = LazyLock::new(|| Metrics {
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
    receipt_queue_depth: register_int_gauge!("tollgate_receipt_queue_depth", "Receipts queued and not yet written")
        .expect("register tollgate_receipt_queue_depth"),
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
});
