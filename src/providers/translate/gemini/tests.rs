//! Golden tests over tests/fixtures/translate/gemini/: adding a case is adding a file.
//! Rewrite the stream's golden chunks after a deliberate change with `TOLLGATE_BLESS=1` and
//! review the diff.

use std::fs;
use std::path::PathBuf;

use serde_json::{json, Value};

use super::parts::finish_reason;
use super::*;
use crate::providers::translate::ChunkTranslator;

const CREATED: i64 = 1_700_000_000;
const MODEL: &str = "vertex/gemini-2.5-flash";
const ID: &str = "chatcmpl-gem1";

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/translate/gemini").join(name)
}

fn load(name: &str) -> Value {
    let path = fixture(name);
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Each `.json` case of a fixture folder, by file name, in name order.
fn golden_pairs(folder: &str) -> Vec<(String, Value)> {
    let mut names: Vec<String> = fs::read_dir(fixture(folder))
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".json"))
        .collect();
    names.sort();
    assert!(!names.is_empty(), "no cases in {folder}");
    names.into_iter().map(|name| (name.clone(), load(&format!("{folder}/{name}")))).collect()
}

fn same(case: &str, got: &Value, want: &Value) {
    let show = |v: &Value| serde_json::to_string_pretty(v).unwrap();
    assert!(got == want, "{case}\n got: {}\nwant: {}", show(got), show(want));
}

#[test]
fn requests_translate_to_their_golden_gemini_body() {
    for (case, pair) in golden_pairs("request") {
        let got = to_gemini_request(&pair["openai"]).unwrap_or_else(|e| panic!("{case}: {e}"));
        same(&case, &got, &pair["gemini"]);
    }
}

#[test]
fn untranslatable_requests_are_refused_naming_the_field() {
    for case in load("refused.json").as_array().unwrap() {
        let want = case["error"].as_str().unwrap();
        let err = to_gemini_request(&case["openai"]).expect_err(want);
        assert_eq!(err.to_string(), want);
        assert_eq!(crate::error::ApiError::from(err).status(), 400);
    }
}

#[test]
fn a_body_that_is_not_an_object_is_refused() {
    assert_eq!(to_gemini_request(&json!([1])).unwrap_err().to_string(), "body: must be a JSON object");
}

#[test]
fn answers_translate_to_their_golden_completion() {
    for (case, pair) in golden_pairs("response") {
        let got = to_openai_completion(&pair["gemini"], MODEL, ID, CREATED).unwrap_or_else(|e| panic!("{case}: {e}"));
        same(&case, &got, &pair["openai"]);
    }
}

#[test]
fn an_answer_without_candidates_or_block_reason_is_an_error() {
    let err = to_openai_completion(&json!({ "usageMetadata": {} }), MODEL, ID, CREATED).unwrap_err();
    assert_eq!(err.field, "candidates");
    let nameless =
        json!({ "candidates": [{ "content": { "parts": [{ "text": "x" }, { "functionCall": { "args": {} } }] } }] });
    let err = to_openai_completion(&nameless, MODEL, ID, CREATED).unwrap_err();
    assert_eq!(err.field, "candidates[0].content.parts[1].functionCall.name");
}

#[test]
fn finish_reasons_map_to_openai_ones() {
    let cases = [
        ("STOP", false, "stop"),
        ("STOP", true, "tool_calls"),
        ("MAX_TOKENS", true, "length"),
        ("SAFETY", false, "content_filter"),
        ("RECITATION", false, "content_filter"),
        ("BLOCKLIST", false, "content_filter"),
        ("PROHIBITED_CONTENT", false, "content_filter"),
        ("SPII", false, "content_filter"),
        ("MALFORMED_FUNCTION_CALL", false, "stop"),
        ("OTHER", false, "stop"),
        ("SOMETHING_NEW", false, "stop"),
    ];
    for (gemini, called, openai) in cases {
        assert_eq!(finish_reason(gemini, called), openai, "{gemini}");
    }
}

#[test]
fn usage_of_reads_answers_stream_events_and_event_arrays() {
    let of = |v: &Value| usage_of(v).map(|u| (u.prompt_tokens, u.completion_tokens));
    let answer = &load("response/text.json")["gemini"];
    assert_eq!(of(answer), Some((12, 37)));
    let event = json!({ "candidates": [], "usageMetadata": { "promptTokenCount": 60, "candidatesTokenCount": 4 } });
    assert_eq!(of(&event), Some((60, 4)));
    let events = json!([event, { "usageMetadata": { "promptTokenCount": 60, "candidatesTokenCount": 9 } }, {}]);
    assert_eq!(of(&events), Some((60, 9)));
    assert_eq!(of(&json!({ "candidates": [] })), None);
    // The cached part of the prompt and the thinking part of the completion are told apart.
    let cached = json!({ "usageMetadata": { "promptTokenCount": 60, "cachedContentTokenCount": 50,
        "candidatesTokenCount": 4, "thoughtsTokenCount": 6 } });
    let u = usage_of(&cached).unwrap();
    assert_eq!((u.prompt_tokens, u.completion_tokens, u.cache_read_tokens, u.reasoning_tokens), (60, 10, 50, 6));
    assert_eq!(u.cache_write_tokens, 0);
}

#[test]
fn google_errors_become_openai_error_objects() {
    for case in load("errors.json").as_array().unwrap() {
        same(&case["gemini"].to_string(), &openai_error(&case["gemini"]), &case["openai"]);
    }
}

/// The `data:` payloads of an SSE text, in order.
fn sse_events(text: &str) -> Vec<Value> {
    text.lines().filter_map(|l| l.strip_prefix("data:")).map(|d| serde_json::from_str(d.trim()).unwrap()).collect()
}

/// Feeds every event, then ends the stream as the gateway does: the chunks of both.
fn run_stream(events: &[Value], include_usage: bool) -> (Vec<Value>, GeminiStreamTranslator) {
    let mut t = GeminiStreamTranslator::new(MODEL, ID, CREATED, include_usage);
    let mut chunks: Vec<Value> = events.iter().flat_map(|e| t.on_event(e)).collect();
    chunks.extend(t.finish());
    (chunks, t)
}

fn golden_stream() -> Vec<Value> {
    sse_events(&fs::read_to_string(fixture("stream/text_and_two_function_calls.sse")).unwrap())
}

#[test]
fn stream_with_two_function_calls_matches_its_golden_chunks() {
    let (chunks, t) = run_stream(&golden_stream(), true);
    assert!(t.is_done());
    let path = fixture("stream/text_and_two_function_calls.chunks.jsonl");
    if std::env::var_os("TOLLGATE_BLESS").is_some() {
        let lines: Vec<String> = chunks.iter().map(Value::to_string).collect();
        fs::write(&path, lines.join("\n") + "\n").unwrap();
    }
    let want: Vec<Value> =
        fs::read_to_string(&path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(chunks.len(), want.len(), "{chunks:#?}");
    for (i, (got, want)) in chunks.iter().zip(&want).enumerate() {
        same(&format!("chunk {i}"), got, want);
    }
}

/// The stream accumulated the way the openai SDK does (by tool-call `index`), so `cargo test`
/// alone checks that both calls come out whole.
#[test]
fn stream_with_two_function_calls_accumulates_to_both_calls() {
    let (chunks, _) = run_stream(&golden_stream(), false);
    let mut text = String::new();
    let mut calls: Vec<(String, String, String)> = Vec::new();
    let mut finish = Vec::new();
    for chunk in &chunks {
        assert!(chunk.get("usage").is_none(), "no usage unless asked: {chunk}");
        let choice = &chunk["choices"][0];
        text.push_str(choice["delta"]["content"].as_str().unwrap_or(""));
        for call in choice["delta"]["tool_calls"].as_array().into_iter().flatten() {
            assert_eq!(call["index"].as_u64(), Some(calls.len() as u64), "one chunk per call, in order");
            let field = |p: &str| call.pointer(p).and_then(Value::as_str).unwrap().to_string();
            calls.push((field("/id"), field("/function/name"), field("/function/arguments")));
        }
        finish.extend(choice["finish_reason"].as_str().map(str::to_string));
    }
    assert_eq!(text, "Checking both now.");
    assert_eq!(finish, ["tool_calls"]);
    let parsed: Vec<(&str, &str, Value)> = calls
        .iter()
        .map(|(id, name, args)| (id.as_str(), name.as_str(), serde_json::from_str(args).unwrap()))
        .collect();
    assert_eq!(
        parsed,
        [
            ("call_chatcmpl-gem1_0", "get_weather", json!({ "city": "Paris", "unit": "c" })),
            ("call_chatcmpl-gem1_1", "get_time", json!({ "tz": "Asia/Tokyo" })),
        ]
    );
}

#[test]
fn stream_usage_is_the_latest_events_and_comes_last() {
    let (chunks, t) = run_stream(&golden_stream(), true);
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    assert_eq!(last["usage"]["prompt_tokens"], 60);
    assert_eq!(last["usage"]["completion_tokens"], 65);
    assert_eq!(last["usage"]["completion_tokens_details"]["reasoning_tokens"], 40);
    assert_eq!(t.usage(), last["usage"]);
    assert!(chunks[..chunks.len() - 1].iter().all(|c| c["usage"].is_null()));
}

#[test]
fn stream_error_event_becomes_an_error_object_and_ends_the_stream() {
    let mut t = GeminiStreamTranslator::new(MODEL, ID, CREATED, true);
    t.on_event(&json!({ "candidates": [{ "content": { "parts": [{ "text": "Hel" }] } }] }));
    let out =
        t.on_event(&json!({ "error": { "code": 429, "message": "Quota exceeded.", "status": "RESOURCE_EXHAUSTED" } }));
    let want =
        json!({ "error": { "message": "Quota exceeded.", "type": "rate_limit_error", "param": null, "code": null } });
    assert_eq!(out, [want]);
    assert!(t.is_done());
    assert!(t.on_event(&json!({ "candidates": [{ "content": { "parts": [{ "text": "lo" }] } }] })).is_empty());
    assert!(t.finish().is_empty(), "no usage chunk after an error");
}

#[test]
fn a_stream_cut_before_its_finish_reason_ends_with_an_error() {
    let events = [json!({ "candidates": [{ "content": { "parts": [{ "text": "Hel" }] } }] })];
    let (chunks, t) = run_stream(&events, true);
    assert!(t.is_done());
    let last = chunks.last().unwrap();
    assert_eq!(last["error"]["type"], "api_error");
    assert_eq!(last["error"]["message"], "the Vertex AI stream ended before the answer was complete");
}

#[test]
fn a_blocked_prompt_streams_a_content_filter_finish() {
    let events = [json!({
        "promptFeedback": { "blockReason": "SAFETY" },
        "usageMetadata": { "promptTokenCount": 7, "totalTokenCount": 7 },
    })];
    let (chunks, _) = run_stream(&events, true);
    assert_eq!(chunks[0]["choices"][0]["delta"], json!({ "role": "assistant", "content": "" }));
    assert_eq!(chunks[1]["choices"][0]["finish_reason"], "content_filter");
    assert_eq!(chunks[2]["usage"]["prompt_tokens"], 7);
    assert_eq!(chunks.len(), 3);
}

#[test]
fn stream_finish_reasons_map_and_are_sent_once() {
    for (reason, want) in [("STOP", "stop"), ("MAX_TOKENS", "length"), ("SAFETY", "content_filter")] {
        let event = json!({ "candidates": [{ "content": { "parts": [{ "text": "" }] }, "finishReason": reason }] });
        let (chunks, _) = run_stream(&[event.clone(), event], false);
        let finishes: Vec<&Value> =
            chunks.iter().map(|c| &c["choices"][0]["finish_reason"]).filter(|f| !f.is_null()).collect();
        assert_eq!(finishes, [want], "{reason}");
    }
}

#[test]
fn a_nameless_streamed_function_call_ends_the_stream_with_an_error() {
    let event = json!({ "candidates": [{ "content": { "parts": [{ "functionCall": { "args": {} } }] } }] });
    let (chunks, t) = run_stream(&[event], false);
    assert!(t.is_done());
    assert_eq!(chunks.last().unwrap()["error"]["type"], "api_error");
}
