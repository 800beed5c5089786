use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::*;
use crate::providers::usage::{fold_event, from_value, Dialect, Usage};

fn stream_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/translate/converse/stream")
}

/// The golden ConverseStream answer (text, then two tool calls whose deltas interleave, then
/// `metadata`), one union value a line.
fn golden_events() -> Vec<Value> {
    let text = std::fs::read_to_string(stream_dir().join("two_tool_calls.events.jsonl")).unwrap();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// The union value → the frame Bedrock sends for it.
fn frame_of(event: &Value) -> Vec<u8> {
    let (key, body) = event.as_object().unwrap().iter().next().unwrap();
    if key.ends_with("Exception") {
        encode_exception(key, body).unwrap()
    } else {
        encode_event(key, body).unwrap()
    }
}

fn golden_bytes() -> Vec<u8> {
    golden_events().iter().flat_map(frame_of).collect()
}

/// The committed binary stream is what `encode_event` writes for the golden events: a stand-in
/// (or tests/sdk/test_bedrock_eventstream.py, through botocore's decoder) can use the file.
/// `TOLLGATE_BLESS=1` rewrites it after a deliberate change.
#[test]
fn encoding_the_golden_events_gives_the_committed_frames() {
    let path = stream_dir().join("two_tool_calls.eventstream");
    let bytes = golden_bytes();
    if std::env::var_os("TOLLGATE_BLESS").is_some() {
        std::fs::write(&path, &bytes).unwrap();
    }
    assert_eq!(bytes, std::fs::read(&path).unwrap());
}

#[test]
fn round_trips_in_one_push() {
    let mut d = Decoder::new();
    assert_eq!(d.push(&golden_bytes()).unwrap(), golden_events());
    assert_eq!(d.pending(), 0);
}

#[test]
fn frames_split_at_every_byte_boundary_decode_the_same() {
    let bytes = golden_bytes();
    let want = golden_events();
    for cut in 0..=bytes.len() {
        let mut d = Decoder::new();
        let mut got = d.push(&bytes[..cut]).unwrap();
        got.extend(d.push(&bytes[cut..]).unwrap());
        assert_eq!(got, want, "cut at {cut}");
    }
    // And one byte at a time.
    let mut d = Decoder::new();
    let got: Vec<Value> = bytes.iter().flat_map(|b| d.push(std::slice::from_ref(b)).unwrap()).collect();
    assert_eq!(got, want);
}

#[test]
fn a_corrupt_message_crc_is_an_error_and_stays_one() {
    let mut bytes = encode_event("messageStop", &json!({ "stopReason": "end_turn" })).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    let mut d = Decoder::new();
    let err = d.push(&bytes).unwrap_err();
    assert!(matches!(err, DecodeError::Frame(ref m) if m.contains("checksum")), "{err}");
    assert_eq!(d.push(&frame_of(&json!({ "messageStart": { "role": "assistant" } }))), Err(err));
}

#[test]
fn a_corrupt_payload_byte_fails_the_message_crc() {
    let mut bytes = encode_event("messageStop", &json!({ "stopReason": "end_turn" })).unwrap();
    let mid = bytes.len() - 8;
    bytes[mid] ^= 0x20;
    assert!(matches!(Decoder::new().push(&bytes), Err(DecodeError::Frame(_))));
}

#[test]
fn a_corrupt_prelude_is_an_error_even_before_the_frame_is_whole() {
    // A length past the maximum is refused at once instead of buffered for.
    let mut d = Decoder::new();
    assert_eq!(d.push(&[0xff, 0xff, 0xff, 0xff, 0, 0]), Err(DecodeError::FrameLength(0xffff_ffff)));
    // A plausible length with a wrong prelude CRC is refused once the frame is whole.
    let mut bytes = encode_event("messageStart", &json!({ "role": "assistant" })).unwrap();
    bytes[9] ^= 0xff;
    assert!(matches!(Decoder::new().push(&bytes), Err(DecodeError::Frame(_))));
}

#[test]
fn exceptions_keep_their_type_and_message() {
    let bytes = encode_exception("throttlingException", &json!({ "message": "Too many tokens" })).unwrap();
    let events = Decoder::new().push(&bytes).unwrap();
    assert_eq!(events, vec![json!({ "throttlingException": { "message": "Too many tokens" } })]);
    assert_eq!(exception_of(&events[0]), Some(("throttlingException", "Too many tokens")));
    assert_eq!(exception_of(&json!({ "messageStop": { "stopReason": "end_turn" } })), None);
}

/// An `error` frame carries its code and message in headers and no payload.
#[test]
fn error_frames_read_as_exceptions() {
    let message = Message::new_from_parts(
        vec![
            Header::new(":message-type", HeaderValue::String("error".into())),
            Header::new(":error-code", HeaderValue::String("InternalFailure".into())),
            Header::new(":error-message", HeaderValue::String("boom".into())),
        ],
        Vec::new(),
    );
    let mut bytes = Vec::new();
    write_message_to(&message, &mut bytes).unwrap();
    let events = Decoder::new().push(&bytes).unwrap();
    assert_eq!(events, vec![json!({ "internalFailureException": { "message": "boom" } })]);
    assert_eq!(exception_key("ThrottlingException"), "throttlingException");
}

#[test]
fn frames_that_are_not_the_union_are_errors() {
    let no_type = Message::new_from_parts(vec![], b"{}".to_vec());
    let mut bytes = Vec::new();
    write_message_to(&no_type, &mut bytes).unwrap();
    assert_eq!(Decoder::new().push(&bytes), Err(DecodeError::MissingHeader(":message-type")));
    let mut bad_json = encode_event("contentBlockDelta", &json!({})).unwrap();
    // Re-encode with a payload that is not JSON.
    let message = Message::new_from_parts(
        vec![
            Header::new(":message-type", HeaderValue::String("event".into())),
            Header::new(":event-type", HeaderValue::String("contentBlockDelta".into())),
        ],
        b"not json".to_vec(),
    );
    bad_json.clear();
    write_message_to(&message, &mut bad_json).unwrap();
    assert_eq!(Decoder::new().push(&bad_json), Err(DecodeError::Payload("contentBlockDelta".into())));
}

#[test]
fn usage_comes_from_the_metadata_event_and_the_converse_body() {
    let events = golden_events();
    // As the gateway reads it: `metadata` events folded, whole answers by `from_value`.
    let of = |u: Usage| (u.prompt_tokens, u.completion_tokens);
    let usage: Vec<(u64, u64)> = events
        .iter()
        .filter_map(|e| {
            let mut acc = None;
            fold_event(Dialect::Converse, e, &mut acc);
            acc.map(of)
        })
        .collect();
    assert_eq!(usage, vec![(492, 89)]);
    let body = json!({ "output": {}, "usage": { "inputTokens": 10, "outputTokens": 3, "totalTokens": 13 } });
    assert_eq!(from_value(Dialect::Converse, &body).map(of), Some((10, 3)));
    assert_eq!(from_value(Dialect::Converse, &json!({ "output": {} })), None);
}
