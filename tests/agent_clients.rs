//! What agent clients call besides chat (issue 19): model lists in both SDK shapes,
//! Anthropic's count_tokens, and the SDK-exact details of errors, over real sockets.

mod support;

use serde_json::{json, Value};
use support::{backends, http, with_standin, Gateway};

fn get(g: &Gateway, path: &str, headers: &[(&str, &str)]) -> http::Resp {
    http::request(g.gw, "GET", path, headers, b"")
}

fn bearer(key: &str) -> String {
    format!("Bearer {key}")
}

fn ids(list: &Value) -> Vec<String> {
    list["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap().to_string()).collect()
}

/// Walks the Anthropic list as the anthropic SDK's auto-pager does: `after_id = last_id` while
/// `has_more`.
fn anthropic_walk(g: &Gateway, key: &str, limit: usize) -> Vec<String> {
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..200 {
        let path = match &after {
            Some(a) => format!("/v1/models?limit={limit}&after_id={a}"),
            None => format!("/v1/models?limit={limit}"),
        };
        let r = get(g, &path, &[("x-api-key", key), ("anthropic-version", "2023-06-01")]);
        assert_eq!(r.status, 200, "{}", r.text());
        let page = r.json();
        for m in page["data"].as_array().unwrap() {
            assert_eq!(m["type"], "model");
            assert!(m["display_name"].is_string() && m["created_at"].as_str().unwrap().ends_with('Z'), "{m}");
        }
        assert!(page["data"].as_array().unwrap().len() <= limit);
        seen.extend(ids(&page));
        if page["has_more"] != true {
            return seen;
        }
        after = Some(page["last_id"].as_str().unwrap().to_string());
    }
    panic!("the Anthropic list never ended");
}

#[test]
fn model_lists_show_what_the_key_may_call_in_both_shapes_and_leave_no_receipt() {
    for b in backends() {
        let (g, up) = with_standin(&b, &[]);
        let auth = bearer(&g.key);
        let r = get(&g, "/v1/models", &[("Authorization", &auth)]);
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(r.header("x-tollgate-receipt-id").is_none(), "a model list is not a model call");
        let list = r.json();
        assert_eq!(list["object"], "list");
        let all = ids(&list);
        for m in list["data"].as_array().unwrap() {
            assert_eq!(m["object"], "model");
            assert!(m["created"].as_i64().unwrap() > 1_700_000_000, "{m}");
            assert!(["openai", "anthropic"].contains(&m["owned_by"].as_str().unwrap()), "{m}");
        }
        assert!(all.contains(&"gpt-4o-mini".to_string()) && all.contains(&"claude-haiku-4-5".to_string()), "{all:?}");
        assert!(!all.iter().any(|m| m.starts_with("bedrock/") || m.starts_with("vertex/")), "not configured: {all:?}");
        let mut sorted = all.clone();
        sorted.sort();
        assert_eq!(all, sorted);

        // A configured provider adds its models, under the names a client sends.
        let r = g.mgmt(
            "PUT",
            "/v1/providers/bedrock",
            Some(&g.key),
            Some(&json!({"access_key_id": "AKIDEXAMPLE", "secret_access_key": "s3cr3t", "region": "us-east-1", "base_url": up.url()})),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        let all = ids(&get(&g, "/v1/models", &[("Authorization", &auth)]).json());
        assert!(all.contains(&"bedrock/amazon.nova-micro-v1:0".to_string()), "{all:?}");
        assert!(!all.iter().any(|m| m.starts_with("bedrock/gpt") || m.starts_with("bedrock/claude-")), "{all:?}");

        // The anthropic SDK's shape: paginated, walked to its end, the same models.
        assert_eq!(anthropic_walk(&g, &g.key, 7), all);
        assert_eq!(anthropic_walk(&g, &g.key, 1000), all);
        let back = get(
            &g,
            &format!("/v1/models?limit=2&before_id={}", all[3]),
            &[("x-api-key", &g.key), ("anthropic-version", "2023-06-01")],
        )
        .json();
        assert_eq!(ids(&back), all[1..3].to_vec());
        assert_eq!(back["has_more"], true);
        let bad = get(&g, "/v1/models?limit=0", &[("x-api-key", &g.key), ("anthropic-version", "2023-06-01")]);
        assert_eq!(bad.status, 400);
        assert_eq!(bad.json()["type"], "error", "Anthropic envelope: {}", bad.text());

        // One model, by a name with `/` and `:` in it too.
        let one = get(&g, "/v1/models/bedrock/amazon.nova-micro-v1%3A0", &[("Authorization", &auth)]);
        assert_eq!(one.status, 200, "{}", one.text());
        assert_eq!(one.json()["id"], "bedrock/amazon.nova-micro-v1:0");
        assert_eq!(one.json()["owned_by"], "bedrock");
        let one = get(&g, "/v1/models/claude-haiku-4-5", &[("x-api-key", &g.key), ("anthropic-version", "2023-06-01")]);
        assert_eq!((one.json()["type"].as_str(), one.json()["id"].as_str()), (Some("model"), Some("claude-haiku-4-5")));
        let missing = get(&g, "/v1/models/gpt-nonexistent", &[("Authorization", &auth)]);
        assert_eq!(missing.status, 404);
        assert_eq!(missing.json()["error"]["type"], "not_found");

        // What a policy forbids this key is not listed, nor answered one by one.
        let policy =
            "rules:\n  - {id: no-claude-for-services, match: {model: \"claude-*\", keyClass: service}, action: deny}\n\
                      allowlist:\n  models: [\"gpt-4o*\", \"claude-*\", \"bedrock/*\"]\n";
        let r = g.mgmt("POST", "/v1/policies", Some(&g.key), Some(&json!({"name": "p", "yaml": policy})));
        assert_eq!(r.status, 201, "{}", r.text());
        let service = g.new_key(&g.key, &json!({"label": "ci", "keyClass": "service"})).1;
        let theirs = ids(&get(&g, "/v1/models", &[("Authorization", &bearer(&service))]).json());
        assert!(theirs.iter().all(|m| m.starts_with("gpt-4o") || m.starts_with("bedrock/")), "{theirs:?}");
        assert!(theirs.contains(&"gpt-4o-mini".to_string()));
        let mine = ids(&get(&g, "/v1/models", &[("Authorization", &auth)]).json());
        assert!(mine.contains(&"claude-haiku-4-5".to_string()) && !mine.contains(&"gpt-5".to_string()), "{mine:?}");
        let hidden = get(&g, "/v1/models/claude-haiku-4-5", &[("Authorization", &bearer(&service))]);
        assert_eq!(hidden.status, 404);

        let no_key = get(&g, "/v1/models", &[]);
        assert_eq!(no_key.status, 401);
        assert_eq!(up.count(), 0, "a model list never reaches a provider");
        // The tenant's log holds the admin receipts of its five management writes (the two
        // provider PUTs of `with_standin`, bedrock, the policy, the service key) and nothing
        // else: no model list left a receipt of any kind.
        assert_eq!(g.call_count(&g.key), 0, "no receipts for model lists");
        let log = g.get_json(&g.key, "/v1/receipts?limit=200");
        let actions: Vec<&str> =
            log["receipts"].as_array().unwrap().iter().rev().map(|r| r["model"].as_str().unwrap()).collect();
        assert_eq!(
            actions,
            ["providers.update", "providers.update", "providers.update", "policies.create", "keys.create"],
            "{log}"
        );
        assert_eq!(g.newest_seq(&g.key), 5, "no receipts for model lists");
        let listed = g.metric("tollgate_requests_total", &["route=\"models\""]);
        assert!(listed >= 10.0, "{listed}");
    }
}

#[test]
fn count_tokens_passes_to_anthropic_unbilled_with_its_own_rate() {
    for b in backends() {
        let (g, up) = with_standin(&b, &[("TOLLGATE_COUNT_TOKENS_RPM", "3")]);
        let (id, key) = g.create_key("agent");
        let r = g.mgmt("PATCH", &format!("/v1/keys/{id}/limits"), Some(&g.key), Some(&json!({"rpmLimit": 1})));
        assert_eq!(r.status, 200, "{}", r.text());
        let body = json!({"model": "claude-haiku-4-5", "messages": [{"role": "user", "content": "hello"}]}).to_string();
        let headers = [
            ("x-api-key", key.as_str()),
            ("anthropic-version", "2023-06-01"),
            ("anthropic-beta", "token-counting-2024-11-01"),
            ("content-type", "application/json"),
        ];
        // Three counts pass though the key's own rpm is 1; one of them through a base URL
        // that already ended in /v1.
        for path in ["/v1/messages/count_tokens?beta=true", "/v1/messages/count_tokens", "/v1/v1/messages/count_tokens"]
        {
            let r = http::request(g.gw, "POST", path, &headers, body.as_bytes());
            assert_eq!(r.status, 200, "{path}: {}", r.text());
            assert_eq!(r.json(), json!({"input_tokens": 42}));
            assert!(r.header("x-tollgate-receipt-id").is_none());
        }
        let sent = up.requests();
        assert_eq!(sent.len(), 3);
        assert_eq!(sent[0].path, "/v1/messages/count_tokens?beta=true");
        assert_eq!(sent[2].path, "/v1/messages/count_tokens");
        assert_eq!(sent[0].header("anthropic-beta"), Some("token-counting-2024-11-01"));
        assert_eq!(sent[0].header("anthropic-version"), Some("2023-06-01"));
        assert_eq!(sent[0].header("x-api-key"), Some("sk-ant-provider-secret"), "the tenant's credential");
        assert_eq!(sent[0].json(), serde_json::from_str::<Value>(&body).unwrap(), "the body passes as sent");

        // Its own limit: the fourth in the minute is refused, in Anthropic's envelope.
        let r = http::request(g.gw, "POST", "/v1/messages/count_tokens", &headers, body.as_bytes());
        assert_eq!(r.status, 429, "{}", r.text());
        assert_eq!(r.json()["type"], "error");
        assert!(r.header("retry-after").is_some() && r.header("retry-after-ms").is_some());
        assert!(r.json()["error"]["message"].as_str().unwrap().contains("count_tokens_rpm"));
        assert_eq!(up.count(), 3);

        // None of it counted against the key: its one chat request of the minute still passes.
        let chat =
            json!({"model": "claude-haiku-4-5", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]});
        let r = http::request(g.gw, "POST", "/v1/messages", &headers, chat.to_string().as_bytes());
        assert_eq!(r.status, 200, "{}", r.text());
        let calls = g.call_receipts(&g.key);
        assert_eq!(calls.len(), 1, "one receipt: the chat, not the counts");
        assert_eq!(
            (calls[0]["model"].as_str(), calls[0]["kind"].as_str()),
            (Some("claude-haiku-4-5"), Some("model_call"))
        );
        // Four management writes before (two provider PUTs, the key, its limits) and the chat:
        // the counts left no receipt of any kind.
        assert_eq!(g.newest_seq(&g.key), 5, "one receipt: the chat, not the counts");

        // A body without a model is the client's error, not sent on.
        let other = g.new_key(&g.key, &json!({"label": "other"})).1;
        let h = [("x-api-key", other.as_str()), ("anthropic-version", "2023-06-01")];
        let r = http::request(g.gw, "POST", "/v1/messages/count_tokens", &h, br#"{"messages":[]}"#);
        assert_eq!(r.status, 400, "{}", r.text());
        assert!(r.json()["error"]["message"].as_str().unwrap().contains("model"));
        assert_eq!(r.header("x-should-retry"), Some("false"));
        let r = http::request(g.gw, "POST", "/v1/messages/count_tokens", &[], body.as_bytes());
        assert_eq!(r.status, 401);
        assert_eq!(up.count(), 4, "only the chat went on");

        // A policy may restrict the beta features keys ask Anthropic for.
        let policy = "allowlist:\n  betas: [\"token-counting-*\", \"prompt-caching-*\"]\n";
        let r = g.mgmt("POST", "/v1/policies", Some(&g.key), Some(&json!({"name": "betas", "yaml": policy})));
        assert_eq!(r.status, 201, "{}", r.text());
        let allowed = [
            ("x-api-key", other.as_str()),
            ("anthropic-version", "2023-06-01"),
            ("anthropic-beta", "token-counting-2024-11-01"),
        ];
        let r = http::request(g.gw, "POST", "/v1/messages/count_tokens", &allowed, body.as_bytes());
        assert_eq!(r.status, 200, "{}", r.text());
        let refused = [
            ("x-api-key", other.as_str()),
            ("anthropic-version", "2023-06-01"),
            ("anthropic-beta", "prompt-caching-2024-07-31, computer-use-2025-01-24"),
        ];
        let r = http::request(g.gw, "POST", "/v1/messages/count_tokens", &refused, body.as_bytes());
        assert_eq!(r.status, 403, "{}", r.text());
        let r = http::request(g.gw, "POST", "/v1/messages", &refused, chat.to_string().as_bytes());
        assert_eq!(r.status, 403, "{}", r.text());
        assert_eq!(r.json()["error"]["type"], "policy_denied");
        assert!(r.json()["error"]["message"].as_str().unwrap().contains("computer-use-2025-01-24"), "{}", r.text());
        let rec = g.receipt_of(&r);
        assert!(
            rec["checks"].as_array().unwrap().iter().any(|c| c["name"] == "ALLOWLIST" && c["result"] == "BLOCK"),
            "{rec}"
        );
        assert_eq!(up.count(), 5, "refused betas never reach Anthropic");
    }
}

#[test]
fn refusals_say_whether_to_retry_and_anthropic_overload_passes_through() {
    for b in backends() {
        let (g, _up) = with_standin(&b, &[]);
        let policy = "rules:\n  - {id: no-o1, match: {model: \"o1*\"}, action: deny}\n";
        let r = g.mgmt("POST", "/v1/policies", Some(&g.key), Some(&json!({"name": "p", "yaml": policy})));
        assert_eq!(r.status, 201, "{}", r.text());
        let chat = |key: &str, model: &str| {
            let body = json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});
            g.post_gw("/v1/chat/completions", key, body.to_string().as_bytes())
        };
        let denied = chat(&g.key, "o1-mini");
        assert_eq!(denied.status, 403);
        assert_eq!(denied.header("x-should-retry"), Some("false"));

        let (id, broke) = g.create_key("budget");
        let budget = json!({"scope": "key", "scopeId": id, "amountUsd": 1e-9, "period": "total"});
        assert_eq!(g.mgmt("POST", "/v1/budgets", Some(&g.key), Some(&budget)).status, 201);
        let over = chat(&broke, "gpt-4o-mini");
        assert_eq!(over.status, 402);
        assert_eq!(over.header("x-should-retry"), Some("false"));

        // 429 stays retryable, with honest waits.
        let (id, limited) = g.create_key("rpm");
        let r = g.mgmt("PATCH", &format!("/v1/keys/{id}/limits"), Some(&g.key), Some(&json!({"rpmLimit": 1})));
        assert_eq!(r.status, 200);
        assert_eq!(chat(&limited, "gpt-4o-mini").status, 200);
        let slow = chat(&limited, "gpt-4o-mini");
        assert_eq!(slow.status, 429);
        assert_eq!(slow.header("x-should-retry"), None);
        let ms: u64 = slow.header("retry-after-ms").unwrap().parse().unwrap();
        let s: u64 = slow.header("retry-after").unwrap().parse().unwrap();
        assert!(ms > 0 && ms <= 120_000 && s == ms.div_ceil(1000), "{ms} ms, {s} s");

        // Anthropic's 529 overloaded keeps its status and type on the Anthropic route.
        let h = [("x-api-key", g.key.as_str()), ("anthropic-version", "2023-06-01")];
        let body =
            json!({"model": "claude-overloaded", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]});
        let r = http::request(g.gw, "POST", "/v1/v1/messages", &h, body.to_string().as_bytes());
        assert_eq!(r.status, 529, "{}", r.text());
        assert_eq!(r.json()["type"], "error");
        assert_eq!(r.json()["error"]["type"], "overloaded_error");
        assert_eq!(g.receipt_of(&r)["upstreamStatus"], "error");
    }
}
