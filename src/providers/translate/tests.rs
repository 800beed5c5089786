//! Golden tests over tests/fixtures/translate/: adding a case is adding a file.
//! `stream/*.chunks.jsonl` is also what tests/sdk/test_translate_stream.py feeds to the openai
//! SDK's stream accumulator, so these bytes are checked from both sides.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::*;

const CREATED: i64 = 1_700_000_000;

fn fixtures(dir: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/translate").join(dir)
}

fn read_json(path: &Path) -> Value {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every `.json` file of `dir`, sorted, with its name for the failure message.
fn cases(dir: &str) -> Vec<(String, Value)> {
    let mut paths: Vec<PathBuf> = fs::read_dir(fixtures(dir)).unwrap().map(|e| e.unwrap().path()).collect();
    paths.retain(|p| p.extension().is_some_and(|e| e == "json"));
    paths.sort();
    assert!(!paths.is_empty(), "no fixtures in {dir}");
    paths.into_iter().map(|p| (p.display().to_string(), read_json(&p))).collect()
}

fn assert_golden(name: &str, got: &Value, want: &Value) {
    assert_eq!(got, want, "{name}\n got: {}\nwant: {}", pretty(got), pretty(want));
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap()
}

#[test]
fn requests_translate_to_their_golden_anthropic_body() {
    for (name, case) in cases("request") {
        let got = to_anthropic_request(&case["openai"]).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_golden(&name, &got, &case["anthropic"]);
    }
}

#[test]
fn untranslatable_requests_are_refused_naming_the_field() {
    let cases = read_json(&fixtures("refused.json"));
    for case in cases.as_array().unwrap() {
        let err = to_anthropic_request(&case["openai"]).expect_err(&case["error"].to_string());
        assert_eq!(err.to_string(), case["error"].as_str().unwrap());
        // The gateway answers it as the client's 400.
        assert_eq!(crate::error::ApiError::from(err).status(), 400);
    }
}

#[test]
fn responses_translate_to_their_golden_completion() {
    for (name, case) in cases("response") {
        let got = to_openai_completion(&case["anthropic"], CREATED).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_golden(&name, &got, &case["openai"]);
    }
}

#[test]
fn include_usage_reads_stream_options() {
    assert!(include_usage(&json!({ "stream_options": { "include_usage": true } })));
    assert!(!include_usage(&json!({ "stream": true })));
}

#[test]
fn anthropic_errors_become_openai_error_objects() {
    let anthropic = json!({ "type": "error", "error": { "type": "overloaded_error", "message": "Overloaded" } });
    let want = json!({ "error": { "message": "Overloaded", "type": "overloaded_error", "param": null, "code": null } });
    assert_eq!(openai_error(&anthropic), want);
}

/// The `data:` payloads of an SSE text, in order.
fn sse_events(text: &str) -> Vec<Value> {
    text.lines().filter_map(|l| l.strip_prefix("data:")).map(|d| serde_json::from_str(d.trim()).unwrap()).collect()
}

fn translate_stream(sse: &str, include_usage: bool) -> (Vec<Value>, StreamTranslator) {
    let mut t = StreamTranslator::new(CREATED, include_usage);
    let chunks = sse_events(sse).iter().flat_map(|e| t.on_event(e)).collect();
    (chunks, t)
}

#[test]
fn stream_with_two_tool_calls_matches_its_golden_chunks() {
    let sse = fs::read_to_string(fixtures("stream").join("two_tool_calls.sse")).unwrap();
    let (chunks, t) = translate_stream(&sse, true);
    assert!(t.is_done());
    let path = fixtures("stream").join("two_tool_calls.chunks.jsonl");
    if std::env::var_os("TOLLGATE_BLESS").is_some() {
        // Rewrites the golden file after a deliberate change; review the diff before committing.
        let lines: Vec<String> = chunks.iter().map(Value::to_string).collect();
        fs::write(&path, lines.join("\n") + "\n").unwrap();
    }
    let golden = fs::read_to_string(&path).unwrap();
    let want: Vec<Value> = golden.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(chunks.len(), want.len(), "{}", chunks.iter().map(pretty).collect::<Vec<_>>().join("\n"));
    for (i, (got, want)) in chunks.iter().zip(&want).enumerate() {
        assert_golden(&format!("chunk {i}"), got, want);
    }
}

/// The same stream accumulated the way the openai SDK does (by tool-call `index`), in Rust, so
/// `cargo test` alone checks the result even where Python is not installed.
#[test]
fn stream_with_two_tool_calls_accumulates_to_both_calls() {
    let sse = fs::read_to_string(fixtures("stream").join("two_tool_calls.sse")).unwrap();
    let (chunks, _) = translate_stream(&sse, false);
    let mut text = String::new();
    let mut calls: Vec<(String, String, String)> = Vec::new();
    let mut finish = Value::Null;
    for chunk in &chunks {
        assert!(chunk.get("usage").is_none(), "no usage chunk unless asked");
        let choice = &chunk["choices"][0];
        text.push_str(choice["delta"]["content"].as_str().unwrap_or(""));
        for call in choice["delta"]["tool_calls"].as_array().into_iter().flatten() {
            let index = call["index"].as_u64().unwrap() as usize;
            if index == calls.len() {
                calls.push((
                    call["id"].as_str().unwrap().into(),
                    call["function"]["name"].as_str().unwrap().into(),
                    String::new(),
                ));
            }
            calls[index].2.push_str(call["function"]["arguments"].as_str().unwrap_or(""));
        }
        if !choice["finish_reason"].is_null() {
            finish = choice["finish_reason"].clone();
        }
    }
    assert_eq!(text, "Checking both now.");
    assert_eq!(finish, "tool_calls");
    let parsed: Vec<(&str, &str, Value)> = calls
        .iter()
        .map(|(id, name, args)| (id.as_str(), name.as_str(), serde_json::from_str(args).unwrap()))
        .collect();
    assert_eq!(
        parsed,
        vec![
            ("toolu_01A", "get_weather", json!({ "city": "Paris", "unit": "c" })),
            ("toolu_01B", "get_time", json!({ "tz": "Asia/Tokyo" })),
        ]
    );
}

#[test]
fn stream_error_event_becomes_an_error_object_and_ends_the_stream() {
    let mut t = StreamTranslator::new(CREATED, false);
    t.on_event(&json!({ "type": "message_start", "message": { "id": "m", "model": "c", "usage": {} } }));
    let out = t.on_event(&json!({ "type": "error", "error": { "type": "overloaded_error", "message": "Overloaded" } }));
    assert_eq!(
        out,
        vec![json!({ "error": { "message": "Overloaded", "type": "overloaded_error", "param": null, "code": null } })]
    );
    assert!(t.is_done());
}

#[test]
fn stream_stop_reasons_map_to_finish_reasons() {
    for (stop, finish) in
        [("end_turn", "stop"), ("stop_sequence", "stop"), ("max_tokens", "length"), ("tool_use", "tool_calls")]
    {
        let mut t = StreamTranslator::new(CREATED, false);
        let out = t.on_event(
            &json!({ "type": "message_delta", "delta": { "stop_reason": stop }, "usage": { "output_tokens": 1 } }),
        );
        assert_eq!(out[0]["choices"][0]["finish_reason"], finish, "{stop}");
    }
}

/// OpenAI has no member for cache writes: the translated usage repeats them as
/// `cache_creation_input_tokens`, so the gateway (which reads a translated stream's usage from
/// the OpenAI chunk) still prices them as writes. Without writes the usage has no such member.
#[test]
fn cache_writes_are_kept_through_the_translated_usage() {
    let mut t = StreamTranslator::new(CREATED, true);
    t.on_event(&json!({ "type": "message_start", "message": { "id": "m", "model": "c", "usage": {
        "input_tokens": 4, "cache_creation_input_tokens": 1000, "cache_read_input_tokens": 3000, "output_tokens": 1 } } }));
    t.on_event(
        &json!({ "type": "message_delta", "delta": { "stop_reason": "end_turn" }, "usage": { "output_tokens": 9 } }),
    );
    let chunk = t.on_event(&json!({ "type": "message_stop" })).pop().unwrap();
    assert_eq!(
        chunk["usage"],
        json!({ "prompt_tokens": 4004, "completion_tokens": 9, "total_tokens": 4013,
                "prompt_tokens_details": { "cached_tokens": 3000 }, "cache_creation_input_tokens": 1000 })
    );
    let mut read = None;
    crate::providers::usage::fold_event(crate::providers::Dialect::OpenAi, &chunk, &mut read);
    let read = read.unwrap();
    assert_eq!(
        (read.prompt_tokens, read.completion_tokens, read.cache_read_tokens, read.cache_write_tokens),
        (4004, 9, 3000, 1000)
    );
}

#[test]
fn stream_usage_option() {
    let mut b = json!({"model": "m", "stream": true});
    assert!(ensure_stream_usage(&mut b));
    assert_eq!(b["stream_options"]["include_usage"], true);
    assert!(!ensure_stream_usage(&mut b), "already on");
    let mut b = json!({"stream_options": {"include_usage": false, "x": 1}});
    assert!(ensure_stream_usage(&mut b));
    assert_eq!(b["stream_options"]["x"], 1);
}
