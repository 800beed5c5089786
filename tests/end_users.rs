//! Issue 42 §6: limits and budgets per end user of a key (`X-Tollgate-Actor`, OpenAI's `user`,
//! Anthropic's `metadata.user_id`), over real sockets against the stand-in upstream: exact on
//! one instance and across three sharing Redis, the 400 for a bad end-user id, the MCP route.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::clock::FakeClock;
use support::cluster::{early_in_a_minute, known_everywhere, three, Cluster};
use support::redis::{fresh_prefix, machine_redis};
use support::standin_mcp::McpStandin;
use support::{http, with_standin, Backend, Gateway, Resp};

fn hello() -> Value {
    json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]})
}

/// A chat completion for `end_user`: by header when `by_header`, else in OpenAI's `user` field.
fn chat_as(gw: std::net::SocketAddr, key: &str, end_user: &str, by_header: bool) -> Resp {
    let auth = format!("Bearer {key}");
    let mut h = vec![("Content-Type", "application/json"), ("Authorization", auth.as_str())];
    let mut body = hello();
    if by_header {
        h.push(("X-Tollgate-Actor", end_user));
    } else {
        body["user"] = json!(end_user);
    }
    http::request(gw, "POST", "/v1/chat/completions", &h, &serde_json::to_vec(&body).unwrap())
}

/// Redis at `redis` under `prefix`. Its timeout is raised from 100 ms: with a dozen gateways
/// on two busy cores a call can take longer, and an instance that thinks Redis down falls back
/// to its own windows (`on_redis_down: open`), which is not what these tests are about
/// (tests/cluster_redis.rs is).
fn shared_env<'a>(redis: &'a str, prefix: &'a str) -> [(&'static str, &'a str); 3] {
    [("TOLLGATE_REDIS_URL", redis), ("TOLLGATE_REDIS_PREFIX", prefix), ("TOLLGATE_REDIS_TIMEOUT_MS", "2000")]
}

/// No instance decided without Redis.
fn no_fallbacks(cluster: &Cluster) {
    for g in &cluster.nodes {
        assert_eq!(g.metric("tollgate_shared_state_fallbacks_total", &[]), 0.0, "{} fell back", g.gw);
    }
}

/// 100 concurrent requests from 10 end users (half by header, half by `user`) spread over
/// `gateways`: how many were answered, and every refusal's message.
fn burst(gateways: &[std::net::SocketAddr], key: &str) -> (usize, Vec<String>) {
    let gateways = Arc::new(gateways.to_vec());
    let threads: Vec<_> = (0..20)
        .map(|t| {
            let (gateways, key) = (gateways.clone(), key.to_string());
            std::thread::spawn(move || {
                let mut out = Vec::new();
                for i in 0..5 {
                    let n = t * 5 + i;
                    let user = format!("user-{}", n % 10);
                    let r = chat_as(gateways[n % gateways.len()], &key, &user, n % 10 < 5);
                    out.push((r.status, r.json()["error"]["message"].as_str().unwrap_or_default().to_string()));
                }
                out
            })
        })
        .collect();
    let all: Vec<(u16, String)> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
    let ok = all.iter().filter(|(s, _)| *s == 200).count();
    let refused: Vec<String> = all.iter().filter(|(s, _)| *s != 200).map(|(s, m)| format!("{s} {m}")).collect();
    (ok, refused)
}

fn assert_end_user_refusals(refused: &[String]) {
    for m in refused {
        assert!(m.starts_with("429 "), "{m}");
        assert!(m.contains("end user \"user-"), "the message names the end user: {m}");
    }
}

#[test]
fn end_user_rpm_is_exact_on_one_instance() {
    let b = Backend::Sqlite;
    let (g, _up) = with_standin(&b, &[]);
    let (id, key) = g.key_with_limits("eu", &json!({"endUserRpmLimit": 5}));
    let listed = g.get_json(&g.key, "/v1/keys");
    let rec = listed["data"].as_array().unwrap().iter().find(|k| k["id"] == id.as_str()).unwrap().clone();
    assert_eq!((rec["endUserRpmLimit"].as_i64(), rec["endUserTpmLimit"].as_i64()), (Some(5), None), "{rec}");
    early_in_a_minute();
    let (ok, refused) = burst(&[g.gw], &key);
    assert_eq!(ok, 50, "10 end users x 5 rpm: {refused:?}");
    assert_end_user_refusals(&refused);
    // A request without an end user is not limited by the end-user limits.
    assert_eq!(g.chat(&key, &hello()).status, 200);
    // The refusals are receipted RATELIMIT:BLOCK under the end user's actor.
    let receipts = g.call_receipts(&key);
    let blocked: Vec<&Value> = receipts
        .iter()
        .filter(|r| r["checks"].as_array().unwrap().iter().any(|c| c["name"] == "RATELIMIT" && c["result"] == "BLOCK"))
        .collect();
    assert_eq!(blocked.len(), 50);
    assert!(blocked.iter().all(|r| r["actor"].as_str().unwrap().starts_with(&format!("{id}/user-"))));
    // One RATELIMIT entry per receipt, however many plugins decided it.
    for r in &receipts {
        let n = r["checks"].as_array().unwrap().iter().filter(|c| c["name"] == "RATELIMIT").count();
        assert!(n <= 1, "{r}");
    }
}

#[test]
fn end_user_tpm_limits_each_end_user_and_the_key_limit_still_applies() {
    let (g, _up) = with_standin(&Backend::Sqlite, &[]);
    // max_tokens 200 holds ~210 tokens per request, settled to the 18 the stand-in's answer uses:
    // two fit in 250 (18 + 210), a third does not (36 + 210 + its prompt > 250).
    let (_, key) = g.key_with_limits("eu-tpm", &json!({"endUserTpmLimit": 250, "rpmLimit": 4}));
    early_in_a_minute();
    let capped = |user: &str| {
        let mut body = hello();
        body["max_tokens"] = json!(200);
        body["user"] = json!(user);
        g.chat(&key, &body)
    };
    assert_eq!(capped("a").status, 200);
    assert_eq!(capped("a").status, 200);
    let r = capped("a");
    assert_eq!(r.status, 429, "{}", r.text());
    assert!(r.text().contains("end user \\\"a\\\""), "{}", r.text());
    assert_eq!(capped("b").status, 200);
    // The key's own 4 rpm: the end user's refusal did not count against it (the end-user
    // limits are decided first), so b and c pass and d is refused by the key's limit.
    assert_eq!(capped("c").status, 200);
    let r = capped("d");
    assert_eq!(r.status, 429);
    assert!(!r.text().contains("end user"), "the key's limit refused: {}", r.text());
}

#[test]
fn a_bad_end_user_id_is_a_400() {
    for b in support::backends() {
        let (g, _up) = with_standin(&b, &[]);
        let (id, key) = g.key_with_limits("eu-bad", &json!({"endUserRpmLimit": 100}));
        let long = "x".repeat(257);
        let r = chat_as(g.gw, &key, &long, true);
        assert_eq!(r.status, 400, "{}", r.text());
        assert!(r.text().contains("X-Tollgate-Actor"), "{}", r.text());
        let r = chat_as(g.gw, &key, &long, false);
        assert_eq!(r.status, 400, "{}", r.text());
        assert!(r.text().contains("256 bytes"), "{}", r.text());
        // 256 bytes of multi-byte text are fine: 85 three-byte characters and one byte.
        let exact = format!("{}a", "€".repeat(85));
        let r = chat_as(g.gw, &key, &exact, true);
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(g.receipt_of(&r)["actor"], format!("{id}/{exact}"));
        // 86 of them are 258 bytes although 86 characters.
        assert_eq!(chat_as(g.gw, &key, &"€".repeat(86), false).status, 400);
        let r = chat_as(g.gw, &key, "tab\there", true);
        assert_eq!(r.status, 400, "{}", r.text());
        let r = chat_as(g.gw, &key, "nul\u{1}", false);
        assert_eq!(r.status, 400, "{}", r.text());
        // Anthropic's metadata.user_id names the end user on /v1/messages too.
        let body = json!({"model": "claude-3-5-haiku", "max_tokens": 10,
            "messages": [{"role": "user", "content": "hi"}], "metadata": {"user_id": long}});
        let r = g.post_gw("/v1/messages", &key, &serde_json::to_vec(&body).unwrap());
        assert_eq!(r.status, 400, "{}", r.text());
        let body = json!({"model": "claude-3-5-haiku", "max_tokens": 10,
            "messages": [{"role": "user", "content": "hi"}], "metadata": {"user_id": "anthropic-user"}});
        let r = g.post_gw("/v1/messages", &key, &serde_json::to_vec(&body).unwrap());
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(g.receipt_of(&r)["actor"], format!("{id}/anthropic-user"));
    }
}

#[test]
fn end_user_rpm_is_exact_across_three_instances_with_redis() {
    let Some(redis) = machine_redis() else { return };
    let prefix = fresh_prefix();
    let env = shared_env(&redis, &prefix);
    let Some((cluster, _up, (_, key))) = three(&env, |g| g.key_with_limits("eu", &json!({"endUserRpmLimit": 5})))
    else {
        return;
    };
    known_everywhere(&cluster.nodes, &key);
    early_in_a_minute();
    let (ok, refused) = burst(&cluster.gateways(), &key);
    no_fallbacks(&cluster);
    assert_eq!(ok, 50, "10 end users x 5 rpm over three instances: {refused:?}");
    assert_end_user_refusals(&refused);
}

/// A `tools/call` of the tool server `search` through gateway `gw`, as `user`.
fn tool_call(gw: std::net::SocketAddr, key: &str, user: &str, id: u64) -> Resp {
    let auth = format!("Bearer {key}");
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "search", "arguments": {"q": "a"}}});
    http::request(
        gw,
        "POST",
        "/mcp/search",
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("Authorization", &auth),
            ("Mcp-Session-Id", "s-1"),
            ("X-Tollgate-Actor", user),
        ],
        &serde_json::to_vec(&body).unwrap(),
    )
}

fn add_tool_server(g: &Gateway, up: &McpStandin) {
    let r = g.mgmt("POST", "/v1/tool-servers", Some(&g.key), Some(&json!({"name": "search", "url": up.url()})));
    assert_eq!(r.status, 201, "{}", r.text());
}

#[test]
fn the_mcp_route_enforces_the_end_user_limit() {
    let up = McpStandin::start();
    let g = Gateway::start(&Backend::Sqlite, &[]);
    add_tool_server(&g, &up);
    let (_, key) = g.key_with_limits("eu-mcp", &json!({"endUserRpmLimit": 1}));
    early_in_a_minute();
    let rpc = |user: &str, id: u64| tool_call(g.gw, &key, user, id);
    assert!(rpc("alice", 1).json()["result"].is_object());
    let calls = up.calls().len();
    let v = rpc("alice", 2).json();
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("end user \"alice\""), "{v}");
    assert_eq!(up.calls().len(), calls, "a refused call is not sent");
    assert!(rpc("bob", 3).json()["result"].is_object(), "another end user of the key passes");
    assert_eq!(rpc(&"x".repeat(300), 4).status, 400);
}

/// 30 concurrent tool calls from three end users over three instances sharing Redis, against
/// `endUserRpmLimit: 5`: exactly 15 are sent to the tool server.
#[test]
fn the_mcp_route_enforces_the_end_user_limit_across_three_instances_with_redis() {
    let Some(redis) = machine_redis() else { return };
    let prefix = fresh_prefix();
    let env = shared_env(&redis, &prefix);
    let tools = McpStandin::start();
    let Some((cluster, _up, (_, key))) = three(&env, |g| {
        add_tool_server(g, &tools);
        g.key_with_limits("eu-mcp", &json!({"endUserRpmLimit": 5}))
    }) else {
        return;
    };
    known_everywhere(&cluster.nodes, &key);
    let gateways = cluster.gateways();
    early_in_a_minute();
    let answers: Vec<Value> = std::thread::scope(|s| {
        let calls: Vec<_> = (0..30)
            .map(|n| {
                let (gw, key) = (gateways[n % 3], key.as_str());
                // Each end user's calls spread over the three instances (12, 9 and 9 calls).
                s.spawn(move || tool_call(gw, key, &format!("user-{}", (n / 3) % 3), n as u64).json())
            })
            .collect();
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    });
    let passed = answers.iter().filter(|v| v["result"].is_object()).count();
    no_fallbacks(&cluster);
    assert_eq!(passed, 15, "3 end users x 5 rpm over three instances: {answers:?}");
    for v in answers.iter().filter(|v| !v["result"].is_object()) {
        assert!(v["error"]["message"].as_str().unwrap_or_default().contains("end user \"user-"), "{v}");
    }
    assert_eq!(tools.calls().len(), 15, "refused calls are not sent");
}

/// One end user's tokens, used on one instance, count on the others: an answer far over
/// `endUserTpmLimit` (settled into Redis) leaves that end user no tokens on any instance, while
/// another end user of the key is served. Per-process windows would let the other instances
/// admit it.
#[test]
fn end_user_tpm_is_shared_across_three_instances_with_redis() {
    let Some(redis) = machine_redis() else { return };
    let prefix = fresh_prefix();
    let env = shared_env(&redis, &prefix);
    let Some((cluster, _up, (id, key))) =
        three(&env, |g| g.key_with_limits("eu-tpm", &json!({"endUserTpmLimit": 1000})))
    else {
        return;
    };
    known_everywhere(&cluster.nodes, &key);
    early_in_a_minute();
    // Reserves ~20 tokens (max_tokens 10), uses 2 011 (the stand-in's USAGE:2000).
    let heavy = |gw: std::net::SocketAddr, user: &str| {
        let auth = format!("Bearer {key}");
        let body =
            json!({"model": "gpt-4o-mini", "max_tokens": 10, "messages": [{"role": "user", "content": "USAGE:2000"}]});
        let h = [("Content-Type", "application/json"), ("Authorization", auth.as_str()), ("X-Tollgate-Actor", user)];
        http::request(gw, "POST", "/v1/chat/completions", &h, &serde_json::to_vec(&body).unwrap())
    };
    let gw = cluster.gateways();
    assert_eq!(heavy(gw[0], "alice").status, 200);
    // The settlement reaches Redis after the answer (in a batch): waited for, not timed.
    let window = format!("{prefix}rl:{id}/alice");
    let deadline = Instant::now() + Duration::from_secs(15);
    while support::redis::hget(&redis, &window, "tc").parse::<i64>().unwrap_or(0) < 2011 {
        assert!(Instant::now() < deadline, "the answer's tokens never reached {window}");
        std::thread::sleep(Duration::from_millis(20));
    }
    for g in [gw[1], gw[2], gw[0]] {
        let r = heavy(g, "alice");
        assert_eq!(r.status, 429, "{}", r.text());
        assert!(r.text().contains("end user \\\"alice\\\""), "{}", r.text());
        assert!(r.header("x-ratelimit-limit-tokens") == Some("1000"), "{:?}", r.headers);
    }
    assert_eq!(heavy(gw[1], "bob").status, 200, "another end user has tokens of its own");
    no_fallbacks(&cluster);
}

/// A chat of gpt-4o for `end_user` that answers 10 000 tokens: $0.10, reserving about as much.
fn dime(gw: std::net::SocketAddr, key: &str, end_user: &str) -> Resp {
    let auth = format!("Bearer {key}");
    let body =
        json!({"model": "gpt-4o", "max_tokens": 10000, "messages": [{"role": "user", "content": "USAGE:10000"}]});
    let h = [("Content-Type", "application/json"), ("Authorization", auth.as_str()), ("X-Tollgate-Actor", end_user)];
    http::request(gw, "POST", "/v1/chat/completions", &h, &serde_json::to_vec(&body).unwrap())
}

/// 48 concurrent dimes of `end_user` over `gateways` against a budget of $1 each end user:
/// the costs answered.
fn spend_a_dollar(gateways: &[std::net::SocketAddr], key: &str, end_user: &str) -> Vec<f64> {
    let gateways = Arc::new(gateways.to_vec());
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let (gateways, key, user) = (gateways.clone(), key.to_string(), end_user.to_string());
            std::thread::spawn(move || {
                let mut costs = Vec::new();
                for i in 0..8 {
                    let r = dime(gateways[(t + i) % gateways.len()], &key, &user);
                    match r.status {
                        200 => costs.push(0.0),
                        402 => {
                            let m = r.json()["error"]["message"].as_str().unwrap().to_string();
                            assert!(m.contains(&format!("end user \"{user}\"")), "{m}");
                        }
                        s => panic!("unexpected {s}: {}", r.text()),
                    }
                }
                costs
            })
        })
        .collect();
    threads.into_iter().flat_map(|t| t.join().unwrap()).collect()
}

/// The receipts' total cost for `end_user` of key `key_id`, with the largest one.
fn spent_by(g: &Gateway, key: &str, key_id: &str, end_user: &str) -> (usize, f64, f64) {
    let actor = format!("{key_id}/{end_user}");
    let costs: Vec<f64> = g
        .call_receipts(key)
        .iter()
        .filter(|r| r["actor"] == actor.as_str() && r["upstreamStatus"] != "BLOCKED")
        .filter_map(|r| r["costUsd"].as_f64())
        .filter(|c| *c > 0.0)
        .collect();
    (costs.len(), costs.iter().sum(), costs.iter().cloned().fold(0.0, f64::max))
}

fn end_user_budget(g: &Gateway, body: Value) -> Value {
    let r = g.mgmt("POST", "/v1/budgets", Some(&g.key), Some(&body));
    assert_eq!(r.status, 201, "{}", r.text());
    r.json()
}

#[test]
fn an_end_user_budget_is_overspent_by_at_most_one_reservation() {
    for b in support::backends() {
        let (g, _up) = with_standin(&b, &[]);
        let (id, key) = g.create_key("eu-budget");
        let v = end_user_budget(&g, json!({"scope": "end_user", "keyId": id, "amountUsd": 1.0, "period": "total"}));
        assert_eq!((v["scope"].as_str(), v["keyId"].as_str()), (Some("end_user"), Some(id.as_str())), "{v}");
        assert!(v["endUser"].is_null(), "{v}");
        let answered = spend_a_dollar(&[g.gw], &key, "alice").len();
        let (n, total, one) = spent_by(&g, &key, &id, "alice");
        assert_eq!(n, answered);
        assert!((9..20).contains(&n), "about ten dimes in a dollar: {n}");
        assert!(total <= 1.0 + one + 1e-9, "overspent by more than one reservation: ${total:.4}");
        // Another end user of the key has a dollar of its own; a request without one has no cap.
        assert_eq!(dime(g.gw, &key, "bob").status, 200);
        assert_eq!(g.say(&key, "gpt-4o", "hi").status, 200);
        // The budget shows the most one end user spent.
        let listed = g.get_json(&g.key, "/v1/budgets");
        let shown = listed["data"].as_array().unwrap().iter().find(|x| x["scope"] == "end_user").unwrap().clone();
        assert!((shown["spentUsd"].as_f64().unwrap() - total).abs() < 1e-6, "{shown} vs {total}");

        // An exact end user of a team: only that end user is capped (here at 0: refused at once).
        let team = g.mgmt("POST", "/v1/team/teams", Some(&g.key), Some(&json!({"name": "t"}))).json();
        let team_id = team["id"].as_str().unwrap().to_string();
        let (_, in_team) = g.new_key(&g.key, &json!({"label": "in-team", "teamId": team_id}));
        end_user_budget(
            &g,
            json!({"scope": "end_user", "teamId": team_id, "endUser": "carol", "amountUsd": 0.0, "period": "monthly"}),
        );
        let r = dime(g.gw, &in_team, "carol");
        assert_eq!(r.status, 402, "{}", r.text());
        assert!(r.text().contains("end user \\\"carol\\\""), "{}", r.text());
        assert_eq!(dime(g.gw, &in_team, "dave").status, 200);
        // Bad bodies.
        for bad in [
            json!({"scope": "end_user", "keyId": id, "teamId": team_id, "amountUsd": 1, "period": "total"}),
            json!({"scope": "end_user", "keyId": "nope", "amountUsd": 1, "period": "total"}),
            json!({"scope": "end_user", "scopeId": id, "amountUsd": 1, "period": "total"}),
            json!({"scope": "end_user", "endUser": "x".repeat(257), "amountUsd": 1, "period": "total"}),
            json!({"scope": "key", "scopeId": id, "endUser": "a", "amountUsd": 1, "period": "total"}),
        ] {
            let r = g.mgmt("POST", "/v1/budgets", Some(&g.key), Some(&bad));
            assert_eq!(r.status, 400, "{bad}: {}", r.text());
        }
    }
}

#[test]
fn an_end_user_budget_is_exact_across_three_instances_with_redis() {
    let Some(redis) = machine_redis() else { return };
    let prefix = fresh_prefix();
    let env = shared_env(&redis, &prefix);
    let Some((cluster, _up, ((id, key), (late_id, late)))) = three(&env, |g| {
        let made = (g.create_key("eu-budget"), g.create_key("eu-late"));
        // Every end user of the tenant's first key: one dollar each.
        end_user_budget(g, json!({"scope": "end_user", "keyId": made.0 .0, "amountUsd": 1.0, "period": "monthly"}));
        made
    }) else {
        return;
    };
    known_everywhere(&cluster.nodes, &key);
    known_everywhere(&cluster.nodes, &late);
    let answered = spend_a_dollar(&cluster.gateways(), &key, "alice").len();
    let (n, total, one) = spent_by(&cluster.nodes[0], &key, &id, "alice");
    assert_eq!(n, answered);
    assert!((9..20).contains(&n), "one dollar over three instances, not three: {n}");
    assert!(total <= 1.0 + one + 1e-9, "overspent by more than one reservation: ${total:.4}");
    assert_eq!(dime(cluster.nodes[1].gw, &key, "bob").status, 200);

    // Spend before the budget: half a dollar, then a dollar's budget leaves about half a dollar.
    let g = &cluster.nodes[0];
    for _ in 0..5 {
        assert_eq!(dime(g.gw, &late, "early").status, 200);
    }
    let before = spent_by(g, &late, &late_id, "early").1;
    end_user_budget(g, json!({"scope": "end_user", "keyId": late_id, "amountUsd": 1.0, "period": "total"}));
    // The watcher raises the end user's entry in Redis to its spend in the database.
    let hash = format!("{prefix}b:end_user:key:{late_id}/early:total");
    let deadline = Instant::now() + Duration::from_secs(15);
    while support::redis::hget(&redis, &hash, "ok") != "1" {
        assert!(Instant::now() < deadline, "the end user's spend was never loaded into {hash}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let seeded = support::redis::hget(&redis, &hash, "spent").parse::<i64>().unwrap() as f64 / 1e9;
    assert!((seeded - before).abs() < 1e-6, "seeded {seeded}, spent {before}");
    spend_a_dollar(&cluster.gateways(), &late, "early");
    let (n, total, one) = spent_by(g, &late, &late_id, "early");
    assert!(total <= 1.0 + one + 1e-9, "overspent by more than one reservation: ${total:.4} in {n}");
    assert!(n < 15, "the earlier spend counted: {n} answers");
    no_fallbacks(&cluster);
}

#[test]
fn end_users_are_listed_per_tenant_with_paging() {
    for b in support::backends() {
        listed_with_paging(&b);
    }
}

fn listed_with_paging(b: &Backend) {
    let (g, _up) = with_standin(b, &[]);
    let (a_id, a) = g.create_key("a");
    let (b_id, b) = g.create_key("b");
    for (key, user) in [(&a, "u1"), (&a, "u2"), (&a, "u2"), (&a, "u3"), (&b, "u1"), (&b, "u4")] {
        assert_eq!(chat_as(g.gw, key, user, true).status, 200);
    }
    assert_eq!(g.chat(&a, &hello()).status, 200, "no end user: not listed");
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/end-users?limit=2&cursor={c}"),
            None => "/v1/end-users?limit=2".to_string(),
        };
        let page = g.get_json(&g.key, &path);
        let data = page["data"].as_array().unwrap();
        assert!(data.len() <= 2);
        for u in data {
            seen.push((u["keyId"].as_str().unwrap().to_string(), u["endUser"].as_str().unwrap().to_string()));
            assert!(u["lastSeenAt"].as_str().is_some_and(|t| !t.is_empty()), "{u}");
            assert!(u["spentUsd"].as_f64().unwrap() > 0.0, "{u}");
        }
        match page["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    let mut want: Vec<(String, String)> = [(&a_id, "u1"), (&a_id, "u2"), (&a_id, "u3"), (&b_id, "u1"), (&b_id, "u4")]
        .iter()
        .map(|(k, u)| (k.to_string(), u.to_string()))
        .collect();
    want.sort();
    assert_eq!(seen, want, "every end user once, by key then end user");
    let only_a = g.get_json(&g.key, &format!("/v1/end-users?keyId={a_id}"));
    let rows = only_a["data"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    let u2 = rows.iter().find(|u| u["endUser"] == "u2").unwrap();
    assert_eq!(u2["requests"], 2, "{u2}");
    // A developer key sees its own end users only.
    let own = g.get_json(&b, "/v1/end-users");
    assert!(own["data"].as_array().unwrap().iter().all(|u| u["keyId"] == b_id.as_str()), "{own}");
    assert_eq!(g.mgmt("GET", &format!("/v1/end-users?keyId={a_id}"), Some(&b), None).status, 404);
    // Another tenant sees none of them, and the key id of this one is a 404 there.
    let (_, other) = g.create_tenant_live("other");
    assert_eq!(g.get_json(&other, "/v1/end-users")["data"], json!([]));
    assert_eq!(g.mgmt("GET", &format!("/v1/end-users?keyId={a_id}"), Some(&other), None).status, 404);
    assert_eq!(g.mgmt("GET", "/v1/end-users?cursor=%%%", Some(&g.key), None).status, 400);
}

/// Seconds from now to about the 11th of next month: a date well inside a month, so that two
/// minutes on are still in it and 31 days on are in the month after.
fn inside_next_month() -> i64 {
    use chrono::{Datelike, TimeZone};
    let now = chrono::Utc::now();
    let (y, m) = if now.month() == 12 { (now.year() + 1, 1) } else { (now.year(), now.month() + 1) };
    let at = chrono::Utc.with_ymd_and_hms(y, m, 11, 0, 0, 0).unwrap();
    (at - now).num_seconds()
}

/// Three keys of the tenant (on `g`): `endUserRpmLimit: 30`, a monthly end-user budget of
/// $0.15 and a total one of $0.15; their secrets.
fn period_keys(g: &Gateway) -> [String; 3] {
    let (_, rpm) = g.key_with_limits("eu-rpm", &json!({"endUserRpmLimit": 30}));
    let (monthly_id, monthly) = g.create_key("eu-monthly");
    let (total_id, total) = g.create_key("eu-total");
    for (id, period) in [(&monthly_id, "monthly"), (&total_id, "total")] {
        end_user_budget(g, json!({"scope": "end_user", "keyId": id, "amountUsd": 0.15, "period": period}));
    }
    [rpm, monthly, total]
}

/// Refused with `want`, the message naming alice.
fn refused_alice(r: Resp, want: u16) {
    let m = r.json()["error"]["message"].as_str().unwrap_or_default().to_string();
    assert_eq!(r.status, want, "{m}");
    assert!(m.contains("end user \"alice\""), "{m}");
}

/// Alice's 30 requests a minute used up over `gateways`: the next is refused on every one.
fn use_up_alices_window(gateways: &[std::net::SocketAddr], key: &str) {
    for i in 0..30 {
        assert_eq!(chat_as(gateways[i % gateways.len()], key, "alice", true).status, 200);
    }
    for gw in gateways {
        refused_alice(chat_as(*gw, key, "alice", true), 429);
    }
}

/// Alice's monthly end-user budget resets a month on, her total one never: on `gateways` in
/// turn, the wall clock moved by `clock` from `base` seconds ahead.
fn alices_budgets_reset(gateways: &[std::net::SocketAddr], keys: &[String; 3], clock: &FakeClock, base: i64) {
    let [_, monthly, total] = keys;
    let mut turn = 0;
    let mut next = || {
        turn += 1;
        gateways[turn % gateways.len()]
    };
    for key in [monthly, total] {
        assert_eq!(dime(next(), key, "alice").status, 200);
        refused_alice(dime(next(), key, "alice"), 402);
    }
    clock.set_offset_seconds(base + 120);
    refused_alice(dime(next(), monthly, "alice"), 402);
    clock.set_offset_seconds(base + 31 * 86_400);
    assert_eq!(dime(next(), monthly, "alice").status, 200, "a new month, a new monthly budget");
    refused_alice(dime(next(), monthly, "alice"), 402);
    refused_alice(dime(next(), total, "alice"), 402);
}

#[test]
fn end_user_windows_and_monthly_budgets_reset_with_their_period() {
    let Some(clock) = FakeClock::start() else { return };
    let base = inside_next_month();
    clock.set_offset_seconds(base);
    let (g, _up) = with_standin(&Backend::Sqlite, &clock.env());
    let keys = period_keys(&g);
    // The moved clock started at 00:00:00: the burst is early in its minute.
    use_up_alices_window(&[g.gw], &keys[0]);
    // Two minutes on (the wall clock moved, nothing waited): a new window.
    clock.set_offset_seconds(base + 120);
    assert_eq!(chat_as(g.gw, &keys[0], "alice", true).status, 200, "a new minute, a new window");
    clock.set_offset_seconds(base);
    alices_budgets_reset(&[g.gw], &keys, &clock, base);
    // The budget shows this month's spend: one dime.
    let listed = g.get_json(&g.key, "/v1/budgets");
    let monthly = listed["data"].as_array().unwrap().iter().find(|b| b["period"] == "monthly").unwrap().clone();
    let spent = monthly["spentUsd"].as_f64().unwrap();
    assert!((0.1..0.11).contains(&spent), "{monthly}");
}

/// Across three instances sharing Redis. The budget periods follow the gateways' clock (moved,
/// as above); the rate windows follow Redis's own clock (`TIME`), which the test cannot move
/// (redis-server's jemalloc and libfaketime do not start together), so the window is waited
/// for: the next minute's first seconds, at most about a minute.
#[test]
fn end_user_windows_and_monthly_budgets_reset_across_three_instances_with_redis() {
    let Some(clock) = FakeClock::start() else { return };
    let Some(redis) = machine_redis() else { return };
    let base = inside_next_month();
    clock.set_offset_seconds(base);
    let prefix = fresh_prefix();
    let mut env = clock.env();
    env.extend(shared_env(&redis, &prefix));
    let Some((cluster, _up, keys)) = three(&env, period_keys) else { return };
    for k in &keys {
        known_everywhere(&cluster.nodes, k);
    }
    let gateways = cluster.gateways();
    alices_budgets_reset(&gateways, &keys, &clock, base);

    early_in_a_minute();
    use_up_alices_window(&gateways, &keys[0]);
    // 30 in the previous window weigh 30·(1 − f) at a fraction f of the next one: one more fits
    // from its second second. Polled (a refused request counts nothing).
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut turn = 0;
    while chat_as(gateways[turn % 3], &keys[0], "alice", true).status != 200 {
        assert!(Instant::now() < deadline, "alice's window never turned");
        turn += 1;
        std::thread::sleep(Duration::from_millis(250));
    }
    no_fallbacks(&cluster);
}
