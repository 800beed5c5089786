//! The shared state's own metrics (`tollgate_shared_state_*`).

use std::sync::LazyLock;

use prometheus::{register_counter, register_int_counter_vec, register_int_gauge, Counter, IntCounterVec, IntGauge};

pub(super) struct ClusterMetrics {
    pub(super) up: IntGauge,
    pub(super) down_seconds: Counter,
    pub(super) errors: IntCounterVec,
    pub(super) fallbacks: IntCounterVec,
    pub(super) dropped: prometheus::IntCounter,
    pub(super) drawn: prometheus::IntCounter,
}

pub(super) static METRICS: LazyLock<ClusterMetrics> = LazyLock::new(|| ClusterMetrics {
    up: register_int_gauge!("tollgate_shared_state_up", "1 while the shared state (Redis) answers, else 0")
        .expect("register tollgate_shared_state_up"),
    down_seconds: register_counter!(
        "tollgate_shared_state_unavailable_seconds_total",
        "Seconds the shared state (Redis) was configured but unreachable"
    )
    .expect("register tollgate_shared_state_unavailable_seconds_total"),
    errors: register_int_counter_vec!(
        "tollgate_shared_state_errors_total",
        "Failed or timed-out calls to the shared state, by operation",
        &["op"]
    )
    .expect("register tollgate_shared_state_errors_total"),
    fallbacks: register_int_counter_vec!(
        "tollgate_shared_state_fallbacks_total",
        "Checks decided without the shared state, by check and fault behaviour (open|closed)",
        &["check", "mode"]
    )
    .expect("register tollgate_shared_state_fallbacks_total"),
    dropped: prometheus::register_int_counter!(
        "tollgate_shared_state_settlements_dropped_total",
        "Settlements not sent to the shared state (it was down, or the queue was full)"
    )
    .expect("register tollgate_shared_state_settlements_dropped_total"),
    drawn: prometheus::register_int_counter!(
        "tollgate_shared_state_granted_admissions_total",
        "Admissions decided in this process on quota the shared state granted it (busy keys far from their limits)"
    )
    .expect("register tollgate_shared_state_granted_admissions_total"),
});
