//! The proxied hot path over real sockets: a stand-in upstream records what it receives.

mod support;

use serde_json::{json, Value};
use support::{backends, http, Backend, Gateway, Standin};

const PROVIDER_SECRET: &str = "sk-provider-secret-0001";
const ANTHROPIC_SECRET: &str = "sk-ant-provider-secret-0002";

fn setup(b: &Backend, env: &[(&str, &str)]) -> (Gateway, Standin) {
    let up = Standin::start();
    let g = Gateway::start(b, env);
    g.set_provider(&g.key, "openai", &up.url(), PROVIDER_SECRET);
    g.set_provider(&g.key, "anthropic", &format!("{}/v1", up.url()), ANTHROPIC_SECRET);
    (g, up)
}

/// Nothing the client sent as its key reaches the upstream: not a header, not the body.
fn assert_no_client_key(up: &Standin) {
    for r in up.requests() {
        for (k, v) in &r.headers {
            assert!(!v.contains("tollgate_sk_"), "client key leaked upstream in header {k}");
        }
        assert!(!String::from_utf8_lossy(&r.body).contains("tollgate_sk_"));
    }
}

#[test]
fn openai_and_anthropic_calls_are_proxied_with_the_provider_credential() {
    for b in backends() {
        let (g, up) = setup(&b, &[]);
        let r = g.post_gw(
            "/v1/chat/completions",
            &g.key,
            br#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}"#,
        );
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["choices"][0]["message"]["content"], "Hello from stand-in");
        assert!(r.header("x-request-id").is_some());
        let seen = up.requests().pop().unwrap();
        assert_eq!(seen.path, "/v1/chat/completions");
        assert_eq!(seen.header("authorization"), Some(format!("Bearer {PROVIDER_SECRET}").as_str()));

        let r = g.post_gw("/v1/embeddings", &g.key, br#"{"model":"text-embedding-3-small","input":"hi"}"#);
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(up.requests().pop().unwrap().path, "/v1/embeddings");

        // Anthropic's native route, the key in x-api-key as the anthropic SDK sends it.
        let r = http::request(
            g.gw,
            "POST",
            "/v1/messages",
            &[("x-api-key", &g.key), ("anthropic-version", "2023-06-01"), ("content-type", "application/json")],
            br#"{"model":"claude-3-5-haiku","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}"#,
        );
        assert_eq!(r.status, 200, "{}", r.text());
        let seen = up.requests().pop().unwrap();
        assert_eq!(seen.path, "/v1/messages", "a trailing /v1 on base_url is not doubled");
        assert_eq!(seen.header("x-api-key"), Some(ANTHROPIC_SECRET));
        assert_eq!(seen.header("anthropic-version"), Some("2023-06-01"));
        assert!(seen.header("authorization").is_none());

        // claude-* on the OpenAI route is translated to Anthropic's Messages API.
        let r = g.post_gw(
            "/v1/chat/completions",
            &g.key,
            br#"{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}]}"#,
        );
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["object"], "chat.completion");
        let seen = up.requests().pop().unwrap();
        assert_eq!((seen.path.as_str(), seen.header("x-api-key")), ("/v1/messages", Some(ANTHROPIC_SECRET)));

        assert_no_client_key(&up);
        assert!(!g.logs().contains(PROVIDER_SECRET) && !g.logs().contains(&g.key), "no secret in the logs");
    }
}

#[test]
fn a_one_mib_body_arrives_byte_for_byte() {
    let (g, up) = setup(&Backend::Sqlite, &[]);
    let filler: String = (0..(1 << 20)).map(|i| (b'a' + (i % 26) as u8) as char).collect();
    // Unusual spacing and key order: the gateway must not re-serialize what it does not change.
    let body =
        format!("{{ \"messages\": [{{\"role\":\"user\",\"content\":\"{filler}\"}}],   \"model\":\"gpt-4o-mini\" }}");
    assert!(body.len() > 1 << 20);
    let r = g.post_gw("/v1/chat/completions", &g.key, body.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    let seen = up.requests().pop().unwrap();
    assert_eq!(seen.body.len(), body.len());
    assert!(seen.body == body.as_bytes(), "upstream body differs from what the client sent");
}

#[test]
fn streams_reach_the_client_before_the_upstream_finishes_and_usage_is_read() {
    for b in backends() {
        let (g, up) = setup(&b, &[]);
        up.gate_streams();
        let auth = format!("Bearer {}", g.key);
        let (status, headers, mut s) = http::stream(
            g.gw,
            "/v1/chat/completions",
            &[("Authorization", &auth), ("Content-Type", "application/json")],
            br#"{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hi"}]}"#,
        );
        assert_eq!(status, 200);
        assert!(headers.iter().any(|(k, v)| k == "content-type" && v.starts_with("text/event-stream")));
        // The stand-in is now blocked after its first event: this read can only succeed if the
        // gateway forwarded that event without waiting for the rest.
        let first = String::from_utf8(s.next_chunk().expect("first chunk")).unwrap();
        assert!(first.contains("\"Hello\""), "{first}");
        assert!(!first.contains("[DONE]"));
        up.release();
        let rest = String::from_utf8(s.rest()).unwrap();
        assert!(rest.contains(" from stand-in") && rest.contains("data: [DONE]"), "{rest}");
        // The gateway asked for usage itself, so the usage-only chunk is not shown to this client.
        assert!(!rest.contains("\"usage\""), "{rest}");
        let seen = up.requests().pop().unwrap();
        assert_eq!(seen.json()["stream_options"]["include_usage"], true);

        let m = |dir: &str, want: f64| {
            let labels = ["model=\"gpt-4o-mini\"", &format!("direction=\"{dir}\"")];
            g.metric_eventually("tollgate_tokens_total", &labels, want)
        };
        assert_eq!((m("prompt", 11.0), m("completion", 7.0)), (11.0, 7.0));
        let want = (11.0 * 0.15 + 7.0 * 0.60) / 1e6;
        let cost = g.metric_eventually("tollgate_cost_usd_total", &["model=\"gpt-4o-mini\""], want);
        assert!((cost - want).abs() < 1e-12, "cost {cost}");

        // A client that asked for usage gets the usage chunk. (Permits first: the stand-in is gated.)
        up.release();
        let r = g.post_gw(
            "/v1/chat/completions",
            &g.key,
            br#"{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"messages":[]}"#,
        );
        assert!(r.text().contains("\"usage\""), "{}", r.text());

        // Anthropic stream: usage from message_start and message_delta.
        up.release();
        let r = http::request(
            g.gw,
            "POST",
            "/v1/messages",
            &[("x-api-key", &g.key), ("content-type", "application/json")],
            br#"{"model":"claude-3-5-haiku","stream":true,"max_tokens":10,"messages":[]}"#,
        );
        assert_eq!(r.status, 200);
        assert!(r.text().contains("event: message_stop"));
        let m = |dir: &str, want: f64| {
            let labels = ["model=\"claude-3-5-haiku\"", &format!("direction=\"{dir}\"")];
            g.metric_eventually("tollgate_tokens_total", &labels, want)
        };
        assert_eq!((m("prompt", 13.0), m("completion", 6.0)), (13.0, 6.0));
        let want = (13.0 * 0.80 + 6.0 * 4.0) / 1e6;
        let cost = g.metric_eventually("tollgate_cost_usd_total", &["model=\"claude-3-5-haiku\""], want);
        assert!((cost - want).abs() < 1e-12, "cost {cost}");
        assert_no_client_key(&up);
    }
}

#[test]
fn body_limit_upstream_failure_and_timeout() {
    let up = Standin::start();
    let g = Gateway::start(
        &Backend::Sqlite,
        &[("TOLLGATE_MAX_BODY_BYTES", "2048"), ("TOLLGATE_UPSTREAM_READ_TIMEOUT_MS", "400")],
    );
    g.set_provider(&g.key, "openai", &up.url(), PROVIDER_SECRET);

    let big = format!("{{\"model\":\"gpt-4o-mini\",\"messages\":[\"{}\"]}}", "x".repeat(4096));
    let r = g.post_gw("/v1/chat/completions", &g.key, big.as_bytes());
    assert_eq!(r.status, 413);
    assert_eq!(r.json()["error"]["type"], "payload_too_large");
    assert_eq!(up.count(), 0, "nothing reached the upstream");
    assert_eq!(g.receipt_of(&r)["upstreamStatus"], "skipped", "a 413 to a valid key has its receipt");

    let r = g.post_gw("/v1/chat/completions", &g.key, br#"{"model":"gpt-hang","messages":[]}"#);
    assert_eq!(r.status, 504, "{}", r.text());
    assert_eq!(r.json()["error"]["type"], "upstream_timeout");
    assert_eq!(g.receipt_of(&r)["upstreamStatus"], "timeout");

    // A provider's 5xx is a 502 in the gateway's envelope, naming the provider's status and message.
    let r = g.post_gw("/v1/chat/completions", &g.key, br#"{"model":"gpt-fail","messages":[]}"#);
    assert_eq!(r.status, 502, "{}", r.text());
    let err = &r.json()["error"];
    assert_eq!((err["type"].as_str(), err["code"].as_u64()), (Some("upstream_error"), Some(502)));
    assert_eq!(err["message"], "openai answered 500: stand-in failure");
    let failed = g.receipt_of(&r);
    assert_eq!(failed["upstreamStatus"], "error");
    assert!(failed["checks"].as_array().unwrap().contains(&json!({"name": "UPSTREAM", "result": "FAIL"})));
    // A provider's 4xx keeps its status and Retry-After, in the envelope.
    let r = g.post_gw("/v1/chat/completions", &g.key, br#"{"model":"gpt-busy","messages":[]}"#);
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.header("retry-after"), Some("7"));
    let err = &r.json()["error"];
    assert_eq!((err["type"].as_str(), err["code"].as_u64()), (Some("rate_limited"), Some(429)));
    assert_eq!(err["message"], "openai answered 429: slow down");
    assert_eq!(g.receipt_of(&r)["upstreamStatus"], "error");

    // A provider that refuses connections.
    let closed = support::free_port();
    g.set_provider(&g.key, "openai", &format!("http://127.0.0.1:{closed}"), PROVIDER_SECRET);
    let r = g.post_gw("/v1/chat/completions", &g.key, br#"{"model":"gpt-4o-mini","messages":[]}"#);
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(r.json()["error"]["type"], "upstream_error");
    assert_eq!(r.json()["error"]["param"], Value::Null);
    assert_eq!(g.receipt_of(&r)["upstreamStatus"], "error");

    // No credentials at all for a provider.
    let r = g.post_gw("/v1/messages", &g.key, br#"{"model":"claude-3-5-haiku","messages":[]}"#);
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["type"], "error");
    assert_eq!(r.json()["error"]["type"], "not_configured");
    assert_eq!(g.metric_eventually("tollgate_requests_total", &["status=\"504\""], 1.0), 1.0);
    // The receipts' UPSTREAM results are counted: the 5xx, the 4xx and the refused connection.
    let upstream = |result: &str| {
        let labels = ["check=\"UPSTREAM\"", &format!("result=\"{result}\"")];
        g.metric("tollgate_checks_total", &labels)
    };
    assert_eq!((upstream("FAIL"), upstream("TIMEOUT")), (3.0, 1.0));
}

#[test]
fn malformed_gateway_requests_get_400_naming_the_field() {
    let (g, up) = setup(&Backend::Sqlite, &[]);
    let cases: &[(&str, &[u8], &str)] = &[
        ("/v1/chat/completions", b"{\"model\":", "not valid JSON"),
        ("/v1/chat/completions", b"[1,2]", "JSON object"),
        ("/v1/chat/completions", br#"{"model":5,"messages":[]}"#, "`model`"),
        ("/v1/chat/completions", br#"{"model":"gpt-4o","messages":{}}"#, "`messages`"),
        ("/v1/chat/completions", br#"{"model":"gpt-4o","messages":[],"stream":"yes"}"#, "`stream`"),
        ("/v1/chat/completions", br#"{"model":"mystery-model","messages":[]}"#, "no route"),
        ("/v1/embeddings", br#"{"model":"text-embedding-3-small"}"#, "`input`"),
        ("/v1/messages", br#"{"model":"claude-3-5-haiku"}"#, "`messages`"),
    ];
    for (path, body, needle) in cases {
        let r = g.post_gw(path, &g.key, body);
        assert_eq!(r.status, 400, "{path} {}", String::from_utf8_lossy(body));
        let v = r.json();
        if *path == "/v1/messages" {
            assert_eq!(v["type"], "error", "Anthropic-shaped envelope");
        }
        let err = &v["error"];
        assert_eq!(err["type"], "invalid_request");
        assert!(err["message"].as_str().unwrap().contains(needle), "{}", err["message"]);
    }
    assert_eq!(up.count(), 0);
    let r = http::request(g.gw, "GET", "/v1/chat/completions", &[], b"");
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"]["code"], 404);
    // Every answer to a valid key has its receipt, committed before the answer ended.
    let auth = format!("Bearer {}", g.key);
    let r = http::request(g.gw, "GET", "/v1/chat/completions", &[("Authorization", &auth)], b"");
    assert_eq!(r.status, 404);
    assert_eq!(g.receipt_of(&r)["upstreamStatus"], "skipped");
    let r = g.post_gw("/v1/chat/completions", &g.key, b"{\"model\":");
    assert_eq!(g.receipt_of(&r)["upstreamStatus"], "skipped");
}
