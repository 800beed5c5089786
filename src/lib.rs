//! Tollgate: a multi-tenant AI governance and observability gateway on Pingora.
//!
//! # Life of a request
//!
//! ```text
//! client ─► gateway listener (Pingora proxy service, `gateway`)
//!   new_ctx ........ pin one Snapshot (keys, credentials, policies, budgets, prices) via ArcSwap
//!   request_filter . admit: key lookup by SHA-256 in the snapshot, route (404), bounded body
//!                    read (413), parse and validate (400), pick provider (`gateway::lifecycle`,
//!                    the same stages for every route kind: `model_call`, `mcp`, `aside_calls`)
//!                  → decide: pipeline.on_request (`src/checks/`): ALLOWLIST, policy, RATELIMIT,
//!                    BUDGET, GUARDRAIL, CACHE — a block answers its envelope, a hit replays
//!                  → forward: provider adapter builds the upstream request (client key
//!                    stripped, provider credential injected) → our pooled upstream leg →
//!                    answer relayed (`gateway::relay`: SSE split per event, usage read, answer
//!                    guardrails per event when armed), all but its ending
//!                  → end: the receipt to the writer, await its commit (group commit), then
//!                    pipeline.on_complete (settle reservations, fill the cache), then the
//!                    ending (`gateway::ending`: the body, or a stream's closing event)
//!   logging ........ metrics
//! database runtime ── receipt writer: per tenant seq/prevHash → JCS → SHA-256 → Ed25519 →
//!               batch insert with guardrail events and key spend, one transaction per batch,
//!               the next batch as soon as one commits
//! management listener (Pingora HTTP app, `management`) ── /v1/*, /status
//! metrics listener (Pingora Prometheus service) ── /metrics
//! background ── change notices (PostgreSQL LISTEN: another process changed something, rebuild
//!               now); snapshot refresh (the safety net) and key last-use flush;
//!               policy file watcher (re-parses changed files, rebuilds the snapshot)
//! ```
//!
//! The gateway reads the whole body before it chooses an upstream, so it runs the upstream
//! leg itself (`upstream`) rather than letting pingora-proxy replay the body from its 64 KiB
//! retry buffer: one code path for every body size. See `docs/architecture.md`.
//!
//! # Layers (docs/architecture.md; enforced by tests/layers.rs)
//!
//! A module imports only from its own layer and the layers below, and never in a circle.
//! - entry: `cli` (one file per command), `server` (builds the one Pingora `Server`)
//! - services: `gateway` (the only `impl ProxyHttp`), `management` (`/v1`, `/status`),
//!   `balance` (the local cluster's front), `notices` (other processes' changes, at once),
//!   `app` (the process's shared state)
//! - domain: `snapshot` (the hot path's immutable view); `checks` (one folder per check: plugin,
//!   engine and shared Redis mode; `checks::pipeline` runs them in `checks::ORDER`);
//!   `providers` (one folder per provider, `translate` between dialects, `pricing`); `receipts`
//!   (vocabulary, sealing, the writer); `compliance` (attestations, proofs, bundles, packs);
//!   `tenant_log` (the receipts as one Merkle tree: tiles, checkpoints, proofs); `routing`
//!   (model routes: targets, strategies, retries, per-target health); `tool_servers`,
//!   `prompts`, `webhooks`, `keys`
//! - platform: `store` (queries and rows), `config` (YAML → validated config, env overrides),
//!   `metrics`, `telemetry` (OTLP export), `upstream` (the pooled HTTP client), `error` (the one
//!   table from error kind to status and envelope), `secrets` (`Secret`, encryption at rest),
//!   `process` (allocator, thread scheduling)

pub mod app;
pub mod balance;
pub mod checks;
pub mod cli;
pub mod compliance;
pub mod config;
pub mod error;
pub mod gateway;
pub mod keys;
pub mod management;
pub mod metrics;
pub mod notices;
pub mod process;
pub mod prompts;
pub mod providers;
pub mod receipts;
pub mod routing;
pub mod secrets;
pub mod server;
pub mod snapshot;
pub mod store;
pub mod telemetry;
pub mod tenant_log;
pub mod tool_servers;
pub mod upstream;
pub mod webhooks;
