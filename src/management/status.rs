//! `GET /status` (no authentication): real component checks, no tenant data.

use std::time::Duration;

use serde_json::{json, Value};

use super::{Handled, Reply};
use crate::app::App;
use crate::config::ProviderName;

fn component(name: &str, group: &str, status: &str, critical: bool, detail: String) -> Value {
    json!({ "name": name, "group": group, "status": status, "critical": critical, "detail": detail })
}

pub async fn get(app: &App) -> Handled {
    let mut components = Vec::new();
    components.push(component(
        "gateway",
        "core",
        "operational",
        true,
        format!("listening on {}; up {} s", app.config.listen.gateway, app.started.elapsed().as_secs()),
    ));

    let db = tokio::time::timeout(Duration::from_secs(2), app.store.ping()).await;
    let (db_status, db_detail) = match db {
        Ok(Ok(())) => ("operational", format!("{:?} reachable", app.store.backend()).to_lowercase()),
        Ok(Err(e)) => ("outage", format!("query failed: {}", short(&e.to_string()))),
        Err(_) => ("outage", "no answer within 2 s".to_string()),
    };
    components.push(component("database", "core", db_status, true, db_detail));

    let snap = app.snapshot.load();
    for p in [ProviderName::OpenAi, ProviderName::Anthropic] {
        let creds: Vec<_> = snap.providers().filter(|(_, c)| c.provider == p).collect();
        let failing = creds.iter().filter(|(_, c)| c.status == "failing").count();
        let status = if failing > 0 { "degraded" } else { "operational" };
        components.push(component(
            p.as_str(),
            "providers",
            status,
            false,
            format!("{} credential(s) stored, {failing} failing their last test", creds.len()),
        ));
    }

    let overall = if components.iter().any(|c| c["critical"] == true && c["status"] == "outage") {
        "outage"
    } else if components.iter().any(|c| c["status"] != "operational") {
        "degraded"
    } else {
        "operational"
    };
    let updated = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string();
    Ok(Reply::Json(200, json!({ "status": overall, "components": components, "updatedAt": updated })))
}

/// Database errors can be long; the public page needs only their gist.
fn short(s: &str) -> String {
    s.chars().take(160).collect()
}
