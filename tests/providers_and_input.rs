//! Provider credentials (masked, encrypted at rest, tested live) and the 400 envelope for bad
//! input on every management write.

mod support;

use serde_json::{json, Value};
use support::{backends, Backend, Gateway, Standin};

const SECRET: &str = "sk-live-very-secret-value-9876";

#[test]
fn provider_credentials_are_masked_everywhere_and_encrypted_at_rest() {
    for b in backends() {
        let up = Standin::start();
        let g = Gateway::start(&b, &[]);
        let r = g.mgmt(
            "PUT",
            "/v1/providers/openai",
            Some(&g.key),
            Some(&json!({"api_key": SECRET, "base_url": up.url()})),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        assert_eq!(
            (v["provider"].as_str(), v["status"].as_str(), v["keyHint"].as_str()),
            (Some("openai"), Some("active"), Some("...9876"))
        );
        assert!(v["updatedAt"].as_str().unwrap().ends_with('Z'));
        // The seed: the response contains only the masked credential, nothing beside it.
        assert_eq!(keys_of(&v), MASKED_FIELDS, "{v}");

        let list = g.mgmt("GET", "/v1/providers", Some(&g.key), None).json();
        let names: Vec<&str> = list.as_array().unwrap().iter().map(|p| p["provider"].as_str().unwrap()).collect();
        assert_eq!(names, ["openai", "anthropic", "bedrock", "vertex"]);
        for p in list.as_array().unwrap() {
            assert_eq!(keys_of(p), MASKED_FIELDS, "{p}");
        }
        assert_eq!(list[1]["status"], "unconfigured");

        // Live test: the stand-in sees one authenticated minimal call.
        let r = g.mgmt("POST", "/v1/providers/openai/test", Some(&g.key), None);
        assert_eq!(r.json(), json!({"ok": true, "reason": "ok"}));
        let seen = up.requests().pop().unwrap();
        assert_eq!((seen.method.as_str(), seen.path.as_str()), ("GET", "/v1/models"));
        assert_eq!(seen.header("authorization"), Some(format!("Bearer {SECRET}").as_str()));

        // A failing test marks the credential `failing` and /status shows it degraded.
        let closed = support::free_port();
        let r = g.mgmt(
            "PUT",
            "/v1/providers/anthropic",
            Some(&g.key),
            Some(&json!({"api_key": "sk-ant-abcdefgh", "base_url": format!("http://127.0.0.1:{closed}")})),
        );
        assert_eq!(r.status, 200);
        let r = g.mgmt("POST", "/v1/providers/anthropic/test", Some(&g.key), None);
        assert_eq!(r.json()["ok"], false);
        assert!(r.json()["reason"].as_str().unwrap().contains("upstream"), "{}", r.text());
        let list = g.mgmt("GET", "/v1/providers", Some(&g.key), None).json();
        assert_eq!(list[1]["status"], "failing");
        let status = g.mgmt("GET", "/status", None, None).json();
        let anthropic =
            status["components"].as_array().unwrap().iter().find(|c| c["name"] == "anthropic").unwrap().clone();
        assert_eq!(anthropic["status"], "degraded");
        assert_eq!(status["status"], "degraded");
        let names: Vec<&str> =
            status["components"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
        for n in ["gateway", "database", "openai", "anthropic"] {
            assert!(names.contains(&n), "{names:?}");
        }

        // Bedrock and Vertex path values are accepted and validated.
        let r =
            g.mgmt("PUT", "/v1/providers/bedrock", Some(&g.key), Some(&json!({"access_key_id": "AKIAEXAMPLE1234"})));
        assert_eq!(r.status, 400);
        let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
        assert!(msg.contains("secret_access_key") && msg.contains("region"), "{msg}");
        let r = g.mgmt("PUT", "/v1/providers/bedrock", Some(&g.key),
            Some(&json!({"access_key_id": "AKIAEXAMPLE1234", "secret_access_key": "wJalrXUtnFEMI/K7MDENG", "region": "us-east-1"})));
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["keyHint"], "...1234");
        assert_eq!(keys_of(&r.json()), MASKED_FIELDS, "no region beside the masked credential");
        let r = g.mgmt("PUT", "/v1/providers/mistral", Some(&g.key), Some(&json!({"api_key": "x"})));
        assert_eq!(r.status, 400);
        assert!(r.text().contains("openai, anthropic, bedrock, vertex"));

        // The secret never appears in any response, the logs, or the database file in clear.
        for path in ["/v1/providers", "/status"] {
            assert!(!g.mgmt("GET", path, Some(&g.key), None).text().contains(SECRET));
        }
        assert!(!g.logs().contains(SECRET));
        if matches!(b, Backend::Sqlite) {
            for f in ["tollgate.db", "tollgate.db-wal"] {
                if let Ok(bytes) = std::fs::read(g.dir.join(f)) {
                    assert!(
                        !bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()),
                        "{f} holds the secret in clear"
                    );
                }
            }
        }
    }
}

/// The seed's masked provider credential, sorted.
const MASKED_FIELDS: [&str; 4] = ["keyHint", "provider", "status", "updatedAt"];

fn keys_of(v: &Value) -> Vec<&str> {
    let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    keys
}

#[test]
fn status_lists_webhooks_as_unconfigured_without_degrading() {
    let g = Gateway::start(&Backend::Sqlite, &[]);
    let status = g.mgmt("GET", "/status", None, None).json();
    let components = status["components"].as_array().unwrap();
    let hooks = components.iter().find(|c| c["name"] == "webhooks").unwrap_or_else(|| panic!("{status}"));
    assert_eq!((hooks["status"].as_str(), hooks["critical"].as_bool()), (Some("unconfigured"), Some(false)), "{hooks}");
    assert!(hooks["group"].is_string(), "{hooks}");
    assert!(hooks["detail"].as_str().unwrap().contains("not configured"), "{hooks}");
    // One process: no shared state (Redis) either, which is not a fault.
    let shared = components.iter().find(|c| c["name"] == "shared-state").unwrap_or_else(|| panic!("{status}"));
    assert_eq!(shared["status"], "unconfigured", "{shared}");
    // Nor witnesses of the tenant log (docs/log.md §5).
    let witnesses = components.iter().find(|c| c["name"] == "witnesses").unwrap_or_else(|| panic!("{status}"));
    assert_eq!(witnesses["status"], "unconfigured", "{witnesses}");
    // Nothing else is wrong on a fresh gateway, so the unconfigured parts leave it operational.
    let unconfigured = ["webhooks", "shared-state", "witnesses"];
    let others: Vec<&Value> = components.iter().filter(|c| !unconfigured.iter().any(|n| c["name"] == *n)).collect();
    assert!(others.iter().all(|c| c["status"] == "operational"), "{status}");
    assert_eq!(status["status"], "operational", "{status}");
}

#[test]
fn secrets_survive_a_restart_with_the_same_master_key() {
    let up = Standin::start();
    let mut g = Gateway::start(&Backend::Sqlite, &[]);
    g.set_provider(&g.key, "openai", &up.url(), SECRET);
    g.stop();
    g.spawn();
    let r = g.post_gw("/v1/chat/completions", &g.key, br#"{"model":"gpt-4o-mini","messages":[]}"#);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(up.requests().pop().unwrap().header("authorization"), Some(format!("Bearer {SECRET}").as_str()));
    let mk = std::fs::metadata(g.dir.join("master.key")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(mk.permissions().mode() & 0o777, 0o600);
}

fn assert_400(r: &support::Resp, needle: &str) {
    assert_eq!(r.status, 400, "{}", r.text());
    let v: Value = r.json();
    assert_eq!(v["error"]["type"], "invalid_request", "{v}");
    assert_eq!(v["error"]["code"], 400);
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains(needle), "`{needle}` not in: {msg}");
}

#[test]
fn every_management_write_answers_400_naming_the_field() {
    let g = Gateway::start(&Backend::Sqlite, &[]);
    let k = g.key.clone();
    let key_id = g.mgmt("GET", "/v1/keys", Some(&k), None).json()["data"][0]["id"].as_str().unwrap().to_string();
    let limits = format!("/v1/keys/{key_id}/limits");
    let cases: Vec<(&str, &str, &[u8], &str)> = vec![
        ("POST", "/v1/keys", b"{\"label\":", "not valid JSON"),
        ("POST", "/v1/keys", b"[]", "invalid"),
        ("POST", "/v1/keys", br#"{"label": 5}"#, "`label`"),
        ("POST", "/v1/keys", br#"{"keyClass": "robot"}"#, "`keyClass`"),
        ("POST", "/v1/keys", br#"{"role": "god"}"#, "`role`"),
        ("POST", "/v1/keys", br#"{"budgetUsd": "ten"}"#, "`budgetUsd`"),
        ("POST", "/v1/keys", br#"{"budgetUsd": -1}"#, "`budgetUsd`"),
        ("POST", "/v1/keys", br#"{"colour": "red"}"#, "colour"),
        ("PATCH", &limits, b"{", "not valid JSON"),
        ("PATCH", &limits, br#"{"rpmLimit": "fast"}"#, "`rpmLimit`"),
        ("PATCH", &limits, br#"{"tpmLimit": -5}"#, "`tpmLimit`"),
        ("PATCH", &limits, br#"{"rpmLimit": 1.5}"#, "`rpmLimit`"),
        ("PUT", "/v1/providers/openai", b"nope", "not valid JSON"),
        ("PUT", "/v1/providers/openai", br#"{"api_key": 42}"#, "`api_key`"),
        ("PUT", "/v1/providers/openai", br#"{}"#, "api_key"),
        ("PUT", "/v1/providers/openai", br#"{"api_key": "k", "base_url": "ftp://x"}"#, "base_url"),
        ("PUT", "/v1/providers/openai", br#"{"api_key": "k", "region": "eu"}"#, "region"),
        ("PUT", "/v1/providers/vertex", br#"{"service_account_json": "not json"}"#, "service_account_json"),
        ("PUT", "/v1/providers/nope", br#"{"api_key": "k"}"#, "unknown provider"),
        ("POST", "/v1/providers/nope/test", b"", "unknown provider"),
        ("GET", "/v1/keys?limit=0", b"", "`limit`"),
    ];
    for (method, path, body, needle) in cases {
        let r = g.mgmt_raw(method, path, &k, body);
        assert_400(&r, needle);
    }
    // Unknown routes and methods are envelopes too, never a bare error page.
    let r = g.mgmt("GET", "/v1/nothing-here", Some(&k), None);
    assert_eq!((r.status, r.json()["error"]["type"].as_str()), (404, Some("not_found")));
    let r = g.mgmt("PUT", "/v1/keys", Some(&k), None);
    assert_eq!(r.status, 405);
    assert_eq!(r.json()["error"]["code"], 405);
}

/// A Vertex key file is parsed when it is stored, as the token source will use it: a file that
/// could never mint a token is a 400 naming what is wrong, and no answer echoes the key.
#[test]
fn a_vertex_key_file_is_checked_when_stored() {
    let g = Gateway::start(&Backend::Sqlite, &[]);
    let good = support::google::service_account("https://oauth2.googleapis.com/token").file;
    // A line of the key's base64: no answer may carry any of it.
    let key_line = good["private_key"].as_str().unwrap().lines().nth(2).unwrap();
    let with = |field: &str, value: Value| {
        let mut file = good.clone();
        file[field] = value;
        json!({ "service_account_json": file.to_string() })
    };
    let not_rsa =
        "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg\n-----END PRIVATE KEY-----\n";
    let cases = [
        (with("client_email", Value::Null), "missing `client_email`"),
        (with("type", json!("authorized_user")), "`type` is `authorized_user`"),
        (with("private_key", json!("not a key")), "`private_key` is not a PEM-encoded RSA private key"),
        (with("private_key", json!(not_rsa)), "`private_key` is not"),
        (with("token_uri", json!("gopher://x/token")), "`token_uri`"),
    ];
    for (body, needle) in cases {
        let r = g.mgmt("PUT", "/v1/providers/vertex", Some(&g.key), Some(&body));
        assert_400(&r, needle);
        assert!(!r.text().contains(key_line), "{}", r.text());
    }
    let r =
        g.mgmt("PUT", "/v1/providers/vertex", Some(&g.key), Some(&json!({ "service_account_json": good.to_string() })));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!((r.json()["status"].as_str(), r.json()["keyHint"].as_str()), (Some("active"), Some("...4e5f")));
    assert!(!r.text().contains(key_line), "{}", r.text());
}

/// PostgreSQL can neither store nor compare a NUL; these were 500s there (found probing the fuzzer's inputs on it).
/// Every backend answers 400 naming where the NUL was, and goes on serving.
#[test]
fn nul_characters_are_400_naming_where_on_every_backend() {
    for b in backends() {
        let g = Gateway::start(&b, &[]);
        let k = g.key.clone();
        let cases: Vec<(&str, &str, &[u8], &str)> = vec![
            ("GET", "/v1/receipts/%00", b"", "the path"),
            ("GET", "/v1/team/teams/a%00b", b"", "the path"),
            ("DELETE", "/v1/policies/%00", b"", "the path"),
            ("GET", "/v1/receipts?actor=%00", b"", "query `actor`"),
            ("GET", "/v1/keys?cursor=%00", b"", "query `cursor`"),
            ("POST", "/v1/keys", br#"{"label": "a\u0000b"}"#, "field `label`"),
            ("POST", "/v1/policies", br#"{"name": "\u0000", "yaml": ""}"#, "field `name`"),
            ("POST", "/v1/budgets/requests", br#"{"budgetId": "x", "amountUsd": 1, "reason": "\u0000"}"#, "`reason`"),
            ("PUT", "/v1/compliance/packs/x", b"framework: x\0", "pack YAML"),
        ];
        for (method, path, body, needle) in cases {
            let r = g.mgmt_raw(method, path, &k, body);
            assert_400(&r, needle);
        }
        // The label `a\\u0000b` (an escaped backslash) holds no NUL and is stored as written.
        let r = g.mgmt_raw("POST", "/v1/keys", &k, br#"{"label": "a\\u0000b"}"#);
        assert_eq!(r.status, 201, "{}", r.text());
        assert_eq!(r.json()["label"], "a\\u0000b");
        assert_eq!(g.mgmt("GET", "/v1/keys", Some(&k), None).status, 200);

        // On the gateway: a NUL in `model` or `user` is the client's 400, with a receipt that
        // records the model with U+FFFD (PostgreSQL refused the NUL: the answer was a 503).
        for (body, field) in [
            (&br#"{"model":"gpt-4o\u0000x","messages":[]}"#[..], "`model`"),
            (&br#"{"model":"gpt-4o","messages":[],"user":"u\u0000"}"#[..], "`user`"),
        ] {
            let r = g.post_gw("/v1/chat/completions", &k, body);
            assert_400(&r, field);
            let receipt = g.receipt_of(&r);
            assert!(!receipt["model"].as_str().unwrap().contains('\0'), "{receipt}");
        }
        assert_eq!(
            g.receipt_of(&g.post_gw("/v1/chat/completions", &k, br#"{"model":"gpt\u0000"}"#))["model"],
            "gpt\u{FFFD}"
        );
    }
}

#[test]
fn oversized_management_bodies_get_413() {
    let g = Gateway::start(&Backend::Sqlite, &[]);
    let body = vec![b' '; 17 << 20];
    let r = g.mgmt_raw("POST", "/v1/keys", &g.key, &body);
    assert_eq!(r.status, 413);
    assert_eq!(r.json()["error"]["type"], "payload_too_large");
}
