//! Request latency beside receipts (unsigned `latencyMs`) and `GET /v1/latency`: calls to a
//! stand-in that answers after a known delay, the receipts' latencies against those delays, the
//! route's nearest-rank percentiles against the receipts', its model filter and a developer
//! key's scope, bad input, tool calls and prompt runs; and a receipt journal written before the
//! field, replayed at start. On SQLite and PostgreSQL.

mod support;

use serde_json::{json, Value};
use support::standin_mcp::McpStandin;
use support::{backends, http, Backend, Gateway, Resp};

/// A chat call whose answer the stand-in holds back `ms` milliseconds (`DELAY:`); `n` keeps
/// every body distinct, so none is answered from the cache.
fn delayed(g: &Gateway, key: &str, model: &str, ms: u64, n: usize, end_user: Option<&str>) -> Resp {
    let body = json!({"model": model, "messages": [{"role": "user", "content": format!("DELAY:{ms} call {n}")}]});
    let auth = format!("Bearer {key}");
    let mut headers = vec![("Content-Type", "application/json"), ("Authorization", auth.as_str())];
    if let Some(u) = end_user {
        headers.push(("X-Tollgate-Actor", u));
    }
    let r = http::request(g.gw, "POST", "/v1/chat/completions", &headers, &serde_json::to_vec(&body).unwrap());
    assert_eq!(r.status, 200, "{}", r.text());
    r
}

/// The value at nearest rank `ceil(p/100 × n)` of `values` (sorted here).
fn nearest_rank(values: &[f64], p: f64) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = (p / 100.0 * v.len() as f64).ceil() as usize;
    v[rank.max(1) - 1]
}

/// The figures `GET /v1/latency` must give for these latencies.
fn expected(latencies: &[f64]) -> Value {
    json!({
        "count": latencies.len(),
        "p50Ms": nearest_rank(latencies, 50.0),
        "p90Ms": nearest_rank(latencies, 90.0),
        "p99Ms": nearest_rank(latencies, 99.0),
        "maxMs": nearest_rank(latencies, 100.0),
    })
}

/// The report's own figures (without `byModel`, or a `byModel` entry without `model`).
fn figures(v: &Value) -> Value {
    let mut v = v.clone();
    let o = v.as_object_mut().unwrap();
    o.remove("byModel");
    o.remove("model");
    v
}

/// Every model-call receipt of the tenant in the list, newest first (one page: the tests make
/// fewer than 200).
fn model_calls(g: &Gateway) -> Vec<Value> {
    g.get_json(&g.key, "/v1/receipts?kind=model_call&limit=200")["receipts"].as_array().unwrap().clone()
}

fn latency_report(g: &Gateway, key: &str, query: &str) -> Value {
    g.get_json(key, &format!("/v1/latency{query}"))
}

#[test]
fn every_call_records_its_latency_and_the_route_gives_nearest_rank_percentiles() {
    for b in backends() {
        let (g, _up) = support::with_standin(&b, &[]);
        let (dev_id, dev) = g.new_key(&g.key, &json!({"label": "dev", "role": "developer"}));
        let mut n = 0;
        let mut call = |key: &str, model: &str, ms: u64, end_user: Option<&str>| {
            n += 1;
            (delayed(&g, key, model, ms, n, end_user), ms)
        };
        let mut calls = Vec::new();
        for ms in [20, 40, 60, 80, 100, 120, 140, 160] {
            calls.push(call(&g.key, "gpt-4o-mini", ms, None));
        }
        for ms in [50, 150, 250] {
            calls.push(call(&g.key, "gpt-4o", ms, None));
        }
        calls.push(call(&dev, "gpt-4o-mini", 30, None));
        calls.push(call(&dev, "gpt-4o", 200, Some("alice")));

        // Each receipt: at least the delay the stand-in held the answer, not signed.
        for (r, ms) in &calls {
            let receipt = g.receipt_of(r);
            let latency = receipt["latencyMs"].as_f64().unwrap_or_else(|| panic!("{b:?}: no latencyMs: {receipt}"));
            assert!(latency >= *ms as f64, "{b:?}: latency {latency} ms under the stand-in's delay of {ms} ms");
            assert_eq!(receipt["verified"], true, "{b:?}: the signature does not cover the latency");
        }
        let admin = g.get_json(&g.key, "/v1/receipts?kind=admin&limit=1")["receipts"][0].clone();
        assert!(admin["latencyMs"].is_null(), "{b:?}: an admin receipt has no request to time: {admin}");

        // The list carries the same values as each receipt.
        let listed = model_calls(&g);
        assert_eq!(listed.len(), calls.len());
        for entry in &listed {
            let one = g.receipt(entry["receiptId"].as_str().unwrap());
            assert_eq!(entry["latencyMs"], one["latencyMs"], "{b:?}");
        }
        let latencies = |keep: &dyn Fn(&Value) -> bool| -> Vec<f64> {
            listed.iter().filter(|r| keep(r)).map(|r| r["latencyMs"].as_f64().unwrap()).collect()
        };

        // The manager: every model call, in total and by model (busiest first).
        let all = latency_report(&g, &g.key, "");
        assert_eq!(figures(&all), expected(&latencies(&|_| true)), "{b:?}: {all}");
        let by_model = all["byModel"].as_array().unwrap();
        let names: Vec<&str> = by_model.iter().map(|m| m["model"].as_str().unwrap()).collect();
        assert_eq!(names, ["gpt-4o-mini", "gpt-4o"], "{b:?}");
        for m in by_model {
            let want = expected(&latencies(&|r| r["model"] == m["model"]));
            assert_eq!(figures(m), want, "{b:?}: {m}");
        }
        let one = latency_report(&g, &g.key, "?model=gpt-4o");
        assert_eq!(figures(&one), expected(&latencies(&|r| r["model"] == "gpt-4o")), "{b:?}: {one}");
        assert_eq!(one["byModel"].as_array().unwrap().len(), 1, "{b:?}: {one}");
        assert_eq!(one["byModel"][0]["count"], 4);

        // A developer key: its own requests only, its end users' included.
        let mine = latency_report(&g, &dev, "");
        let own = |r: &Value| r["actor"] == dev_id.as_str() || r["actor"] == format!("{dev_id}/alice").as_str();
        assert_eq!(figures(&mine), expected(&latencies(&own)), "{b:?}: {mine}");
        assert_eq!(mine["count"], 2);
        let mine = latency_report(&g, &dev, "?model=gpt-4o");
        assert_eq!(
            (mine["count"].as_u64(), mine["p50Ms"].as_f64()),
            (Some(1), latencies(&|r| own(r) && r["model"] == "gpt-4o").first().copied())
        );

        // The period: one that ends before the calls holds none; `from` bounds it too.
        let empty = latency_report(&g, &g.key, "?to=2000-01-01T00:00:00Z");
        assert_eq!(
            empty,
            json!({"count": 0, "p50Ms": null, "p90Ms": null, "p99Ms": null, "maxMs": null, "byModel": []})
        );
        let hour_ago = (chrono::Utc::now() - chrono::Duration::hours(1)).format("%Y-%m-%dT%H:%M:%SZ").to_string();
        assert_eq!(latency_report(&g, &g.key, &format!("?from={hour_ago}"))["count"], calls.len());
        let future = (chrono::Utc::now() + chrono::Duration::hours(1)).format("%Y-%m-%dT%H:%M:%SZ").to_string();
        assert_eq!(latency_report(&g, &g.key, &format!("?from={future}"))["count"], 0);

        // Bad input: the error envelope.
        for query in ["?from=yesterday", "?to=2026-13-01T00:00:00Z"] {
            let r = g.mgmt("GET", &format!("/v1/latency{query}"), Some(&g.key), None);
            assert_eq!(r.status, 400, "{b:?} {query}: {}", r.text());
            let err = &r.json()["error"];
            assert_eq!((err["type"].as_str(), err["code"].as_u64()), (Some("invalid_request"), Some(400)), "{err}");
            assert!(err["message"].as_str().unwrap().contains("RFC 3339"), "{err}");
        }
        assert_eq!(g.mgmt("GET", "/v1/latency", None, None).status, 401);
    }
}

/// The other receipts of requests carry it too: a tool call's (not counted by the route, which
/// reports model calls) and a prompt run's.
#[test]
fn tool_calls_and_prompt_runs_record_their_latency() {
    for b in backends() {
        let (g, _up) = support::with_standin(&b, &[]);
        let mcp = McpStandin::start();
        let r = g.mgmt("POST", "/v1/tool-servers", Some(&g.key), Some(&json!({"name": "search", "url": mcp.url()})));
        assert_eq!(r.status, 201, "{}", r.text());
        let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "search", "arguments": {"q": "x"}}});
        let auth = format!("Bearer {}", g.key);
        let headers = [
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("Authorization", auth.as_str()),
        ];
        let r = http::request(g.gw, "POST", "/mcp/search", &headers, &serde_json::to_vec(&call).unwrap());
        assert_eq!(r.status, 200, "{}", r.text());
        let tool = g.receipt_of(&r);
        assert_eq!(tool["kind"], "tool_call");
        assert!(tool["latencyMs"].as_f64().is_some_and(|ms| ms > 0.0), "{b:?}: {tool}");
        assert_eq!(latency_report(&g, &g.key, "")["count"], 0, "{b:?}: tool calls are not model calls");

        let p =
            g.mgmt("POST", "/v1/prompts", Some(&g.key), Some(&json!({"name": "slow", "content": "DELAY:80 {{x}}"})));
        assert_eq!(p.status, 201, "{}", p.text());
        let id = p.json()["id"].as_str().unwrap().to_string();
        let versions = g.get_json(&g.key, &format!("/v1/prompts/{id}/versions"));
        let run =
            json!({"promptId": id, "versionId": versions[0]["id"], "variables": {"x": "y"}, "model": "gpt-4o-mini"});
        let run = g.mgmt("POST", "/v1/prompts/run", Some(&g.key), Some(&run));
        assert_eq!(run.status, 200, "{}", run.text());
        let ran = model_calls(&g);
        assert_eq!(ran.len(), 1, "{b:?}: {ran:?}");
        let ms = ran[0]["latencyMs"].as_f64().unwrap_or_else(|| panic!("{b:?}: {}", ran[0]));
        assert!(ms >= 80.0, "{b:?}: the run's call waited 80 ms for its answer, its receipt says {ms}");
        assert_eq!(latency_report(&g, &g.key, "")["p50Ms"].as_f64(), Some(ms));
    }
}

/// Journal lines written before `latency_us` existed (their rows one value short) replay at
/// start as receipts whose latency is unknown, still verified; a call after the restart records
/// its own. SQLite (the journal is SQLite's).
#[test]
fn a_journal_written_before_the_field_replays_with_the_latency_unknown() {
    // The applier never runs during the test and the snapshot refresh (which reads spend, so
    // applies the journal first) only at start: the calls stay in the journal until the kill.
    let env = [
        ("TOLLGATE_RECEIPTS_JOURNAL", "1"),
        ("TOLLGATE_RECEIPTS_JOURNAL_APPLY_MS", "3600000"),
        ("TOLLGATE_SNAPSHOT_REFRESH_MS", "3600000"),
    ];
    let (mut g, _up) = support::with_standin(&Backend::Sqlite, &env);
    let ids: Vec<String> = (0..3)
        .map(|n| delayed(&g, &g.key, "gpt-4o-mini", 10, n, None).header("x-tollgate-receipt-id").unwrap().to_string())
        .collect();
    g.signal_and_wait(9);

    // Each journaled record as an older version wrote it: a JSON line (the journal's format
    // before session 50), its row without the last value.
    let dir = g.dir.join("tollgate.db.receipts");
    let mut rewritten = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let mut out = String::new();
        for record in tollgate::store::journal::read_segment(&path, true).unwrap() {
            let mut record = serde_json::to_value(&record).unwrap();
            let row = record["r"].as_array_mut().unwrap();
            assert!(row.last().unwrap().is_i64() || row.last().unwrap().is_null(), "latency_us is the last value");
            row.pop();
            rewritten += 1;
            out.push_str(&record.to_string());
            out.push('\n');
        }
        std::fs::write(path.with_extension("jsonl"), out).unwrap();
        std::fs::remove_file(&path).unwrap();
    }
    assert!(rewritten >= 3, "the calls were still in the journal: {rewritten} lines");

    g.spawn();
    assert!(g.logs().contains("receipts written to the database at start"), "{}", g.logs());
    for id in &ids {
        let r = g.receipt(id);
        assert!(r["latencyMs"].is_null(), "an old line's latency is unknown: {r}");
        assert_eq!(r["verified"], true, "{r}");
    }
    let after = delayed(&g, &g.key, "gpt-4o-mini", 10, 99, None);
    assert!(g.receipt_of(&after)["latencyMs"].as_f64().is_some_and(|ms| ms >= 10.0));
    let report = latency_report(&g, &g.key, "");
    assert_eq!(report["count"], 1, "only the receipt with a latency counts: {report}");
    let chain =
        g.get_json(&g.key, &format!("/v1/receipts/{}/verify-chain", after.header("x-tollgate-receipt-id").unwrap()));
    assert_eq!(chain["ok"], true, "{chain}");
}
