//! The Grafana dashboard (`packaging/grafana/tollgate.json`) queries only what the binary
//! exposes: every metric it names, every label it filters or groups by, and every label value it
//! filters on for equality are read back from a running gateway's `/metrics` after traffic that
//! makes each of those series (an answer, a cache hit, a guardrail block, an unknown key, a rate
//! limit and a budget refusal).

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{backends, http, with_standin, Gateway};

const DASHBOARD: &str = include_str!("../packaging/grafana/tollgate.json");

/// Labels Prometheus attaches when it scrapes a target; the binary never exposes them.
const TARGET_LABELS: &[&str] = &["instance", "job"];

/// What issue 17 asks the dashboard to show, as the selector that shows it: (what, metric,
/// equality matchers the selector must carry).
type Shown = (&'static str, &'static str, &'static [(&'static str, &'static str)]);
const REQUIRED: &[Shown] = &[
    ("traffic", "tollgate_requests_total", &[]),
    ("errors by type", "tollgate_errors_total", &[]),
    ("latency percentiles", "tollgate_request_duration_seconds_bucket", &[]),
    ("tokens by model", "tollgate_tokens_total", &[]),
    ("cost by model", "tollgate_cost_usd_total", &[]),
    ("receipts written", "tollgate_receipts_written_total", &[]),
    ("receipt writer lag", "tollgate_receipt_queue_depth", &[]),
    ("guardrail blocks", "tollgate_guardrail_events_total", &[("result", "BLOCK")]),
    ("cache savings", "tollgate_cache_saved_usd_total", &[]),
    ("rate-limit blocks", "tollgate_checks_total", &[("check", "RATELIMIT"), ("result", "BLOCK")]),
    ("budget blocks", "tollgate_checks_total", &[("check", "BUDGET"), ("result", "BLOCK")]),
];

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Str(String),
    /// A label-matching or comparison operator: `=`, `!=`, `=~`, `!~`, `==`.
    Op(String),
    Other(char),
}

/// Just enough of PromQL's (and the exposition format's) lexer to find selectors and groupings.
fn tokens(text: &str) -> Vec<Tok> {
    let c: Vec<char> = text.chars().collect();
    let (mut i, mut out) = (0, Vec::new());
    while i < c.len() {
        let ch = c[i];
        if ch.is_whitespace() {
            i += 1;
        } else if ch.is_ascii_alphabetic() || ch == '_' {
            let start = i;
            while i < c.len() && (c[i].is_ascii_alphanumeric() || c[i] == '_' || c[i] == ':') {
                i += 1;
            }
            out.push(Tok::Ident(c[start..i].iter().collect()));
        } else if ch == '"' || ch == '\'' {
            let mut s = String::new();
            i += 1;
            while i < c.len() && c[i] != ch {
                if c[i] == '\\' && i + 1 < c.len() {
                    i += 1;
                }
                s.push(c[i]);
                i += 1;
            }
            i += 1;
            out.push(Tok::Str(s));
        } else if let Some(op) =
            ["=~", "!~", "!=", "=="].iter().find(|op| c[i..].starts_with(&op.chars().collect::<Vec<_>>()))
        {
            out.push(Tok::Op(op.to_string()));
            i += 2;
        } else if ch == '=' {
            out.push(Tok::Op("=".into()));
            i += 1;
        } else {
            out.push(Tok::Other(ch));
            i += 1;
        }
    }
    out
}

#[derive(Debug, Default, PartialEq)]
struct Selector {
    metric: String,
    /// (label, operator, value)
    matchers: Vec<(String, String, String)>,
}

#[derive(Debug, Default, PartialEq)]
struct Query {
    selectors: Vec<Selector>,
    /// Labels of every `by (...)` / `without (...)` in the expression.
    grouping: Vec<String>,
}

/// The `tollgate_*` selectors and the groupings of a PromQL expression. A scrape line
/// (`name{label="value"} 1`) reads as one selector too.
fn parse(expr: &str) -> Query {
    let t = tokens(expr);
    let mut q = Query::default();
    let mut i = 0;
    while i < t.len() {
        match &t[i] {
            Tok::Ident(name) if name.starts_with("tollgate_") => {
                let mut sel = Selector { metric: name.clone(), matchers: Vec::new() };
                if t.get(i + 1) == Some(&Tok::Other('{')) {
                    i += 2;
                    while let (Some(Tok::Ident(l)), Some(Tok::Op(op)), Some(Tok::Str(v))) =
                        (t.get(i), t.get(i + 1), t.get(i + 2))
                    {
                        sel.matchers.push((l.clone(), op.clone(), v.clone()));
                        i += 3;
                        if t.get(i) == Some(&Tok::Other(',')) {
                            i += 1;
                        }
                    }
                    assert_eq!(t.get(i), Some(&Tok::Other('}')), "unreadable selector of {name} in {expr}");
                }
                q.selectors.push(sel);
            }
            Tok::Ident(kw) if (kw == "by" || kw == "without") && t.get(i + 1) == Some(&Tok::Other('(')) => {
                i += 2;
                while let Some(Tok::Ident(l)) = t.get(i) {
                    q.grouping.push(l.clone());
                    i += 1;
                    if t.get(i) == Some(&Tok::Other(',')) {
                        i += 1;
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }
    q
}

/// Every series of a scrape: (name, labels).
type Series = Vec<(String, BTreeMap<String, String>)>;

fn series(exposition: &str) -> Series {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let s = parse(l).selectors.into_iter().next()?;
            Some((s.metric, s.matchers.into_iter().map(|(l, _, v)| (l, v)).collect()))
        })
        .collect()
}

/// One query of the dashboard: where it is, its expression, its legend.
struct Target {
    place: String,
    expr: String,
    legend: String,
}

fn targets(dashboard: &Value) -> Vec<Target> {
    let mut out = Vec::new();
    for p in dashboard["panels"].as_array().expect("panels") {
        for t in p["targets"].as_array().into_iter().flatten() {
            out.push(Target {
                place: format!("panel \"{}\" target {}", p["title"].as_str().unwrap_or("?"), t["refId"]),
                expr: t["expr"].as_str().unwrap_or_default().to_string(),
                legend: t["legendFormat"].as_str().unwrap_or_default().to_string(),
            });
        }
    }
    for v in dashboard["templating"]["list"].as_array().into_iter().flatten() {
        if let Some(query) = v["query"]["query"].as_str() {
            let place = format!("variable {}", v["name"]);
            out.push(Target { place, expr: query.to_string(), legend: String::new() });
        }
    }
    out
}

/// Whatever a target asks for that the scraped series do not have.
fn problems(targets: &[Target], have: &Series) -> Vec<String> {
    let mut out = Vec::new();
    let scrape_labels = |l: &str| TARGET_LABELS.contains(&l);
    for t in targets {
        let q = parse(&t.expr);
        if q.selectors.is_empty() {
            out.push(format!("{}: queries no tollgate_ metric: {}", t.place, t.expr));
        }
        for s in &q.selectors {
            let of: Vec<&BTreeMap<String, String>> =
                have.iter().filter(|(n, _)| *n == s.metric).map(|(_, l)| l).collect();
            if of.is_empty() {
                out.push(format!("{}: metric {} is not exposed", t.place, s.metric));
                continue;
            }
            for (label, op, value) in s.matchers.iter().filter(|(l, _, _)| !scrape_labels(l)) {
                if !of.iter().any(|ls| ls.contains_key(label)) {
                    out.push(format!("{}: {} has no label {label}", t.place, s.metric));
                } else if op == "=" && !value.contains('$') && !of.iter().any(|ls| ls.get(label) == Some(value)) {
                    out.push(format!("{}: no series {}{{{label}=\"{value}\"}}", t.place, s.metric));
                }
            }
            for label in q.grouping.iter().filter(|l| !scrape_labels(l)) {
                if !of.iter().any(|ls| ls.contains_key(label)) {
                    out.push(format!("{}: groups by {label}, which {} lacks", t.place, s.metric));
                }
            }
        }
        // A legend naming a label the result does not keep renders empty.
        for part in t.legend.split("{{").skip(1) {
            let label = part.split("}}").next().unwrap_or_default().trim();
            if !q.grouping.iter().any(|g| g == label) {
                out.push(format!("{}: legend {{{{{label}}}}} is not a label the query groups by", t.place));
            }
        }
    }
    out
}

fn scrape(g: &Gateway) -> Series {
    let r = http::request(g.metrics, "GET", "/metrics", &[], b"");
    assert_eq!(r.status, 200);
    series(&r.text())
}

const POLICY: &str = "guardrails:\n  applyTo: [request]\n  pii:\n    credit_card: block\ncache:\n  mode: exact\n";

#[test]
fn the_dashboard_is_a_grafana_dashboard_covering_what_issue_17_asks() {
    let d: Value = serde_json::from_str(DASHBOARD).expect("packaging/grafana/tollgate.json is JSON");
    assert!(d["uid"].is_string() && d["title"].is_string() && d["schemaVersion"].is_u64());
    let panels = d["panels"].as_array().expect("panels");
    let mut ids: Vec<u64> = panels.iter().map(|p| p["id"].as_u64().expect("every panel has an id")).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), panels.len(), "panel ids are unique");
    for p in panels.iter().filter(|p| p["type"] != "row") {
        let g = &p["gridPos"];
        assert!(g["x"].as_u64().unwrap() + g["w"].as_u64().unwrap() <= 24, "{} is wider than the grid", p["title"]);
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{} uses the dashboard's data source", p["title"]);
        assert!(!p["targets"].as_array().is_none_or(Vec::is_empty), "{} has a query", p["title"]);
    }
    let selectors: Vec<Selector> = targets(&d).iter().flat_map(|t| parse(&t.expr).selectors).collect();
    for (what, metric, matchers) in REQUIRED {
        let shown = selectors.iter().any(|s| {
            s.metric == *metric
                && matchers.iter().all(|(l, v)| s.matchers.iter().any(|(ml, op, mv)| ml == l && op == "=" && mv == v))
        });
        assert!(shown, "the dashboard shows {what} ({metric} {matchers:?})");
    }
}

/// The check below is only as good as its reading of PromQL: a misspelt metric, label or value,
/// and a legend on a label the query drops, are each caught.
#[test]
fn the_query_check_catches_a_misspelt_metric_label_value_or_legend() {
    let have = series(
        "# TYPE tollgate_checks_total counter\n\
         tollgate_checks_total{check=\"CACHE\",result=\"HIT\"} 2\n\
         tollgate_request_duration_seconds_bucket{route=\"chat\",le=\"0.5\"} 1\n",
    );
    let target = |expr: &str, legend: &str| Target { place: "t".into(), expr: expr.into(), legend: legend.into() };
    let good = [
        target("sum by (result) (rate(tollgate_checks_total{check=\"CACHE\", instance=~\"$i\"}[5m]))", "{{result}}"),
        target("histogram_quantile(0.99, sum by (le, route) (rate(tollgate_request_duration_seconds_bucket[$__rate_interval])))", ""),
    ];
    assert_eq!(problems(&good, &have), Vec::<String>::new());
    for (expr, legend, problem) in [
        ("rate(tollgate_check_total[5m])", "", "metric tollgate_check_total is not exposed"),
        ("rate(tollgate_checks_total{name=\"CACHE\"}[5m])", "", "tollgate_checks_total has no label name"),
        ("rate(tollgate_checks_total{check=\"cache\"}[5m])", "", "no series tollgate_checks_total{check=\"cache\"}"),
        ("sum by (model) (rate(tollgate_checks_total[5m]))", "", "groups by model, which tollgate_checks_total lacks"),
        ("sum(rate(tollgate_checks_total[5m]))", "{{check}}", "legend {{check}} is not a label the query groups by"),
        ("sum(rate(other_total[5m]))", "", "queries no tollgate_ metric"),
    ] {
        let found = problems(&[target(expr, legend)], &have);
        assert!(found.iter().any(|p| p.contains(problem)), "{expr}: expected \"{problem}\", got {found:?}");
    }
}

#[test]
fn every_series_the_dashboard_queries_is_exposed_by_the_binary() {
    let d: Value = serde_json::from_str(DASHBOARD).expect("packaging/grafana/tollgate.json is JSON");
    let queries = targets(&d);
    for b in backends() {
        let (g, _up) = with_standin(&b, &[]);
        let body = json!({"name": "dashboard", "enabled": true, "yaml": POLICY});
        let r = g.mgmt("POST", "/v1/policies", Some(&g.key), Some(&body));
        assert_eq!(r.status, 201, "{}", r.text());

        // An answer with usage, then the same request from the cache.
        assert_eq!(g.say(&g.key, "gpt-4o-mini", "what is 2+2?").status, 200);
        let hit = g.say(&g.key, "gpt-4o-mini", "what is 2+2?");
        assert_eq!(hit.header("x-tollgate-cache"), Some("HIT"), "{}", hit.text());
        assert_eq!(g.say(&g.key, "gpt-4o-mini", "my card is 4111 1111 1111 1111").status, 400);
        assert_eq!(g.say("tollgate_sk_unknown", "gpt-4o-mini", "hi").status, 401);

        let (id, limited) = g.create_key("rpm");
        let r = g.mgmt("PATCH", &format!("/v1/keys/{id}/limits"), Some(&g.key), Some(&json!({"rpmLimit": 1})));
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(g.say(&limited, "gpt-4o-mini", "one").status, 200);
        assert_eq!(g.say(&limited, "gpt-4o-mini", "two").status, 429);

        let (id, broke) = g.create_key("budget");
        let budget = json!({"scope": "key", "scopeId": id, "amountUsd": 1e-9, "period": "total"});
        let r = g.mgmt("POST", "/v1/budgets", Some(&g.key), Some(&budget));
        assert_eq!(r.status, 201, "{}", r.text());
        assert_eq!(g.say(&broke, "gpt-4o-mini", "three").status, 402);

        // Metrics are recorded just after each answer, and receipts by the writer: wait
        // (bounded) until every series is there.
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let found = problems(&queries, &scrape(&g));
            if found.is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{b:?}: the dashboard queries what the binary does not expose:\n{}",
                found.join("\n")
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
