//! The auditor role (docs/log.md §8, in part): `role: auditor` keys, made by managers only, read
//! the receipt, log, compliance and analytics routes of their tenant and nothing else — every
//! other management route, every write, and every gateway route (model calls, model lists,
//! count_tokens, MCP) answers `403 forbidden`; `tollgate log audit` runs with such a key.

mod support;

use serde_json::json;
use support::{http, Backend};

#[test]
fn auditor_keys_read_evidence_and_nothing_else() {
    let (g, _up) = support::with_standin(&Backend::Sqlite, &[]);
    assert_eq!(g.say(&g.key, "gpt-4o-mini", "hello").status, 200);
    let (_, dev) = g.create_key("dev");
    let r = g.mgmt("POST", "/v1/keys", Some(&dev), Some(&json!({"role": "auditor"})));
    assert_eq!(r.status, 403, "only managers make keys: {}", r.text());
    let (_, auditor) = g.new_key(&g.key, &json!({"label": "audit", "role": "auditor"}));
    let listed = g.get_json(&g.key, "/v1/keys");
    assert!(listed.to_string().contains("\"auditor\""), "{listed}");

    let receipt_id =
        g.get_json(&g.key, "/v1/receipts?limit=1")["receipts"][0]["receiptId"].as_str().unwrap().to_string();
    for path in [
        "/v1/receipts".to_string(),
        format!("/v1/receipts/{receipt_id}"),
        format!("/v1/receipts/{receipt_id}/verify-chain"),
        "/v1/receipts/export?format=jsonl".into(),
        "/v1/log/checkpoint".into(),
        "/v1/log/verifier-keys".into(),
        "/v1/log/inclusion?seq=1".into(),
        "/v1/compliance/attestation?fromSeq=1&toSeq=1".into(),
        "/v1/compliance/signing-keys".into(),
        "/v1/anomalies".into(),
        "/v1/cache".into(),
    ] {
        let r = g.mgmt("GET", &path, Some(&auditor), None);
        assert_eq!(r.status, 200, "GET {path}: {}", r.text());
    }
    let refused: &[(&str, &str, Option<serde_json::Value>)] = &[
        ("GET", "/v1/keys", None),
        ("GET", "/v1/policies", None),
        ("GET", "/v1/budgets", None),
        ("GET", "/v1/providers", None),
        ("POST", "/v1/keys", Some(json!({"label": "x"}))),
        ("POST", "/v1/policies", Some(json!({"name": "p", "yaml": "rules: []"}))),
        ("POST", "/v1/budgets/requests", Some(json!({"amountUsd": 1, "reason": "more"}))),
        ("DELETE", "/v1/keys/no-such-key", None),
    ];
    for (method, path, body) in refused {
        let r = g.mgmt(method, path, Some(&auditor), body.as_ref());
        assert_eq!(r.status, 403, "{method} {path}: {}", r.text());
        let e = r.json();
        assert_eq!(e["error"]["type"], "forbidden");
        assert!(e["error"]["message"].as_str().unwrap().contains("auditor keys only read"), "{e}");
    }

    // The gateway: no model call, no model list, no tool call; and no receipt for the attempt.
    let before = g.newest_seq(&g.key);
    let r = g.say(&auditor, "gpt-4o-mini", "may I?");
    assert_eq!((r.status, r.json()["error"]["type"].as_str()), (403, Some("forbidden")), "{}", r.text());
    let auth = format!("Bearer {auditor}");
    let r = http::request(g.gw, "GET", "/v1/models", &[("Authorization", &auth)], b"");
    assert_eq!(r.status, 403, "{}", r.text());
    let mcp = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let r = g.post_gw("/mcp/anything", &auditor, &serde_json::to_vec(&mcp).unwrap());
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(g.newest_seq(&g.key), before);

    // The auditor's own tool runs with the auditor's key.
    let state = g.dir.join("audit");
    let url = format!("http://{}", g.mgmt);
    let out = g.cli(&["log", "audit", "--url", &url, "--key", &auditor, "--state", state.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
}

/// An operator makes an auditor key from the command line; it reads evidence and nothing else.
#[test]
fn the_command_line_makes_auditor_keys() {
    let g = support::Gateway::start(&Backend::Sqlite, &[]);
    let out = g.cli(&["key", "create", "--tenant", &g.tenant_id, "--role", "auditor", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let made: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let auditor = made["key"].as_str().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while g.mgmt("GET", "/v1/receipts", Some(auditor), None).status != 200 {
        assert!(std::time::Instant::now() < deadline, "the server never accepted the new key");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(g.mgmt("GET", "/v1/keys", Some(auditor), None).status, 403);
    let listed = g.get_json(&g.key, "/v1/keys");
    let role = listed["data"].as_array().unwrap().iter().find(|k| k["id"] == made["keyId"]).map(|k| k["role"].clone());
    assert_eq!(role, Some(serde_json::json!("auditor")), "{listed}");
    let bad = g.cli(&["key", "create", "--tenant", &g.tenant_id, "--role", "root"]);
    assert!(!bad.status.success());
}

/// Every write route of the router's own table (not a hand list) refuses an auditor key with
/// 403, and each refusal is in the admin trail as `deny` under the route's action, by the
/// auditor, having changed nothing.
#[test]
fn an_auditor_is_refused_on_every_write_route_and_each_refusal_is_recorded() {
    use tollgate::management::routes::{action, is_write, ROUTES};
    let g = support::Gateway::start(&Backend::Sqlite, &[]);
    let (auditor_id, auditor) = g.new_key(&g.key, &json!({"label": "audit", "role": "auditor"}));
    let writes: Vec<_> = ROUTES.iter().filter(|r| is_write(r)).collect();
    assert!(writes.len() > 30, "{}", writes.len());
    for r in writes {
        let path = r.path.replace('{', "no-such-").replace('}', "");
        let before = g.newest_seq(&g.key);
        let got = g.mgmt(r.method, &path, Some(&auditor), Some(&json!({})));
        assert_eq!(got.status, 403, "{} {path}: {}", r.method, got.text());
        assert_eq!(got.json()["error"]["type"], "forbidden", "{} {path}", r.method);
        let trail = g.get_json(&g.key, "/v1/audit-events?limit=1")["data"][0].clone();
        assert_eq!(trail["seq"].as_u64(), Some(before + 1), "{} {path}: one receipt, the refusal", r.method);
        assert_eq!(trail["model"].as_str(), action(r), "{} {path}", r.method);
        assert_eq!(
            (trail["actor"].as_str(), &trail["checks"][0]["result"]),
            (Some(auditor_id.as_str()), &json!("deny"))
        );
    }
}
