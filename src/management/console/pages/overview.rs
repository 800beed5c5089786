//! Overview: the `/status` components and, over the last hour, day or week, requests, errors
//! by kind, spend and tokens by model and blocks by check, drawn as bar charts (SVG made here,
//! no script), counted from the receipt list the signed-in key may read; and the latency
//! percentiles of `GET /v1/latency` for the same window, p50 and p99 by model as a chart.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::ctx::Ctx;
use crate::error::ApiError;
use crate::management::handler::Reply;

/// At most this many receipts are read for one overview (5 pages of 200): enough for a glance,
/// bounded for a busy tenant; the page says when it stopped there.
const MAX_PAGES: usize = 5;

/// The latency chart shows the busiest models only (the API lists them busiest first).
const LATENCY_MODELS: usize = 8;

/// One aggregate per label.
#[derive(Default)]
struct Totals {
    requests: u64,
    errors: BTreeMap<String, f64>,
    spend: BTreeMap<String, f64>,
    tokens: BTreeMap<String, f64>,
    blocks: BTreeMap<String, f64>,
}

impl Totals {
    fn add(&mut self, r: &Value) {
        self.requests += 1;
        let model = r["model"].as_str().unwrap_or("?").to_string();
        let status = r["upstreamStatus"].as_str().unwrap_or("?");
        if status != "ok" {
            *self.errors.entry(status.to_string()).or_default() += 1.0;
        }
        *self.spend.entry(model.clone()).or_default() += r["costUsd"].as_f64().unwrap_or(0.0);
        let tokens = r["promptTokens"].as_f64().unwrap_or(0.0) + r["completionTokens"].as_f64().unwrap_or(0.0);
        *self.tokens.entry(model).or_default() += tokens;
        for check in r["checks"].as_array().into_iter().flatten() {
            if matches!(check["result"].as_str(), Some("BLOCK") | Some("deny")) {
                *self.blocks.entry(check["name"].as_str().unwrap_or("?").to_string()).or_default() += 1.0;
            }
        }
    }
}

/// Bars of a chart: label, value, and the bar's share of the largest value in percent.
fn bars(values: &BTreeMap<String, f64>) -> Value {
    let max = values.values().cloned().fold(0.0_f64, f64::max);
    let pct = |v: f64| if max > 0.0 { (v / max * 100.0).max(1.0) } else { 0.0 };
    values
        .iter()
        .enumerate()
        .map(|(i, (k, v))| json!({"label": k, "value": shown(*v), "pct": pct(*v), "y": i * 28}))
        .collect()
}

/// Milliseconds as the page shows them: one decimal.
fn ms(v: &Value) -> Option<f64> {
    v.as_f64().map(|ms| (ms * 10.0).round() / 10.0)
}

/// The latency part of the page from a `GET /v1/latency` answer: the window's count, p50 and
/// p99, and a p50 bar and a p99 bar per model (scaled to the largest p99, so the two compare).
fn latency(report: &Value) -> Value {
    let models: Vec<&Value> = report["byModel"].as_array().into_iter().flatten().take(LATENCY_MODELS).collect();
    let max = models.iter().filter_map(|m| m["p99Ms"].as_f64()).fold(0.0_f64, f64::max);
    let pct = |v: f64| if max > 0.0 { (v / max * 100.0).max(1.0) } else { 0.0 };
    let mut bars = Vec::new();
    for m in &models {
        for (name, field, alt) in [("p50", "p50Ms", false), ("p99", "p99Ms", true)] {
            let v = m[field].as_f64().unwrap_or(0.0);
            let label = format!("{} {name}", m["model"].as_str().unwrap_or("?"));
            bars.push(json!({"label": label, "value": ms(&m[field]), "pct": pct(v), "y": bars.len() * 28, "alt": alt}));
        }
    }
    json!({
        "count": report["count"].as_u64().unwrap_or(0),
        "p50": ms(&report["p50Ms"]),
        "p99": ms(&report["p99Ms"]),
        "chart": {"title": "p50 / p99 latency by model", "unit": "ms", "bars": bars},
    })
}

/// A whole count as an integer, money to six decimals.
fn shown(v: f64) -> Value {
    if v.fract() == 0.0 && v.abs() < 9e15 {
        json!(v as i64)
    } else {
        json!((v * 1e6).round() / 1e6)
    }
}

pub async fn page(c: &Ctx<'_>) -> Result<Reply, ApiError> {
    let window = match c.req.query("window") {
        Some("hour") => ("hour", chrono::Duration::hours(1)),
        Some("week") => ("week", chrono::Duration::weeks(1)),
        _ => ("day", chrono::Duration::days(1)),
    };
    let from = (chrono::Utc::now() - window.1).format("%Y-%m-%dT%H:%M:%SZ").to_string();
    let mut totals = Totals::default();
    let mut cursor: Option<String> = None;
    let mut capped = false;
    for i in 0..MAX_PAGES {
        let mut q = vec![
            ("from".to_string(), from.clone()),
            ("kind".into(), "model_call".into()),
            ("limit".into(), "200".into()),
        ];
        q.extend(cursor.take().map(|c| ("cursor".to_string(), c)));
        let page = c.get("/v1/receipts", &q).await?;
        page["receipts"].as_array().into_iter().flatten().for_each(|r| totals.add(r));
        cursor = page["nextCursor"].as_u64().map(|n| n.to_string());
        capped = cursor.is_some() && i + 1 == MAX_PAGES;
        if cursor.is_none() {
            break;
        }
    }
    let status = c.get("/status", &[]).await.unwrap_or(Value::Null);
    let latency = latency(&c.get("/v1/latency", &[("from".to_string(), from)]).await?);
    let data = json!({
        "window": window.0, "capped": capped, "requests": totals.requests, "status": status, "latency": latency,
        "charts": [
            {"title": "Errors by kind", "unit": "requests", "bars": bars(&totals.errors)},
            {"title": "Spend by model", "unit": "USD", "bars": bars(&totals.spend)},
            {"title": "Tokens by model", "unit": "tokens", "bars": bars(&totals.tokens)},
            {"title": "Blocks by check", "unit": "requests", "bars": bars(&totals.blocks)},
        ],
    });
    Ok(c.render(200, "overview.html", "overview", data))
}
