//! All four providers through the gateway, over real sockets against the stand-in: Anthropic,
//! Bedrock (SigV4, Converse, event-stream frames) and Vertex (service-account token, Gemini),
//! natively and translated from `/v1/chat/completions`, with their receipts.

mod support;

use serde_json::{json, Value};
use support::{google, http, standin_cloud, with_standin, Backend, Gateway, Standin};
use tollgate::providers::eventstream::Decoder;

const HAIKU: &str = "anthropic.claude-3-haiku-20240307-v1:0";
const AKID: &str = "AKIDSTANDINEXAMPLE";

fn setup() -> (Gateway, Standin, google::ServiceAccountKey) {
    let (g, up) = with_standin(&Backend::Sqlite, &[]);
    let r = g.mgmt(
        "PUT",
        "/v1/providers/bedrock",
        Some(&g.key),
        Some(&json!({"access_key_id": AKID, "secret_access_key": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYSTANDINKEY",
            "region": "us-east-1", "base_url": up.url()})),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let sa = google::service_account(&format!("{}/token", up.url()));
    let r = g.mgmt(
        "PUT",
        "/v1/providers/vertex",
        Some(&g.key),
        Some(&json!({"service_account_json": sa.file.to_string(), "region": "europe-west4", "base_url": up.url()})),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    (g, up, sa)
}

fn ask(model: &str, text: &str) -> Value {
    json!({"model": model, "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}]})
}

/// The `data:` payloads of an SSE answer, `[DONE]` included.
fn sse_data(body: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(body).lines().filter_map(|l| l.strip_prefix("data: ")).map(str::to_string).collect()
}

fn streamed(g: &Gateway, mut body: Value) -> (http::Resp, Vec<Value>, String) {
    body["stream"] = true.into();
    let r = g.chat(&g.key, &body);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.header("content-type").unwrap().starts_with("text/event-stream"), "{:?}", r.headers);
    let data = sse_data(&r.body);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"), "{}", r.text());
    let chunks: Vec<Value> = data[..data.len() - 1].iter().map(|d| serde_json::from_str(d).unwrap()).collect();
    let text = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    (r, chunks, text)
}

/// The tool calls a client accumulates from streamed deltas, by index.
fn accumulate_tool_calls(chunks: &[Value]) -> Vec<(String, String)> {
    let mut calls: Vec<(String, String)> = Vec::new();
    for c in chunks {
        for d in c["choices"][0]["delta"]["tool_calls"].as_array().into_iter().flatten() {
            let i = d["index"].as_u64().expect("every tool-call delta has its index") as usize;
            if i == calls.len() {
                calls.push((
                    d["function"]["name"].as_str().expect("a new call names its function").into(),
                    String::new(),
                ));
            }
            calls[i].1.push_str(d["function"]["arguments"].as_str().unwrap_or(""));
        }
    }
    calls
}

fn check_receipt(g: &Gateway, r: &http::Resp, provider: &str, model: &str, tokens: (u64, u64)) {
    let rc = g.receipt_of(r);
    assert_eq!(rc["provider"], provider, "{rc}");
    assert_eq!(rc["model"], model, "{rc}");
    assert_eq!(
        (rc["promptTokens"].as_u64(), rc["completionTokens"].as_u64()),
        (Some(tokens.0), Some(tokens.1)),
        "{rc}"
    );
    assert!(rc["costUsd"].as_f64().unwrap() > 0.0, "priced from the shipped table: {rc}");
}

fn expected_tools() -> Vec<(String, String)> {
    vec![("get_weather".into(), r#"{"city":"Paris"}"#.into()), ("get_time".into(), r#"{"zone":"CET"}"#.into())]
}

fn tools_body(model: &str) -> Value {
    let tool = |name: &str| {
        json!({"type": "function", "function": {"name": name, "description": "x",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}})
    };
    json!({"model": model, "messages": [{"role": "user", "content": "TOOLS"}],
        "tools": [tool("get_weather"), tool("get_time")], "tool_choice": "auto"})
}

#[test]
fn claude_on_chat_completions_is_served_by_anthropic_messages() {
    let (g, up, _) = setup();
    let r = g.chat(&g.key, &ask("claude-3-5-haiku", "ECHO:hi|there"));
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(
        (v["object"].as_str(), v["choices"][0]["message"]["content"].as_str()),
        (Some("chat.completion"), Some("hithere"))
    );
    assert_eq!(v["usage"]["prompt_tokens"], 13);
    let sent = up.requests().pop().unwrap();
    assert_eq!(sent.path, "/v1/messages");
    let body = sent.json();
    assert_eq!((body["system"].as_str(), body["messages"].as_array().map(Vec::len)), (Some("Be brief."), Some(1)));
    assert!(body["max_tokens"].as_u64().unwrap() > 0, "max_tokens is required upstream: {body}");
    assert_eq!(sent.header("x-api-key"), Some("sk-ant-provider-secret"));
    check_receipt(&g, &r, "anthropic", "claude-3-5-haiku", (13, 6));

    let (r, chunks, text) = streamed(&g, ask("claude-3-5-haiku", "ECHO:a|b|c"));
    assert_eq!(text, "abc");
    assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk"));
    assert!(chunks.iter().all(|c| c.get("usage").is_none_or(Value::is_null)), "no usage chunk unasked");
    check_receipt(&g, &r, "anthropic", "claude-3-5-haiku", (13, 6));
    let mut asked = ask("claude-3-5-haiku", "hello");
    asked["stream_options"] = json!({"include_usage": true});
    let (_, chunks, _) = streamed(&g, asked);
    assert_eq!(chunks.last().unwrap()["usage"]["completion_tokens"], 6, "{chunks:?}");

    let r = g.chat(&g.key, &tools_body("claude-3-5-haiku"));
    let calls = r.json()["choices"][0]["message"]["tool_calls"].clone();
    assert_eq!(calls.as_array().map(Vec::len), Some(2), "{}", r.text());
    assert_eq!(r.json()["choices"][0]["finish_reason"], "tool_calls");
    let (_, chunks, _) = streamed(&g, tools_body("claude-3-5-haiku"));
    assert_eq!(accumulate_tool_calls(&chunks), expected_tools());
}

#[test]
fn bedrock_converse_natively_and_from_chat_completions_signed_with_sigv4() {
    let (g, up, _) = setup();
    let encoded = HAIKU.replace(':', "%3A");
    let body = json!({"messages": [{"role": "user", "content": [{"text": "ECHO:native|call"}]}],
        "inferenceConfig": {"maxTokens": 50}});
    let r = g.post_gw(&format!("/bedrock/model/{encoded}/converse"), &g.key, body.to_string().as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["output"]["message"]["content"][0]["text"], "nativecall", "passed through");
    let sent = up.requests().pop().unwrap();
    assert_eq!(sent.path, format!("/model/{encoded}/converse"));
    let auth = sent.header("authorization").unwrap();
    assert!(auth.starts_with(&format!("AWS4-HMAC-SHA256 Credential={AKID}/")), "{auth}");
    assert!(auth.contains("/us-east-1/bedrock/aws4_request"), "{auth}");
    assert!(sent.header("x-amz-date").is_some());
    assert!(!format!("{:?}", sent.headers).contains("tollgate_sk_"), "the client's key never goes upstream");
    check_receipt(&g, &r, "bedrock", HAIKU, (17, 9));

    // converse-stream: real event-stream frames pass through, usage read from `metadata`.
    let r = g.post_gw(&format!("/bedrock/model/{encoded}/converse-stream"), &g.key, body.to_string().as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/vnd.amazon.eventstream"));
    let events = Decoder::default().push(&r.body).expect("whole frames");
    let kinds: Vec<&str> = events.iter().filter_map(|e| e.as_object()?.keys().next().map(String::as_str)).collect();
    assert_eq!(kinds.first(), Some(&"messageStart"));
    assert_eq!(kinds.last(), Some(&"metadata"));
    check_receipt(&g, &r, "bedrock", HAIKU, (17, 9));

    // The same model from the OpenAI route: Converse out, chat.completion back.
    let model = format!("bedrock/{HAIKU}");
    let r = g.chat(&g.key, &ask(&model, "ECHO:x|y"));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["choices"][0]["message"]["content"], "xy");
    let sent = up.requests().pop().unwrap();
    assert_eq!(sent.path, format!("/model/{encoded}/converse"));
    assert_eq!(sent.json()["system"][0]["text"], "Be brief.");
    check_receipt(&g, &r, "bedrock", &model, (17, 9));
    let (r, _, text) = streamed(&g, ask(&model, "ECHO:p|q"));
    assert_eq!(text, "pq");
    assert!(up.requests().pop().unwrap().path.ends_with("/converse-stream"));
    check_receipt(&g, &r, "bedrock", &model, (17, 9));
    let (_, chunks, _) = streamed(&g, tools_body(&model));
    assert_eq!(accumulate_tool_calls(&chunks), expected_tools());
    // An exception frame mid-stream ends the translated stream with an OpenAI error object.
    let mut throttled = ask(&model, "THROTTLE");
    throttled["stream"] = true.into();
    let r = g.chat(&g.key, &throttled);
    let data = sse_data(&r.body);
    let last: Value = serde_json::from_str(data.last().expect("events")).unwrap();
    assert!(last["error"]["message"].as_str().unwrap().contains("Too many requests"), "{}", r.text());
    assert!(!data.iter().any(|d| d == "[DONE]"), "an errored stream is not completed: {}", r.text());

    // The provider test: a signed call Bedrock validates (400) proves the keys.
    let t = g.mgmt("POST", "/v1/providers/bedrock/test", Some(&g.key), None);
    assert_eq!(t.json(), json!({"ok": true, "reason": "ok"}), "{}", t.text());
}

#[test]
fn vertex_gemini_with_a_service_account_token_minted_once() {
    let (g, up, sa) = setup();
    let path = "/vertex/v1/projects/tollgate-test/locations/europe-west4/publishers/google/models/gemini-2.0-flash";
    let body = json!({"contents": [{"role": "user", "parts": [{"text": "ECHO:gem|ini"}]}]});
    let r = g.post_gw(&format!("{path}:generateContent"), &g.key, body.to_string().as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["candidates"][0]["content"]["parts"][0]["text"], "gemini");
    check_receipt(&g, &r, "vertex", "gemini-2.0-flash", (21, 8));
    let sent = up.requests().pop().unwrap();
    assert_eq!(
        sent.path,
        "/v1/projects/tollgate-test/locations/europe-west4/publishers/google/models/gemini-2.0-flash:generateContent"
    );
    assert_eq!(sent.header("authorization"), Some(format!("Bearer {}", standin_cloud::TOKEN).as_str()));

    // The JWT-bearer grant, verified with the service account's public key.
    let grants: Vec<_> = up.requests().into_iter().filter(|q| q.path == "/token").collect();
    assert_eq!(grants.len(), 1);
    let form = String::from_utf8(grants[0].body.clone()).unwrap();
    let assertion = form.split('&').find_map(|kv| kv.strip_prefix("assertion=")).unwrap();
    let token_uri = format!("{}/token", up.url());
    let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
    validation.set_audience(&[token_uri.as_str()]);
    validation.set_issuer(&[google::CLIENT_EMAIL]);
    let claims =
        jsonwebtoken::decode::<Value>(assertion, &jsonwebtoken::DecodingKey::from_rsa_der(&sa.public_der), &validation)
            .expect("a valid RS256 grant")
            .claims;
    assert!(claims["scope"].as_str().unwrap().contains("https://www.googleapis.com/auth/cloud-platform"), "{claims}");

    // Streamed natively (SSE with alt=sse), and from the OpenAI route; no new token.
    let r = g.post_gw(&format!("{path}:streamGenerateContent?alt=sse"), &g.key, body.to_string().as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(sse_data(&r.body).len(), 2, "{}", r.text());
    check_receipt(&g, &r, "vertex", "gemini-2.0-flash", (21, 8));
    let r = g.chat(&g.key, &ask("vertex/gemini-2.0-flash", "ECHO:one|two"));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["choices"][0]["message"]["content"], "onetwo");
    let sent = up.requests().pop().unwrap();
    assert_eq!(
        sent.path,
        "/v1/projects/tollgate-test/locations/europe-west4/publishers/google/models/gemini-2.0-flash:generateContent"
    );
    assert_eq!(sent.json()["systemInstruction"]["parts"][0]["text"], "Be brief.");
    check_receipt(&g, &r, "vertex", "vertex/gemini-2.0-flash", (21, 8));
    let (r, _, text) = streamed(&g, ask("vertex/gemini-2.0-flash", "ECHO:s|t"));
    assert_eq!(text, "st");
    assert!(up.requests().pop().unwrap().path.ends_with(":streamGenerateContent?alt=sse"));
    check_receipt(&g, &r, "vertex", "vertex/gemini-2.0-flash", (21, 8));
    let (_, chunks, _) = streamed(&g, tools_body("vertex/gemini-2.0-flash"));
    assert_eq!(accumulate_tool_calls(&chunks), expected_tools());
    assert_eq!(up.requests().iter().filter(|q| q.path == "/token").count(), 1, "one token for every request");

    let t = g.mgmt("POST", "/v1/providers/vertex/test", Some(&g.key), None);
    assert_eq!(t.json(), json!({"ok": true, "reason": "ok"}), "{}", t.text());
}

#[test]
fn a_refusing_token_endpoint_is_a_clear_502_and_a_failing_test() {
    let (g, up, _) = setup();
    up.refuse_tokens();
    let r = g.chat(&g.key, &ask("vertex/gemini-2.0-flash", "hi"));
    assert_eq!(r.status, 502, "{}", r.text());
    let message = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(message.contains("invalid_grant"), "{message}");
    assert!(g.receipt_of(&r)["provider"] == "vertex");
    let t = g.mgmt("POST", "/v1/providers/vertex/test", Some(&g.key), None).json();
    assert_eq!(t["ok"], false, "{t}");
    assert!(t["reason"].as_str().unwrap().contains("invalid_grant"), "{t}");
    let list = g.mgmt("GET", "/v1/providers", Some(&g.key), None).json();
    assert_eq!(list[3]["status"], "failing", "{list}");
}

#[test]
fn native_routes_refuse_bad_bodies_in_their_clients_error_shapes() {
    let (g, _up, _) = setup();
    let r = g.post_gw(&format!("/bedrock/model/{HAIKU}/converse"), &g.key, br#"{"messages": "hi"}"#);
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["__type"], "ValidationException", "botocore reads the code from __type: {}", r.text());
    assert!(r.json()["message"].as_str().unwrap().contains("messages"));
    let path = "/vertex/projects/p/locations/l/publishers/google/models/gemini-2.0-flash:generateContent";
    let r = g.post_gw(path, &g.key, b"{}");
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["error"]["status"], "INVALID_ARGUMENT", "{}", r.text());
    assert!(g.receipt_of(&r)["model"] == "gemini-2.0-flash");
    // A chat body Bedrock cannot take is the client's 400, naming the field.
    let r = g.chat(
        &g.key,
        &json!({"model": format!("bedrock/{HAIKU}"), "n": 3, "messages": [{"role": "user", "content": "hi"}]}),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.json()["error"]["message"].as_str().unwrap().contains('n'), "{}", r.text());
}
