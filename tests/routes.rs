//! Routes, fallbacks and named credentials (docs/API.md "Routes, fallbacks and named
//! credentials", docs/decisions/routes.md), over real sockets against the stand-in upstream,
//! whose failures are chosen by the target's model id (tests/support/standin_routes.rs).

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::{backends, http, with_standin, Backend, Gateway, Standin};

fn put_route(g: &Gateway, model: &str, body: &Value) {
    let r = g.mgmt("PUT", &format!("/v1/routes/{model}"), Some(&g.key), Some(body));
    assert_eq!(r.status, 200, "{}", r.text());
}

fn put_credential(g: &Gateway, provider: &str, name: &str, up: &Standin, secret: &str) {
    let body = json!({"api_key": secret, "base_url": up.url()});
    let r = g.mgmt("PUT", &format!("/v1/providers/{provider}/credentials/{name}"), Some(&g.key), Some(&body));
    assert_eq!(r.status, 200, "{}", r.text());
}

fn target(provider: &str, credential: &str, model: &str) -> Value {
    json!({"provider": provider, "credential": credential, "model": model})
}

fn chat(g: &Gateway, model: &str, stream: bool) -> http::Resp {
    g.chat(&g.key, &json!({"model": model, "stream": stream, "messages": [{"role": "user", "content": "hi"}]}))
}

fn attempts(r: &http::Resp) -> usize {
    r.header("x-tollgate-attempts").expect("x-tollgate-attempts on a routed answer").parse().unwrap()
}

/// How many requests the stand-in saw for `model`.
fn seen(up: &Standin, model: &str) -> usize {
    up.requests()
        .iter()
        .filter(|r| serde_json::from_slice::<Value>(&r.body).ok().is_some_and(|b| b["model"] == model))
        .count()
}

#[test]
fn a_fallback_route_answers_from_the_second_target_with_one_receipt() {
    for b in backends() {
        let (g, up) = with_standin(&b, &[]);
        let route = json!({"strategy": "fallback", "retries": {"attempts": 2, "backoffMs": 0},
            "targets": [target("openai", "default", "gpt-fail"), target("anthropic", "default", "claude-3-5-haiku")]});
        put_route(&g, "smart", &route);
        let r = chat(&g, "smart", false);
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["choices"][0]["message"]["content"], "Hello from stand-in", "translated from Anthropic");
        assert_eq!(attempts(&r), 2);
        let receipt = g.receipt_of(&r);
        assert_eq!(
            (receipt["provider"].as_str(), receipt["model"].as_str()),
            (Some("anthropic"), Some("claude-3-5-haiku"))
        );
        assert_eq!(receipt["promptTokens"], 13, "only the answering attempt's tokens: {receipt}");
        let tries = receipt["attempts"].as_array().expect("attempts beside the receipt");
        assert_eq!(tries.len(), 2);
        assert_eq!(
            (&tries[0]["provider"], &tries[0]["model"], &tries[0]["status"], &tries[0]["outcome"]),
            (&json!("openai"), &json!("gpt-fail"), &json!(500), &json!("retry"))
        );
        assert_eq!(
            (&tries[1]["provider"], &tries[1]["status"], &tries[1]["outcome"]),
            (&json!("anthropic"), &json!(200), &json!("ok"))
        );
        assert_eq!(tries[1]["credential"], "default");
        assert_eq!(g.call_count(&g.key), 1, "one receipt per client request");

        // Another 4xx is the request's own fault: relayed, never moved on from.
        let route = json!({"targets": [target("openai", "default", "gpt-bad-request"), target("openai", "default", "gpt-4o-mini")]});
        put_route(&g, "strict", &route);
        let before = seen(&up, "gpt-4o-mini");
        let r = chat(&g, "strict", false);
        assert_eq!(r.status, 400, "{}", r.text());
        assert_eq!(attempts(&r), 1);
        assert_eq!(seen(&up, "gpt-4o-mini"), before);

        // A connection closed without an answer moves on too.
        let route = json!({"retries": {"backoffMs": 0},
            "targets": [target("openai", "default", "gpt-reset"), target("openai", "default", "gpt-4o-mini")]});
        put_route(&g, "resilient", &route);
        let r = chat(&g, "resilient", false);
        assert_eq!(r.status, 200, "{}", r.text());
        let tries = g.receipt_of(&r)["attempts"].clone();
        assert_eq!((&tries[0]["status"], &tries[1]["model"]), (&json!(0), &json!("gpt-4o-mini")), "{tries}");

        // The rate limit counts client requests, not attempts: two routed requests of two
        // attempts each fit a limit of 2 a minute; the third does not.
        let (_, limited) = g.key_with_limits("two-a-minute", &json!({"rpmLimit": 2}));
        let ask = || g.chat(&limited, &json!({"model": "smart", "messages": [{"role": "user", "content": "hi"}]}));
        let (first, second) = (ask(), ask());
        assert_eq!((first.status, attempts(&first), second.status, attempts(&second)), (200, 2, 200, 2));
        assert_eq!(ask().status, 429);

        // A target the tenant's policies refuse (matched with its own provider and model id) is
        // left out.
        let deny = "rules:\n  - id: no-fail\n    match: {model: [\"gpt-fail\"]}\n    action: deny\n";
        let p = g.mgmt(
            "POST",
            "/v1/policies",
            Some(&g.key),
            Some(&json!({"name": "no-fail", "enabled": true, "yaml": deny})),
        );
        assert_eq!(p.status, 201, "{}", p.text());
        let (fails_before, r) = (seen(&up, "gpt-fail"), chat(&g, "resilient-2", false));
        assert_eq!(r.status, 400, "no such route yet: {}", r.text());
        let route =
            json!({"targets": [target("openai", "default", "gpt-fail"), target("openai", "default", "gpt-4o-mini")]});
        put_route(&g, "resilient-2", &route);
        let r = chat(&g, "resilient-2", false);
        assert_eq!((r.status, attempts(&r)), (200, 1), "{}", r.text());
        assert_eq!(seen(&up, "gpt-fail"), fails_before, "the refused target is never called");

        // A model without a route is served as before, with no attempts header.
        let r = chat(&g, "gpt-4o-mini", false);
        assert_eq!(r.status, 200);
        assert!(r.header("x-tollgate-attempts").is_none());
        assert!(g.receipt_of(&r).get("attempts").is_none());
    }
}

#[test]
fn retries_stop_at_the_attempts_or_the_deadline_with_the_last_error() {
    for b in backends() {
        let (g, up) = with_standin(&b, &[]);
        // Three tries of one target answering 503 (retry-after-ms honoured): its last error is
        // the answer, as a provider's 5xx is without a route (502 upstream_error).
        let route = json!({"retries": {"attempts": 3, "backoffMs": 1}, "targets": [target("openai", "default", "gpt-unavailable")]});
        put_route(&g, "flaky", &route);
        let r = chat(&g, "flaky", false);
        assert_eq!(r.status, 502, "{}", r.text());
        assert_eq!(r.json()["error"]["message"], "openai answered 503: try later", "the provider's last error");
        assert_eq!(attempts(&r), 3);
        assert_eq!(seen(&up, "gpt-unavailable"), 3);
        let tries = g.receipt_of(&r)["attempts"].clone();
        assert_eq!((&tries[1]["outcome"], &tries[2]["outcome"]), (&json!("retry"), &json!("failed")));

        // A target that never answers: each try ends at its own timeout, and the tries end at the
        // total deadline long before `attempts` are used up.
        let route = json!({"retries": {"attempts": 10, "perAttemptTimeoutMs": 150, "totalTimeoutMs": 600, "backoffMs": 10},
            "targets": [target("openai", "default", "gpt-hang")]});
        put_route(&g, "stuck", &route);
        let r = chat(&g, "stuck", false);
        assert_eq!(r.status, 504, "{}", r.text());
        assert_eq!(r.json()["error"]["type"], "upstream_timeout", "{}", r.text());
        let n = attempts(&r);
        assert!((2..10).contains(&n), "{n} tries within the deadline");
        assert_eq!(g.receipt_of(&r)["attempts"].as_array().unwrap().len(), n);
    }
}

#[test]
fn a_stream_falls_back_before_its_first_byte_and_never_after() {
    for b in backends() {
        let (g, up) = with_standin(&b, &[]);
        let route = json!({"retries": {"backoffMs": 0},
            "targets": [target("openai", "default", "gpt-fail"), target("openai", "default", "gpt-4o-mini")]});
        put_route(&g, "streamy", &route);
        let r = chat(&g, "streamy", true);
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(r.text().contains("Hello") && r.text().contains("[DONE]"), "{}", r.text());
        assert_eq!(attempts(&r), 2);

        let route = json!({"retries": {"backoffMs": 0},
            "targets": [target("openai", "default", "gpt-stream-break"), target("openai", "default", "gpt-4o-mini")]});
        put_route(&g, "breaking", &route);
        let before = seen(&up, "gpt-4o-mini");
        let r = chat(&g, "breaking", true);
        assert_eq!(r.status, 200);
        let text = r.text();
        assert!(text.contains("Hel"), "the first bytes reached the client: {text}");
        assert!(text.contains("\"error\""), "the stream ends with its error event: {text}");
        assert_eq!(attempts(&r), 1);
        assert_eq!(seen(&up, "gpt-4o-mini"), before, "no fallback after the first byte");
    }
}

#[test]
fn a_weighted_route_spreads_requests_by_weight_and_least_busy_spreads_concurrent_ones() {
    let b = &backends()[0];
    let (g, up) = with_standin(b, &[]);
    put_credential(&g, "openai", "key-a", &up, "sk-weight-a");
    put_credential(&g, "openai", "key-b", &up, "sk-weight-b");
    let route = json!({"strategy": "weighted", "targets": [
        {"provider": "openai", "credential": "key-a", "model": "gpt-4o-mini", "weight": 3},
        {"provider": "openai", "credential": "key-b", "model": "gpt-4o-mini", "weight": 1}]});
    put_route(&g, "spread", &route);
    for _ in 0..1000 {
        assert_eq!(chat(&g, "spread", false).status, 200);
    }
    let with =
        |k: &str| up.requests().iter().filter(|r| r.header("authorization") == Some(&format!("Bearer {k}"))).count();
    let (a, b_) = (with("sk-weight-a"), with("sk-weight-b"));
    assert_eq!(a + b_, 1000);
    assert!((712..=787).contains(&a), "3:1 within ±5%: {a} vs {b_}");

    // Least busy: two requests in flight at once go to the two credentials. `gpt-held` keeps each
    // at the stand-in until the test lets them go, so the second is sent while the first is
    // surely in flight (with a slow model and no hold, a loaded machine sent the second after the
    // first had ended, and both went to `key-a`).
    let route = json!({"strategy": "least-busy", "retries": {"attempts": 1, "perAttemptTimeoutMs": 20000},
        "targets": [
        {"provider": "openai", "credential": "key-a", "model": "gpt-held"},
        {"provider": "openai", "credential": "key-b", "model": "gpt-held"}]});
    put_route(&g, "idle", &route);
    let answers: Vec<http::Resp> = std::thread::scope(|s| {
        let mut calls = Vec::new();
        for n in 1..=2 {
            calls.push(s.spawn(|| chat(&g, "idle", false)));
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while seen(&up, "gpt-held") < n {
                assert!(std::time::Instant::now() < deadline, "request {n} never reached the stand-in");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        up.release_held(2);
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    });
    let mut creds: Vec<String> =
        answers.iter().map(|r| g.receipt_of(r)["attempts"][0]["credential"].as_str().unwrap().to_string()).collect();
    creds.sort();
    assert_eq!(creds, ["key-a", "key-b"]);
}

/// A gateway with route `name`: `first` (credential `default`), then `gpt-4o-mini` (credential
/// `backup`), two tries, a breaker opening after two failures for a second.
fn guarded(b: &Backend, name: &str, first: &str) -> (Gateway, Standin) {
    let (g, up) = with_standin(b, &[]);
    put_credential(&g, "openai", "backup", &up, "sk-backup");
    let route = json!({"retries": {"attempts": 2, "backoffMs": 0}, "breaker": {"failures": 2, "cooldownSeconds": 1},
        "targets": [target("openai", "default", first), target("openai", "backup", "gpt-4o-mini")]});
    put_route(&g, name, &route);
    (g, up)
}

/// `/status`'s entry of one route target.
fn target_status(g: &Gateway, name: &str) -> Value {
    let s = g.mgmt("GET", "/status", None, None).json();
    s["components"].as_array().unwrap().iter().find(|c| c["name"] == name).cloned().unwrap_or(Value::Null)
}

#[test]
fn a_broken_target_is_skipped_after_n_failures_and_probed_after_the_cool_down() {
    for b in backends() {
        let (g, up) = guarded(&b, "guarded", "gpt-fail");
        for _ in 0..2 {
            let r = chat(&g, "guarded", false);
            assert_eq!((r.status, attempts(&r)), (200, 2));
        }
        let status = |g: &Gateway| target_status(g, "route:guarded/openai/default");
        assert_eq!(status(&g)["status"], "outage", "open after 2 failures in a row");
        let before = seen(&up, "gpt-fail");
        let r = chat(&g, "guarded", false);
        assert_eq!((r.status, attempts(&r)), (200, 1), "the open target is skipped");
        assert_eq!(seen(&up, "gpt-fail"), before);
        assert_eq!(target_status(&g, "route:guarded/openai/backup")["status"], "operational");
        assert!(
            g.metric("tollgate_upstream_attempts_total", &["outcome=\"retry\"", "target=\"openai/default/gpt-fail\""])
                >= 2.0
        );
        assert_eq!(g.metric("tollgate_target_state", &["route=\"guarded\"", "credential=\"default\""]), 2.0);

        std::thread::sleep(Duration::from_millis(1100));
        assert_eq!(status(&g)["status"], "degraded", "half-open after the cool-down");
        let r = chat(&g, "guarded", false);
        assert_eq!((r.status, attempts(&r)), (200, 2), "one probe, which fails and moves on");
        assert_eq!(seen(&up, "gpt-fail"), before + 1);
        assert_eq!(status(&g)["status"], "outage", "a failed probe opens it again");
    }
}

#[test]
fn a_target_whose_rate_limit_is_used_up_is_skipped_until_its_reset() {
    for b in backends() {
        let (g, up) = with_standin(&b, &[]);
        put_credential(&g, "openai", "backup", &up, "sk-backup");
        let route = json!({"targets": [target("openai", "default", "gpt-exhausted"), target("openai", "backup", "gpt-4o-mini")]});
        put_route(&g, "limited", &route);
        let r = chat(&g, "limited", false);
        assert_eq!(r.status, 200);
        assert_eq!(g.receipt_of(&r)["model"], "gpt-exhausted", "the answer itself is good");
        let r = chat(&g, "limited", false);
        assert_eq!((r.status, attempts(&r)), (200, 1));
        assert_eq!(g.receipt_of(&r)["model"], "gpt-4o-mini", "skipped until its reset (2 s)");
        std::thread::sleep(Duration::from_millis(2100));
        let r = chat(&g, "limited", false);
        assert_eq!(g.receipt_of(&r)["model"], "gpt-exhausted", "tried again after the reset");
        assert_eq!(seen(&up, "gpt-exhausted"), 2);
    }
}

#[test]
fn named_credentials_are_masked_listed_and_deleted() {
    for b in backends() {
        let (g, up) = with_standin(&b, &[]);
        let body = json!({"api_key": "sk-named-secret-9876", "base_url": up.url()});
        let r = g.mgmt("PUT", "/v1/providers/openai/credentials/backup", Some(&g.key), Some(&body));
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(!r.text().contains("sk-named-secret"), "{}", r.text());
        assert_eq!((r.json()["name"].as_str(), r.json()["keyHint"].as_str()), (Some("backup"), Some("...9876")));
        let list = g.mgmt("GET", "/v1/providers/openai/credentials", Some(&g.key), None);
        assert_eq!(list.status, 200);
        assert!(!list.text().contains("sk-named-secret") && !list.text().contains("sk-provider-secret"));
        let names: Vec<String> =
            list.json().as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap().to_string()).collect();
        assert_eq!(names, ["backup", "default"], "the seed's credential is `default`");
        let seed = g.mgmt("GET", "/v1/providers", Some(&g.key), None).json();
        let openai = seed.as_array().unwrap().iter().find(|p| p["provider"] == "openai").unwrap().clone();
        assert_ne!(openai["keyHint"], "...9876", "GET /v1/providers shows the `default` credential: {openai}");
        let matching =
            |cond: &str| g.sql(&format!("UPDATE provider_named_credentials SET status = status WHERE {cond}"));
        assert_eq!(matching("name = 'backup'"), 1);
        assert_eq!(matching("sealed LIKE '%sk-named%'"), 0, "encrypted at rest");

        let (_, dev) = g.new_key(&g.key, &json!({"label": "dev", "role": "developer"}));
        assert_eq!(g.mgmt("PUT", "/v1/providers/openai/credentials/x", Some(&dev), Some(&body)).status, 403);
        assert_eq!(g.mgmt("GET", "/v1/providers/openai/credentials", Some(&dev), None).status, 200);
        assert_eq!(g.mgmt("PUT", "/v1/providers/openai/credentials/bad%20name", Some(&g.key), Some(&body)).status, 400);
        assert_eq!(g.mgmt("PUT", "/v1/providers/mistral/credentials/x", Some(&g.key), Some(&body)).status, 400);
        assert_eq!(g.mgmt("PUT", "/v1/providers/openai/credentials/x", Some(&g.key), Some(&json!({}))).status, 400);

        let (_, other) = g.create_tenant_live("globex");
        assert_eq!(g.mgmt("DELETE", "/v1/providers/openai/credentials/backup", Some(&other), None).status, 404);
        assert_eq!(g.mgmt("DELETE", "/v1/providers/openai/credentials/backup", Some(&g.key), None).status, 204);
        assert_eq!(g.mgmt("DELETE", "/v1/providers/openai/credentials/backup", Some(&g.key), None).status, 404);
    }
}

#[test]
fn routes_are_managed_hot_reloaded_and_private_to_their_tenant() {
    for b in backends() {
        let (g, up) = with_standin(&b, &[]);
        put_credential(&g, "openai", "backup", &up, "sk-backup");
        let first = json!({"targets": [target("openai", "default", "gpt-4o-mini")]});
        put_route(&g, "house-model", &first);
        let got = g.mgmt("GET", "/v1/routes/house-model", Some(&g.key), None);
        assert_eq!(got.status, 200, "{}", got.text());
        let v = got.json();
        assert_eq!(
            (v["model"].as_str(), v["strategy"].as_str(), v["source"].as_str()),
            (Some("house-model"), Some("fallback"), Some("api"))
        );
        assert_eq!((v["retries"]["attempts"].as_u64(), v["breaker"]["failures"].as_u64()), (Some(2), Some(5)), "{v}");
        assert_eq!(v["targets"][0]["weight"], 1);
        let r = chat(&g, "house-model", false);
        assert_eq!(g.receipt_of(&r)["attempts"][0]["credential"], "default");

        // Replaced: the next request follows the new route, no restart.
        put_route(&g, "house-model", &json!({"targets": [target("openai", "backup", "gpt-4o-mini")]}));
        let r = chat(&g, "house-model", false);
        assert_eq!(g.receipt_of(&r)["attempts"][0]["credential"], "backup");
        let list = g.mgmt("GET", "/v1/routes", Some(&g.key), None).json();
        assert_eq!(list.as_array().unwrap().iter().filter(|r| r["model"] == "house-model").count(), 1);

        for bad in [
            json!({"targets": []}),
            json!({"targets": [target("mistral", "default", "m")]}),
            json!({"targets": [target("openai", "default", "m")], "retries": {"attempts": 0}}),
            json!({"targets": [target("openai", "default", "m")], "strategy": "random"}),
            json!({"targets": [target("openai", "default", "m")], "colour": "red"}),
            json!({"model": "other", "targets": [target("openai", "default", "m")]}),
        ] {
            let r = g.mgmt("PUT", "/v1/routes/house-model", Some(&g.key), Some(&bad));
            assert_eq!(r.status, 400, "{bad}: {}", r.text());
        }
        let (_, dev) = g.new_key(&g.key, &json!({"label": "dev", "role": "developer"}));
        assert_eq!(g.mgmt("PUT", "/v1/routes/house-model", Some(&dev), Some(&first)).status, 403);
        assert_eq!(g.mgmt("GET", "/v1/routes/house-model", Some(&dev), None).status, 200);

        let (_, other) = g.create_tenant_live("globex");
        assert_eq!(g.mgmt("GET", "/v1/routes/house-model", Some(&other), None).status, 404);
        assert_eq!(g.mgmt("DELETE", "/v1/routes/house-model", Some(&other), None).status, 404);
        let r = g.chat(&other, &json!({"model": "house-model", "messages": [{"role": "user", "content": "hi"}]}));
        assert_eq!(r.status, 400, "another tenant's route is not this one's: {}", r.text());

        assert_eq!(g.mgmt("DELETE", "/v1/routes/house-model", Some(&g.key), None).status, 204);
        assert_eq!(g.mgmt("GET", "/v1/routes/house-model", Some(&g.key), None).status, 404);
        assert_eq!(chat(&g, "house-model", false).status, 400, "no route, no default rule: as before");
    }
}

#[test]
fn config_routes_take_model_routes_beside_the_default_rules() {
    let b = Backend::Sqlite;
    let dir = std::env::temp_dir().join(format!("tollgate-routes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("tollgate.yaml");
    std::fs::write(
        &file,
        "routes:\n  - model: team-default\n    strategy: fallback\n    retries: { attempts: 2, backoffMs: 0 }\n    targets:\n      - { provider: openai, model: gpt-fail }\n      - { provider: openai, model: gpt-4o-mini }\n",
    )
    .unwrap();
    let (g, _up) = with_standin(&b, &[("TOLLGATE_CONFIG", file.to_str().unwrap())]);
    let r = chat(&g, "team-default", false);
    assert_eq!((r.status, attempts(&r)), (200, 2), "{}", r.text());
    assert_eq!(chat(&g, "gpt-4o-mini", false).status, 200, "the default rules stay");
    let list = g.mgmt("GET", "/v1/routes", Some(&g.key), None).json();
    assert_eq!(list[0]["source"], "config");

    std::fs::write(&file, "routes:\n  - model: x\n    provider: openai\n    targets: []\n").unwrap();
    let out =
        std::process::Command::new(support::bin()).args(["check-config", "--config"]).arg(&file).output().unwrap();
    assert!(!out.status.success());
    std::fs::write(&file, "routes:\n  - model: x\n    targets: [{ provider: mistral, model: m }]\n").unwrap();
    let out =
        std::process::Command::new(support::bin()).args(["check-config", "--config"]).arg(&file).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("mistral"), "{}", String::from_utf8_lossy(&out.stderr));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_recovered_target_closes_its_breaker_through_one_successful_probe() {
    for b in backends() {
        // `gpt-recover-2` answers 503 twice, then recovers.
        let (g, up) = guarded(&b, "healing", "gpt-recover-2");
        let name = "route:healing/openai/default";
        let gauge = |g: &Gateway| g.metric("tollgate_target_state", &["route=\"healing\"", "credential=\"default\""]);
        for _ in 0..2 {
            let r = chat(&g, "healing", false);
            assert_eq!((r.status, attempts(&r)), (200, 2), "{}", r.text());
            assert_eq!(g.receipt_of(&r)["model"], "gpt-4o-mini");
        }
        assert_eq!(target_status(&g, name)["status"], "outage", "open after two failures in a row");
        assert_eq!(gauge(&g), 2.0);
        let r = chat(&g, "healing", false);
        assert_eq!((r.status, attempts(&r)), (200, 1), "skipped while open");
        assert_eq!(seen(&up, "gpt-recover-2"), 2);

        // The cool-down ends (waited for, not timed): half-open, and the next request probes.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while target_status(&g, name)["status"] != "degraded" {
            assert!(std::time::Instant::now() < deadline, "never half-open: {}", target_status(&g, name));
            std::thread::sleep(Duration::from_millis(50));
        }
        let r = chat(&g, "healing", false);
        assert_eq!((r.status, attempts(&r)), (200, 1), "{}", r.text());
        let probe = g.receipt_of(&r);
        assert_eq!(probe["model"], "gpt-recover-2", "the probe answered: {probe}");
        assert_eq!((&probe["attempts"][0]["outcome"], &probe["attempts"][0]["status"]), (&json!("ok"), &json!(200)));
        assert_eq!(target_status(&g, name)["status"], "operational", "a successful probe closes the breaker");
        assert_eq!(gauge(&g), 0.0);

        // Closed: the traffic is back on the recovered target, the backup rests.
        let backup = seen(&up, "gpt-4o-mini");
        for _ in 0..3 {
            let r = chat(&g, "healing", false);
            assert_eq!((r.status, attempts(&r)), (200, 1));
            assert_eq!(g.receipt_of(&r)["model"], "gpt-recover-2");
        }
        assert_eq!(seen(&up, "gpt-recover-2"), 6);
        assert_eq!(seen(&up, "gpt-4o-mini"), backup);
        let ok = g
            .metric("tollgate_upstream_attempts_total", &["outcome=\"ok\"", "target=\"openai/default/gpt-recover-2\""]);
        assert_eq!(ok, 4.0);
    }
}

#[test]
fn least_busy_sends_new_requests_past_a_target_holding_one_in_flight() {
    let (g, up) = with_standin(&Backend::Sqlite, &[]);
    put_credential(&g, "openai", "fast", &up, "sk-fast");
    // Listed first, so it wins ties; `gpt-held` keeps its requests until the test lets them go
    // (a request sent there by mistake fails at its timeout instead of hanging the test).
    let route = json!({"strategy": "least-busy", "retries": {"attempts": 1, "perAttemptTimeoutMs": 20000},
        "targets": [target("openai", "default", "gpt-held"), target("openai", "fast", "gpt-4o-mini")]});
    put_route(&g, "balanced", &route);
    std::thread::scope(|s| {
        let slow = s.spawn(|| chat(&g, "balanced", false));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while seen(&up, "gpt-held") < 1 {
            assert!(std::time::Instant::now() < deadline, "the first request never reached the slow target");
            std::thread::sleep(Duration::from_millis(20));
        }
        // One request in flight at the slow target, none at the fast one: every new one goes there.
        for _ in 0..10 {
            let r = chat(&g, "balanced", false);
            assert_eq!(r.status, 200, "{}", r.text());
            assert_eq!(g.receipt_of(&r)["attempts"][0]["credential"], "fast");
        }
        assert_eq!((seen(&up, "gpt-held"), seen(&up, "gpt-4o-mini")), (1, 10));
        up.release_held(10);
        let r = slow.join().unwrap();
        assert_eq!((r.status, g.receipt_of(&r)["model"].as_str()), (200, Some("gpt-held")));
    });
    // Nothing in flight any more: the tie goes to the first listed target again (its in-flight
    // count drops as its request ends, an instant after the client has the answer).
    let back = (0..5).any(|_| {
        let r = chat(&g, "balanced", false);
        g.receipt_of(&r)["attempts"][0]["credential"] == "default"
    });
    assert!(back, "the slow target never took a request again once idle");
}

const HAIKU: &str = "anthropic.claude-3-haiku-20240307-v1:0";

/// Bedrock and Vertex credentials `default` and a second one in another region, all on the
/// stand-in.
fn cloud_credentials(g: &Gateway, up: &Standin) {
    for (name, region) in [("default", "us-east-1"), ("west", "us-west-2")] {
        let body = json!({"access_key_id": "AKIDSTANDINEXAMPLE", "secret_access_key": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYSTANDINKEY",
            "region": region, "base_url": up.url()});
        let r = g.mgmt("PUT", &format!("/v1/providers/bedrock/credentials/{name}"), Some(&g.key), Some(&body));
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let sa = support::google::service_account(&format!("{}/token", up.url()));
    for (name, region) in [("default", "europe-west4"), ("us", "us-central1")] {
        let body = json!({"service_account_json": sa.file.to_string(), "region": region, "base_url": up.url()});
        let r = g.mgmt("PUT", &format!("/v1/providers/vertex/credentials/{name}"), Some(&g.key), Some(&body));
        assert_eq!(r.status, 200, "{}", r.text());
    }
}

/// The stand-in's requests to the cloud APIs (paths under `/model/` or `/v1/projects/`).
fn cloud_calls(up: &Standin) -> Vec<support::standin::Recorded> {
    up.requests().into_iter().filter(|r| r.path.starts_with("/model/") || r.path.starts_with("/v1/projects/")).collect()
}

#[test]
fn native_bedrock_and_vertex_calls_follow_their_routes() {
    let (g, up) = with_standin(&Backend::Sqlite, &[]);
    cloud_credentials(&g, &up);
    // Bedrock: the first region is down, the second answers; the path names the route.
    let route = json!({"retries": {"backoffMs": 0}, "targets": [target("bedrock", "default", "anthropic.unavailable-v1:0"),
        target("bedrock", "west", HAIKU)]});
    put_route(&g, "house-claude", &route);
    let body = json!({"messages": [{"role": "user", "content": [{"text": "ECHO:routed|call"}]}],
        "inferenceConfig": {"maxTokens": 50}});
    let r = g.post_gw("/bedrock/model/house-claude/converse", &g.key, body.to_string().as_bytes());
    assert_eq!((r.status, attempts(&r)), (200, 2), "{}", r.text());
    assert_eq!(r.json()["output"]["message"]["content"][0]["text"], "routedcall");
    let calls = cloud_calls(&up);
    let [first, second] = &calls[calls.len() - 2..] else { unreachable!() };
    assert_eq!(first.path, "/model/anthropic.unavailable-v1%3A0/converse");
    assert!(first.header("authorization").unwrap().contains("/us-east-1/bedrock/aws4_request"));
    assert_eq!(second.path, format!("/model/{}/converse", HAIKU.replace(':', "%3A")));
    assert!(
        second.header("authorization").unwrap().contains("/us-west-2/bedrock/aws4_request"),
        "signed for its region"
    );
    assert!(second.json().get("model").is_none(), "a Converse body carries no model: {}", second.json());
    let receipt = g.receipt_of(&r);
    assert_eq!((receipt["provider"].as_str(), receipt["model"].as_str()), (Some("bedrock"), Some(HAIKU)));
    assert_eq!(
        (&receipt["attempts"][0]["outcome"], &receipt["attempts"][1]["credential"]),
        (&json!("retry"), &json!("west"))
    );
    // converse-stream falls back before its first frame.
    let r = g.post_gw("/bedrock/model/house-claude/converse-stream", &g.key, body.to_string().as_bytes());
    assert_eq!((r.status, attempts(&r)), (200, 2), "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/vnd.amazon.eventstream"));
    assert!(cloud_calls(&up).last().unwrap().path.ends_with("/converse-stream"));

    // Vertex: the target's credential gives the project and region, the target the model.
    let route = json!({"retries": {"backoffMs": 0}, "targets": [target("vertex", "default", "gemini-unavailable"),
        target("vertex", "us", "gemini-2.0-flash")]});
    put_route(&g, "house-gemini", &route);
    let path = "/vertex/v1/projects/client-project/locations/anywhere/publishers/google/models/house-gemini";
    let body = json!({"contents": [{"role": "user", "parts": [{"text": "ECHO:gem|ini"}]}]});
    let r = g.post_gw(&format!("{path}:generateContent"), &g.key, body.to_string().as_bytes());
    assert_eq!((r.status, attempts(&r)), (200, 2), "{}", r.text());
    assert_eq!(r.json()["candidates"][0]["content"]["parts"][0]["text"], "gemini");
    let calls = cloud_calls(&up);
    let want =
        "/v1/projects/tollgate-test/locations/us-central1/publishers/google/models/gemini-2.0-flash:generateContent";
    assert_eq!(calls.last().unwrap().path, want);
    assert_eq!(g.receipt_of(&r)["model"], "gemini-2.0-flash");
    let r = g.post_gw(&format!("{path}:streamGenerateContent?alt=sse"), &g.key, body.to_string().as_bytes());
    assert_eq!((r.status, attempts(&r)), (200, 2), "{}", r.text());
    assert!(r.text().starts_with("data: "), "{}", r.text());
    assert!(cloud_calls(&up).last().unwrap().path.ends_with("gemini-2.0-flash:streamGenerateContent?alt=sse"));

    // A route none of whose targets speaks the native API is refused, not sent elsewhere.
    put_route(&g, "chat-only", &json!({"targets": [target("openai", "default", "gpt-4o-mini")]}));
    let r = g.post_gw("/bedrock/model/chat-only/converse", &g.key, body.to_string().as_bytes());
    assert_eq!(r.status, 400, "{}", r.text());
    // Without a route, a native call is as before.
    let r = g.post_gw(
        &format!("/bedrock/model/{HAIKU}/converse"),
        &g.key,
        br#"{"messages": [{"role": "user", "content": [{"text": "hi"}]}]}"#,
    );
    assert_eq!((r.status, r.header("x-tollgate-attempts")), (200, None), "{}", r.text());
}

/// The checks see a routed request with the first target it may use, and reserve its budget
/// at its dearest target (the route's own name has no price).
#[test]
fn the_checks_see_the_target_a_routed_request_may_use() {
    let (g, up) = with_standin(&Backend::Sqlite, &[]);
    // A provider allowlist that refuses the first target: the request goes to the second.
    let yaml = "allowlist: {providers: [\"anthropic\"]}\n";
    let p = g.mgmt(
        "POST",
        "/v1/policies",
        Some(&g.key),
        Some(&json!({"name": "only-anthropic", "enabled": true, "yaml": yaml})),
    );
    assert_eq!(p.status, 201, "{}", p.text());
    let route = json!({"targets": [target("openai", "default", "gpt-4o-mini"), target("anthropic", "default", "claude-3-5-haiku")]});
    put_route(&g, "allowed", &route);
    let r = chat(&g, "allowed", false);
    assert_eq!((r.status, attempts(&r)), (200, 1), "{}", r.text());
    assert_eq!(g.receipt_of(&r)["provider"], "anthropic");
    assert_eq!(seen(&up, "gpt-4o-mini"), 0);
    let only_openai = json!({"targets": [target("openai", "default", "gpt-4o-mini")]});
    put_route(&g, "refused", &only_openai);
    assert_eq!(chat(&g, "refused", false).status, 403);
    let id = p.json()["id"].as_str().unwrap().to_string();
    assert_eq!(g.mgmt("DELETE", &format!("/v1/policies/{id}"), Some(&g.key), None).status, 204);

    // A $1 budget, 48 concurrent requests through a route to gpt-4o answering $0.10 each: each
    // reserves at gpt-4o's price, so the budget admits about ten, not all of them.
    put_route(&g, "dear", &json!({"targets": [target("openai", "default", "gpt-4o")]}));
    let (_, key) = g.new_key(&g.key, &json!({"label": "one-dollar", "budgetUsd": 1.0}));
    let body = json!({"model": "dear", "max_tokens": 10000, "messages": [{"role": "user", "content": "USAGE:10000"}]});
    let statuses: Vec<u16> = std::thread::scope(|s| {
        let calls: Vec<_> =
            (0..6).map(|_| s.spawn(|| (0..8).map(|_| g.chat(&key, &body).status).collect::<Vec<u16>>())).collect();
        calls.into_iter().flat_map(|c| c.join().unwrap()).collect()
    });
    let answered = statuses.iter().filter(|&&s| s == 200).count();
    assert!(statuses.iter().all(|&s| s == 200 || s == 402), "{statuses:?}");
    assert!((9..=11).contains(&answered), "about ten dimes in a dollar, not 48: {answered}");
}
