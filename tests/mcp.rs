//! Issue 20: MCP tool servers behind `/mcp/{server}`, over real sockets: registration (sealed,
//! write-only headers), the tool-call checks and their JSON-RPC refusals, `tool_call` receipts,
//! tenant isolation, bad input, and a server that is down.

mod support;

use serde_json::{json, Value};
use support::standin_mcp::McpStandin;
use support::{backends, free_port, http, Gateway, Resp};

fn register(g: &Gateway, key: &str, name: &str, url: &str) -> Resp {
    g.mgmt(
        "POST",
        "/v1/tool-servers",
        Some(key),
        Some(&json!({"name": name, "url": url, "headers": {"Authorization": "Bearer server-secret-42"}})),
    )
}

fn policy(g: &Gateway, yaml: &str) {
    let r = g.mgmt("POST", "/v1/policies", Some(&g.key), Some(&json!({"name": "p", "enabled": true, "yaml": yaml})));
    assert_eq!(r.status, 201, "{}", r.text());
}

/// One MCP message to `/mcp/{server}` with the Tollgate key as the bearer.
fn rpc(g: &Gateway, server: &str, key: &str, body: &Value) -> Resp {
    let auth = format!("Bearer {key}");
    http::request(
        g.gw,
        "POST",
        &format!("/mcp/{server}"),
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("Authorization", &auth),
            ("Mcp-Session-Id", "s-1"),
        ],
        &serde_json::to_vec(body).unwrap(),
    )
}

fn call(id: u64, tool: &str, args: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": args}})
}

fn checks(receipt: &Value) -> Vec<String> {
    receipt["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| format!("{}:{}", c["name"], c["result"]).replace('"', ""))
        .collect()
}

/// The SSE answer's JSON-RPC messages.
fn sse_messages(body: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(body)
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .collect()
}

#[test]
fn tool_servers_are_registered_per_tenant_with_write_only_headers() {
    for b in backends() {
        let up = McpStandin::start();
        let g = Gateway::start(&b, &[]);
        let r = register(&g, &g.key, "search", &up.url());
        assert_eq!(r.status, 201, "{}", r.text());
        assert!(!r.text().contains("server-secret-42"), "{}", r.text());
        assert_eq!(r.json()["headerNames"], json!(["authorization"]));
        assert_eq!(register(&g, &g.key, "search", &up.url()).status, 409);
        let list = g.mgmt("GET", "/v1/tool-servers", Some(&g.key), None);
        assert_eq!(list.status, 200);
        assert!(!list.text().contains("server-secret-42"));
        assert_eq!(list.json()[0]["name"], "search");
        assert_eq!(list.json()[0]["source"], "api");
        // At rest, the header value is ciphertext.
        let db = std::fs::read(g.dir.join("tollgate.db")).unwrap_or_default();
        assert!(!db.windows(16).any(|w| w == b"server-secret-42"));
        assert!(!g.logs().contains("server-secret-42"));

        // Bad registrations, and a developer key.
        for bad in [
            json!({"name": "a/b", "url": up.url()}),
            json!({"name": "x", "url": "ftp://x"}),
            json!({"name": "x", "url": up.url(), "headers": {"mcp-session-id": "1"}}),
            json!({"name": "x", "url": up.url(), "headers": {"x-a": "bad\nvalue"}}),
        ] {
            let r = g.mgmt("POST", "/v1/tool-servers", Some(&g.key), Some(&bad));
            assert_eq!(r.status, 400, "{bad}: {}", r.text());
            assert!(!r.text().contains("bad\nvalue"));
        }
        let (_, dev) = g.create_key("dev");
        assert_eq!(register(&g, &dev, "other", &up.url()).status, 403);

        // Another tenant neither sees nor reaches it.
        let (_, other) = g.create_tenant_live("globex");
        assert_eq!(g.mgmt("GET", "/v1/tool-servers", Some(&other), None).json(), json!([]));
        let before = up.requests().len();
        let r = rpc(&g, "search", &other, &call(1, "search", json!({"q": "x"})));
        assert_eq!(r.status, 404, "{}", r.text());
        assert_eq!(g.mgmt("DELETE", "/v1/tool-servers/search", Some(&other), None).status, 404);
        assert_eq!(up.requests().len(), before, "another tenant's call never reaches the server");

        assert_eq!(g.mgmt("DELETE", "/v1/tool-servers/search", Some(&g.key), None).status, 204);
        assert_eq!(rpc(&g, "search", &g.key, &call(1, "search", json!({}))).status, 404);
    }
}

#[test]
fn a_tool_call_is_checked_receipted_and_reaches_the_server_without_the_tollgate_key() {
    for b in backends() {
        let up = McpStandin::start();
        let g = Gateway::start(&b, &[]);
        assert_eq!(register(&g, &g.key, "search", &up.url()).status, 201);
        policy(&g, "allowlist:\n  tools: [search, search_sse, broken]\nguardrails:\n  pii: {email: redact}\n");

        // initialize and notifications pass through, without receipts.
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
        let r = rpc(&g, "search", &g.key, &init);
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.header("mcp-session-id"), Some("s-1"));
        assert!(r.header("x-tollgate-receipt-id").is_none());
        let r = rpc(&g, "search", &g.key, &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        assert_eq!(r.status, 202);

        // tools/list hides what the key may not call.
        let r = rpc(&g, "search", &g.key, &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
        let listed = r.json();
        let names: Vec<&str> =
            listed["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["search"]);

        // A call: the email is redacted before the server sees it.
        let r = rpc(&g, "search", &g.key, &call(2, "search", json!({"q": "mail bob@example.com", "n": 3})));
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        assert_eq!(v["id"], 2);
        assert!(v["result"]["content"][0]["text"].as_str().unwrap().contains("[REDACTED:EMAIL]"), "{v}");
        let seen = up.requests().last().unwrap().clone();
        assert!(!String::from_utf8_lossy(&seen.body).contains("bob@example.com"));
        assert_eq!(seen.header("authorization"), Some("Bearer server-secret-42"));
        assert_eq!(seen.header("mcp-session-id"), Some("s-1"));
        assert!(up.requests().iter().all(|q| !q.headers.iter().any(|(_, v)| v.contains(&g.key))), "never the key");
        let rec = g.receipt_of(&r);
        assert_eq!(rec["kind"], "tool_call");
        assert_eq!(rec["provider"], "search");
        assert_eq!(rec["model"], "search");
        assert_eq!(rec["upstreamStatus"], "ok");
        assert_eq!(rec["verified"], true);
        assert_eq!(checks(&rec), ["ALLOWLIST:PASS", "GUARDRAIL:REDACT", "UPSTREAM:PASS", "GUARDRAIL:PASS"]);

        // Calling a tool outside the allowlist: a JSON-RPC error, never sent.
        let before = up.calls().len();
        let r = rpc(&g, "search", &g.key, &call(3, "shell.exec", json!({"cmd": "rm -rf /"})));
        assert_eq!(r.status, 200);
        let v = r.json();
        assert_eq!((v["id"].clone(), v["error"]["code"].clone()), (json!(3), json!(-32001)), "{v}");
        assert_eq!(up.calls().len(), before);
        let rec = g.receipt_of(&r);
        assert_eq!(checks(&rec), ["ALLOWLIST:BLOCK", "UPSTREAM:SKIPPED"]);
        assert_eq!(rec["upstreamStatus"], "skipped");

        // An SSE answer: the progress event, then the checked result, with its receipt.
        let r = rpc(&g, "search", &g.key, &call(4, "search_sse", json!({"q": "x"})));
        assert_eq!(r.status, 200);
        let msgs = sse_messages(&r.body);
        assert_eq!(msgs.len(), 2, "{}", r.text());
        assert_eq!(msgs[0]["method"], "notifications/progress");
        assert_eq!(msgs[1]["id"], 4);
        assert_eq!(g.receipt_of(&r)["upstreamStatus"], "ok");

        // A JSON-RPC error from the server is UPSTREAM: FAIL.
        let r = rpc(&g, "search", &g.key, &call(5, "broken", json!({})));
        assert_eq!(r.json()["error"]["message"], "it broke");
        let rec = g.receipt_of(&r);
        assert_eq!(rec["upstreamStatus"], "error");
        assert!(checks(&rec).contains(&"UPSTREAM:FAIL".to_string()));

        // Lists filter by kind; exports carry it.
        let l = g.mgmt("GET", "/v1/receipts?kind=tool_call", Some(&g.key), None).json();
        let kinds: Vec<&str> = l["receipts"].as_array().unwrap().iter().map(|r| r["kind"].as_str().unwrap()).collect();
        assert_eq!(kinds.len(), 4);
        assert!(kinds.iter().all(|k| *k == "tool_call"));
        assert_eq!(g.mgmt("GET", "/v1/receipts?kind=model_call", Some(&g.key), None).json()["receipts"], json!([]));
        assert_eq!(g.mgmt("GET", "/v1/receipts?kind=nope", Some(&g.key), None).status, 400);
        // The export holds the whole log: the admin receipts of the registration and the policy
        // (docs/log.md §8), then the four tool calls, each row with its kind.
        let csv = g.mgmt("GET", "/v1/receipts/export?format=csv", Some(&g.key), None).text();
        let kinds: Vec<&str> = csv.lines().skip(1).map(|l| l.rsplit(',').next().unwrap()).collect();
        assert_eq!(kinds, ["admin", "admin", "tool_call", "tool_call", "tool_call", "tool_call"], "{csv}");
        assert!(csv.lines().nth(3).unwrap().contains(",search,search,"), "{csv}");
        let att = g.mgmt("GET", "/v1/compliance/attestation", Some(&g.key), None);
        assert_eq!(att.json()["totals"]["toolReceipts"], 4, "{}", att.text());
        assert_eq!(att.json()["totals"]["receipts"], 4, "admin receipts are not calls: {}", att.text());
        // Coverage: a control proven by ALLOWLIST lists the tool call the allowlist refused.
        let cov = g.mgmt("GET", "/v1/compliance/coverage/owasp-llm-2025", Some(&g.key), None).json();
        let control = cov["controls"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["provenBy"].as_array().is_some_and(|p| p.iter().any(|x| x == "ALLOWLIST")))
            .unwrap_or_else(|| panic!("a control proven by ALLOWLIST: {cov}"));
        let id = control["id"].as_str().unwrap().replace(':', "%3A");
        let path = format!("/v1/compliance/coverage/owasp-llm-2025/controls/{id}/receipts?limit=200");
        let proving = g.mgmt("GET", &path, Some(&g.key), None).json();
        assert!(
            proving["receipts"].as_array().unwrap().iter().any(|r| r["kind"] == "tool_call"),
            "tool receipts count in coverage: {proving}"
        );

        // Metrics and /status.
        assert!(
            g.metric("tollgate_tool_calls_total", &["server=\"search\"", "tool=\"search\"", "result=\"ok\""]) >= 1.0
        );
        assert!(g.metric("tollgate_tool_calls_total", &["tool=\"shell.exec\"", "result=\"blocked\""]) >= 1.0);
        let status = g.mgmt("GET", "/status", None, None).json();
        let c = status["components"].as_array().unwrap().iter().find(|c| c["name"] == "tool-server:search").cloned();
        assert_eq!(c.expect("the tool server is on /status")["group"], "tools");
    }
}

#[test]
fn bad_input_and_a_server_that_is_down_get_clear_errors() {
    let b = &backends()[0];
    let up = McpStandin::start();
    let g = Gateway::start(b, &[("TOLLGATE_MAX_BODY_BYTES", "4096")]);
    assert_eq!(register(&g, &g.key, "search", &up.url()).status, 201);
    let down = format!("http://127.0.0.1:{}/mcp", free_port());
    assert_eq!(register(&g, &g.key, "down", &down).status, 201);
    let auth = format!("Bearer {}", g.key);
    let post = |path: &str, body: &[u8]| {
        http::request(g.gw, "POST", path, &[("Content-Type", "application/json"), ("Authorization", &auth)], body)
    };

    let r = post("/mcp/search", b"{not json");
    assert_eq!((r.status, r.json()["error"]["code"].clone()), (400, json!(-32700)), "{}", r.text());
    let batch = serde_json::to_vec(&json!([call(1, "search", json!({})), call(2, "search", json!({}))])).unwrap();
    let r = post("/mcp/search", &batch);
    assert_eq!((r.status, r.json()["error"]["code"].clone()), (400, json!(-32600)), "{}", r.text());
    let r = post("/mcp/search", br#"{"jsonrpc":"1.0","id":1,"method":"tools/list"}"#);
    assert_eq!(r.status, 400);
    let r = post("/mcp/search", br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}"#);
    assert_eq!((r.status, r.json()["error"]["code"].clone()), (200, json!(-32602)));
    assert_eq!(g.receipt_of(&r)["kind"], "tool_call");
    let r = post("/mcp/search", &vec![b' '; 5000]);
    assert_eq!(r.status, 413);
    let r = post("/mcp/nobody", &serde_json::to_vec(&call(1, "search", json!({}))).unwrap());
    assert_eq!(r.status, 404);
    let r = http::request(g.gw, "POST", "/mcp/search", &[("Content-Type", "application/json")], b"{}");
    assert_eq!(r.status, 401);
    assert!(up.calls().is_empty(), "none of these reached the server");

    let r = post("/mcp/down", &serde_json::to_vec(&call(9, "search", json!({}))).unwrap());
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!((v["id"].clone(), v["error"]["code"].clone()), (json!(9), json!(-32005)), "{v}");
    let rec = g.receipt_of(&r);
    assert_eq!(rec["upstreamStatus"], "error");
    assert!(checks(&rec).contains(&"UPSTREAM:FAIL".to_string()));
    let status = g.mgmt("GET", "/status", None, None).json();
    let c = status["components"].as_array().unwrap().iter().find(|c| c["name"] == "tool-server:down").cloned();
    assert_eq!(c.unwrap()["status"], "degraded");
}

#[test]
fn config_lists_tool_servers_too() {
    let b = &backends()[0];
    let up = McpStandin::start();
    // The tenant exists before the server starts; its id goes into the config file.
    let mut g = Gateway::start(b, &[]);
    g.stop();
    let cfg = g.dir.join("tools.yaml");
    let yaml = format!(
        "tool_servers:\n  - {{tenant: \"{}\", name: cfgsrv, url: \"{}\", headers: {{x-api-key: cfg-secret-9}}}}\n",
        g.tenant_id,
        up.url()
    );
    std::fs::write(&cfg, yaml).unwrap();
    g.set_env("TOLLGATE_CONFIG", &cfg.display().to_string());
    g.spawn();
    let list = g.mgmt("GET", "/v1/tool-servers", Some(&g.key), None);
    assert_eq!(list.json()[0]["source"], "config", "{}", list.text());
    assert!(!list.text().contains("cfg-secret-9"));
    assert_eq!(g.mgmt("DELETE", "/v1/tool-servers/cfgsrv", Some(&g.key), None).status, 409);
    let r = rpc(&g, "cfgsrv", &g.key, &call(1, "search", json!({"q": 1})));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(up.requests().last().unwrap().header("x-api-key"), Some("cfg-secret-9"));
}

#[test]
fn tool_calls_count_against_rate_limits_and_priced_tools_against_budgets() {
    for b in backends() {
        let up = McpStandin::start();
        let conf = std::env::temp_dir().join(format!("tollgate-mcp-prices-{}.yaml", std::process::id()));
        std::fs::write(&conf, "pricing:\n  \"tool:search/search\": {input: 0.01, output: 0}\n").unwrap();
        let g = Gateway::start(&b, &[("TOLLGATE_CONFIG", conf.to_str().unwrap())]);
        assert_eq!(register(&g, &g.key, "search", &up.url()).status, 201);

        // One request per minute: the second call is a JSON-RPC error, never sent, receipted.
        let (id, limited) = g.create_key("rpm");
        let r = g.mgmt("PATCH", &format!("/v1/keys/{id}/limits"), Some(&g.key), Some(&json!({"rpmLimit": 1})));
        assert_eq!(r.status, 200, "{}", r.text());
        let first = rpc(&g, "search", &limited, &call(1, "search", json!({"q": "a"})));
        assert!(first.json()["result"].is_object(), "{}", first.text());
        let calls = up.calls().len();
        let second = rpc(&g, "search", &limited, &call(2, "search", json!({"q": "b"})));
        assert_eq!(second.status, 200);
        let v = second.json();
        assert_eq!(v["id"], 2);
        assert!(v["error"]["message"].as_str().unwrap().contains("rate limit"), "{v}");
        assert_eq!(up.calls().len(), calls, "a refused call is not sent");
        assert!(checks(&g.receipt_of(&second)).contains(&"RATELIMIT:BLOCK".to_string()));

        // A priced tool (USD 0.01 per call) against a key budget of 0.015: one call passes and
        // is billed, the second would exceed it and is refused before the server.
        let (id, broke) = g.create_key("budget");
        let budget = json!({"scope": "key", "scopeId": id, "amountUsd": 0.015, "period": "total"});
        assert_eq!(g.mgmt("POST", "/v1/budgets", Some(&g.key), Some(&budget)).status, 201);
        let paid = rpc(&g, "search", &broke, &call(3, "search", json!({"q": "paid"})));
        assert!(paid.json()["result"].is_object(), "{}", paid.text());
        assert_eq!(g.receipt_of(&paid)["costUsd"].as_f64(), Some(0.01));
        let calls = up.calls().len();
        let over = rpc(&g, "search", &broke, &call(4, "search", json!({"q": "over"})));
        let v = over.json();
        assert_eq!(v["id"], 4);
        assert!(v["error"].is_object(), "{v}");
        assert_eq!(up.calls().len(), calls);
        assert!(checks(&g.receipt_of(&over)).contains(&"BUDGET:BLOCK".to_string()), "{}", g.receipt_of(&over));
        let _ = std::fs::remove_file(&conf);
    }
}
