//! Tenant policies over real sockets: the `/v1/policies` API (CRUD, validation with line and
//! column, permissions, tenant isolation) and policy files watched on disk, on every backend.

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{backends, Gateway};

const DENY_BIG: &str = "rules:\n  - id: big\n    match: {model: \"gpt-4*\"}\n    action: deny\n";

fn post(g: &Gateway, key: &str, body: Value) -> support::Resp {
    g.mgmt("POST", "/v1/policies", Some(key), Some(&body))
}

fn list(g: &Gateway, key: &str) -> Vec<Value> {
    let r = g.mgmt("GET", "/v1/policies?limit=200", Some(key), None);
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["data"].as_array().unwrap().clone()
}

fn policies_status(g: &Gateway) -> Value {
    let s = g.mgmt("GET", "/status", None, None).json();
    s["components"].as_array().unwrap().iter().find(|c| c["name"] == "policies").cloned().expect("policies component")
}

/// Polls until `f` yields a value (bounded); the watcher picks files up within `watch_ms`.
fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn invalid_message(r: &support::Resp) -> String {
    assert_eq!(r.status, 400, "{}", r.text());
    let v = r.json();
    assert_eq!(v["error"]["type"], "invalid_request");
    assert_eq!(v["error"]["code"], 400);
    v["error"]["message"].as_str().unwrap().to_string()
}

#[test]
fn policies_crud_in_force_before_the_call_returns() {
    for b in backends() {
        let g = Gateway::start(&b, &[]);
        assert!(list(&g, &g.key).is_empty());

        let r = post(&g, &g.key, json!({"name": "no big models", "enabled": true, "yaml": DENY_BIG}));
        assert_eq!(r.status, 201, "{}", r.text());
        let p = r.json();
        let id = p["id"].as_str().unwrap().to_string();
        assert_eq!(uuid::Uuid::parse_str(&id).unwrap().get_version_num(), 7);
        assert_eq!(p["name"], "no big models");
        assert_eq!(p["enabled"], true);
        assert_eq!(p["yaml"], DENY_BIG);
        assert_eq!(p["source"], "api");
        assert_eq!(p["createdAt"], p["updatedAt"]);
        // Compiled and swapped in before the answer: /status counts it right away.
        assert!(policies_status(&g)["detail"].as_str().unwrap().contains("1 API policies in force"));

        let got = g.mgmt("GET", &format!("/v1/policies/{id}"), Some(&g.key), None);
        assert_eq!(got.status, 200);
        assert_eq!(got.json(), p);
        assert_eq!(list(&g, &g.key), vec![p.clone()]);

        // PUT replaces the whole policy; `enabled` defaults to true.
        let new_yaml = "cache: {mode: exact, ttlSeconds: 60}\n";
        let r = g.mgmt(
            "PUT",
            &format!("/v1/policies/{id}"),
            Some(&g.key),
            Some(&json!({"name": "cache", "enabled": false, "yaml": new_yaml})),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["enabled"], false);
        assert!(policies_status(&g)["detail"].as_str().unwrap().contains("0 API policies in force"));
        let r = g.mgmt(
            "PUT",
            &format!("/v1/policies/{id}"),
            Some(&g.key),
            Some(&json!({"name": "cache", "yaml": new_yaml})),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        assert_eq!(
            (v["name"].as_str(), v["enabled"].as_bool(), v["yaml"].as_str()),
            (Some("cache"), Some(true), Some(new_yaml))
        );
        assert_eq!(v["createdAt"], p["createdAt"]);
        assert!(v["updatedAt"].as_str().unwrap() >= p["updatedAt"].as_str().unwrap());
        assert!(policies_status(&g)["detail"].as_str().unwrap().contains("1 API policies in force"));

        // Pagination walks creation order.
        let mut ids = vec![id.clone()];
        for i in 0..3 {
            let r = post(&g, &g.key, json!({"name": format!("p{i}"), "enabled": i != 1, "yaml": ""}));
            assert_eq!(r.status, 201, "{}", r.text());
            ids.push(r.json()["id"].as_str().unwrap().to_string());
        }
        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let path = match &cursor {
                Some(c) => format!("/v1/policies?limit=3&cursor={c}"),
                None => "/v1/policies?limit=3".to_string(),
            };
            let page = g.mgmt("GET", &path, Some(&g.key), None).json();
            seen.extend(page["data"].as_array().unwrap().iter().map(|p| p["id"].as_str().unwrap().to_string()));
            match page["nextCursor"].as_str() {
                Some(c) => cursor = Some(c.to_string()),
                None => break,
            }
        }
        assert_eq!(seen, ids);
        assert!(invalid_message(&g.mgmt("GET", "/v1/policies?limit=0", Some(&g.key), None)).contains("limit"));

        let r = g.mgmt("DELETE", &format!("/v1/policies/{id}"), Some(&g.key), None);
        assert_eq!(r.status, 204);
        assert!(r.body.is_empty());
        assert_eq!(g.mgmt("GET", &format!("/v1/policies/{id}"), Some(&g.key), None).status, 404);
        assert_eq!(g.mgmt("DELETE", &format!("/v1/policies/{id}"), Some(&g.key), None).status, 404);
        assert_eq!(list(&g, &g.key).len(), 3);
        assert!(policies_status(&g)["detail"].as_str().unwrap().contains("2 API policies in force"));
    }
}

#[test]
fn invalid_policies_are_400_with_line_column_and_field() {
    for b in backends() {
        let g = Gateway::start(&b, &[]);
        let bad = |yaml: &str| invalid_message(&post(&g, &g.key, json!({"name": "x", "enabled": true, "yaml": yaml})));

        // Positions read as words, not as a compiler's `origin:line:col`.
        let bad = |yaml: &str| {
            let m = bad(yaml);
            assert!(m.starts_with("field `yaml` is not a valid policy: line "), "{m}");
            m
        };
        // Broken YAML syntax.
        let m = bad("rules:\n  - id: a\n    action: deny\n   match: {model: x}\n");
        assert!(m.contains("line 4, column "), "{m}");
        // Unknown field.
        let m = bad("rules:\n  - id: a\n    action: deny\n    colour: red\n");
        assert!(m.contains("line 4, column 5: field `rules[0]") && m.contains("unknown field `colour`"), "{m}");
        // Wrong enum value.
        let m = bad("cache:\n  mode: sometimes\n");
        assert!(m.contains("line 2, column 9: field `cache.mode`") && m.contains("sometimes"), "{m}");
        // A wrong value deep in a rule names its whole path.
        let m = bad("rules:\n  - id: a\n    match: {model: {x: 1}}\n    action: deny\n");
        assert!(m.contains("line 3, column ") && m.contains(": field `rules[0].match.model`: "), "{m}");
        // What serde cannot check: regexes, time windows, duplicate ids, tenant.
        let m = bad("guardrails:\n  patterns:\n    - pattern: \"(unclosed\"\n      action: block\n");
        assert!(m.contains("line 3, column ") && m.contains("guardrails.patterns[0].pattern"), "{m}");
        let m =
            bad("rules:\n  - id: night\n    match:\n      time:\n        hours: \"22:00-30:00\"\n    action: deny\n");
        assert!(m.contains("line 5, column ") && m.contains("rules[0].match.time.hours"), "{m}");
        let m = bad("rules:\n  - {id: a, action: deny}\n  - {id: a, action: allow}\n");
        assert!(m.contains("line 3, column ") && m.contains("rules[1].id") && m.contains("duplicate"), "{m}");
        let m = bad("tenant: acme\nrules: []\n");
        assert!(m.contains("line 1, column 1: field `tenant`"), "{m}");
        // PUT validates the same way.
        let id =
            post(&g, &g.key, json!({"name": "ok", "yaml": "rules: []\n"})).json()["id"].as_str().unwrap().to_string();
        let r = g.mgmt(
            "PUT",
            &format!("/v1/policies/{id}"),
            Some(&g.key),
            Some(&json!({"name": "ok", "yaml": "cache:\n  mode: sometimes\n"})),
        );
        let m = invalid_message(&r);
        assert!(m.starts_with("field `yaml` is not a valid policy: line 2, column 9: field `cache.mode`"), "{m}");
        assert_eq!(g.mgmt("DELETE", &format!("/v1/policies/{id}"), Some(&g.key), None).status, 204);

        // The request body itself.
        let m = invalid_message(&post(&g, &g.key, json!({"enabled": true, "yaml": ""})));
        assert!(m.contains("name"), "{m}");
        let m = invalid_message(&post(&g, &g.key, json!({"name": "x", "yaml": "", "colour": 1})));
        assert!(m.contains("colour"), "{m}");
        let m = invalid_message(&post(&g, &g.key, json!({"name": " ", "yaml": ""})));
        assert!(m.contains("name"), "{m}");
        assert!(list(&g, &g.key).is_empty(), "nothing invalid was stored");
    }
}

#[test]
fn writes_need_a_manager_and_other_tenants_ids_are_not_found() {
    for b in backends() {
        let g = Gateway::start(&b, &[]);
        let dev = g.new_key(&g.key, &json!({"label": "dev"})).1;
        let r = post(&g, &g.key, json!({"name": "mine", "enabled": true, "yaml": DENY_BIG}));
        let id = r.json()["id"].as_str().unwrap().to_string();
        let body = json!({"name": "x", "enabled": true, "yaml": ""});

        for r in [
            post(&g, &dev, body.clone()),
            g.mgmt("PUT", &format!("/v1/policies/{id}"), Some(&dev), Some(&body)),
            g.mgmt("DELETE", &format!("/v1/policies/{id}"), Some(&dev), None),
        ] {
            assert_eq!(r.status, 403, "{}", r.text());
            assert_eq!(r.json()["error"]["type"], "forbidden");
        }
        // Reading is open to every key of the tenant.
        assert_eq!(list(&g, &dev).len(), 1);
        assert_eq!(g.mgmt("GET", &format!("/v1/policies/{id}"), Some(&dev), None).status, 200);

        let (_, other) = g.create_tenant_live("globex");
        assert!(list(&g, &other).is_empty());
        for r in [
            g.mgmt("GET", &format!("/v1/policies/{id}"), Some(&other), None),
            g.mgmt("PUT", &format!("/v1/policies/{id}"), Some(&other), Some(&body)),
            g.mgmt("DELETE", &format!("/v1/policies/{id}"), Some(&other), None),
        ] {
            assert_eq!(r.status, 404, "{}", r.text());
            assert_eq!(r.json()["error"]["type"], "not_found");
        }
        let still = g.mgmt("GET", &format!("/v1/policies/{id}"), Some(&g.key), None);
        assert_eq!(still.json()["yaml"], DENY_BIG);
        assert_eq!(g.mgmt("PATCH", "/v1/policies", Some(&g.key), None).status, 405);
    }
}

fn write(dir: &Path, name: &str, text: &str) {
    // Write then rename, as editors and deploy tools do: the watcher never sees half a file.
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, dir.join(name)).unwrap();
}

fn file_entry(g: &Gateway, key: &str, name: &str) -> Option<Value> {
    list(g, key).into_iter().find(|p| p["id"] == format!("file:{name}"))
}

#[test]
fn policy_files_are_watched_listed_read_only_and_survive_mistakes() {
    for b in backends() {
        let dir: PathBuf = std::env::temp_dir().join(format!("tollgate-policies-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        // Present at start: in force from the first request, no waiting.
        write(&dir, "all.yaml", "rules:\n  - {id: everyone, match: {model: \"o1*\"}, action: deny}\n");
        std::fs::write(dir.join("notes.yaml.sample"), "not: [a policy").unwrap();
        let g =
            Gateway::start(&b, &[("TOLLGATE_POLICY_DIR", dir.to_str().unwrap()), ("TOLLGATE_POLICY_WATCH_MS", "100")]);
        let (_, other) = g.create_tenant_live("globex");

        let all = file_entry(&g, &g.key, "all.yaml").expect("file policy listed at start");
        assert_eq!(all["source"], "file");
        assert_eq!(all["name"], "all.yaml");
        assert_eq!(all["path"], dir.join("all.yaml").display().to_string());
        assert_eq!(all["enabled"], true);
        assert!(all["error"].is_null());
        assert!(file_entry(&g, &other, "all.yaml").is_some(), "no tenant: every tenant");
        assert_eq!(list(&g, &g.key).len(), 1, "the .sample file is not a policy");
        let st = policies_status(&g);
        assert_eq!(st["status"], "operational", "{st}");
        assert!(st["detail"].as_str().unwrap().contains("1 file policies"), "{st}");

        // API policies come first, then files.
        let api = post(&g, &g.key, json!({"name": "api", "enabled": true, "yaml": DENY_BIG})).json();
        let ids: Vec<Value> = list(&g, &g.key).iter().map(|p| p["id"].clone()).collect();
        assert_eq!(ids, vec![api["id"].clone(), json!("file:all.yaml")]);
        let page = g.mgmt("GET", "/v1/policies?limit=1", Some(&g.key), None).json();
        assert_eq!(page["nextCursor"], api["id"]);
        let page = g
            .mgmt("GET", &format!("/v1/policies?limit=1&cursor={}", api["id"].as_str().unwrap()), Some(&g.key), None)
            .json();
        assert_eq!(page["data"][0]["id"], "file:all.yaml");
        assert!(page["nextCursor"].is_null());

        // A file for one tenant (by name) appears for it only.
        write(&dir, "acme.yml", "tenant: acme\nallowlist: {models: [\"gpt-4o-mini\"]}\n");
        let acme = eventually("acme.yml listed", || file_entry(&g, &g.key, "acme.yml"));
        assert_eq!(acme["tenant"], "acme");
        assert!(file_entry(&g, &other, "acme.yml").is_none());
        assert_eq!(g.mgmt("GET", "/v1/policies/file:acme.yml", Some(&g.key), None).json()["yaml"], acme["yaml"]);
        assert_eq!(g.mgmt("GET", "/v1/policies/file%3Aacme.yml", Some(&g.key), None).status, 200);
        assert_eq!(g.mgmt("GET", "/v1/policies/file:acme.yml", Some(&other), None).status, 404);

        // Read-only through the API: 409 for the tenant it applies to, 404 for others.
        let body = json!({"name": "x", "enabled": true, "yaml": ""});
        for r in [
            g.mgmt("PUT", "/v1/policies/file:acme.yml", Some(&g.key), Some(&body)),
            g.mgmt("DELETE", "/v1/policies/file:all.yaml", Some(&g.key), None),
        ] {
            assert_eq!(r.status, 409, "{}", r.text());
            assert_eq!(r.json()["error"]["type"], "conflict");
            assert!(r.json()["error"]["message"].as_str().unwrap().contains("managed on disk"));
        }
        assert_eq!(g.mgmt("DELETE", "/v1/policies/file:acme.yml", Some(&other), None).status, 404);

        // Edit: the new version replaces the old one.
        let v2 = "tenant: acme\nallowlist: {models: [\"gpt-4o-mini\", \"claude-*\"]}\n";
        write(&dir, "acme.yml", v2);
        eventually("edit visible", || file_entry(&g, &g.key, "acme.yml").filter(|p| p["yaml"] == v2));

        // Break it: the last good version stays, the error names file, line and field.
        write(&dir, "acme.yml", "tenant: acme\nallowlist:\n  modles: [\"o1\"]\n");
        let st = eventually("policies degraded", || Some(policies_status(&g)).filter(|s| s["status"] == "degraded"));
        let detail = st["detail"].as_str().unwrap();
        assert!(detail.contains("acme.yml") && detail.contains("acme.yml:3:") && detail.contains("modles"), "{detail}");
        let kept = file_entry(&g, &g.key, "acme.yml").expect("old version still listed");
        assert_eq!(kept["yaml"], v2);
        assert!(kept["error"].as_str().unwrap().contains("acme.yml:3:3"), "{kept}");
        assert_eq!(g.mgmt("GET", "/status", None, None).json()["status"], "degraded");
        assert!(g.logs().contains("acme.yml:3:3"), "the error is logged");

        // A file that never parsed is reported and not listed.
        write(&dir, "new.yaml", "rules:\n  - {id: a, action: deny}\n  - {id: a, action: deny}\n");
        let st = eventually("new.yaml reported", || {
            Some(policies_status(&g)).filter(|s| s["detail"].as_str().unwrap().contains("new.yaml"))
        });
        assert!(st["detail"].as_str().unwrap().contains("rules[1].id"), "{st}");
        assert!(file_entry(&g, &g.key, "new.yaml").is_none());

        // Fix both: operational again, the fixed version in force.
        let v3 = "tenant: acme\nallowlist: {models: [\"claude-*\"]}\n";
        write(&dir, "acme.yml", v3);
        std::fs::remove_file(dir.join("new.yaml")).unwrap();
        let st = eventually("operational again", || Some(policies_status(&g)).filter(|s| s["status"] == "operational"));
        assert!(st["detail"].as_str().unwrap().contains("2 file policies"), "{st}");
        let fixed = file_entry(&g, &g.key, "acme.yml").unwrap();
        assert_eq!(fixed["yaml"], v3);
        assert!(fixed["error"].is_null());

        // Removing a file removes its policy.
        std::fs::remove_file(dir.join("all.yaml")).unwrap();
        eventually("all.yaml gone", || file_entry(&g, &other, "all.yaml").is_none().then_some(()));
        assert!(file_entry(&g, &g.key, "acme.yml").is_some());

        drop(g);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn check_config_validates_policy_files() {
    let dir = std::env::temp_dir().join(format!("tollgate-check-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("good.yaml"), DENY_BIG).unwrap();
    let run = || {
        std::process::Command::new(support::bin())
            .arg("check-config")
            .env("TOLLGATE_POLICY_DIR", &dir)
            .env("TOLLGATE_DATA_DIR", &dir)
            .output()
            .unwrap()
    };
    let out = run();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 policy file(s) OK"));

    std::fs::write(dir.join("bad.yml"), "rules:\n  - id: x\n    action: deny\n    match: {keyclass: agent}\n").unwrap();
    let out = run();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("{}:4:", dir.join("bad.yml").display())), "{err}");
    assert!(err.contains("rules[0].match") && err.contains("keyclass"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `POST /v1/policies/validate`: the create route's check without saving. A valid policy → 200
/// with its rule count; an invalid one → the very refusal create gives (line, column, field);
/// a bad body → 400 in the envelope. Any key but an auditor's; nothing stored, nothing in the
/// admin trail.
#[test]
fn validate_checks_like_create_and_changes_nothing() {
    for b in backends() {
        let g = Gateway::start(&b, &[]);
        let (_, dev) = g.new_key(&g.key, &json!({"label": "dev"}));
        let (_, auditor) = g.new_key(&g.key, &json!({"label": "audit", "role": "auditor"}));
        let validate = |key: &str, body: Value| g.mgmt("POST", "/v1/policies/validate", Some(key), Some(&body));
        let before = g.newest_seq(&g.key);

        let two = "rules:\n  - id: a\n    action: deny\n  - id: b\n    action: allow\n";
        for key in [&g.key, &dev] {
            let r = validate(key, json!({"yaml": two}));
            assert_eq!(r.status, 200, "{}", r.text());
            assert_eq!(r.json(), json!({"valid": true, "rules": 2}));
        }
        let r = validate(&g.key, json!({"yaml": "cache: {mode: exact, ttlSeconds: 60}\n"}));
        assert_eq!(r.json(), json!({"valid": true, "rules": 0}), "{}", r.text());

        // The same refusal as create, word for word, for every kind of mistake.
        for bad in [
            "rules:\n  - id: a\n    action: deny\n    colour: red\n",
            "rules:\n  - id: a\n    action: deny\n   match: {model: x}\n",
            "cache:\n  mode: sometimes\n",
            "tenant: acme\nrules: []\n",
        ] {
            let checked = invalid_message(&validate(&dev, json!({"yaml": bad})));
            let created = invalid_message(&post(&g, &g.key, json!({"name": "x", "yaml": bad})));
            assert_eq!(checked, created, "{bad}");
            assert!(checked.starts_with("field `yaml` is not a valid policy: line "), "{checked}");
        }
        let m = invalid_message(&validate(
            &g.key,
            json!({"yaml": "rules:\n  - id: a\n    action: deny\n    colour: red\n"}),
        ));
        assert!(m.contains("line 4, column 5: field `rules[0]") && m.contains("unknown field `colour`"), "{m}");

        // The body itself: not JSON, no `yaml`, an unknown field, the wrong type.
        let r = g.mgmt_raw("POST", "/v1/policies/validate", &g.key, b"{\"yaml\": ");
        assert!(invalid_message(&r).contains("not valid JSON"), "{}", r.text());
        assert!(invalid_message(&validate(&g.key, json!({}))).contains("yaml"));
        assert!(invalid_message(&validate(&g.key, json!({"yaml": "", "name": "x"}))).contains("name"));
        assert!(invalid_message(&validate(&g.key, json!({"yaml": 3}))).contains("yaml"));

        // Who: no key → 401; an auditor → 403 (auditors only read evidence).
        let r = g.mgmt("POST", "/v1/policies/validate", None, Some(&json!({"yaml": two})));
        assert_eq!(r.status, 401, "{}", r.text());
        let r = validate(&auditor, json!({"yaml": two}));
        assert_eq!((r.status, r.json()["error"]["type"].as_str()), (403, Some("forbidden")), "{}", r.text());
        // Other methods on the path are not a policy called `validate`.
        assert_eq!(g.mgmt("GET", "/v1/policies/validate", Some(&g.key), None).status, 405);

        // Nothing stored, and no admin receipt for any of it (the refused auditor's included).
        assert!(list(&g, &g.key).is_empty(), "validating stored nothing");
        assert_eq!(g.newest_seq(&g.key), before, "validating appends nothing to the tenant's log");
        if let support::Backend::Postgres(url) = &b {
            support::drop_postgres(url);
        }
    }
}
