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
//! # Modules
//! - `cli`, `server`, `app`: the process, its services and shared state
//! - `config`: YAML → validated config, env overrides; `pricing`: price table
//! - `snapshot`: the hot path's immutable view; `notices`: other processes' changes, at once;
//!   `keys`: virtual key secrets
//! - `policy`: the policy language, its validation, per-tenant compilation, policy files
//! - `budget`: the budget book (which limits apply) and the in-memory spend ledger
//! - `pipeline`: the `Check` trait, `Exchange`, `Verdict` and the pipeline; `src/checks/`: one
//!   file per check and the one ordered table; `ratelimit`, `cache`, `guardrails`: the state
//!   and engines the checks use
//! - `gateway`: the only `impl ProxyHttp`; `upstream`: the pooled upstream client
//! - `providers`: per-provider request building, usage reading, stored credentials
//! - `translate`: OpenAI Chat Completions ↔ Anthropic Messages (request, answer, stream); pure
//! - `management`: the `/v1` API and `/status`; `store`: sqlx queries, one module per resource
//! - `error`: the one table from error kind to status and envelope; `metrics`: Prometheus
//! - `guardrails`: PII, secrets, prompt injection and custom patterns found, redacted or blocked
//!   in request and (streamed) response text; pure, compiled once per snapshot
//! - `sealing`: AES-256-GCM for secrets at rest; `secret`: a string that never prints
//! - `telemetry`: opt-in OpenTelemetry traces, one GenAI span per gateway request (OTLP/HTTP)

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
pub mod secrets;
pub mod server;
pub mod snapshot;
pub mod store;
pub mod telemetry;
pub mod tool_servers;
pub mod upstream;
pub mod webhooks;
