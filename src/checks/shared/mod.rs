//! State several gateway processes share (`cluster.redis_url` / `TOLLGATE_REDIS_URL`): rate
//! windows, budget spend and reservations, and (optionally) cached answers, in Redis. Without
//! it every process keeps its own (the embedded default).
//!
//! The checks stay free of I/O: they ask ([`crate::checks::pipeline::Verdict::Ask`]) and this answers,
//! one round trip per request's asks (a Lua script sent by hash), or none when a busy key far
//! from its limits draws on quota Redis granted this process (`allowance`). Settling is a
//! second script, sent in batches from a task off the answer's path.
//!
//! Faults: every call is bounded by `cluster.redis_timeout_ms`. A failure marks the store down;
//! while down no request waits on it (each ask answers `Unavailable` at once) and the checks
//! apply `cluster.on_redis_down`: `open` falls back to the per-process counters, `closed`
//! refuses with 503. A watcher pings every 200 ms while down (every second while up), brings
//! the store back as soon as it answers, and rebuilds budget spend from the database when Redis
//! lost it.

pub(crate) mod admit;
mod allowance;
mod cluster;
mod metrics;
pub(crate) mod settle;

pub use cluster::{budget_entries, Cluster};
