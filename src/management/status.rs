//! `GET /status` (no authentication): real component checks, no tenant data.

use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::Serialize;
use utoipa::ToSchema;

use super::handler::{Handled, Reply};
use super::openapi_parts::string_enum;
use crate::app::App;
use crate::providers::{self, ProviderName};
use crate::snapshot::Snapshot;

/// `operational`, `degraded`, `outage`, or (a component only) `unconfigured`.
struct Health;

impl utoipa::PartialSchema for Health {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        string_enum(["operational", "degraded", "outage", UNCONFIGURED])
    }
}

impl ToSchema for Health {}

/// One checked part of the service.
#[derive(Serialize, ToSchema)]
pub(super) struct Component {
    name: String,
    /// `core`, `providers`, `tools` or `background`.
    group: &'static str,
    #[schema(value_type = Health)]
    status: &'static str,
    /// Whether its outage is the whole service's.
    critical: bool,
    detail: String,
}

fn component(name: &str, group: &'static str, status: &'static str, critical: bool, detail: String) -> Component {
    Component { name: name.to_string(), group, status, critical, detail }
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct StatusReport {
    #[schema(value_type = Health)]
    status: &'static str,
    components: Vec<Component>,
    updated_at: String,
}

/// Service status (no key needed)
///
/// Real component checks, no tenant data.
#[utoipa::path(get, path = "/status", operation_id = "getStatus", tag = "meta", security(()),
    responses((status = 200, description = "The overall status and each component's", body = StatusReport)))]
pub async fn get(app: &App) -> Handled {
    let mut components = vec![gateway_component(app), database_component(app).await];
    components.push(receipt_writer_component(app));
    components.push(signer_component(app));
    let snap = app.snapshot.load();
    components.extend(provider_components(&snap));
    components.extend(tool_server_components(&snap));
    components.extend(route_target_components(&snap));
    components.push(policies_component(app));
    components.push(webhooks_component(app).await);
    components.push(shared_state_component(app));
    components.push(witnesses_component(app));

    let overall = overall(&components);
    let updated = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string();
    Ok(Reply::json(200, &StatusReport { status: overall, components, updated_at: updated }))
}

/// The tenant log's witnesses (docs/log.md §5): degraded while one has not cosigned for
/// `log.witness_stale_seconds`; a witness never takes the service down.
fn witnesses_component(app: &App) -> Component {
    match &app.witnesses {
        None => component("witnesses", "background", UNCONFIGURED, false, "no log.witnesses configured".into()),
        Some(w) => {
            let (status, detail) = w.status();
            component("witnesses", "background", status, false, detail)
        }
    }
}

fn gateway_component(app: &App) -> Component {
    let detail = format!("listening on {}; up {} s", app.config.listen.gateway, app.started.elapsed().as_secs());
    component("gateway", "core", "operational", true, detail)
}

async fn database_component(app: &App) -> Component {
    let db = tokio::time::timeout(Duration::from_secs(2), app.store.ping()).await;
    let (db_status, db_detail) = match db {
        Ok(Ok(())) => ("operational", format!("{:?} reachable", app.store.backend()).to_lowercase()),
        Ok(Err(e)) => ("outage", format!("query failed: {}", short(&e.to_string()))),
        Err(_) => ("outage", "no answer within 2 s".to_string()),
    };
    component("database", "core", db_status, true, db_detail)
}

/// Degraded while a batch keeps failing, or while the journal's applier gets nothing into the
/// database.
fn receipt_writer_component(app: &App) -> Component {
    let w = &app.receipts.stats;
    let failing = w.failing.load(Ordering::Relaxed);
    let journal = w.journal.get();
    let applier_failing = journal.and_then(|j| j.failing_for());
    let attempts =
        if failing > 0 { format!(", {failing} failed attempts on the current batch") } else { String::new() };
    let journal = match (journal, applier_failing) {
        (Some(j), Some(f)) => {
            format!("; journal: {} receipts waiting, the database has taken none for {} ms", j.pending(), f.as_millis())
        }
        (Some(j), None) => format!("; journal: {} receipts waiting for the database", j.pending()),
        (None, _) => String::new(),
    };
    let detail = format!(
        "queue depth {}, lag {} ms, {} written since start{attempts}{journal}",
        w.depth.load(Ordering::Relaxed),
        w.lag_ms.load(Ordering::Relaxed),
        w.written.load(Ordering::Relaxed),
    );
    let status = if failing > 0 || applier_failing.is_some() { "degraded" } else { "operational" };
    component("receipt-writer", "core", status, true, detail)
}

/// A real round trip through the key: sign a probe and verify it.
fn signer_component(app: &App) -> Component {
    let probe = b"tollgate status probe";
    let sig = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(app.signer.sign(probe))
    };
    let signer_ok =
        crate::receipts::canonical::verify_signature(probe, &sig, &app.signer.signing_key().verifying_key().to_bytes());
    let status = if signer_ok { "operational" } else { "outage" };
    component("signer", "core", status, true, format!("ed25519 key {}", app.signer.key_id))
}

fn provider_components(snap: &Snapshot) -> Vec<Component> {
    let mut components = Vec::new();
    for p in ProviderName::ALL.into_iter().filter(|&p| providers::provider(p).keyed_by_api_key()) {
        let creds: Vec<_> = snap.providers().filter(|(_, c)| c.provider == p).collect();
        let failing = creds.iter().filter(|(_, c)| c.status == "failing").count();
        let status = if failing > 0 { "degraded" } else { "operational" };
        let detail = format!("{} credential(s) stored, {failing} failing their last test", creds.len());
        components.push(component(p.as_str(), "providers", status, false, detail));
    }
    components
}

/// Each tool server by name only: no URL, no tenant (the page needs no key).
fn tool_server_components(snap: &Snapshot) -> Vec<Component> {
    let mut servers: Vec<_> = snap.tool_servers().collect();
    servers.sort_by(|a, b| (&a.name, &a.tenant_id).cmp(&(&b.name, &b.tenant_id)));
    let mut components = Vec::new();
    for s in servers {
        let (calls, failures) = (s.state.calls.load(Ordering::Relaxed), s.state.failures.load(Ordering::Relaxed));
        let failing = s.state.last_failed.load(Ordering::Relaxed);
        let detail = format!(
            "{calls} tool call(s) reached it since start, {failures} failed{}",
            if failing { "; the last one failed" } else { "" }
        );
        let status = if failing { "degraded" } else { "operational" };
        components.push(component(&format!("tool-server:{}", s.name), "tools", status, false, detail));
    }
    components
}

/// A component that is switched off, not failing: it says so, but does not degrade the whole.
const UNCONFIGURED: &str = "unconfigured";

/// `outage` when a critical component is out, `degraded` when any other is neither operational
/// nor unconfigured, else `operational`.
/// Each route target (`route:<model>/<provider>/<credential>`): `operational` (breaker closed),
/// `degraded` (half-open: the next request probes it) or `outage` (open). A target several
/// tenants route to under the same names shows the worst of them; no tenant is named.
fn route_target_components(snap: &Snapshot) -> Vec<Component> {
    use crate::routing::TargetState;
    let now = chrono::Utc::now().timestamp_millis();
    let mut by_name: std::collections::BTreeMap<String, TargetState> = std::collections::BTreeMap::new();
    for route in snap.model_routes() {
        for t in &route.targets {
            let state = t.health.state(now);
            let e = by_name.entry(t.component(&route.model)).or_insert(state);
            *e = (*e).max_by_gauge(state);
        }
    }
    by_name
        .into_iter()
        .map(|(name, state)| {
            let detail = match state {
                TargetState::Operational => "breaker closed",
                TargetState::Degraded => "breaker half-open: the next request probes it",
                TargetState::Outage => "breaker open: skipped until its cool-down ends",
            };
            component(&name, "routes", state.as_str(), false, detail.into())
        })
        .collect()
}

fn overall(components: &[Component]) -> &'static str {
    if components.iter().any(|c| c.critical && c.status == "outage") {
        "outage"
    } else if components.iter().any(|c| c.status != "operational" && c.status != UNCONFIGURED) {
        "degraded"
    } else {
        "operational"
    }
}

/// Policy files that fail to parse keep their last good version in force: degraded, naming
/// each broken file and its error (line, column, field), until the file is fixed.
fn policies_component(app: &App) -> Component {
    let files = app.snapshot.files.current();
    let api = app.snapshot.load().api_policy_count();
    let dir = app.snapshot.files.dir().display().to_string();
    let mut problems: Vec<String> = files.dir_error.iter().cloned().collect();
    problems.extend(
        files
            .errors
            .iter()
            .map(|e| format!("{} rejected: {}", e.name, e.message.chars().take(400).collect::<String>())),
    );
    if !problems.is_empty() {
        let detail = format!(
            "{}; {} file policies and {api} API policies in force (broken files keep their last good version)",
            problems.join("; "),
            files.policies.len()
        );
        return component("policies", "core", "degraded", false, detail);
    }
    let from = if files.dir_exists { format!("from {dir}") } else { format!("({dir} does not exist)") };
    let detail = format!("{} file policies {from}; {api} API policies in force", files.policies.len());
    component("policies", "core", "operational", false, detail)
}

/// The outbox across all tenants (counts only): `unconfigured` without endpoints, `degraded`
/// while an endpoint's deliveries are failing and being retried.
async fn webhooks_component(app: &App) -> Component {
    let stats = tokio::time::timeout(Duration::from_secs(2), crate::store::webhooks::stats(&app.store)).await;
    let s = match stats {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return webhooks_degraded(format!("outbox unreadable: {}", short(&e.to_string()))),
        Err(_) => return webhooks_degraded("outbox unreadable: no answer within 2 s".into()),
    };
    if s.endpoints == 0 && s.pending == 0 {
        return component(
            "webhooks",
            "background",
            UNCONFIGURED,
            false,
            "webhooks are not configured: no webhook endpoints, no events are sent".into(),
        );
    }
    let oldest = s
        .oldest_pending_ms
        .map(|ms| ((chrono::Utc::now().timestamp_millis() - ms).max(0) / 1000).to_string())
        .unwrap_or_else(|| "0".into());
    let status = if s.failing_endpoints > 0 { "degraded" } else { "operational" };
    let detail = format!(
        "{} endpoints; pending {}, failing endpoints {}, oldest undelivered {oldest} s, given up {}",
        s.endpoints, s.pending, s.failing_endpoints, s.given_up
    );
    component("webhooks", "background", status, false, detail)
}

fn webhooks_degraded(detail: String) -> Component {
    component("webhooks", "background", "degraded", false, detail)
}

/// Redis for several gateway processes: `unconfigured` in one process; `outage` while it does
/// not answer (critical when `on_redis_down: closed`, since limited requests are refused then).
fn shared_state_component(app: &App) -> Component {
    let Some(c) = &app.cluster else {
        return component(
            "shared-state",
            "core",
            UNCONFIGURED,
            false,
            "in-process: no cluster.redis_url; rate limits, budgets and the cache are this process's own".into(),
        );
    };
    let critical = !c.fail_open();
    let cache = if c.shared_cache { "rate limits, budgets and the cache" } else { "rate limits and budgets" };
    if c.is_up() {
        let detail = format!("{} reachable; {cache} shared (on_redis_down: {})", c.address, c.on_down.as_str());
        return component("shared-state", "core", "operational", critical, detail);
    }
    let fallback = if c.fail_open() {
        "falling back to this process's own limits and budgets"
    } else {
        "requests with a rate limit or a budget are refused with 503"
    };
    let detail = format!("{} unreachable ({}); {fallback} until it answers", c.address, c.reason());
    component("shared-state", "core", "outage", critical, detail)
}

/// Database errors can be long; the public page needs only their gist.
fn short(s: &str) -> String {
    s.chars().take(160).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unconfigured_components_do_not_degrade_the_whole() {
        let c = |status: &'static str, critical: bool| component("x", "core", status, critical, String::new());
        assert_eq!(overall(&[c("operational", true), c(UNCONFIGURED, false)]), "operational");
        assert_eq!(overall(&[c(UNCONFIGURED, false), c("degraded", false)]), "degraded");
        assert_eq!(overall(&[c(UNCONFIGURED, false), c("outage", true)]), "outage");
    }
}
