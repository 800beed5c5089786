//! OpenTelemetry traces over real sockets: the gateway exports one span per request to a
//! stand-in OTLP collector, child of the client's `traceparent`, passed on to the provider.

mod support;

use serde_json::json;
use support::otlp::{Collector, Span};
use support::{http, with_standin, Backend, Gateway, Standin};

/// Text that must never leave in a span unless prompts are captured.
const PROMPT: &str = "PROMPT-TEXT-the-colour-of-my-cat-7f3a";
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

fn traced(collector: &Collector, extra: &[(&str, &str)]) -> (Gateway, Standin) {
    let url = collector.url();
    let mut env = vec![("TOLLGATE_OTLP_ENDPOINT", url.as_str())];
    env.extend_from_slice(extra);
    with_standin(&Backend::Sqlite, &env)
}

fn chat_body(model: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({"model": model, "messages": [{"role": "user", "content": PROMPT}]})).unwrap()
}

fn post(g: &Gateway, path: &str, body: &[u8], traceparent: Option<&str>) -> support::Resp {
    let auth = format!("Bearer {}", g.key);
    let mut headers = vec![("Authorization", auth.as_str()), ("content-type", "application/json")];
    if let Some(tp) = traceparent {
        headers.extend([("traceparent", tp), ("tracestate", "vendor=abc")]);
    }
    http::request(g.gw, "POST", path, &headers, body)
}

fn span_of(collector: &Collector, r: &support::Resp) -> Span {
    let id = r.header("x-tollgate-receipt-id").expect("a receipt id").to_string();
    collector.wait_span(&format!("for receipt {id}"), |s| s.attr("tollgate.receipt.id") == id.as_str())
}

#[test]
fn each_request_is_a_genai_span_in_the_callers_trace_and_carries_no_prompt() {
    let collector = Collector::start();
    let (g, up) = traced(&collector, &[("OTEL_BSP_SCHEDULE_DELAY", "100"), ("OTEL_SERVICE_NAME", "gw-under-test")]);
    let traceparent = format!("00-{TRACE_ID}-{CLIENT_SPAN}-01");
    let r = post(&g, "/v1/chat/completions", &chat_body("gpt-4o-mini"), Some(&traceparent));
    assert_eq!(r.status, 200, "{}", r.text());

    let s = span_of(&collector, &r);
    assert_eq!((s.trace_id.as_str(), s.parent_span_id.as_str()), (TRACE_ID, CLIENT_SPAN), "child of the caller's span");
    assert_eq!((s.name.as_str(), s.kind), ("chat gpt-4o-mini", 2));
    let expected = json!({
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.response.model": "gpt-4o-mini",
        "gen_ai.usage.input_tokens": 11,
        "gen_ai.usage.output_tokens": 7,
        "http.response.status_code": 200,
        "http.request.method": "POST",
        "url.path": "/v1/chat/completions",
        "tollgate.tenant.id": g.tenant_id,
        "tollgate.request.id": r.header("x-request-id").unwrap(),
    });
    for (k, v) in expected.as_object().unwrap() {
        assert_eq!(s.attr(k), v, "{k}");
    }
    assert_eq!(s.resource["service.name"], "gw-under-test");
    assert_eq!(s.status.0, 0, "a success leaves the status unset");

    // The checks, as events, are the receipt's checks in the receipt's order.
    let receipt = g.receipt_of(&r);
    let checks: Vec<(String, String)> = receipt["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap().into(), c["result"].as_str().unwrap().into()))
        .collect();
    let events: Vec<(String, String)> =
        s.events.iter().map(|(n, a)| (n.clone(), a["tollgate.check.result"].as_str().unwrap().into())).collect();
    assert_eq!(events, checks);
    assert!(events.contains(&("UPSTREAM".into(), "PASS".into())), "{events:?}");

    // The provider saw the same trace, with this span as the parent.
    let seen = up.requests().pop().unwrap();
    let upstream_tp = seen.header("traceparent").expect("traceparent propagated upstream");
    assert_eq!(upstream_tp, format!("00-{TRACE_ID}-{}-01", s.span_id));
    assert_eq!(seen.header("tracestate"), Some("vendor=abc"));

    // A caller that does not sample its trace: passed on unsampled, and never exported (the
    // queue is first in, first out: a later sampled span arriving shows it was not queued).
    let unsampled =
        post(&g, "/v1/chat/completions", &chat_body("gpt-4o-mini"), Some(&format!("00-{TRACE_ID}-{CLIENT_SPAN}-00")));
    assert_eq!(unsampled.status, 200);
    let upstream_tp = up.requests().pop().unwrap().header("traceparent").unwrap().to_string();
    assert!(upstream_tp.starts_with(&format!("00-{TRACE_ID}-")) && upstream_tp.ends_with("-00"), "{upstream_tp}");
    let later = post(&g, "/v1/chat/completions", &chat_body("gpt-4o-mini"), None);
    span_of(&collector, &later);
    let id = unsampled.header("x-tollgate-receipt-id").unwrap();
    assert!(collector.spans().iter().all(|s| s.attr("tollgate.receipt.id") != id), "an unsampled span was exported");

    // Nothing of the prompt is in any export, in any form.
    assert!(s.attributes.get("gen_ai.input.messages").is_none());
    for e in collector.exports() {
        assert!(!String::from_utf8_lossy(&e.body).contains(PROMPT), "prompt text exported");
    }
}

#[test]
fn streams_refusals_and_upstream_failures_have_their_spans() {
    let collector = Collector::start();
    let (g, _up) = traced(&collector, &[("OTEL_BSP_SCHEDULE_DELAY", "100")]);

    // A streamed Anthropic call: the answering model and tokens come from the events.
    let body = json!({"model": "claude-3-5-haiku", "max_tokens": 10, "stream": true,
                      "messages": [{"role": "user", "content": PROMPT}]});
    let r = post(&g, "/v1/messages", &serde_json::to_vec(&body).unwrap(), None);
    assert_eq!(r.status, 200, "{}", r.text());
    let s = span_of(&collector, &r);
    assert_eq!(s.parent_span_id, "", "no traceparent: a root span");
    assert_eq!(s.trace_id.len(), 32);
    assert_eq!(s.attr("gen_ai.provider.name"), "anthropic");
    assert_eq!(s.attr("gen_ai.response.model"), "claude-3-5-haiku");
    assert_eq!((s.attr("gen_ai.usage.input_tokens"), s.attr("gen_ai.usage.output_tokens")), (&json!(13), &json!(6)));

    // Embeddings are their own operation.
    let r = post(&g, "/v1/embeddings", br#"{"model":"text-embedding-3-small","input":"x"}"#, None);
    assert_eq!(r.status, 200, "{}", r.text());
    let s = span_of(&collector, &r);
    assert_eq!(
        (s.name.as_str(), s.attr("gen_ai.operation.name")),
        ("embeddings text-embedding-3-small", &json!("embeddings"))
    );

    // The provider failing is a failed span; its error type is the status relayed.
    let r = post(&g, "/v1/chat/completions", &chat_body("gpt-fail"), None);
    assert_eq!(r.status, 502, "{}", r.text());
    let s = span_of(&collector, &r);
    assert_eq!(s.status.0, 2, "error status");
    assert_eq!((s.attr("error.type"), s.attr("http.response.status_code")), (&json!("502"), &json!(502)));
    assert!(s.events.iter().any(|(n, a)| n == "UPSTREAM" && a["tollgate.check.result"] == "FAIL"));
    assert!(s.attributes.get("gen_ai.usage.input_tokens").is_none(), "no usage without an answer");

    // A refusal (bad key) is the gateway working: a span with its error type, status unset.
    let r = http::request(g.gw, "POST", "/v1/chat/completions", &[("Authorization", "Bearer nope")], b"{}");
    assert_eq!(r.status, 401);
    let rid = r.header("x-request-id").unwrap().to_string();
    let s = collector.wait_span("for the refusal", |s| s.attr("tollgate.request.id") == rid.as_str());
    assert_eq!((s.status.0, s.attr("error.type")), (0, &json!("unauthorized")));

    for e in collector.exports() {
        assert!(!String::from_utf8_lossy(&e.body).contains(PROMPT), "prompt text exported");
    }
}

#[test]
fn prompts_are_exported_when_enabled_and_spans_are_flushed_at_shutdown() {
    let collector = Collector::start();
    // Batches would wait ten minutes: only the shutdown flush can deliver this span.
    let (mut g, _up) =
        traced(&collector, &[("OTEL_BSP_SCHEDULE_DELAY", "600000"), ("TOLLGATE_OTLP_CAPTURE_PROMPTS", "true")]);
    let r = post(&g, "/v1/chat/completions", &chat_body("gpt-4o-mini"), None);
    assert_eq!(r.status, 200, "{}", r.text());
    let receipt_id = r.header("x-tollgate-receipt-id").unwrap().to_string();
    assert!(collector.spans().is_empty(), "nothing exported before the batch is due");

    g.signal_and_wait(15);
    let s = collector.wait_span("after SIGTERM", |s| s.attr("tollgate.receipt.id") == receipt_id.as_str());
    let messages: serde_json::Value = serde_json::from_str(s.attr("gen_ai.input.messages").as_str().unwrap()).unwrap();
    assert_eq!(messages, json!([{"role": "user", "content": PROMPT}]));
}

/// HTTPS export on the TLS stack Pingora already has (rustls, ring), trusting the system's
/// roots, here a test CA through `SSL_CERT_FILE`.
#[test]
fn spans_reach_a_collector_over_https() {
    let dir = std::env::temp_dir().join(format!("tollgate-otlp-ca-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = dir.join("ca.pem");
    let collector = Collector::start_tls(&ca);
    assert!(collector.url().starts_with("https://"));
    let (g, _up) = traced(&collector, &[("OTEL_BSP_SCHEDULE_DELAY", "100"), ("SSL_CERT_FILE", ca.to_str().unwrap())]);
    let r = post(&g, "/v1/chat/completions", &chat_body("gpt-4o-mini"), None);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(span_of(&collector, &r).attr("gen_ai.request.model"), "gpt-4o-mini");
    let _ = std::fs::remove_dir_all(dir);
}

/// A collector that is down never reaches the request path; the operator reads why in the log.
#[test]
fn an_unreachable_collector_costs_requests_nothing_and_is_logged() {
    let closed = format!("http://127.0.0.1:{}", support::free_port());
    let (g, _up) =
        with_standin(&Backend::Sqlite, &[("TOLLGATE_OTLP_ENDPOINT", &closed), ("OTEL_BSP_SCHEDULE_DELAY", "100")]);
    for _ in 0..3 {
        let r = post(&g, "/v1/chat/completions", &chat_body("gpt-4o-mini"), None);
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !g.logs().contains("tracing: exporting") {
        assert!(std::time::Instant::now() < deadline, "no export failure logged:\n{}", g.logs());
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn tracing_is_off_by_default_and_a_bad_endpoint_is_refused_at_start() {
    let collector = Collector::start();
    let (g, up) = with_standin(&Backend::Sqlite, &[]);
    let r = post(&g, "/v1/chat/completions", &chat_body("gpt-4o-mini"), None);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(up.requests().pop().unwrap().header("traceparent").is_none(), "no trace context without tracing");
    assert!(collector.exports().is_empty());

    let out = std::process::Command::new(support::bin())
        .arg("serve")
        .env("TOLLGATE_DATA_DIR", &g.dir)
        .env("TOLLGATE_OTLP_ENDPOINT", "collector:4318")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("telemetry.otlp_endpoint") && err.contains("http://"), "{err}");
}
