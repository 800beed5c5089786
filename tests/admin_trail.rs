//! The admin trail (docs/log.md §8), end to end on every backend: each management write and each
//! evidence read appends a signed `admin` receipt (actor, action, signed `subject`) to the
//! tenant's log in the change's own transaction; a refused write appends a `deny` one and changes
//! nothing; a failed write appends none; `GET /v1/audit-events` lists them newest first with their
//! hashes and signatures; attestation totals count them apart; and the chain stays one chain
//! while admin writes and gateway calls interleave, across a restart.

mod support;

use serde_json::{json, Value};
use support::{backends, http, Backend, Gateway};

/// The manager key's id: the `actor` of its model calls.
fn key_id_of(g: &Gateway, key: &str) -> String {
    let r = g.say(key, "gpt-4o-mini", "who am I");
    assert_eq!(r.status, 200, "{}", r.text());
    g.receipt_of(&r)["actor"].as_str().unwrap().to_string()
}

/// A management call with an `X-Request-Id`.
fn call(g: &Gateway, key: &str, method: &str, path: &str, body: &Value, request_id: &str) -> http::Resp {
    let auth = format!("Bearer {key}");
    let headers =
        [("Authorization", auth.as_str()), ("Content-Type", "application/json"), ("X-Request-Id", request_id)];
    http::request(g.mgmt, method, path, &headers, &serde_json::to_vec(body).unwrap())
}

fn events(g: &Gateway, key: &str, query: &str) -> Vec<Value> {
    g.get_json(key, &format!("/v1/audit-events{query}"))["data"].as_array().unwrap().clone()
}

fn newest_event(g: &Gateway) -> Value {
    events(g, &g.key, "?limit=1").remove(0)
}

/// The event's receipt, read back through the receipt API: its hash and signature verify now.
fn assert_verifies(g: &Gateway, event: &Value) {
    let r = g.receipt(event["receiptId"].as_str().unwrap());
    assert_eq!(r["verified"], true, "{r}");
    assert_eq!((r["kind"].as_str(), &r["subject"]), (Some("admin"), &event["subject"]), "{r}");
    assert_eq!(r["thisHash"], event["thisHash"]);
    assert_eq!(r["signature"], event["signature"]);
}

#[test]
fn writes_and_evidence_reads_leave_signed_admin_receipts() {
    for b in backends() {
        let (g, _up) = support::with_standin(&b, &[]);
        let manager = key_id_of(&g, &g.key);

        // A create: its action, actor, subject, request id and fixed members; verifiable.
        let policy =
            json!({"name": "p", "yaml": "rules:\n  - {id: no-35, match: {model: \"gpt-3.5*\"}, action: deny}\n"});
        let r = call(&g, &g.key, "POST", "/v1/policies", &policy, "req-admin-1");
        assert_eq!(r.status, 201, "{}", r.text());
        let policy_id = r.json()["id"].as_str().unwrap().to_string();
        let e = newest_event(&g);
        assert_eq!(
            (e["model"].as_str(), e["subject"].as_str(), e["actor"].as_str(), e["requestId"].as_str()),
            (Some("policies.create"), Some(policy_id.as_str()), Some(manager.as_str()), Some("req-admin-1")),
            "{e}"
        );
        assert_eq!((e["provider"].as_str(), e["upstreamStatus"].as_str()), (Some("tollgate"), Some("skipped")));
        assert_eq!((e["promptTokens"].as_u64(), e["completionTokens"].as_u64()), (Some(0), Some(0)));
        assert_eq!(e["checks"], json!([{"name": "authz", "result": "pass"}]));
        assert_verifies(&g, &e);

        // Update, delete; a second delete finds nothing, changes nothing and is not recorded.
        let r = g.mgmt("PUT", &format!("/v1/policies/{policy_id}"), Some(&g.key), Some(&policy));
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(newest_event(&g)["model"], "policies.update");
        assert_eq!(g.mgmt("DELETE", &format!("/v1/policies/{policy_id}"), Some(&g.key), None).status, 204);
        let deleted = newest_event(&g);
        assert_eq!(
            (deleted["model"].as_str(), deleted["subject"].as_str()),
            (Some("policies.delete"), Some(&*policy_id))
        );
        assert_eq!(g.mgmt("DELETE", &format!("/v1/policies/{policy_id}"), Some(&g.key), None).status, 404);
        assert_eq!(newest_event(&g)["receiptId"], deleted["receiptId"], "a write that changed nothing left a receipt");

        // A key's secret never reaches its admin receipt.
        let (key_id, secret) = g.create_key("made");
        let e = newest_event(&g);
        assert_eq!((e["model"].as_str(), e["subject"].as_str()), (Some("keys.create"), Some(key_id.as_str())));
        let listed = g.mgmt("GET", "/v1/audit-events", Some(&g.key), None).text();
        assert!(!listed.contains(&secret[8..]), "a key secret in the audit events");

        refused_writes_are_recorded_as_deny(&g, &secret, &key_id);
        a_failed_write_leaves_no_receipt(&g);
        evidence_reads_are_recorded(&g);
        audit_events_filter_and_page(&g, &manager, &key_id);
    }
}

/// A developer's and an auditor's refused writes: `deny`, their actor, and nothing changed.
fn refused_writes_are_recorded_as_deny(g: &Gateway, developer: &str, developer_id: &str) {
    let policies = g.get_json(&g.key, "/v1/policies");
    let r = g.mgmt("POST", "/v1/keys", Some(developer), Some(&json!({"label": "sneaky"})));
    assert_eq!(r.status, 403, "{}", r.text());
    let e = newest_event(g);
    assert_eq!((e["model"].as_str(), e["actor"].as_str()), (Some("keys.create"), Some(developer_id)), "{e}");
    assert_eq!(e["checks"], json!([{"name": "authz", "result": "deny"}]));
    assert_verifies(g, &e);

    let (auditor_id, auditor) = g.new_key(&g.key, &json!({"label": "audit", "role": "auditor"}));
    let r = g.mgmt("POST", "/v1/policies", Some(&auditor), Some(&json!({"name": "x", "yaml": "rules: []"})));
    assert_eq!(r.status, 403, "{}", r.text());
    let e = newest_event(g);
    assert_eq!((e["model"].as_str(), e["actor"].as_str()), (Some("policies.create"), Some(auditor_id.as_str())));
    assert_eq!(e["checks"][0]["result"], "deny");
    assert_eq!(g.get_json(&g.key, "/v1/policies"), policies, "a refused write changed something");
    // The auditor reads the trail.
    assert_eq!(events(g, &auditor, "?limit=1")[0]["receiptId"], e["receiptId"]);
}

/// A write the database refuses (a duplicate name) rolls its admin receipt back with it.
fn a_failed_write_leaves_no_receipt(g: &Gateway) {
    let server =
        json!({"name": "dup", "url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer tool-secret-7"}});
    let r = g.mgmt("POST", "/v1/tool-servers", Some(&g.key), Some(&server));
    assert_eq!(r.status, 201, "{}", r.text());
    let before = newest_event(g);
    assert_eq!((before["model"].as_str(), before["subject"].as_str()), (Some("tool-servers.create"), Some("dup")));
    let r = g.mgmt("POST", "/v1/tool-servers", Some(&g.key), Some(&server));
    assert_eq!(r.status, 409, "{}", r.text());
    assert_eq!(newest_event(g)["receiptId"], before["receiptId"]);
    let listed = g.mgmt("GET", "/v1/audit-events", Some(&g.key), None).text();
    assert!(!listed.contains("tool-secret-7"), "a tool server's header value in the audit events");
}

/// Exports, attestations and evidence bundles are recorded with the seq range they read.
fn evidence_reads_are_recorded(g: &Gateway) {
    let head = g.newest_seq(&g.key);
    let r = g.mgmt("GET", "/v1/receipts/export?format=jsonl", Some(&g.key), None);
    assert_eq!(r.status, 200);
    let lines = r.text().lines().count() as u64;
    assert_eq!(lines, head, "the export holds what was there when it began, not its own receipt");
    let e = newest_event(g);
    assert_eq!((e["model"].as_str(), e["subject"].as_str()), (Some("receipts.export"), Some(&*format!("1-{head}"))));

    let to = head + 1;
    let a = g.get_json(&g.key, &format!("/v1/compliance/attestation?fromSeq=1&toSeq={to}"));
    let e = newest_event(g);
    assert_eq!(
        (e["model"].as_str(), e["subject"].as_str()),
        (Some("compliance.attestation"), Some(&*format!("1-{to}")))
    );
    let admin = g.get_json(&g.key, "/v1/receipts?kind=admin&limit=200")["receipts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["seq"].as_u64().unwrap() <= to)
        .count() as u64;
    let t = &a["totals"];
    assert_eq!(t["adminEvents"].as_u64(), Some(admin), "{t}");
    assert_eq!(t["receipts"].as_u64().unwrap() + admin, to, "{t}");
    assert_eq!((t["chainVerified"].as_bool(), t["signaturesVerified"].as_bool()), (Some(true), Some(true)), "{t}");

    let bundle = g.mgmt("GET", &format!("/v1/compliance/evidence-bundle?fromSeq=1&toSeq={to}"), Some(&g.key), None);
    assert_eq!(bundle.status, 200);
    let e = newest_event(g);
    assert_eq!(e["model"], "compliance.evidence-bundle");
    let (ok, report) = g.verify_bundle(&bundle.body, &[]);
    assert!(ok, "tollgate verify of a bundle holding admin receipts: {report}");
}

/// `actor`, `action` and the seq cursor.
fn audit_events_filter_and_page(g: &Gateway, manager: &str, developer_id: &str) {
    let all = events(g, &g.key, "?limit=200");
    assert!(all.len() >= 10, "{}", all.len());
    let seqs: Vec<u64> = all.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] > w[1]), "newest first: {seqs:?}");
    let creates = events(g, &g.key, "?action=policies.create");
    assert!(!creates.is_empty() && creates.iter().all(|e| e["model"] == "policies.create"));
    let mine = events(g, &g.key, &format!("?actor={developer_id}"));
    assert_eq!(mine.len(), 1, "{mine:?}");
    assert!(events(g, &g.key, &format!("?actor={manager}")).len() > 5);
    let page = g.get_json(&g.key, "/v1/audit-events?limit=2");
    let cursor = page["nextCursor"].as_u64().expect("a next page");
    let next = events(g, &g.key, &format!("?limit=2&cursor={cursor}"));
    assert_eq!(next[0]["seq"], all[2]["seq"]);
    let r = g.mgmt("GET", "/v1/audit-events?from=yesterday", Some(&g.key), None);
    assert_eq!(r.status, 400, "{}", r.text());
}

/// Admin writes and gateway calls at the same time, then a restart: one chain, no gap, no fork.
/// On SQLite with the receipt journal (the default: its writer keeps heads in memory) and
/// without it, and on PostgreSQL.
#[test]
fn admin_writes_and_gateway_calls_share_one_chain() {
    let mut runs: Vec<(Backend, &[(&str, &str)])> = backends().into_iter().map(|b| (b, &[][..])).collect();
    runs.push((Backend::Sqlite, &[("TOLLGATE_RECEIPTS_JOURNAL", "0")]));
    for (b, env) in runs {
        let (mut g, _up) = support::with_standin(&b, env);
        let base = g.newest_seq(&g.key);
        let calls = std::thread::scope(|s| {
            let caller =
                s.spawn(|| (0..60).filter(|i| g.say(&g.key, "gpt-4o-mini", &format!("n{i}")).status == 200).count());
            for i in 0..20 {
                let r = g.mgmt(
                    "POST",
                    "/v1/webhook-endpoints",
                    Some(&g.key),
                    Some(&json!({"url": format!("https://example.com/h{i}"), "events": ["key.revoked"]})),
                );
                assert_eq!(r.status, 201, "{}", r.text());
            }
            caller.join().unwrap()
        });
        assert_eq!(calls, 60);
        let head = g.newest_seq(&g.key);
        assert_eq!(head, base + 80, "60 calls and 20 admin writes");
        assert_eq!(events(&g, &g.key, "?action=webhook-endpoints.create&limit=200").len(), 20);
        chain_is_whole(&g, head);
        if matches!(b, Backend::Sqlite) {
            g.stop();
            g.spawn();
        }
        let r = g.mgmt("DELETE", &format!("/v1/webhook-endpoints/{}", first_endpoint(&g)), Some(&g.key), None);
        assert_eq!(r.status, 204, "{}", r.text());
        assert_eq!(g.say(&g.key, "gpt-4o-mini", "after").status, 200);
        chain_is_whole(&g, head + 2);
    }
}

fn first_endpoint(g: &Gateway) -> String {
    g.get_json(&g.key, "/v1/webhook-endpoints")["data"][0]["id"].as_str().unwrap().to_string()
}

fn chain_is_whole(g: &Gateway, head: u64) {
    let newest = g.get_json(&g.key, "/v1/receipts?limit=1")["receipts"][0].clone();
    assert_eq!(newest["seq"].as_u64(), Some(head));
    let id = newest["receiptId"].as_str().unwrap();
    let report = g.get_json(&g.key, &format!("/v1/receipts/{id}/verify-chain"));
    assert_eq!((report["ok"].as_bool(), report["count"].as_u64()), (Some(true), Some(head)), "{report}");
}
