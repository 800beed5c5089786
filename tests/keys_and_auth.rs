//! Keys, authentication, permissions, rotation, revocation and tenant isolation, over real
//! sockets against the built binary, on every database backend.

mod support;

use serde_json::{json, Value};
use support::{backends, Gateway};

#[test]
fn unauthenticated_requests_get_401_envelopes_on_both_ports() {
    for b in backends() {
        let g = Gateway::start(&b, &[]);
        let chat = br#"{"model":"gpt-4o-mini","messages":[]}"#;
        for auth in
            [None, Some("Bearer"), Some("Bearer tollgate_sk_unknown"), Some("Basic abc"), Some("Bearer sk-other")]
        {
            let mut h = vec![("Content-Type", "application/json")];
            if let Some(a) = auth {
                h.push(("Authorization", a));
            }
            let r = support::http::request(g.gw, "POST", "/v1/chat/completions", &h, chat);
            assert_eq!(r.status, 401, "{auth:?}");
            let v = r.json();
            assert_eq!(v["error"]["type"], "unauthorized");
            assert_eq!(v["error"]["code"], 401);
            assert!(v["error"].get("param").is_some(), "OpenAI-shaped: param present");

            let r = support::http::request(g.mgmt, "GET", "/v1/keys", &h, b"");
            assert_eq!(r.status, 401);
            assert_eq!(
                r.json(),
                json!({"error": {"type": "unauthorized", "code": 401, "message": r.json()["error"]["message"]}})
            );
        }
        // Anthropic route, Anthropic-shaped error, x-api-key accepted as the key header.
        let r = support::http::request(
            g.gw,
            "POST",
            "/v1/messages",
            &[("x-api-key", "tollgate_sk_nope"), ("Content-Type", "application/json")],
            br#"{"model":"claude-3-5-haiku","messages":[]}"#,
        );
        assert_eq!(r.status, 401);
        assert_eq!(r.json()["type"], "error");
        assert_eq!(r.json()["error"]["type"], "unauthorized");
        // /status needs no key.
        assert_eq!(g.mgmt("GET", "/status", None, None).status, 200);
    }
}

#[test]
fn developer_keys_are_refused_manager_operations() {
    for b in backends() {
        let g = Gateway::start(&b, &[]);
        let (dev_id, dev) = g.new_key(&g.key, &json!({"label": "ci", "keyClass": "service", "budgetUsd": 5}));
        let (other_id, _) = g.new_key(&g.key, &json!({"label": "other"}));

        let forbidden = [
            g.mgmt("POST", "/v1/keys", Some(&dev), Some(&json!({"label": "x"}))),
            g.mgmt("DELETE", &format!("/v1/keys/{other_id}"), Some(&dev), None),
            g.mgmt("PATCH", &format!("/v1/keys/{other_id}/limits"), Some(&dev), Some(&json!({"rpmLimit": 5}))),
            g.mgmt("PUT", "/v1/providers/openai", Some(&dev), Some(&json!({"api_key": "sk-x"}))),
            g.mgmt("POST", "/v1/providers/openai/test", Some(&dev), None),
        ];
        for r in forbidden {
            assert_eq!(r.status, 403, "{}", r.text());
            assert_eq!(r.json()["error"]["type"], "forbidden");
        }

        // A non-manager lists only its own key; a manager lists all of them.
        let mine = g.mgmt("GET", "/v1/keys", Some(&dev), None).json();
        let ids: Vec<&str> = mine["data"].as_array().unwrap().iter().map(|k| k["id"].as_str().unwrap()).collect();
        assert_eq!(ids, vec![dev_id.as_str()]);
        let rec = &mine["data"][0];
        assert_eq!(
            (rec["keyClass"].as_str(), rec["role"].as_str(), rec["budgetUsd"].as_f64()),
            (Some("service"), Some("developer"), Some(5.0))
        );
        assert!(rec.get("key").is_none(), "the secret is shown only at creation");
        assert_eq!(rec["keyHint"].as_str().unwrap().len(), 4);
        let all = g.mgmt("GET", "/v1/keys", Some(&g.key), None).json();
        assert_eq!(all["data"].as_array().unwrap().len(), 3);

        // Pagination: one per page, cursor walks all three.
        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let path = match &cursor {
                Some(c) => format!("/v1/keys?limit=1&cursor={c}"),
                None => "/v1/keys?limit=1".to_string(),
            };
            let page = g.mgmt("GET", &path, Some(&g.key), None).json();
            seen.extend(page["data"].as_array().unwrap().iter().map(|k| k["id"].as_str().unwrap().to_string()));
            match page["nextCursor"].as_str() {
                Some(c) => cursor = Some(c.to_string()),
                None => break,
            }
        }
        assert_eq!(seen.len(), 3);

        // Limits: PATCH leaves omitted fields unchanged.
        let r = g.mgmt(
            "PATCH",
            &format!("/v1/keys/{dev_id}/limits"),
            Some(&g.key),
            Some(&json!({"rpmLimit": 60, "tpmLimit": 1000})),
        );
        // The end-user limits (issue 42 §6) are in the answer too.
        let none = json!(null);
        let want =
            json!({"id": dev_id, "rpmLimit": 60, "tpmLimit": 1000, "endUserRpmLimit": none, "endUserTpmLimit": none});
        assert_eq!(r.json(), want);
        let r = g.mgmt("PATCH", &format!("/v1/keys/{dev_id}/limits"), Some(&g.key), Some(&json!({"tpmLimit": null})));
        let want =
            json!({"id": dev_id, "rpmLimit": 60, "tpmLimit": null, "endUserRpmLimit": none, "endUserTpmLimit": none});
        assert_eq!(r.json(), want);
    }
}

#[test]
fn rotation_sequence_and_revocation_on_the_next_request() {
    for b in backends() {
        let g = Gateway::start(&b, &[]);
        let old = g.key.clone();
        let old_id = g.mgmt("GET", "/v1/keys", Some(&old), None).json()["data"][0]["id"].as_str().unwrap().to_string();
        // 1. create the new key with the old one
        let (_new_id, new) = g.new_key(&old, &json!({"label": "rotated", "role": "manager"}));
        // 2. the new key works on both ports
        assert_eq!(g.mgmt("GET", "/v1/keys", Some(&new), None).status, 200);
        let chat = br#"{"model":"gpt-4o-mini","messages":[]}"#;
        assert_ne!(g.post_gw("/v1/chat/completions", &new, chat).status, 401);
        // 3. delete the old key with the new one
        let r = g.mgmt("DELETE", &format!("/v1/keys/{old_id}"), Some(&new), None);
        assert_eq!(r.status, 204, "{}", r.text());
        // The very next request with the old key fails, on both ports.
        assert_eq!(g.post_gw("/v1/chat/completions", &old, chat).status, 401);
        assert_eq!(g.mgmt("GET", "/v1/keys", Some(&old), None).status, 401);
        assert_eq!(g.mgmt("DELETE", &format!("/v1/keys/{old_id}"), Some(&new), None).status, 404);
        let ids = g.mgmt("GET", "/v1/keys", Some(&new), None).json();
        assert_eq!(ids["data"].as_array().unwrap().len(), 1);
    }
}

#[test]
fn another_tenants_ids_answer_404() {
    for b in backends() {
        let g = Gateway::start(&b, &[]);
        let (_t2, key2) = g.create_tenant_live("globex");
        let (id1, _) = g.new_key(&g.key, &json!({"label": "acme-dev"}));
        g.set_provider(&g.key, "openai", "http://127.0.0.1:9", "sk-acme-secret-1234");

        assert_eq!(g.mgmt("DELETE", &format!("/v1/keys/{id1}"), Some(&key2), None).status, 404);
        let r = g.mgmt("PATCH", &format!("/v1/keys/{id1}/limits"), Some(&key2), Some(&json!({"rpmLimit": 1})));
        assert_eq!(r.status, 404);
        assert_eq!(r.json()["error"]["type"], "not_found");
        let keys2 = g.mgmt("GET", "/v1/keys", Some(&key2), None).json();
        assert!(keys2["data"].as_array().unwrap().iter().all(|k| k["id"] != id1.as_str()));
        let p2 = g.mgmt("GET", "/v1/providers", Some(&key2), None).json();
        assert_eq!(p2[0]["provider"], "openai");
        assert_eq!(p2[0]["status"], "unconfigured", "tenant B does not see tenant A's credential");
        // Tenant A's key still works after tenant B's attempts.
        assert_eq!(g.mgmt("GET", "/v1/keys?cursor=", Some(&g.key), None).status, 200);
    }
}

#[test]
fn first_start_creates_default_tenant_and_prints_one_manager_key() {
    let g = Gateway::start_with(&support::Backend::Sqlite, &[], false);
    let logs = g.logs();
    let key = logs
        .split_whitespace()
        .find(|w| w.starts_with("tollgate_sk_"))
        .unwrap_or_else(|| panic!("no key printed: {logs}"))
        .to_string();
    assert_eq!(logs.matches("tollgate_sk_").count(), 1, "printed exactly once");
    let r = g.mgmt("GET", "/v1/keys", Some(&key), None);
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["data"][0]["role"], "manager");
}

#[test]
fn cli_key_create_and_check_config() {
    let g = Gateway::start(&support::Backend::Sqlite, &[]);
    let out = g.cli(&["key", "create", "--tenant", &g.tenant_id, "--label", "cli", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let key = v["key"].as_str().unwrap();
    // A key made by another process reaches the running server through the snapshot refresh.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let r = g.mgmt("GET", "/v1/keys", Some(key), None);
        if r.status == 200 {
            assert_eq!(r.json()["data"][0]["role"], "developer");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "CLI key never became valid");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let out = g.cli(&["key", "create", "--tenant", "no-such-tenant"]);
    assert!(!out.status.success());

    let bad = g.dir.join("bad.yaml");
    std::fs::write(&bad, "server:\n  threads: 2\nlisten:\n  gateway: \"not-an-address\"\n").unwrap();
    let out = g.cli(&["check-config", "--config", bad.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("bad.yaml:4:") && err.contains("listen.gateway"), "{err}");
    std::fs::write(&bad, "server:\n  threads: 2\n  thread_count: 3\n").unwrap();
    let out = g.cli(&["check-config", "--config", bad.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.yaml:3:") && err.contains("thread_count"), "{err}");
    let good = g.dir.join("good.yaml");
    std::fs::write(&good, "routes:\n  - { model: \"mistral-*\", provider: openai }\n").unwrap();
    assert!(g.cli(&["check-config", "--config", good.to_str().unwrap()]).status.success());
    assert!(g.cli(&["check-config"]).status.success(), "embedded defaults are valid");
}
