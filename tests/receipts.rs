//! Receipts end to end: one per request with a valid key, the receipt API, tamper detection,
//! concurrency, several processes on PostgreSQL, and durability across SIGTERM and SIGKILL.

mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};
use support::{backends, http, Backend, Gateway};

use support::with_standin as setup;

fn receipt(g: &Gateway, key: &str, id: &str) -> Value {
    let r = g.mgmt("GET", &format!("/v1/receipts/{id}"), Some(key), None);
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

fn verify_chain(g: &Gateway, key: &str, id: &str, query: &str) -> Value {
    let r = g.mgmt("GET", &format!("/v1/receipts/{id}/verify-chain{query}"), Some(key), None);
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

#[test]
fn every_request_with_a_valid_key_leaves_exactly_one_receipt() {
    for b in backends() {
        let (g, _up) = setup(&b, &[]);
        let key_id =
            g.mgmt("GET", "/v1/keys", Some(&g.key), None).json()["data"][0]["id"].as_str().unwrap().to_string();
        // The setup's provider PUTs left admin receipts (docs/log.md §8): the chain starts with
        // them, and the calls' receipts follow the newest.
        let base = g.newest_seq(&g.key);
        let log = g.get_json(&g.key, "/v1/receipts?limit=200")["receipts"].clone();
        assert_eq!(log.as_array().unwrap().len() as u64, base);
        assert!(log.as_array().unwrap().iter().all(|r| r["kind"] == "admin"), "{log}");
        let genesis = receipt(&g, &g.key, log[base as usize - 1]["receiptId"].as_str().unwrap());
        assert_eq!((genesis["seq"].as_u64(), genesis["prevHash"].as_str()), (Some(1), Some("0".repeat(64).as_str())));
        let prior = receipt(&g, &g.key, log[0]["receiptId"].as_str().unwrap());
        let auth = format!("Bearer {}", g.key);
        let ok = http::request(
            g.gw,
            "POST",
            "/v1/chat/completions",
            &[("Authorization", &auth), ("X-Tollgate-Actor", "alice"), ("X-Request-Id", "req-42")],
            br#"{"model":"gpt-4o-mini","messages":[]}"#,
        );
        let failed = g.chat_raw(&g.key, r#"{"model":"gpt-fail","messages":[]}"#);
        let invalid = g.chat_raw(&g.key, r#"{"model":"gpt-4o-mini"}"#);
        let unauthenticated = g.chat_raw("tollgate_sk_nope", r#"{"model":"gpt-4o-mini","messages":[]}"#);
        assert_eq!((ok.status, failed.status, invalid.status, unauthenticated.status), (200, 502, 400, 401));
        assert!(unauthenticated.header("x-tollgate-receipt-id").is_none(), "no key, no receipt");
        let ids: Vec<String> =
            [&ok, &failed, &invalid].iter().map(|r| r.header("x-tollgate-receipt-id").unwrap().to_string()).collect();
        assert_eq!(g.newest_seq(&g.key), base + 3, "committed before the answers ended");
        assert_eq!(g.call_count(&g.key), 3, "one receipt per request with a valid key");

        let r = receipt(&g, &g.key, &ids[0]);
        assert_eq!(r["seq"], base + 1);
        assert_eq!(r["prevHash"], prior["thisHash"]);
        assert_eq!(r["v"], 1);
        assert_eq!(r["tenantId"], g.tenant_id.as_str());
        assert_eq!(r["actor"], format!("{key_id}/alice"));
        assert_eq!(r["requestId"], "req-42");
        assert_eq!((r["provider"].as_str(), r["model"].as_str()), (Some("openai"), Some("gpt-4o-mini")));
        assert_eq!((r["promptTokens"].as_u64(), r["completionTokens"].as_u64()), (Some(11), Some(7)));
        assert!((r["costUsd"].as_f64().unwrap() - 5.85e-6).abs() < 1e-15);
        assert_eq!(r["checks"], json!([{"name": "UPSTREAM", "result": "PASS"}]));
        assert_eq!(r["upstreamStatus"], "ok");
        assert_eq!(r["kind"], "model_call");
        // Stamped with the baseline pack set (stamping is on by default).
        let packs = g.mgmt("GET", "/v1/compliance/packs", Some(&g.key), None).json();
        assert_eq!(r["receiptPackVersion"], packs["packSetVersion"]);
        assert_eq!(r["verified"], true);
        assert_eq!(r["thisHash"].as_str().unwrap().len(), 64);
        assert!(regex_like_ts(r["ts"].as_str().unwrap()), "{}", r["ts"]);

        let r2 = receipt(&g, &g.key, &ids[1]);
        assert_eq!((r2["seq"].as_u64(), r2["upstreamStatus"].as_str()), (Some(base + 2), Some("error")));
        assert_eq!(r2["checks"][0]["result"], "FAIL");
        assert_eq!(r2["prevHash"], r["thisHash"]);
        let r3 = receipt(&g, &g.key, &ids[2]);
        assert_eq!(
            (r3["upstreamStatus"].as_str(), r3["checks"][0]["result"].as_str()),
            (Some("skipped"), Some("SKIPPED"))
        );
        assert_eq!(r3["model"], "gpt-4o-mini");

        let keys = g.mgmt("GET", "/v1/compliance/signing-keys", Some(&g.key), None).json();
        assert_eq!(keys["keys"][0]["keyId"], r["keyId"]);
        assert_eq!(keys["activeKeyId"], r["keyId"]);
        assert!(keys["scope"].is_string() && keys["disclaimer"].is_string());
        let status = g.mgmt("GET", "/status", None, None).json();
        let names: Vec<&str> =
            status["components"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert!(names.contains(&"receipt-writer") && names.contains(&"signer"), "{names:?}");
        assert!(g.metric_eventually("tollgate_receipts_written_total", &[], 3.0) >= 3.0);
        // One request at a time: on SQLite each commits its own receipt on its thread; on
        // PostgreSQL the writer commits them all.
        let by = if matches!(b, Backend::Sqlite) { "by=\"own\"" } else { "by=\"writer\"" };
        assert_eq!(g.metric("tollgate_receipt_commits_total", &[by]), 3.0, "{by}");
        assert_eq!(g.metric("tollgate_receipt_commits_total", &[]), 3.0, "every waited-for receipt counted once");
    }
}

fn regex_like_ts(ts: &str) -> bool {
    let b = ts.as_bytes();
    ts.len() == 23 && b[4] == b'-' && b[10] == b' ' && b[13] == b':' && b[19] == b'.'
}

#[test]
fn list_filters_cursor_and_bad_queries() {
    let (g, _up) = setup(&Backend::Sqlite, &[]);
    // The setup's provider PUTs left `base` admin receipts (docs/log.md §8), seqs 1..=base,
    // listed and filtered like any receipt; the 31 calls follow.
    let base = g.newest_seq(&g.key);
    for i in 0..30 {
        let model = if i % 3 == 0 { "gpt-fail" } else { "gpt-4o-mini" };
        g.chat_raw(&g.key, &format!(r#"{{"model":"{model}","messages":[]}}"#));
    }
    g.chat_raw(&g.key, r#"{"model":"claude-3-5-haiku","messages":[]}"#);
    let last = base + 31;
    assert_eq!(g.wait_receipts(&g.key, last), last);

    let page1 = g.mgmt("GET", "/v1/receipts", Some(&g.key), None).json();
    let seqs: Vec<u64> = page1["receipts"].as_array().unwrap().iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (last - 24..=last).rev().collect::<Vec<_>>(), "default limit 25, seq descending");
    assert_eq!(page1["nextCursor"], last - 24);
    let page2 = g.mgmt("GET", &format!("/v1/receipts?cursor={}", last - 24), Some(&g.key), None).json();
    let seqs: Vec<u64> = page2["receipts"].as_array().unwrap().iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..last - 24).rev().collect::<Vec<_>>(), "the rest, down to the first admin receipt");
    assert_eq!(page2["nextCursor"], Value::Null);

    let count = |q: &str| {
        let r = g.mgmt("GET", &format!("/v1/receipts?limit=200&{q}"), Some(&g.key), None);
        assert_eq!(r.status, 200, "{q}: {}", r.text());
        r.json()["receipts"].as_array().unwrap().len()
    };
    assert_eq!(count("model=gpt-fail"), 10);
    assert_eq!(count("upstreamStatus=error"), 10);
    assert_eq!(count("upstreamStatus=ok&model=gpt-4o-mini"), 20);
    assert_eq!(count("provider=anthropic"), 1);
    assert_eq!(count("check=UPSTREAM"), 31);
    assert_eq!(count("check=GUARDRAIL"), 0);
    assert_eq!(count("check=authz"), base as usize, "the admin receipts' check");
    assert_eq!(count("kind=model_call"), 31);
    assert_eq!(count("kind=admin"), base as usize);
    assert_eq!(count("from=2000-01-01T00:00:00Z&to=2999-01-01T00:00:00%2B02:00"), last as usize);
    assert_eq!(count("kind=model_call&from=2000-01-01T00:00:00Z&to=2999-01-01T00:00:00%2B02:00"), 31);
    assert_eq!(count("from=2999-01-01T00:00:00Z"), 0);
    // Below seq base + 10: calls 0..=8, of which 0, 3 and 6 went to gpt-fail.
    assert_eq!(count(&format!("model=gpt-fail&cursor={}", base + 10)), 3, "filters compose with the cursor");
    let key_id = g.mgmt("GET", "/v1/keys", Some(&g.key), None).json()["data"][0]["id"].as_str().unwrap().to_string();
    // The manager key made the calls and the provider PUTs alike.
    assert_eq!(count(&format!("actor={key_id}")), last as usize);
    assert_eq!(count(&format!("actor={key_id}&kind=model_call")), 31);

    for bad in ["from=yesterday", "to=2026-13-01T00:00:00Z", "limit=0", "limit=201", "cursor=x", "upstreamStatus=meh"] {
        let r = g.mgmt("GET", &format!("/v1/receipts?{bad}"), Some(&g.key), None);
        assert_eq!(r.status, 400, "{bad}");
        assert_eq!(r.json()["error"]["type"], "invalid_request");
    }
}

#[test]
fn exports_stream_jsonl_and_csv_with_truncation() {
    let (g, _up) = setup(&Backend::Sqlite, &[]);
    // The setup's provider PUTs left `base` admin receipts (docs/log.md §8): exports hold them
    // too, before the 12 calls.
    let base = g.newest_seq(&g.key);
    for _ in 0..12 {
        g.chat_raw(&g.key, r#"{"model":"gpt-4o-mini","messages":[]}"#);
    }
    assert_eq!(g.wait_receipts(&g.key, base + 12), base + 12);
    let auth = format!("Bearer {}", g.key);
    let r = http::request(g.mgmt, "GET", "/v1/receipts/export", &[("Authorization", &auth)], b"");
    assert_eq!(r.status, 200);
    assert!(r.header("content-disposition").unwrap().starts_with("attachment"));
    assert_eq!(r.header("x-tollgate-truncated"), Some("false"));
    let lines: Vec<Value> = r.text().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len() as u64, base + 12, "the export did not list itself");
    assert!(lines.windows(2).all(|w| w[0]["seq"].as_u64() < w[1]["seq"].as_u64()), "ascending");
    let kinds: Vec<&str> = lines.iter().map(|l| l["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds[..base as usize], vec!["admin"; base as usize]);
    assert_eq!(kinds[base as usize..], ["model_call"; 12]);
    let call = &lines[base as usize];
    for k in ["this_hash", "signature", "key_id", "kind", "prevHash", "costUsd"] {
        assert!(lines[0].get(k).is_some() && call.get(k).is_some(), "{k} missing");
    }
    assert_eq!(lines[0]["subject"], "openai", "an admin receipt names what it acted on");
    assert_eq!(lines[1]["prevHash"], lines[0]["this_hash"]);
    assert_eq!(call["prevHash"], lines[base as usize - 1]["this_hash"]);

    let r = http::request(g.mgmt, "GET", "/v1/receipts/export?format=csv&limit=5", &[("Authorization", &auth)], b"");
    assert_eq!(r.header("x-tollgate-truncated"), Some("true"));
    assert!(r.header("content-type").unwrap().starts_with("text/csv"));
    let text = r.text();
    let rows: Vec<&str> = text.lines().collect();
    assert_eq!(rows[0], "seq,receiptId,requestId,ts,actor,provider,model,promptTokens,completionTokens,costUsd,checks,upstreamStatus,this_hash,kind");
    assert_eq!(rows.len(), 6);
    assert!(rows[1].starts_with("1,") && rows[1].ends_with(",admin"), "{}", rows[1]);
    assert!(rows[1].contains(",tollgate,providers.update,0,0,0,authz:pass,skipped,"), "{}", rows[1]);
    let call = rows[base as usize + 1];
    assert!(call.starts_with(&format!("{},", base + 1)), "{call}");
    assert!(call.ends_with(",model_call") && call.contains(",UPSTREAM:PASS,ok,"), "{call}");
    assert!(call.contains(",0.00000585,"), "{call}");

    let r = http::request(g.mgmt, "GET", "/v1/receipts/export?format=xml", &[("Authorization", &auth)], b"");
    assert_eq!(r.status, 400);
    let r = http::request(g.mgmt, "GET", "/v1/receipts/export?limit=50001", &[("Authorization", &auth)], b"");
    assert_eq!(r.status, 400);
}

#[test]
fn tampering_is_found_by_verify_chain_and_the_signature_check() {
    for b in backends() {
        let (g, _up) = setup(&b, &[]);
        // The setup's provider PUTs left `base` admin receipts (docs/log.md §8): the five calls
        // are seqs base + 1 ..= base + 5, and verify-chain covers the whole chain.
        let base = g.newest_seq(&g.key);
        let ids: Vec<String> = (0..5)
            .map(|_| {
                g.chat_raw(&g.key, r#"{"model":"gpt-4o-mini","messages":[]}"#)
                    .header("x-tollgate-receipt-id")
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(g.wait_receipts(&g.key, base + 5), base + 5);
        let clean = verify_chain(&g, &g.key, &ids[4], "");
        assert_eq!(clean, json!({"ok": true, "count": base + 5, "brokenAtSeq": null, "gapAtSeq": null}));

        let seq = |i: u64| base + i; // the seq of the i-th call, from 1
        assert_eq!(g.sql(&format!("UPDATE receipts SET prompt_tokens = 999 WHERE seq = {}", seq(3))), 1);
        let report = verify_chain(&g, &g.key, &ids[4], "");
        assert_eq!((report["ok"].as_bool(), report["brokenAtSeq"].as_u64()), (Some(false), Some(seq(3))));
        assert_eq!(receipt(&g, &g.key, &ids[2])["verified"], false);
        assert_eq!(receipt(&g, &g.key, &ids[1])["verified"], true);

        assert_eq!(g.sql(&format!("DELETE FROM receipts WHERE seq = {}", seq(4))), 1);
        let report = verify_chain(&g, &g.key, &ids[4], "");
        assert_eq!((report["brokenAtSeq"].as_u64(), report["gapAtSeq"].as_u64()), (Some(seq(3)), Some(seq(4))));
        assert_eq!(report["count"], base + 4);
        // A range that avoids the damage verifies.
        let report = verify_chain(&g, &g.key, &ids[4], &format!("?from={}&to={}", seq(1), seq(2)));
        assert_eq!(report, json!({"ok": true, "count": 2, "brokenAtSeq": null, "gapAtSeq": null}));
        // A relinked forgery: rewrite the fifth call's prevHash to skip the gap; its own hash
        // then breaks.
        g.sql(&format!("UPDATE receipts SET prev_hash = 'ff' WHERE seq = {}", seq(5)));
        let report = verify_chain(&g, &g.key, &ids[4], &format!("?from={0}&to={0}", seq(5)));
        assert_eq!(report["brokenAtSeq"], seq(5));
        let r = g.mgmt("GET", &format!("/v1/receipts/{}/verify-chain?from=4&to=2", ids[4]), Some(&g.key), None);
        assert_eq!(r.status, 400);
    }
}

#[test]
fn another_tenants_receipts_answer_404() {
    let (g, _up) = setup(&Backend::Sqlite, &[]);
    let (_t2, key2) = g.create_tenant_live("globex");
    let id = g
        .chat_raw(&g.key, r#"{"model":"gpt-4o-mini","messages":[]}"#)
        .header("x-tollgate-receipt-id")
        .unwrap()
        .to_string();
    let id2 = g
        .chat_raw(&key2, r#"{"model":"gpt-4o-mini","messages":[]}"#)
        .header("x-tollgate-receipt-id")
        .unwrap()
        .to_string();
    g.wait_receipts(&g.key, 1);
    g.wait_receipts(&key2, 1);
    for path in [format!("/v1/receipts/{id}"), format!("/v1/receipts/{id}/verify-chain")] {
        let r = g.mgmt("GET", &path, Some(&key2), None);
        assert_eq!(r.status, 404, "{path}");
        assert_eq!(r.json()["error"]["type"], "not_found");
    }
    let list2 = g.mgmt("GET", "/v1/receipts", Some(&key2), None).json();
    assert_eq!(list2["receipts"].as_array().unwrap().len(), 1);
    assert_eq!(list2["receipts"][0]["receiptId"], id2.as_str());
    let auth = format!("Bearer {key2}");
    let export = http::request(g.mgmt, "GET", "/v1/receipts/export", &[("Authorization", &auth)], b"").text();
    assert!(!export.contains(&id) && export.contains(&id2));
    // Each tenant has its own chain starting at seq 1.
    assert_eq!(receipt(&g, &key2, &id2)["seq"], 1);
}

/// Sends `n` requests from `threads` threads, alternating over `targets` (gateway, key).
fn burst(targets: &[(std::net::SocketAddr, String)], n: u64, threads: u64) -> u64 {
    let next = Arc::new(AtomicU64::new(0));
    let answered = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (next, answered, targets) = (next.clone(), answered.clone(), targets.to_vec());
            std::thread::spawn(move || loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= n {
                    return;
                }
                let (addr, key) = &targets[i as usize % targets.len()];
                let auth = format!("Bearer {key}");
                let r = http::request(
                    *addr,
                    "POST",
                    "/v1/chat/completions",
                    &[("Authorization", &auth)],
                    br#"{"model":"gpt-4o-mini","messages":[]}"#,
                );
                if r.status == 200 {
                    answered.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    answered.load(Ordering::SeqCst)
}

#[test]
fn a_thousand_concurrent_requests_over_two_tenants_leave_gap_free_chains() {
    for b in backends() {
        let (g, up) = setup(&b, &[]);
        let (_t2, key2) = g.create_tenant_live("globex");
        g.set_provider(&key2, "openai", &up.url(), "sk-provider-2");
        // Each tenant's chain starts with the admin receipts of its provider PUTs (docs/log.md §8).
        let bases = [g.newest_seq(&g.key), g.newest_seq(&key2)];
        let answered = burst(&[(g.gw, g.key.clone()), (g.gw, key2.clone())], 1000, 32);
        assert_eq!(answered, 1000);
        for (key, base) in [&g.key, &key2].into_iter().zip(bases) {
            assert_eq!(g.wait_receipts(key, base + 500), base + 500);
            assert_eq!(g.call_count(key), 500);
            let newest = g.mgmt("GET", "/v1/receipts?limit=1", Some(key), None).json()["receipts"][0]["receiptId"]
                .as_str()
                .unwrap()
                .to_string();
            let report = verify_chain(&g, key, &newest, "");
            assert_eq!(report, json!({"ok": true, "count": base + 500, "brokenAtSeq": null, "gapAtSeq": null}));
        }
    }
}

#[test]
fn two_gateway_processes_on_one_postgres_keep_one_gap_free_chain() {
    let Some(url) = support::fresh_postgres() else { return };
    let b = Backend::Postgres(url);
    // Processes sharing a database must share the master key that seals provider secrets.
    let master = [("TOLLGATE_MASTER_KEY", "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=")];
    let (g1, up) = setup(&b, &master);
    let mut g2 = Gateway::start_with(&b, &master, false);
    g2.key = g1.key.clone();
    // The chain starts with the admin receipts of the setup's provider PUTs (docs/log.md §8).
    let base = g1.newest_seq(&g1.key);
    let answered = burst(&[(g1.gw, g1.key.clone()), (g2.gw, g1.key.clone())], 600, 24);
    assert_eq!(answered, 600);
    assert!(up.count() >= 600);
    assert_eq!(g1.wait_receipts(&g1.key, base + 600), base + 600);
    assert_eq!(g1.call_count(&g1.key), 600);
    let newest = g1.mgmt("GET", "/v1/receipts?limit=1", Some(&g1.key), None).json()["receipts"][0]["receiptId"]
        .as_str()
        .unwrap()
        .to_string();
    let report = verify_chain(&g1, &g1.key, &newest, "");
    assert_eq!(report, json!({"ok": true, "count": base + 600, "brokenAtSeq": null, "gapAtSeq": null}));
    // Both processes signed (each has its own key file), and both keys are in the registry.
    let keys = g1.mgmt("GET", "/v1/compliance/signing-keys", Some(&g1.key), None).json();
    assert_eq!(keys["keys"].as_array().unwrap().len(), 2);
    let auth = format!("Bearer {}", g1.key);
    let export =
        http::request(g1.mgmt, "GET", "/v1/receipts/export?limit=1000", &[("Authorization", &auth)], b"").text();
    let signers: std::collections::BTreeSet<String> = export
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["kind"] == "model_call")
        .map(|r| r["key_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(signers.len(), 2, "call receipts from both processes");
    drop(g2);
}

#[test]
fn rotated_signing_keys_keep_verifying_old_receipts() {
    let (mut g, _up) = setup(&Backend::Sqlite, &[]);
    let base = g.newest_seq(&g.key); // the setup's admin receipts (docs/log.md §8)
    let old = g
        .chat_raw(&g.key, r#"{"model":"gpt-4o-mini","messages":[]}"#)
        .header("x-tollgate-receipt-id")
        .unwrap()
        .to_string();
    g.wait_receipts(&g.key, base + 1);
    g.stop();
    let out = g.cli(&["signing-key", "rotate"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    g.spawn();
    let new = g
        .chat_raw(&g.key, r#"{"model":"gpt-4o-mini","messages":[]}"#)
        .header("x-tollgate-receipt-id")
        .unwrap()
        .to_string();
    g.wait_receipts(&g.key, base + 2);
    let (a, b) = (receipt(&g, &g.key, &old), receipt(&g, &g.key, &new));
    assert_ne!(a["keyId"], b["keyId"]);
    assert_eq!((a["verified"].as_bool(), b["verified"].as_bool()), (Some(true), Some(true)));
    assert_eq!(b["prevHash"], a["thisHash"], "the chain continues across the rotation");
    let reg = g.mgmt("GET", "/v1/compliance/signing-keys", Some(&g.key), None).json();
    let keys = reg["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 2);
    let retired = keys.iter().find(|k| k["keyId"] == a["keyId"]).unwrap();
    assert!(retired["retiredAt"].is_string());
    assert_eq!(reg["activeKeyId"], b["keyId"]);
    let mode = std::fs::metadata(g.dir.join("signing.key")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(mode.permissions().mode() & 0o777, 0o600);
}
