//! The AWS event-stream framing of Bedrock's `converse-stream` answers
//! (`application/vnd.amazon.eventstream`), read and written with `aws-smithy-eventstream`, the
//! AWS SDK's codec: it checks both CRC-32s of every frame and parses the typed headers.
//!
//! A frame is `total length (u32) · headers length (u32) · prelude CRC · headers · payload ·
//! message CRC`. [`Decoder`] turns each complete frame into one JSON value shaped like the
//! ConverseStream output union, so the usage reader and the translator see what the AWS SDKs
//! hand their users:
//!
//! - an `event` frame → `{"<:event-type>": <JSON payload>}`, e.g.
//!   `{"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": "Hi"}}}`;
//! - an `exception` frame → `{"<:exception-type>": <payload>}`, e.g.
//!   `{"throttlingException": {"message": "Too many requests"}}`;
//! - an `error` frame (headers only) → `{"<:error-code>…Exception": {"message": <:error-message>}}`,
//!   named so that one rule finds every failure: the key ends in `Exception` ([`exception_of`]).

use aws_smithy_eventstream::frame::{read_message_from, write_message_to};
use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
use serde_json::{json, Map, Value};

/// The largest frame AWS sends (aws-c-event-stream's `AWS_EVENT_STREAM_MAX_MESSAGE_SIZE`). A
/// prelude announcing more is corrupt: refusing it at once keeps a bad length from making the
/// decoder buffer without end.
pub const MAX_FRAME_LEN: usize = 16 * 1024 * 1024;
/// Prelude (12 bytes) plus the trailing message CRC (4): the smallest possible frame.
const MIN_FRAME_LEN: usize = 16;

/// Why the byte stream cannot be read further. After one, the stream is unusable: every later
/// [`Decoder::push`] returns the same error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("event-stream frame length {0} is out of range")]
    FrameLength(usize),
    #[error("invalid event-stream frame: {0}")]
    Frame(String),
    #[error("event-stream frame has no {0} header")]
    MissingHeader(&'static str),
    #[error("event-stream frame of unknown message type {0:?}")]
    MessageType(String),
    #[error("the {0} event's payload is not JSON")]
    Payload(String),
}

/// Why a stand-in frame could not be written (a header or payload past the format's limits).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot encode event-stream frame: {0}")]
pub struct EncodeError(String);

/// Reassembles frames from chunks of any size: a frame may span pushes, a push may hold
/// several frames.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: Vec<u8>,
    failed: Option<DecodeError>,
}

impl Decoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// The next bytes of the stream → the union value of every frame they complete, in order.
    /// A corrupt frame is an error at once (events decoded earlier in the same push are
    /// dropped with it: the answer is broken either way).
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<Value>, DecodeError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        self.buf.extend_from_slice(bytes);
        let mut events = Vec::new();
        let mut start = 0;
        loop {
            match next_frame(&self.buf[start..]) {
                Ok(Some((event, len))) => {
                    events.push(event);
                    start += len;
                }
                Ok(None) => break,
                Err(e) => {
                    self.buf = Vec::new();
                    self.failed = Some(e.clone());
                    return Err(e);
                }
            }
        }
        self.buf.drain(..start);
        Ok(events)
    }

    /// Bytes of a frame not yet complete: non-zero when the stream ends means it was cut.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }
}

/// The first frame of `bytes` and its length, or `None` while it is incomplete. The length is
/// read here only to know when the frame is whole; `read_message_from` then checks both CRCs.
fn next_frame(bytes: &[u8]) -> Result<Option<(Value, usize)>, DecodeError> {
    let Some(prefix) = bytes.first_chunk::<4>() else {
        return Ok(None);
    };
    let len = u32::from_be_bytes(*prefix) as usize;
    if !(MIN_FRAME_LEN..=MAX_FRAME_LEN).contains(&len) {
        return Err(DecodeError::FrameLength(len));
    }
    let Some(frame) = bytes.get(..len) else {
        return Ok(None);
    };
    let message = read_message_from(frame).map_err(|e| DecodeError::Frame(e.to_string()))?;
    Ok(Some((union_value(&message)?, len)))
}

/// One decoded frame → its union value (see the module documentation).
fn union_value(message: &Message) -> Result<Value, DecodeError> {
    let message_type = string_header(message, ":message-type").ok_or(DecodeError::MissingHeader(":message-type"))?;
    let (key, body) = match message_type {
        "event" => {
            let event_type = string_header(message, ":event-type").ok_or(DecodeError::MissingHeader(":event-type"))?;
            let payload = json_payload(message.payload()).ok_or_else(|| DecodeError::Payload(event_type.into()))?;
            (event_type.to_string(), payload)
        }
        "exception" => {
            let kind =
                string_header(message, ":exception-type").ok_or(DecodeError::MissingHeader(":exception-type"))?;
            // An exception's payload is `{"message": ...}`; anything else is kept as its text.
            let payload = json_payload(message.payload()).unwrap_or_else(|| text_message(message.payload()));
            (kind.to_string(), payload)
        }
        "error" => {
            let code = string_header(message, ":error-code").unwrap_or("InternalFailure");
            let text = string_header(message, ":error-message").unwrap_or("the event stream reported an error");
            (exception_key(code), json!({ "message": text }))
        }
        other => return Err(DecodeError::MessageType(other.to_string())),
    };
    let mut union = Map::new();
    union.insert(key, body);
    Ok(Value::Object(union))
}

/// An `error` frame's code (`InternalFailure`, `ThrottlingException`) as a union key in the
/// exceptions' spelling: lower camel case, ending in `Exception`.
fn exception_key(code: &str) -> String {
    let mut chars = code.chars();
    let mut key: String = match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => "internalFailure".into(),
    };
    if !key.ends_with("Exception") {
        key.push_str("Exception");
    }
    key
}

fn string_header<'m>(message: &'m Message, name: &str) -> Option<&'m str> {
    let header = message.headers().iter().find(|h| h.name().as_str() == name)?;
    match header.value() {
        HeaderValue::String(s) => Some(s.as_str()),
        _ => None,
    }
}

/// An empty payload reads as `{}` (an event with no members); otherwise it must be JSON.
fn json_payload(payload: &[u8]) -> Option<Value> {
    if payload.is_empty() {
        return Some(json!({}));
    }
    serde_json::from_slice(payload).ok()
}

fn text_message(payload: &[u8]) -> Value {
    json!({ "message": String::from_utf8_lossy(payload) })
}

/// A union value that reports a failure: its exception type and message. Every key ending in
/// `Exception` is one (Bedrock's `validationException`, `throttlingException`,
/// `modelStreamErrorException`, ..., and `error` frames as [`Decoder`] names them).
pub fn exception_of(event: &Value) -> Option<(&str, &str)> {
    let (key, body) = event.as_object()?.iter().find(|(k, _)| k.ends_with("Exception"))?;
    let message = body.get("message").or_else(|| body.get("Message")).and_then(Value::as_str).unwrap_or("");
    Some((key.as_str(), message))
}

/// A stand-in's `event` frame, as Bedrock writes it (`:event-type`, `:content-type`,
/// `:message-type` headers; the JSON payload).
pub fn encode_event(event_type: &str, payload: &Value) -> Result<Vec<u8>, EncodeError> {
    encode(&[(":event-type", event_type), (":content-type", "application/json"), (":message-type", "event")], payload)
}

/// A stand-in's `exception` frame: `exception_type` such as `throttlingException`, the
/// payload usually `{"message": "..."}`.
pub fn encode_exception(exception_type: &str, payload: &Value) -> Result<Vec<u8>, EncodeError> {
    encode(
        &[(":exception-type", exception_type), (":content-type", "application/json"), (":message-type", "exception")],
        payload,
    )
}

fn encode(headers: &[(&str, &str)], payload: &Value) -> Result<Vec<u8>, EncodeError> {
    let headers = headers
        .iter()
        .map(|(name, value)| Header::new(name.to_string(), HeaderValue::String(value.to_string().into())))
        .collect();
    let message = Message::new_from_parts(headers, payload.to_string().into_bytes());
    let mut out = Vec::new();
    write_message_to(&message, &mut out).map_err(|e| EncodeError(e.to_string()))?;
    Ok(out)
}

#[cfg(test)]
mod tests;
