//! The OpenAI Responses API through the gateway, over real sockets, on every database backend:
//! creates (whole and streamed, text and function calls) are model calls with one receipt
//! each; retrieve, delete, input items and input token counts pass through with none; a stored
//! response belongs to the tenant that created it (another tenant's id answers 404 and never
//! reaches the provider, across a restart too); answer guardrails hold on Responses streams.

mod support;

use serde_json::{json, Value};
use support::standin_responses::{INPUT_TOKENS, OUTPUT_TOKENS};
use support::{backends, http, with_standin, Backend, Gateway, Standin};

fn create(g: &Gateway, key: &str, body: &Value) -> http::Resp {
    g.post_gw("/v1/responses", key, body.to_string().as_bytes())
}

fn call(g: &Gateway, key: &str, method: &str, path: &str) -> http::Resp {
    let auth = format!("Bearer {key}");
    http::request(g.gw, method, path, &[("Authorization", &auth)], b"")
}

/// A stream's events as `(name, data)`.
type Events = Vec<(String, Value)>;

/// A streamed create: status, headers and the events.
fn stream(g: &Gateway, key: &str, body: &Value) -> (u16, Vec<(String, String)>, Events) {
    let auth = format!("Bearer {key}");
    let h = [("Authorization", auth.as_str()), ("Content-Type", "application/json")];
    let (status, headers, s) = http::stream(g.gw, "/v1/responses", &h, body.to_string().as_bytes());
    let text = String::from_utf8(s.rest()).unwrap();
    let events = text
        .split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let name = e.lines().find_map(|l| l.strip_prefix("event: ")).unwrap_or_default().to_string();
            let data = e.lines().find_map(|l| l.strip_prefix("data: ")).unwrap_or_else(|| panic!("no data: {e}"));
            (name, serde_json::from_str(data).unwrap())
        })
        .collect();
    (status, headers, events)
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// The answer text of a whole response.
fn output_text(response: &Value) -> String {
    let items = response["output"].as_array().unwrap();
    let parts = items.iter().filter_map(|i| i["content"].as_array()).flatten();
    parts.filter_map(|p| p["text"].as_str()).collect()
}

/// A receipt is a model call of openai's with the stand-in's usage, priced from the table.
fn assert_billed(receipt: &Value, model: &str) {
    assert_eq!(receipt["kind"], "model_call", "{receipt}");
    assert_eq!(receipt["provider"], "openai");
    assert_eq!(receipt["model"], model);
    assert_eq!(receipt["promptTokens"].as_u64(), Some(INPUT_TOKENS));
    assert_eq!(receipt["completionTokens"].as_u64(), Some(OUTPUT_TOKENS));
    // gpt-4o-mini: $0.15 / $0.60 per million input / output tokens.
    let expected = (INPUT_TOKENS as f64 * 0.15 + OUTPUT_TOKENS as f64 * 0.60) / 1e6;
    assert!((receipt["costUsd"].as_f64().unwrap() - expected).abs() < 1e-15, "{receipt}");
    assert_eq!(receipt["upstreamStatus"], "ok");
}

fn assert_not_found(r: &http::Resp, id: &str) {
    assert_eq!(r.status, 404, "{}", r.text());
    let error = &r.json()["error"];
    assert_eq!(error["type"], "not_found", "{error}");
    assert_eq!(error["code"], 404);
    assert!(error["param"].is_null(), "the OpenAI envelope: {error}");
    assert!(error["message"].as_str().unwrap().contains(id), "{error}");
    assert!(r.header("x-tollgate-receipt-id").is_none(), "no receipt for a refused read");
}

#[test]
fn creates_are_billed_model_calls_and_reads_pass_through_without_receipts() {
    for b in backends() {
        let (g, up) = with_standin(&b, &[]);
        let r = create(&g, &g.key, &json!({"model": "gpt-4o-mini", "input": "Say hello"}));
        assert_eq!(r.status, 200, "{}", r.text());
        let response = r.json();
        let id = response["id"].as_str().unwrap().to_string();
        assert!(id.starts_with("resp_"), "{response}");
        assert_eq!(output_text(&response), "Hello from stand-in");
        assert_billed(&g.receipt_of(&r), "gpt-4o-mini");
        let sent = up.requests().last().unwrap().clone();
        assert_eq!((sent.method.as_str(), sent.path.as_str()), ("POST", "/v1/responses"));
        assert_eq!(sent.header("authorization"), Some("Bearer sk-provider-secret"));
        assert_eq!(sent.json()["input"], "Say hello", "the body passes as it came");
        let seq = g.newest_seq(&g.key);

        // Right after the create: retrieve, its input items, a token count, then delete.
        let got = call(&g, &g.key, "GET", &format!("/v1/responses/{id}"));
        assert_eq!(got.status, 200, "{}", got.text());
        assert_eq!(got.json()["id"], id.as_str());
        assert_eq!(output_text(&got.json()), "Hello from stand-in");
        assert!(got.header("x-tollgate-receipt-id").is_none(), "a read has no receipt");
        assert!(got.header("x-request-id").is_some());
        let items = call(&g, &g.key, "GET", &format!("/v1/responses/{id}/input_items?limit=10&order=asc"));
        assert_eq!(items.status, 200, "{}", items.text());
        assert_eq!(items.json()["data"][0]["content"][0]["text"], "Say hello");
        assert_eq!(up.requests().last().unwrap().path, format!("/v1/responses/{id}/input_items?limit=10&order=asc"));
        let count = g.post_gw(
            "/v1/responses/input_tokens",
            &g.key,
            json!({"model": "gpt-4o-mini", "input": "Say hello", "previous_response_id": id}).to_string().as_bytes(),
        );
        assert_eq!(count.status, 200, "{}", count.text());
        assert_eq!(count.json()["object"], "response.input_tokens");
        assert!(count.header("x-tollgate-receipt-id").is_none());
        let gone = call(&g, &g.key, "DELETE", &format!("/v1/responses/{id}"));
        assert_eq!(gone.status, 200, "{}", gone.text());
        assert_eq!(gone.json()["deleted"], true);
        let methods: Vec<String> = up.requests().iter().rev().take(4).map(|r| r.method.clone()).collect();
        assert_eq!(methods, ["DELETE", "POST", "GET", "GET"]);
        assert!(up.requests().iter().all(|r| r.header("authorization") == Some("Bearer sk-provider-secret")));
        assert_eq!(call(&g, &g.key, "GET", &format!("/v1/responses/{id}")).status, 404, "deleted");
        assert_eq!(g.newest_seq(&g.key), seq, "reads, counts and deletes leave no receipt");

        // A model routed elsewhere does not speak Responses; a refused create has its receipt.
        let refused = create(&g, &g.key, &json!({"model": "claude-3-5-haiku", "input": "hi"}));
        assert_eq!(refused.status, 400, "{}", refused.text());
        assert!(refused.json()["error"]["param"].is_null());
        assert_eq!(g.receipt_of(&refused)["upstreamStatus"], "skipped");
        let background = create(&g, &g.key, &json!({"model": "gpt-4o-mini", "input": "hi", "background": true}));
        assert_eq!(background.status, 400, "unbillable: {}", background.text());
        assert!(background.json()["error"]["message"].as_str().unwrap().contains("`background`"));
    }
}

#[test]
fn streamed_creates_relay_the_events_and_bill_from_response_completed() {
    for b in backends() {
        let (g, _up) = with_standin(&b, &[]);
        let body = json!({"model": "gpt-4o-mini", "input": [{"role": "user",
            "content": [{"type": "input_text", "text": "ECHO:Hel|lo| there"}]}], "stream": true});
        let (status, headers, events) = stream(&g, &g.key, &body);
        assert_eq!(status, 200);
        assert!(header(&headers, "content-type").unwrap().starts_with("text/event-stream"));
        let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.completed"
            ]
        );
        let said: String = events.iter().filter_map(|(_, v)| v["delta"].as_str()).collect();
        assert_eq!(said, "Hello there");
        let seqs: Vec<u64> = events.iter().map(|(_, v)| v["sequence_number"].as_u64().unwrap()).collect();
        assert_eq!(seqs, (0..11).collect::<Vec<u64>>(), "events pass untouched without answer checks");
        let receipt = g.receipt(header(&headers, "x-tollgate-receipt-id").unwrap());
        assert_billed(&receipt, "gpt-4o-mini");

        // The streamed response is the tenant's as soon as the stream named it.
        let id = events[0].1["response"]["id"].as_str().unwrap();
        assert_eq!(call(&g, &g.key, "GET", &format!("/v1/responses/{id}")).status, 200);
    }
}

#[test]
fn function_calls_whole_and_streamed() {
    let (g, _up) = with_standin(&Backend::Sqlite, &[]);
    let tools = json!([{"type": "function", "name": "get_weather", "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]);
    let r = create(&g, &g.key, &json!({"model": "gpt-4o-mini", "input": "TOOLS", "tools": tools}));
    assert_eq!(r.status, 200, "{}", r.text());
    let call_item = r.json()["output"][0].clone();
    assert_eq!(call_item["type"], "function_call");
    assert_eq!(call_item["name"], "get_weather");
    assert_eq!(call_item["arguments"], r#"{"city":"Paris"}"#);
    assert_billed(&g.receipt_of(&r), "gpt-4o-mini");

    // The tool's result goes back chained to the call, naming the call's own item.
    let id = r.json()["id"].as_str().unwrap().to_string();
    let next = create(
        &g,
        &g.key,
        &json!({"model": "gpt-4o-mini", "previous_response_id": id, "tools": tools, "input": [
            {"type": "item_reference", "id": call_item["id"]},
            {"type": "function_call_output", "call_id": call_item["call_id"], "output": "{\"temp\":21}"}]}),
    );
    assert_eq!(next.status, 200, "{}", next.text());

    let (status, headers, events) =
        stream(&g, &g.key, &json!({"model": "gpt-4o-mini", "input": "TOOLS", "tools": tools, "stream": true}));
    assert_eq!(status, 200);
    let args: String = events
        .iter()
        .filter(|(n, _)| n == "response.function_call_arguments.delta")
        .map(|(_, v)| v["delta"].as_str().unwrap())
        .collect();
    assert_eq!(args, r#"{"city":"Paris"}"#);
    let (last, done) = events.last().unwrap();
    assert_eq!(last, "response.completed");
    assert_eq!(done["response"]["output"][0]["type"], "function_call");
    assert_billed(&g.receipt(header(&headers, "x-tollgate-receipt-id").unwrap()), "gpt-4o-mini");
}

/// Tenant B's gateway key, with B's own openai credential on the same stand-in.
fn second_tenant(g: &Gateway, up: &Standin) -> String {
    let (_, key) = g.create_tenant_live("beta");
    g.set_provider(&key, "openai", &up.url(), "sk-provider-secret-b");
    // The credential reaches the gateway with the next snapshot.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while g.post_gw("/v1/responses/input_tokens", &key, br#"{"model":"gpt-4o-mini","input":"x"}"#).status != 200 {
        assert!(std::time::Instant::now() < deadline, "tenant B's credential never arrived");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    key
}

#[test]
fn a_stored_response_belongs_to_its_tenant_across_a_restart() {
    for b in backends() {
        let (mut g, up) = with_standin(&b, &[]);
        let a = create(&g, &g.key, &json!({"model": "gpt-4o-mini", "input": "mine"}));
        assert_eq!(a.status, 200, "{}", a.text());
        let id = a.json()["id"].as_str().unwrap().to_string();
        let item = a.json()["output"][0]["id"].as_str().unwrap().to_string();
        let (_, _, events) = stream(&g, &g.key, &json!({"model": "gpt-4o-mini", "input": "also mine", "stream": true}));
        let streamed = events[0].1["response"]["id"].as_str().unwrap().to_string();
        let b_key = second_tenant(&g, &up);

        let refused_by_b = |g: &Gateway| {
            let before = up.count();
            let seq_b = g.newest_seq(&b_key);
            for rid in [&id, &streamed] {
                assert_not_found(&call(g, &b_key, "GET", &format!("/v1/responses/{rid}")), rid);
                assert_not_found(&call(g, &b_key, "GET", &format!("/v1/responses/{rid}/input_items")), rid);
                assert_not_found(&call(g, &b_key, "DELETE", &format!("/v1/responses/{rid}")), rid);
                let counted = format!(r#"{{"model":"gpt-4o-mini","input":"x","previous_response_id":"{rid}"}}"#);
                assert_eq!(g.post_gw("/v1/responses/input_tokens", &b_key, counted.as_bytes()).status, 404);
                // Chaining from A's response is a create: refused, with B's receipt saying so.
                let chained =
                    create(g, &b_key, &json!({"model": "gpt-4o-mini", "input": "x", "previous_response_id": rid}));
                assert_eq!(chained.status, 404, "{}", chained.text());
                assert_eq!(chained.json()["error"]["type"], "not_found");
                let receipt = g.mgmt(
                    "GET",
                    &format!("/v1/receipts/{}", chained.header("x-tollgate-receipt-id").unwrap()),
                    Some(&b_key),
                    None,
                );
                assert_eq!(receipt.json()["upstreamStatus"], "skipped");
            }
            let by_item =
                create(g, &b_key, &json!({"model": "gpt-4o-mini", "input": [{"type": "item_reference", "id": item}]}));
            assert_eq!(by_item.status, 404, "{}", by_item.text());
            // An id nobody here created is not B's either.
            let unknown =
                create(g, &b_key, &json!({"model": "gpt-4o-mini", "input": "x", "previous_response_id": "resp_nope"}));
            assert_eq!(unknown.status, 404);
            assert_eq!(up.count(), before, "none of B's attempts reached the provider");
            assert_eq!(g.newest_seq(&b_key), seq_b + 4, "one receipt per refused create, none for the reads");
        };
        refused_by_b(&g);

        // The owners outlive the process: read back from the database after a restart.
        g.stop();
        g.spawn();
        refused_by_b(&g);
        for rid in [&id, &streamed] {
            assert_eq!(call(&g, &g.key, "GET", &format!("/v1/responses/{rid}")).status, 200, "A still reads {rid}");
        }
        let chained = create(&g, &g.key, &json!({"model": "gpt-4o-mini", "input": "more", "previous_response_id": id}));
        assert_eq!(chained.status, 200, "{}", chained.text());
        assert_eq!(up.requests().last().unwrap().json()["previous_response_id"], id.as_str());
    }
}

#[test]
fn guardrails_hold_on_responses_input_and_streamed_output() {
    let (g, up) = with_standin(&Backend::Sqlite, &[]);
    let yaml = "guardrails:\n  pii:\n    email: redact\n    credit_card: redact\n    ssn: block\n";
    let r = g.mgmt("POST", "/v1/policies", Some(&g.key), Some(&json!({"name": "p", "enabled": true, "yaml": yaml})));
    assert_eq!(r.status, 201, "{}", r.text());

    // The input is redacted before it leaves, as a string or as input_text parts.
    let r = create(
        &g,
        &g.key,
        &json!({"model": "gpt-4o-mini", "input": [{"role": "user",
        "content": [{"type": "input_text", "text": "mail jane.doe@example.com"}]}]}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(up.requests().last().unwrap().json()["input"][0]["content"][0]["text"], "mail [REDACTED:EMAIL]");
    let checks = g.receipt_of(&r)["checks"].clone();
    assert!(checks.as_array().unwrap().iter().any(|c| c["name"] == "GUARDRAIL" && c["result"] == "REDACT"), "{checks}");

    // A card split across deltas never leaves in clear: not in the deltas, not in the events
    // that repeat the text whole, not in the final response.
    let (status, _, events) = stream(
        &g,
        &g.key,
        &json!({"model": "gpt-4o-mini", "stream": true, "input": "ECHO:pay with 4111 1111| 1111 1111 thanks"}),
    );
    assert_eq!(status, 200);
    let said: String = events
        .iter()
        .filter(|(n, _)| n == "response.output_text.delta")
        .map(|(_, v)| v["delta"].as_str().unwrap())
        .collect();
    assert_eq!(said, "pay with [REDACTED:CREDIT_CARD] thanks");
    let all = events.iter().map(|(_, v)| v.to_string()).collect::<String>();
    assert!(!all.contains("1111 1111"), "{all}");
    let (last, done) = events.last().unwrap();
    assert_eq!(last, "response.completed");
    assert_eq!(output_text(&done["response"]), said);
    let text_done = events.iter().find(|(n, _)| n == "response.output_text.done").unwrap();
    assert_eq!(text_done.1["text"], said.as_str());

    // A retrieved response is the model's answer again: the same guardrails apply.
    let id = events[0].1["response"]["id"].as_str().unwrap();
    let got = call(&g, &g.key, "GET", &format!("/v1/responses/{id}"));
    assert_eq!(got.status, 200);
    assert_eq!(output_text(&got.json()), "pay with [REDACTED:CREDIT_CARD] thanks");

    // A block mid-stream ends it with an `error` event the SDKs raise on.
    let (status, _, events) =
        stream(&g, &g.key, &json!({"model": "gpt-4o-mini", "stream": true, "input": "ECHO:ssn 078-05-|1120 ok"}));
    assert_eq!(status, 200);
    let (name, error) = events.last().unwrap();
    assert_eq!(name, "error");
    assert_eq!(error["type"], "error");
    assert_eq!(error["code"], "guardrail_blocked");
    assert_eq!(error["error"]["type"], "guardrail_blocked");
    assert!(!events.iter().any(|(n, _)| n == "response.completed"));
    assert!(!events.iter().map(|(_, v)| v.to_string()).collect::<String>().contains("1120"));

    // A token count sends text to the provider too: redacted likewise, and no receipt.
    let count = g.post_gw(
        "/v1/responses/input_tokens",
        &g.key,
        json!({"model": "gpt-4o-mini", "input": "ask bob@example.org"}).to_string().as_bytes(),
    );
    assert_eq!(count.status, 200, "{}", count.text());
    assert_eq!(up.requests().last().unwrap().json()["input"], "ask [REDACTED:EMAIL]");
    let blocked = g.post_gw(
        "/v1/responses/input_tokens",
        &g.key,
        json!({"model": "gpt-4o-mini", "input": "ssn 078-05-1120"}).to_string().as_bytes(),
    );
    assert_eq!(blocked.status, 400, "{}", blocked.text());
    assert_eq!(blocked.json()["error"]["type"], "guardrail_blocked");
}
