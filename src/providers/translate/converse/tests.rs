//! Golden tests over tests/fixtures/translate/converse/: adding a case is adding a file.
//! `stream/two_tool_calls.chunks.jsonl` is also what tests/sdk/test_translate_converse_stream.py
//! feeds to the openai SDK's stream accumulator, and `stream/two_tool_calls.eventstream` (the
//! same events as real frames) what tests/sdk/test_bedrock_eventstream.py decodes with botocore.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::*;
use crate::providers::eventstream::{encode_exception, Decoder};

const CREATED: i64 = 1_700_000_000;
const MODEL: &str = "bedrock/anthropic.claude-3-haiku-20240307-v1:0";
const ID: &str = "chatcmpl-test";

fn fixtures(dir: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/translate/converse").join(dir)
}

fn load(path: &Path) -> Value {
    let parsed = fs::read_to_string(path)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()));
    parsed.unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `.json` cases of `dir`, in name order, each with its path for the failure message.
fn cases(dir: &str) -> Vec<(String, Value)> {
    let mut paths: Vec<PathBuf> = fs::read_dir(fixtures(dir)).unwrap().filter_map(|e| Some(e.ok()?.path())).collect();
    paths.retain(|p| p.extension() == Some("json".as_ref()));
    paths.sort();
    assert!(!paths.is_empty(), "no fixtures in {dir}");
    paths.iter().map(|p| (p.display().to_string(), load(p))).collect()
}

fn assert_golden(name: &str, got: &Value, want: &Value) {
    let show = |v: &Value| serde_json::to_string_pretty(v).unwrap();
    assert_eq!(got, want, "{name}\n got: {}\nwant: {}", show(got), show(want));
}

/// Every case of `dir`: `translate(case[from])` must equal `case[to]`.
fn check_goldens(dir: &str, from: &str, to: &str, translate: impl Fn(&Value) -> Result<Value, TranslateError>) {
    for (name, case) in cases(dir) {
        match translate(&case[from]) {
            Ok(got) => assert_golden(&name, &got, &case[to]),
            Err(e) => panic!("{name}: {e}"),
        }
    }
}

#[test]
fn requests_and_answers_translate_to_their_goldens() {
    check_goldens("request", "openai", "converse", to_converse_request);
    check_goldens("response", "converse", "openai", |c| to_openai_completion(c, MODEL, ID, CREATED));
}

/// Each refusal is the client's 400, worded with the field to change.
#[test]
fn untranslatable_requests_are_refused_naming_the_field() {
    for case in load(&fixtures("refused.json")).as_array().unwrap() {
        let want = case["error"].as_str().unwrap();
        let err = to_converse_request(&case["openai"]).map(|_| ()).unwrap_err();
        assert_eq!((err.to_string().as_str(), crate::error::ApiError::from(err).status()), (want, 400));
    }
}

#[test]
fn malformed_answers_are_errors_naming_the_field() {
    let err = to_openai_completion(&json!({ "output": {} }), MODEL, ID, CREATED).unwrap_err();
    assert_eq!(err.to_string(), "output.message.content: the Bedrock answer has no content array");
    let answer = json!({ "output": { "message": { "content": [{ "toolUse": { "name": "f", "input": {} } }] } } });
    let err = to_openai_completion(&answer, MODEL, ID, CREATED).unwrap_err();
    assert_eq!(err.to_string(), "output.message.content[0].toolUse.toolUseId: must be a string");
}

/// One JSON value a line.
fn read_jsonl(path: &Path) -> Vec<Value> {
    fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn golden_events() -> Vec<Value> {
    read_jsonl(&fixtures("stream").join("two_tool_calls.events.jsonl"))
}

fn translate(events: &[Value], include_usage: bool) -> (Vec<Value>, ConverseStreamTranslator) {
    let mut t = ConverseStreamTranslator::new(MODEL, ID, CREATED, include_usage);
    let chunks = events.iter().flat_map(|e| t.on_event(e)).collect();
    (chunks, t)
}

/// The golden stream decoded from its real frames (as the gateway will read it) and
/// translated, chunk for chunk.
#[test]
fn stream_with_two_tool_calls_matches_its_golden_chunks() {
    let frames = fs::read(fixtures("stream").join("two_tool_calls.eventstream")).unwrap();
    let events = Decoder::new().push(&frames).unwrap();
    let (chunks, t) = translate(&events, true);
    assert!(t.is_done());
    let path = fixtures("stream").join("two_tool_calls.chunks.jsonl");
    if std::env::var_os("TOLLGATE_BLESS").is_some() {
        // Rewrites the golden file after a deliberate change; review the diff before committing.
        fs::write(&path, chunks.iter().map(|c| format!("{c}\n")).collect::<String>()).unwrap();
    }
    assert_golden("two_tool_calls.chunks.jsonl", &Value::from(chunks), &Value::from(read_jsonl(&path)));
}

/// What the openai SDK's accumulator makes of `chunks` (keyed by tool-call `index`): the text,
/// each call's (id, name, arguments), the last finish reason.
fn accumulate(chunks: &[Value]) -> (String, BTreeMap<u64, (Value, Value, String)>, Value) {
    let mut acc = (String::new(), BTreeMap::new(), Value::Null);
    for choice in chunks.iter().filter_map(|c| c["choices"].get(0)) {
        acc.0 += choice["delta"]["content"].as_str().unwrap_or("");
        for call in choice["delta"]["tool_calls"].as_array().into_iter().flatten() {
            let entry = acc.1.entry(call["index"].as_u64().unwrap());
            let slot = entry.or_insert_with(|| (call["id"].clone(), call["function"]["name"].clone(), String::new()));
            slot.2 += call["function"]["arguments"].as_str().unwrap_or("");
        }
        if !choice["finish_reason"].is_null() {
            acc.2 = choice["finish_reason"].clone();
        }
    }
    acc
}

/// The interleaved argument deltas land on the right call.
#[test]
fn stream_with_two_interleaved_tool_calls_accumulates_to_both_calls() {
    let (chunks, _) = translate(&golden_events(), false);
    assert!(chunks.iter().all(|c| c.get("usage").is_none()), "no usage chunk unless asked");
    assert!(chunks.iter().all(|c| c["id"] == ID && c["model"] == MODEL));
    let (text, calls, finish) = accumulate(&chunks);
    assert_eq!((text.as_str(), finish), ("Checking both now.", json!("tool_calls")));
    let calls: Vec<Value> = calls
        .into_values()
        .map(|(id, name, args)| json!([id, name, serde_json::from_str::<Value>(&args).unwrap()]))
        .collect();
    assert_eq!(
        calls,
        [
            json!(["tooluse_A1", "get_weather", { "city": "Paris", "unit": "c" }]),
            json!(["tooluse_B2", "get_time", { "tz": "Asia/Tokyo" }]),
        ]
    );
}

#[test]
fn the_usage_chunk_comes_from_metadata_and_ends_the_stream() {
    let (chunks, t) = translate(&golden_events(), true);
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    assert_eq!(
        last["usage"],
        json!({ "prompt_tokens": 492, "completion_tokens": 89, "total_tokens": 581,
                "prompt_tokens_details": { "cached_tokens": 12 } })
    );
    assert!(t.is_done());
}

#[test]
fn a_stream_cut_before_metadata_owes_nothing_and_is_not_done() {
    let events = golden_events();
    let (chunks, mut t) = translate(&events[..events.len() - 1], true);
    assert_eq!(chunks.last().unwrap()["choices"][0]["finish_reason"], "tool_calls");
    assert!(!t.is_done());
    assert_eq!(ChunkTranslator::finish(&mut t), Vec::<Value>::new());
}

/// An exception frame mid-answer, decoded from real bytes, becomes the OpenAI error object and
/// ends the stream; later events are ignored.
#[test]
fn stream_exception_becomes_an_error_object_and_ends_the_stream() {
    let mut t = ConverseStreamTranslator::new(MODEL, ID, CREATED, true);
    t.on_event(&json!({ "messageStart": { "role": "assistant" } }));
    let frame = encode_exception("throttlingException", &json!({ "message": "Too many tokens" })).unwrap();
    let events = Decoder::new().push(&frame).unwrap();
    let out = t.on_event(&events[0]);
    let want = json!({ "error": { "message": "Too many tokens", "type": "throttlingException", "param": null, "code": null } });
    assert_eq!(out, vec![want]);
    assert!(t.is_done());
    assert!(t.on_event(&json!({ "metadata": { "usage": { "inputTokens": 1, "outputTokens": 1 } } })).is_empty());
}

#[test]
fn stream_stop_reasons_map_to_finish_reasons() {
    for (stop, finish) in [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("tool_use", "tool_calls"),
        ("guardrail_intervened", "content_filter"),
        ("content_filtered", "content_filter"),
    ] {
        let mut t = ConverseStreamTranslator::new(MODEL, ID, CREATED, false);
        let out = t.on_event(&json!({ "messageStop": { "stopReason": stop } }));
        assert_eq!(out[0]["choices"][0]["finish_reason"], finish, "{stop}");
    }
}

#[test]
fn bedrock_error_answers_become_openai_error_objects() {
    let error = |kind: &str, message: &str| json!({ "error": { "message": message, "type": kind, "param": null, "code": null } });
    let header = Some("ValidationException:http://internal.amazon.com/coral/com.amazon.bedrock/");
    assert_eq!(openai_error(header, &json!({ "message": "bad" })), error("ValidationException", "bad"));
    let body = json!({ "__type": "com.amazon.coral#ThrottlingException", "Message": "slow down" });
    assert_eq!(openai_error(None, &body), error("ThrottlingException", "slow down"));
    assert_eq!(openai_error(None, &json!("x")), error("api_error", "the Bedrock upstream answered an error"));
}
