//! The checks end to end over real sockets: rate limits, budgets (with concurrency and across a
//! restart), policies (hot reload through the API and from files), allowlists, guardrails on
//! requests and on streamed answers, the cache, and the analytics endpoints. Every blocked
//! request is shown not to reach the upstream and to leave a receipt saying why.

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{backends, http, Backend, Gateway};

use support::with_standin as setup;

fn ask(text: &str) -> Value {
    json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}]})
}

fn policy(g: &Gateway, yaml: &str) -> String {
    let r = g.mgmt("POST", "/v1/policies", Some(&g.key), Some(&json!({"name": "p", "enabled": true, "yaml": yaml})));
    assert_eq!(r.status, 201, "{}", r.text());
    r.json()["id"].as_str().unwrap().to_string()
}

/// The receipt of an answer, once written: its checks as `NAME:RESULT` and its body.
fn receipt_of(g: &Gateway, r: &http::Resp) -> (Vec<String>, Value) {
    let id = r.header("x-tollgate-receipt-id").expect("receipt id header").to_string();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = g.mgmt("GET", &format!("/v1/receipts/{id}"), Some(&g.key), None);
        if got.status == 200 {
            let v = got.json();
            let checks = v["checks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| format!("{}:{}", c["name"].as_str().unwrap(), c["result"].as_str().unwrap()))
                .collect();
            return (checks, v);
        }
        assert!(Instant::now() < deadline, "receipt {id} never written");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn key_id(g: &Gateway) -> String {
    g.mgmt("GET", "/v1/keys", Some(&g.key), None).json()["data"][0]["id"].as_str().unwrap().to_string()
}

#[test]
fn rate_limits_answer_429_with_headers_and_changes_apply_on_the_next_request() {
    for b in backends() {
        let (g, up) = setup(&b, &[]);
        let id = key_id(&g);
        let r = g.mgmt("PATCH", &format!("/v1/keys/{id}/limits"), Some(&g.key), Some(&json!({"rpmLimit": 2})));
        assert_eq!(r.status, 200, "{}", r.text());

        for _ in 0..2 {
            let ok = g.chat(&g.key, &ask("hi"));
            assert_eq!(ok.status, 200, "{}", ok.text());
            assert_eq!(ok.header("x-ratelimit-limit-requests"), Some("2"));
        }
        let before = up.count();
        let limited = g.chat(&g.key, &ask("hi"));
        assert_eq!(limited.status, 429, "{}", limited.text());
        assert_eq!(up.count(), before, "a limited request must not reach the upstream");
        assert_eq!(limited.json()["error"]["type"], "rate_limited");
        let retry: u64 = limited.header("retry-after").expect("Retry-After").parse().unwrap();
        assert!((1..=120).contains(&retry), "{retry}");
        assert_eq!(limited.header("x-ratelimit-limit-requests"), Some("2"));
        assert_eq!(limited.header("x-ratelimit-remaining-requests"), Some("0"));
        assert!(limited.header("x-ratelimit-reset-requests").is_some());
        let (checks, rec) = receipt_of(&g, &limited);
        assert_eq!(checks, ["RATELIMIT:BLOCK", "UPSTREAM:SKIPPED"]);
        assert_eq!(rec["upstreamStatus"], "skipped");

        // Lifting the limit is in force for the very next request.
        let r = g.mgmt("PATCH", &format!("/v1/keys/{id}/limits"), Some(&g.key), Some(&json!({"rpmLimit": null})));
        assert_eq!(r.status, 200);
        assert_eq!(g.chat(&g.key, &ask("hi")).status, 200);

        // A token limit smaller than what one request may use refuses it outright.
        let r = g.mgmt("PATCH", &format!("/v1/keys/{id}/limits"), Some(&g.key), Some(&json!({"tpmLimit": 100})));
        assert_eq!(r.json()["tpmLimit"], 100, "{}", r.text());
        let mut big = ask("hi");
        big["max_tokens"] = json!(5000);
        let r = g.chat(&g.key, &big);
        assert_eq!(r.status, 429, "{}", r.text());
        assert!(r.header("x-ratelimit-limit-tokens") == Some("100"));
        assert!(r.json()["error"]["message"].as_str().unwrap().contains("max_tokens"));
    }
}

const REQUESTS_TRIPLE: [&str; 3] =
    ["x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests"];
const TOKENS_TRIPLE: [&str; 3] =
    ["x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"];

/// Asserts which rate-limit triples an answer carries: exactly those of the key's limits.
fn assert_triples(r: &http::Resp, requests: bool, tokens: bool) {
    for (triple, expected) in [(REQUESTS_TRIPLE, requests), (TOKENS_TRIPLE, tokens)] {
        for name in triple {
            assert_eq!(r.header(name).is_some(), expected, "{name} on a {} answer", r.status);
        }
    }
}

/// `Retry-After` in whole seconds and `retry-after-ms` (read by the OpenAI SDK) tell the
/// same wait.
fn assert_retry_after(r: &http::Resp) -> u64 {
    let s: u64 = r.header("retry-after").expect("Retry-After").parse().unwrap();
    let ms: u64 = r.header("retry-after-ms").expect("retry-after-ms").parse().unwrap();
    assert!((1..=120_000).contains(&ms), "{ms}");
    assert_eq!(s, ms.div_ceil(1000), "Retry-After {s} s vs retry-after-ms {ms}");
    ms
}

/// Issue 16 §3.1: every answer of a limited key carries OpenAI's triple for each limit the key
/// has, and every 429 `Retry-After` and `retry-after-ms`, whichever limit refused.
#[test]
fn rate_limit_headers_name_every_limit_of_the_key() {
    for b in backends() {
        let (g, up) = setup(&b, &[]);
        let rpm_only = g.key_with_limits("rpm-only", &json!({"rpmLimit": 1})).1;
        let both = g.key_with_limits("both", &json!({"rpmLimit": 1, "tpmLimit": 100_000})).1;
        let tpm_first = g.key_with_limits("both-tokens", &json!({"rpmLimit": 100, "tpmLimit": 1000})).1;

        let ok = g.chat(&rpm_only, &ask("hi"));
        assert_eq!(ok.status, 200, "{}", ok.text());
        assert_triples(&ok, true, false);
        let limited = g.chat(&rpm_only, &ask("hi"));
        assert_eq!(limited.status, 429, "{}", limited.text());
        assert_triples(&limited, true, false);
        assert_retry_after(&limited);

        let ok = g.chat(&both, &ask("hi"));
        assert_eq!(ok.status, 200, "{}", ok.text());
        assert_triples(&ok, true, true);
        assert_eq!(ok.header("x-ratelimit-limit-tokens"), Some("100000"));
        let before = up.count();
        let limited = g.chat(&both, &ask("hi"));
        assert_eq!(limited.status, 429, "{}", limited.text());
        assert_eq!(up.count(), before, "a limited request must not reach the upstream");
        assert!(limited.json()["error"]["message"].as_str().unwrap().contains("requests per minute"));
        assert_triples(&limited, true, true);
        assert_eq!(limited.header("x-ratelimit-remaining-requests"), Some("0"));
        assert_retry_after(&limited);

        // Refused by the token limit: the requests triple comes along.
        let ok = g.chat(&tpm_first, &ask("USAGE:1489"));
        assert_eq!(ok.status, 200, "{}", ok.text());
        assert_triples(&ok, true, true);
        let limited = g.chat(&tpm_first, &ask("hi"));
        assert_eq!(limited.status, 429, "{}", limited.text());
        assert!(limited.json()["error"]["message"].as_str().unwrap().contains("tokens per minute"));
        assert_triples(&limited, true, true);
        assert_eq!(limited.header("x-ratelimit-remaining-requests"), Some("99"));
        assert_retry_after(&limited);
        let (checks, _) = receipt_of(&g, &limited);
        assert_eq!(checks, ["RATELIMIT:BLOCK", "UPSTREAM:SKIPPED"]);
    }
}

/// Issue 16 §3.2: a `tpmLimit` under the default answer reservation (1024) takes a first small
/// request without `max_tokens`; once it has used 1500 tokens the next one waits. Only a
/// request whose own `max_tokens` is over the limit is refused outright.
#[test]
fn a_small_token_limit_takes_a_first_request_without_max_tokens() {
    for b in backends() {
        let (g, up) = setup(&b, &[]);
        let key = g.key_with_limits("tpm", &json!({"tpmLimit": 1000})).1;

        // The stand-in reports 11 + 1489 = 1500 tokens used.
        let ok = g.chat(&key, &ask("USAGE:1489"));
        assert_eq!(ok.status, 200, "{}", ok.text());
        assert_eq!(ok.json()["usage"]["total_tokens"], 1500);
        assert_triples(&ok, false, true);
        assert_eq!(ok.header("x-ratelimit-limit-tokens"), Some("1000"));
        let (checks, _) = receipt_of(&g, &ok);
        assert_eq!(checks, ["RATELIMIT:PASS", "UPSTREAM:PASS"]);

        let before = up.count();
        let limited = g.chat(&key, &ask("hi"));
        assert_eq!(limited.status, 429, "{}", limited.text());
        assert_eq!(up.count(), before, "a limited request must not reach the upstream");
        assert_eq!(limited.json()["error"]["type"], "rate_limited");
        assert_triples(&limited, false, true);
        assert_eq!(limited.header("x-ratelimit-remaining-tokens"), Some("0"));
        assert_retry_after(&limited);
        assert_eq!(limited.header("x-should-retry"), None, "it fits once the window has moved on");

        // Its own cap over the whole limit can never pass, and the SDKs are told not to retry.
        let mut big = ask("hi");
        big["max_completion_tokens"] = json!(1000);
        let never = g.chat(&key, &big);
        assert_eq!(never.status, 429, "{}", never.text());
        assert!(never.json()["error"]["message"].as_str().unwrap().contains("max_tokens"), "{}", never.text());
        assert_eq!(never.header("x-should-retry"), Some("false"));
        assert_retry_after(&never);
        assert_eq!(up.count(), before);
    }
}

#[test]
fn concurrent_requests_cannot_overspend_a_budget_and_spend_survives_a_restart() {
    for b in backends() {
        let (mut g, up) = setup(&b, &[]);
        let id = key_id(&g);
        // gpt-4o: $2.50 in / $10 out per million. The stand-in answers 11 + 7 tokens, so one
        // request costs 11*2.5e-6 + 7*1e-5 = 9.75e-5; the budget allows ten of them.
        let per_request = 11.0 * 2.5e-6 + 7.0 * 1e-5;
        let budget = 10.0 * per_request;
        let r = g.mgmt(
            "POST",
            "/v1/budgets",
            Some(&g.key),
            Some(&json!({"scope": "key", "scopeId": id, "amountUsd": budget, "period": "total"})),
        );
        assert_eq!(r.status, 201, "{}", r.text());
        let budget_id = r.json()["id"].as_str().unwrap().to_string();
        // The admin receipts of the writes so far (docs/log.md §8); the calls' receipts follow.
        let base = g.newest_seq(&g.key);

        let body = json!({"model": "gpt-4o", "max_tokens": 7, "messages": [{"role": "user", "content": "hi"}]});
        let reservation = (body.to_string().len() as f64 / 4.0).ceil() * 2.5e-6 + 7.0 * 1e-5;
        let statuses: Vec<u16> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..50).map(|_| s.spawn(|| g.chat(&g.key, &body).status)).collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let ok = statuses.iter().filter(|&&s| s == 200).count();
        let ok_burst = ok;
        let refused = statuses.iter().filter(|&&s| s == 402).count();
        assert_eq!(ok + refused, 50, "{statuses:?}");
        assert!((1..=11).contains(&ok), "{ok} succeeded against a budget for 10");
        assert_eq!(up.count(), ok, "refused requests never reach the upstream");

        // Reservations in flight may have refused requests the budget could still take: spend
        // what is left one by one until the budget refuses.
        let mut ok = ok;
        let refused_resp = loop {
            let r = g.chat(&g.key, &body);
            if r.status != 200 {
                break r;
            }
            ok += 1;
            assert!(ok <= 11, "{ok} requests succeeded against a budget for 10");
        };
        assert_eq!(refused_resp.status, 402, "{}", refused_resp.text());
        let budgets = g.mgmt("GET", "/v1/budgets", Some(&g.key), None).json();
        let spent = budgets["data"][0]["spentUsd"].as_f64().unwrap();
        assert!((spent - ok as f64 * per_request).abs() < 1e-9, "spent {spent} for {ok} requests");
        assert!(spent <= budget + reservation + 1e-12, "spent {spent} > budget {budget} + one reservation");
        assert!(spent > budget - reservation, "the budget was used up: spent {spent} of {budget}");
        assert_eq!(refused_resp.json()["error"]["type"], "budget_exceeded");
        let (checks, _) = receipt_of(&g, &refused_resp);
        assert_eq!(checks, ["BUDGET:BLOCK", "UPSTREAM:SKIPPED"]);

        // Spend is durable: after a restart it is the same and still enforced.
        g.wait_receipts(&g.key, base + 51 + (ok as u64 - ok_burst as u64));
        g.stop();
        g.spawn();
        let after = g.mgmt("GET", "/v1/budgets", Some(&g.key), None).json();
        assert!((after["data"][0]["spentUsd"].as_f64().unwrap() - spent).abs() < 1e-9, "{after}");
        let again = g.chat(&g.key, &body);
        assert_eq!(again.status, 402, "{} / {after} / ok={ok}", again.text());

        // A granted budget request raises the budget: requests pass again.
        let req = g.mgmt(
            "POST",
            "/v1/budgets/requests",
            Some(&g.key),
            Some(&json!({"budgetId": budget_id, "amountUsd": 1.0, "reason": "launch week"})),
        );
        assert_eq!(req.status, 201, "{}", req.text());
        let rid = req.json()["id"].as_str().unwrap().to_string();
        let ok = g.mgmt("POST", &format!("/v1/budgets/requests/{rid}/approve"), Some(&g.key), None);
        assert_eq!(ok.status, 200, "{}", ok.text());
        assert_eq!(g.chat(&g.key, &body).status, 200);
    }
}

#[test]
fn policies_deny_allowlists_block_and_updates_apply_without_restart() {
    for b in backends() {
        let (g, up) = setup(&b, &[]);
        assert_eq!(g.chat(&g.key, &ask("hi")).status, 200);
        let (checks, _) = receipt_of(&g, &g.chat(&g.key, &ask("hi")));
        assert_eq!(checks, ["UPSTREAM:PASS"], "no policy, no policy check");

        let id = policy(
            &g,
            "rules:\n  - id: no-big-models\n    match: {model: [\"gpt-4o\"]}\n    action: deny\n    reason: needs approval\n",
        );
        let before = up.count();
        let denied = g.chat(&g.key, &json!({"model": "gpt-4o", "messages": []}));
        assert_eq!(denied.status, 403, "{}", denied.text());
        assert_eq!(denied.json()["error"]["type"], "policy_denied");
        assert!(denied.json()["error"]["message"].as_str().unwrap().contains("no-big-models"));
        assert_eq!(up.count(), before);
        let (checks, rec) = receipt_of(&g, &denied);
        assert_eq!(checks, ["policy:deny", "UPSTREAM:SKIPPED"]);
        assert_eq!(rec["upstreamStatus"], "skipped");
        let (checks, _) = receipt_of(&g, &g.chat(&g.key, &ask("hi")));
        assert_eq!(checks, ["policy:allow", "UPSTREAM:PASS"]);

        // Replace it: the next request sees the new policy (an allowlist now).
        let yaml = "allowlist:\n  models: [\"gpt-4o-mini\"]\n";
        let r = g.mgmt(
            "PUT",
            &format!("/v1/policies/{id}"),
            Some(&g.key),
            Some(&json!({"name": "p", "enabled": true, "yaml": yaml})),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        let before = up.count();
        let blocked = g.chat(&g.key, &json!({"model": "gpt-4o", "messages": []}));
        assert_eq!(blocked.status, 403, "{}", blocked.text());
        assert_eq!(up.count(), before);
        let (checks, _) = receipt_of(&g, &blocked);
        assert_eq!(checks, ["ALLOWLIST:BLOCK", "UPSTREAM:SKIPPED"]);
        let (checks, _) = receipt_of(&g, &g.chat(&g.key, &ask("hi")));
        assert_eq!(checks, ["ALLOWLIST:PASS", "UPSTREAM:PASS"]);

        // Broken YAML is refused with its position, and the policy in force stays.
        let r = g.mgmt(
            "PUT",
            &format!("/v1/policies/{id}"),
            Some(&g.key),
            Some(&json!({"name": "p", "enabled": true, "yaml": "allowlist:\n  models: [\n"})),
        );
        assert_eq!(r.status, 400);
        assert!(r.json()["error"]["message"].as_str().unwrap().contains("line 3, column 1: "), "{}", r.text());
        assert_eq!(g.chat(&g.key, &json!({"model": "gpt-4o", "messages": []})).status, 403);

        assert_eq!(g.mgmt("DELETE", &format!("/v1/policies/{id}"), Some(&g.key), None).status, 204);
        assert_eq!(g.chat(&g.key, &json!({"model": "gpt-4o", "messages": []})).status, 200);
    }
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn policy_files_hot_reload_and_a_broken_file_keeps_the_old_policy() {
    let dir = std::env::temp_dir().join(format!("tollgate-policies-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.display().to_string();
    let (g, _up) = setup(&Backend::Sqlite, &[("TOLLGATE_POLICY_DIR", &d)]);
    assert_eq!(g.chat(&g.key, &ask("hi")).status, 200);

    let file = dir.join("deny.yaml");
    std::fs::write(&file, "rules:\n  - id: file-deny\n    match: {model: \"gpt-4o-mini\"}\n    action: deny\n")
        .unwrap();
    wait_for("the file policy", || g.chat(&g.key, &ask("hi")).status == 403);

    std::fs::write(&file, "rules:\n  - id: file-deny\n    match: {model: [\n").unwrap();
    wait_for("the broken file on /status", || {
        let s = g.mgmt("GET", "/status", None, None).json();
        s["components"].as_array().unwrap().iter().any(|c| c["name"] == "policies" && c["status"] == "degraded")
    });
    let s = g.mgmt("GET", "/status", None, None).json();
    let comp = s["components"].as_array().unwrap().iter().find(|c| c["name"] == "policies").unwrap().clone();
    assert!(comp["detail"].as_str().unwrap().contains("deny.yaml"), "{comp}");
    assert_eq!(g.chat(&g.key, &ask("hi")).status, 403, "the last good version stays in force");

    std::fs::write(&file, "rules: []\n").unwrap();
    wait_for("the fixed file", || g.chat(&g.key, &ask("hi")).status == 200);
    let _ = std::fs::remove_dir_all(&dir);
}

const GUARDS: &str = "guardrails:\n  applyTo: [request]\n  pii:\n    email: redact\n    credit_card: block\n  \
                      patterns:\n    - {pattern: \"(?i)project\\\\s+nightingale\", action: block, category: confidential}\n";

#[test]
fn request_guardrails_redact_before_the_upstream_and_block_with_events() {
    for b in backends() {
        let (g, up) = setup(&b, &[]);
        policy(&g, GUARDS);

        let r = g.chat(&g.key, &ask("mail me at jane.doe@example.com please"));
        assert_eq!(r.status, 200, "{}", r.text());
        let sent = up.requests().last().unwrap().json();
        assert_eq!(sent["messages"][0]["content"], "mail me at [REDACTED:EMAIL] please");
        let (checks, _) = receipt_of(&g, &r);
        assert_eq!(checks, ["GUARDRAIL:REDACT", "UPSTREAM:PASS"]);

        let before = up.count();
        let card = g.chat(&g.key, &ask("my card is 4111 1111 1111 1111"));
        assert_eq!(card.status, 400, "{}", card.text());
        assert_eq!(card.json()["error"]["type"], "guardrail_blocked");
        let custom = g.chat(&g.key, &ask("status of Project   Nightingale?"));
        assert_eq!(custom.status, 400);
        assert_eq!(up.count(), before, "blocked requests never reach the upstream");
        let (checks, _) = receipt_of(&g, &card);
        assert_eq!(checks, ["GUARDRAIL:BLOCK", "UPSTREAM:SKIPPED"]);
        // A Luhn-invalid number is no card.
        assert_eq!(g.chat(&g.key, &ask("order 4111 1111 1111 1112")).status, 200);

        // Anomalies list the events, newest first, without any of the text.
        let a = g.mgmt("GET", "/v1/anomalies", Some(&g.key), None);
        assert_eq!(a.status, 200, "{}", a.text());
        let events = a.json()["data"].as_array().unwrap().clone();
        let cats: Vec<&str> = events.iter().map(|e| e["category"].as_str().unwrap()).collect();
        assert_eq!(cats, ["confidential", "credit_card", "email"], "{events:?}");
        assert_eq!(events[1]["result"], "BLOCK");
        assert_eq!(events[2]["result"], "REDACT");
        // "4111 1111" with its space: ids are random hex, and "4111" alone turned up inside one.
        assert!(!a.text().contains("jane.doe") && !a.text().contains("4111 1111"), "{}", a.text());
        let page = g.mgmt("GET", "/v1/anomalies?limit=1", Some(&g.key), None).json();
        let next = page["nextCursor"].as_str().expect("a second page").to_string();
        let page2 = g.mgmt("GET", &format!("/v1/anomalies?limit=5&cursor={next}"), Some(&g.key), None).json();
        assert_eq!(page2["data"].as_array().unwrap().len(), 2);
        assert_eq!(g.mgmt("GET", "/v1/anomalies?from=yesterday", Some(&g.key), None).status, 400);
        assert_eq!(
            g.metric_eventually("tollgate_guardrail_events_total", &["category=\"email\""], 1.0),
            1.0,
            "guardrail events are counted in metrics"
        );
    }
}

#[test]
fn answer_guardrails_catch_a_card_split_across_stream_events() {
    let (g, _up) = setup(&Backend::Sqlite, &[]);
    policy(&g, "guardrails:\n  applyTo: [response]\n  pii:\n    credit_card: redact\n    email: redact\n");
    let auth = format!("Bearer {}", g.key);
    let h = [("Authorization", auth.as_str()), ("Content-Type", "application/json")];

    // OpenAI stream: the card number arrives in two events.
    let body = json!({"model": "gpt-4o-mini", "stream": true,
        "messages": [{"role": "user", "content": "ECHO:pay with 4111 1111| 1111 1111 thanks"}]});
    let (status, _, s) = http::stream(g.gw, "/v1/chat/completions", &h, body.to_string().as_bytes());
    assert_eq!(status, 200);
    let text = String::from_utf8(s.rest()).unwrap();
    let mut said = String::new();
    for line in text.lines().filter_map(|l| l.strip_prefix("data: ")).filter(|l| *l != "[DONE]") {
        let v: Value = serde_json::from_str(line).unwrap();
        if let Some(c) = v["choices"][0]["delta"]["content"].as_str() {
            said.push_str(c);
        }
    }
    assert_eq!(said, "pay with [REDACTED:CREDIT_CARD] thanks", "{text}");
    assert!(!text.contains("1111 1111") && !text.contains("1111|"), "no part of the card: {text}");

    // Anthropic stream, an email split in three.
    let body = json!({"model": "claude-3-5-haiku", "max_tokens": 50, "stream": true,
        "messages": [{"role": "user", "content": "ECHO:write to bob|@example|.com now"}]});
    let (status, _, s) = http::stream(g.gw, "/v1/messages", &h, body.to_string().as_bytes());
    assert_eq!(status, 200);
    let text = String::from_utf8(s.rest()).unwrap();
    let mut said = String::new();
    for line in text.lines().filter_map(|l| l.strip_prefix("data: ")) {
        let v: Value = serde_json::from_str(line).unwrap();
        if v["type"] == "content_block_delta" {
            said.push_str(v["delta"]["text"].as_str().unwrap());
        }
    }
    assert_eq!(said, "write to [REDACTED:EMAIL] now", "{text}");
    assert!(text.contains("message_stop"), "the stream still ends properly: {text}");

    // Non-streamed answers are redacted whole.
    let r = g.chat(&g.key, &ask("ECHO:card 4111-1111-1111-1111 ok"));
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["choices"][0]["message"]["content"], "card [REDACTED:CREDIT_CARD] ok");
    let (checks, _) = receipt_of(&g, &r);
    assert_eq!(checks, ["UPSTREAM:PASS", "GUARDRAIL:REDACT"]);
}

#[test]
fn the_cache_answers_repeats_without_the_upstream_and_reports_savings() {
    for b in backends() {
        let (g, up) = setup(&b, &[]);
        policy(&g, "cache:\n  mode: exact\n  ttlSeconds: 600\n");
        // The admin receipts of the setup (docs/log.md §8); the five calls' receipts follow.
        let base = g.newest_seq(&g.key);

        let first = g.chat(&g.key, &ask("what is 2+2?"));
        assert_eq!(first.status, 200);
        let n = up.count();
        // Same request, members in another order: a hit.
        let reordered = r#"{"messages":[{"content":"what is 2+2?","role":"user"}],"model":"gpt-4o-mini"}"#;
        let hit = g.post_gw("/v1/chat/completions", &g.key, reordered.as_bytes());
        assert_eq!(hit.status, 200);
        assert_eq!(up.count(), n, "a hit never reaches the upstream");
        assert_eq!(hit.header("x-tollgate-cache"), Some("HIT"));
        assert_eq!(hit.json()["choices"], first.json()["choices"]);
        let (checks, rec) = receipt_of(&g, &hit);
        assert_eq!(checks, ["CACHE:HIT", "UPSTREAM:SKIPPED"]);
        assert_eq!(rec["costUsd"], 0.0);
        let (checks, _) = receipt_of(&g, &first);
        assert_eq!(checks, ["CACHE:MISS", "UPSTREAM:PASS"]);

        // no-cache goes to the upstream.
        let auth = format!("Bearer {}", g.key);
        let bypass = http::request(
            g.gw,
            "POST",
            "/v1/chat/completions",
            &[("Authorization", &auth), ("Cache-Control", "no-cache")],
            ask("what is 2+2?").to_string().as_bytes(),
        );
        assert_eq!(bypass.status, 200);
        assert_eq!(up.count(), n + 1);
        let (checks, _) = receipt_of(&g, &bypass);
        assert_eq!(checks, ["CACHE:BYPASS", "UPSTREAM:PASS"]);

        // A streamed request replays as SSE.
        let mut s = ask("stream me");
        s["stream"] = json!(true);
        let one = g.chat(&g.key, &s);
        let two = g.chat(&g.key, &s);
        assert_eq!(up.count(), n + 2);
        assert!(two.header("content-type").unwrap().starts_with("text/event-stream"));
        assert_eq!(one.text(), two.text());
        assert!(two.text().contains("data: [DONE]"));

        assert_eq!(g.wait_receipts(&g.key, base + 5), base + 5);
        assert_eq!(g.call_count(&g.key), 5);
        let stats = g.mgmt("GET", "/v1/cache", Some(&g.key), None);
        assert_eq!(stats.status, 200, "{}", stats.text());
        let v = stats.json();
        assert_eq!((v["hits"].as_u64(), v["misses"].as_u64()), (Some(2), Some(2)), "{v}");
        assert_eq!(v["hitRate"], 0.5);
        // Each hit saved the 11 + 7 tokens of gpt-4o-mini the miss paid for.
        assert_eq!(v["savedTokens"], 36);
        let saved = v["savedUsd"].as_f64().unwrap();
        assert!((saved - 2.0 * (11.0 * 0.15 + 7.0 * 0.6) / 1e6).abs() < 1e-12, "{v}");
        assert_eq!(v["byModel"][0]["model"], "gpt-4o-mini");
        assert_eq!(g.mgmt("GET", "/v1/cache?to=nope", Some(&g.key), None).status, 400);

        // Another tenant asking the same never hits this tenant's answers.
        let (_, other) = g.create_tenant_live("other");
        g.set_provider(&other, "openai", &up.url(), "sk-x");
        let yaml = json!({"name": "c", "enabled": true, "yaml": "cache: {mode: exact}\n"});
        assert_eq!(g.mgmt("POST", "/v1/policies", Some(&other), Some(&yaml)).status, 201);
        let o = g.chat(&other, &ask("what is 2+2?"));
        assert_eq!(o.status, 200);
        assert_eq!(up.count(), n + 3);
    }
}
