//! The upstream leg's answer: relay it to the client, read usage, and let the answer-side checks
//! see it (response guardrails) when one asked to. The relay never ends an answer: it hands
//! back the [`Ending`] (the answer's last bytes, or the whole of it) for the gateway to send once
//! the receipt is committed.

use bytes::{Bytes, BytesMut};
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use serde_json::Value;

use super::ending::Ending;
use super::sse::{event_data, SseSplitter};
use crate::error::{ApiError, ErrorKind, Flavor};
use crate::guardrails::{event_text, set_event_text};
use crate::pipeline::{Cached, Ctx, JsonBody, Pipeline, ResponsePiece};
use crate::providers::usage::{self, Dialect, Usage};
use crate::receipts::{CheckResult, UpstreamStatus};
use crate::upstream::{UpstreamError, UpstreamResponse};

/// How the upstream leg ended, for metrics and the receipt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UpstreamOutcome {
    /// No upstream call was made (a check or an error answered first).
    #[default]
    Skipped,
    /// The provider answered 2xx and the whole answer was relayed.
    Pass,
    /// The provider answered an error status, or the connection failed.
    Fail,
    Timeout,
}

impl UpstreamOutcome {
    pub fn from_error(e: &UpstreamError) -> Self {
        match e {
            UpstreamError::Timeout(_) => UpstreamOutcome::Timeout,
            UpstreamError::Failed(_) => UpstreamOutcome::Fail,
        }
    }

    /// The receipt's `upstreamStatus`.
    pub fn status(self) -> UpstreamStatus {
        match self {
            UpstreamOutcome::Skipped => UpstreamStatus::Skipped,
            UpstreamOutcome::Pass => UpstreamStatus::Ok,
            UpstreamOutcome::Fail => UpstreamStatus::Error,
            UpstreamOutcome::Timeout => UpstreamStatus::Timeout,
        }
    }
}

/// What the relay learnt on the way, and how the answer is to end.
pub struct Relayed {
    pub status: u16,
    pub usage: Option<Usage>,
    pub outcome: UpstreamOutcome,
    /// The answer as the client gets it, when it was asked for (cache) and complete.
    pub captured: Option<Cached>,
    pub ending: Ending,
}

/// How the answer is to be relayed.
pub struct RelayPlan<'a> {
    pub dialect: Dialect,
    pub flavor: Flavor,
    /// The provider's name, for error messages.
    pub provider: &'static str,
    /// Drop OpenAI's usage-only chunk the gateway asked for on the client's behalf.
    pub hide_usage_chunk: bool,
    /// Headers every answer carries (request and receipt ids, rate-limit state).
    pub headers: &'a [(&'static str, String)],
    pub pipeline: &'a Pipeline,
    pub cx: &'a mut Ctx,
    /// Keep a copy of the answer up to this size (for the cache).
    pub capture_limit: Option<usize>,
}

/// Non-streamed answers are held whole up to this size: their last byte waits for the receipt,
/// their usage is read from them, and answer-side checks see them before they leave. Larger
/// ones (big embedding batches) are relayed as they come and only their last chunk waits.
const WHOLE_BODY_CAP: usize = 16 << 20;
/// How much of a provider's error answer is read for its message.
const ERROR_BODY_CAP: usize = 64 << 10;

/// Response headers that describe the upstream hop, not the answer.
const HOP_HEADERS: &[&str] =
    &["connection", "keep-alive", "transfer-encoding", "content-length", "set-cookie", "alt-svc", "proxy-connection"];

fn answer_header(
    resp: &UpstreamResponse<'_>,
    status: u16,
    plan_headers: &[(&'static str, String)],
) -> Option<ResponseHeader> {
    let mut header = ResponseHeader::build(status, Some(resp.header().headers.len() + plan_headers.len() + 1)).ok()?;
    for (name, value) in resp.header().headers.iter() {
        if !HOP_HEADERS.contains(&name.as_str()) {
            let _ = header.append_header(name.clone(), value.clone());
        }
    }
    for (k, v) in plan_headers {
        let _ = header.insert_header(*k, v.as_str());
    }
    Some(header)
}

fn content_type(resp: &UpstreamResponse<'_>) -> String {
    resp.header().headers.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_string()
}

pub async fn relay(session: &mut Session, resp: UpstreamResponse<'_>, plan: RelayPlan<'_>) -> Relayed {
    if !resp.header().status.is_success() {
        return relay_refusal(resp, plan).await;
    }
    if content_type(&resp).starts_with("text/event-stream") {
        relay_events(session, resp, plan).await
    } else {
        relay_body(session, resp, plan).await
    }
}

/// A provider's error answer, in the gateway's envelope: a 5xx becomes 502 `upstream_error`, a
/// 4xx keeps its status (and `Retry-After`); the provider's status and message are in `message`.
async fn relay_refusal(mut resp: UpstreamResponse<'_>, plan: RelayPlan<'_>) -> Relayed {
    let status = resp.header().status.as_u16();
    let retry_after: Vec<(&'static str, String)> = ["retry-after", "retry-after-ms"]
        .into_iter()
        .filter_map(|h| Some((h, resp.header().headers.get(h)?.to_str().ok()?.to_string())))
        .collect();
    let body = resp.read_all(ERROR_BODY_CAP).await.unwrap_or_default();
    resp.release().await;
    let said = provider_message(&body);
    let kind = if status >= 500 { ErrorKind::UpstreamError } else { ErrorKind::ProviderRefused(status) };
    let message = match said {
        Some(m) => format!("{} answered {status}: {m}", plan.provider),
        None => format!("{} answered {status}", plan.provider),
    };
    let e = ApiError::new(kind, message).with_headers(retry_after);
    Relayed {
        status: e.status(),
        usage: None,
        outcome: UpstreamOutcome::Fail,
        captured: None,
        ending: Ending::error(&e, plan.flavor, plan.headers.to_vec()),
    }
}

/// The message of a provider's error body (`error.message` in OpenAI's and Anthropic's
/// envelopes, or a top-level `message`), else its first 500 characters of text.
fn provider_message(body: &[u8]) -> Option<String> {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        let m = v.pointer("/error/message").or_else(|| v.get("message")).and_then(Value::as_str);
        if let Some(m) = m {
            return Some(m.chars().take(500).collect());
        }
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    (!text.is_empty()).then(|| text.chars().take(500).collect())
}

/// A non-streamed answer: held whole (it is small), checked, and handed back as the ending.
async fn relay_body(session: &mut Session, mut resp: UpstreamResponse<'_>, plan: RelayPlan<'_>) -> Relayed {
    let status = resp.header().status.as_u16();
    let mut out =
        Relayed { status, usage: None, outcome: UpstreamOutcome::Fail, captured: None, ending: Ending::Abort };
    let mut kept: Vec<Bytes> = Vec::new();
    let mut kept_len = 0usize;
    loop {
        match resp.next_chunk().await {
            Ok(Some(c)) if kept_len + c.len() <= WHOLE_BODY_CAP => {
                kept_len += c.len();
                kept.push(c);
            }
            Ok(Some(c)) => {
                kept.push(c);
                return relay_large_body(session, resp, plan, kept, out).await;
            }
            Ok(None) => break,
            Err(e) => {
                out.outcome = UpstreamOutcome::from_error(&e);
                log::warn!("upstream answer could not be read whole: {e}");
                let err = ApiError::new(ErrorKind::UpstreamError, format!("{}'s answer broke off", plan.provider));
                out.status = err.status();
                out.ending = Ending::error(&err, plan.flavor, plan.headers.to_vec());
                return out;
            }
        }
    }
    let body = match kept.len() {
        1 => kept.pop().unwrap_or_default(),
        _ => Bytes::from(kept.concat()),
    };
    out.outcome = UpstreamOutcome::Pass;
    out.usage = usage::from_json_bytes(plan.dialect, &body);
    let mut sent = body;
    if plan.cx.scan_answer {
        // Checks read the bytes; a JSON tree is built only if one of them needs it (to redact).
        let mut answer = JsonBody::lazy(sent.clone());
        match plan.pipeline.on_response(&mut ResponsePiece::Json(&mut answer), plan.cx) {
            Ok(()) => {
                if let Some(v) =
                    answer.built().filter(|_| plan.cx.response_checks.iter().any(|c| c.result == CheckResult::Redact))
                {
                    sent = serde_json::to_vec(v).map(Bytes::from).unwrap_or(sent);
                }
            }
            Err(e) => {
                out.status = e.status();
                out.ending = Ending::error(&e, plan.flavor, plan.headers.to_vec());
                resp.release().await;
                return out;
            }
        }
    }
    let Some(mut header) = answer_header(&resp, status, plan.headers) else { return out };
    let _ = header.insert_header(http::header::CONTENT_LENGTH, sent.len().to_string());
    if plan.capture_limit.is_some_and(|l| sent.len() <= l) {
        let content_type = content_type(&resp);
        out.captured =
            Some(Cached { status, content_type, body: sent.clone(), usage: Usage::default(), cost_usd: 0.0 });
    }
    resp.release().await;
    out.ending = Ending::Whole(Box::new(header), sent);
    out
}

/// A non-streamed answer over [`WHOLE_BODY_CAP`]: relayed as it comes, its last chunk held back.
/// Its usage is not read (no provider reports usage in answers this size) and it is not cached.
async fn relay_large_body(
    session: &mut Session,
    mut resp: UpstreamResponse<'_>,
    plan: RelayPlan<'_>,
    kept: Vec<Bytes>,
    mut out: Relayed,
) -> Relayed {
    let upstream_len = resp.header().headers.get(http::header::CONTENT_LENGTH).cloned();
    let Some(mut header) = answer_header(&resp, out.status, plan.headers) else { return out };
    match upstream_len {
        Some(len) => {
            let _ = header.insert_header(http::header::CONTENT_LENGTH, len);
        }
        None if !session.is_http2() => {
            let _ = header.insert_header(http::header::TRANSFER_ENCODING, "chunked");
        }
        None => {}
    }
    if session.write_response_header(Box::new(header), false).await.is_err() {
        out.ending = Ending::Gone;
        return out;
    }
    let mut held: Option<Bytes> = None;
    let mut pending = kept.into_iter();
    loop {
        let chunk = match pending.next() {
            Some(c) => c,
            None => match resp.next_chunk().await {
                Ok(Some(c)) => c,
                Ok(None) => break,
                Err(e) => {
                    out.outcome = UpstreamOutcome::from_error(&e);
                    log::warn!("upstream broke off mid-answer: {e}");
                    return out;
                }
            },
        };
        if let Some(previous) = held.replace(chunk) {
            if session.write_response_body(Some(previous), false).await.is_err() {
                out.ending = Ending::Gone;
                return out;
            }
        }
    }
    out.outcome = UpstreamOutcome::Pass;
    resp.release().await;
    out.ending = Ending::Tail { bytes: held, stream: None };
    out
}

/// A streamed answer (SSE): events go out as they arrive, scanned when a check asked to; the
/// stream's closing event is held back as the ending.
async fn relay_events(session: &mut Session, mut resp: UpstreamResponse<'_>, plan: RelayPlan<'_>) -> Relayed {
    let status = resp.header().status.as_u16();
    let stream = Some((plan.dialect, plan.flavor));
    let mut out =
        Relayed { status, usage: None, outcome: UpstreamOutcome::Fail, captured: None, ending: Ending::Abort };
    let Some(mut header) = answer_header(&resp, status, plan.headers) else { return out };
    if !session.is_http2() {
        let _ = header.insert_header(http::header::TRANSFER_ENCODING, "chunked");
    }
    if session.write_response_header(Box::new(header), false).await.is_err() {
        out.ending = Ending::Gone;
        return out;
    }
    let content_type = content_type(&resp);
    let mut scanner =
        plan.cx.scan_answer.then_some(EventScanner { pipeline: plan.pipeline, template: None, blocked: None });
    let mut capture = plan.capture_limit.map(|_| BytesMut::new());
    let mut sse = SseSplitter::default();
    // The closing events ([DONE], message_stop) and what a check released just before them.
    let mut held = BytesMut::new();
    loop {
        let chunk = match resp.next_chunk().await {
            Ok(Some(c)) => c,
            Ok(None) => break,
            Err(e) => {
                out.outcome = UpstreamOutcome::from_error(&e);
                log::warn!("upstream broke off mid-stream: {e}");
                let err = ApiError::new(ErrorKind::UpstreamError, format!("{}'s stream broke off", plan.provider));
                out.ending = Ending::Tail { bytes: Some(error_event(plan.dialect, plan.flavor, &err)), stream };
                return out;
            }
        };
        let mut forward = BytesMut::new();
        for event in sse.push(&chunk) {
            if read_event(plan.dialect, &event, &mut out.usage) && plan.hide_usage_chunk {
                continue;
            }
            // Nothing may overtake a held closing event.
            let closing = !held.is_empty() || is_closing(plan.dialect, &event);
            let target = if closing { &mut held } else { &mut forward };
            match scanner.as_mut() {
                Some(s) => {
                    s.event(&event, plan.cx, target);
                    if let Some(e) = s.blocked.take() {
                        // Headers are out: the refusal travels as the stream's last event.
                        if !forward.is_empty()
                            && session.write_response_body(Some(forward.freeze()), false).await.is_err()
                        {
                            out.ending = Ending::Gone;
                            return out;
                        }
                        out.outcome = UpstreamOutcome::Pass;
                        out.usage = out.usage.or(Some(Usage::default()));
                        out.ending = Ending::Tail { bytes: Some(error_event(plan.dialect, plan.flavor, &e)), stream };
                        return out;
                    }
                }
                None => target.extend_from_slice(&event),
            }
        }
        if forward.is_empty() {
            continue;
        }
        let forward = forward.freeze();
        if let Some(c) = capture.as_mut() {
            c.extend_from_slice(&forward);
        }
        if session.write_response_body(Some(forward), false).await.is_err() {
            out.ending = Ending::Gone;
            return out;
        }
    }
    let mut tail = BytesMut::new();
    if let Some(s) = scanner.as_mut() {
        if let Some(rest) = sse.finish() {
            read_event(plan.dialect, &rest, &mut out.usage);
            s.event(&rest, plan.cx, &mut held);
        }
        s.flush(plan.cx, &mut tail);
        if let Some(e) = s.blocked.take() {
            out.outcome = UpstreamOutcome::Pass;
            out.ending = Ending::Tail { bytes: Some(error_event(plan.dialect, plan.flavor, &e)), stream };
            return out;
        }
    } else if let Some(rest) = sse.finish() {
        read_event(plan.dialect, &rest, &mut out.usage);
        held.extend_from_slice(&rest);
    }
    tail.extend_from_slice(&held);
    let tail = tail.freeze();
    if let Some(mut c) = capture.filter(|_| plan.capture_limit.is_some()) {
        c.extend_from_slice(&tail);
        if plan.capture_limit.is_some_and(|l| c.len() <= l) {
            out.captured =
                Some(Cached { status, content_type, body: c.freeze(), usage: Usage::default(), cost_usd: 0.0 });
        }
    }
    out.outcome = UpstreamOutcome::Pass;
    resp.release().await;
    out.ending = Ending::Tail { bytes: (!tail.is_empty()).then_some(tail), stream };
    out
}

/// The event that closes a stream: OpenAI's `data: [DONE]`, Anthropic's `message_stop`.
fn is_closing(dialect: Dialect, event: &[u8]) -> bool {
    let trimmed = event.trim_ascii();
    match dialect {
        Dialect::OpenAi => trimmed == b"data: [DONE]" || trimmed == b"data:[DONE]",
        Dialect::Anthropic => trimmed.starts_with(b"event: message_stop") || trimmed.starts_with(b"event:message_stop"),
    }
}

/// Passes each streamed text event through the answer-side checks. Text a check holds back is
/// released in a copy of the last text event, just before the next event that carries none.
struct EventScanner<'a> {
    pipeline: &'a Pipeline,
    /// The last text event: its non-data lines and parsed data, to carry released text.
    template: Option<(String, Value)>,
    blocked: Option<ApiError>,
}

impl EventScanner<'_> {
    fn event(&mut self, event: &Bytes, cx: &mut Ctx, out: &mut BytesMut) {
        let parsed = event_data(event).and_then(|d| serde_json::from_str::<Value>(&d).ok());
        let Some(mut v) = parsed else {
            self.flush(cx, out);
            out.extend_from_slice(event);
            return;
        };
        let Some(text) = event_text(&v).map(str::to_string) else {
            self.flush(cx, out);
            out.extend_from_slice(event);
            return;
        };
        let mut t = text.clone();
        if let Err(e) = self.pipeline.on_response(&mut ResponsePiece::Delta { text: &mut t, end: false }, cx) {
            self.blocked = Some(e);
            return;
        }
        let lines = other_lines(event);
        if t == text {
            out.extend_from_slice(event);
        } else {
            set_event_text(&mut v, t);
            write_event(out, &lines, &v);
        }
        self.template = Some((lines, v));
    }

    fn flush(&mut self, cx: &mut Ctx, out: &mut BytesMut) {
        if self.blocked.is_some() {
            return;
        }
        let mut t = String::new();
        if let Err(e) = self.pipeline.on_response(&mut ResponsePiece::Delta { text: &mut t, end: true }, cx) {
            self.blocked = Some(e);
            return;
        }
        if t.is_empty() {
            return;
        }
        if let Some((lines, mut v)) = self.template.clone() {
            set_event_text(&mut v, t);
            write_event(out, &lines, &v);
        }
    }
}

/// The lines of an event other than `data:` (e.g. Anthropic's `event: …`).
fn other_lines(event: &[u8]) -> String {
    let text = String::from_utf8_lossy(event);
    text.lines().filter(|l| !l.is_empty() && !l.starts_with("data:")).map(|l| format!("{l}\n")).collect()
}

fn write_event(out: &mut BytesMut, lines: &str, data: &Value) {
    out.extend_from_slice(lines.as_bytes());
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(&serde_json::to_vec(data).unwrap_or_default());
    out.extend_from_slice(b"\n\n");
}

/// A refusal in the stream's own format, as its last event.
pub fn error_event(dialect: Dialect, flavor: Flavor, e: &ApiError) -> Bytes {
    let mut out = BytesMut::new();
    if dialect == Dialect::Anthropic {
        out.extend_from_slice(b"event: error\n");
    }
    write_event(&mut out, "", &e.envelope(flavor));
    out.freeze()
}

/// Folds one event's usage into `acc`; true when the event is OpenAI's usage-only chunk.
fn read_event(dialect: Dialect, event: &Bytes, acc: &mut Option<Usage>) -> bool {
    // Parsing every token event would cost more than relaying it; only usage events matter.
    if memchr_usage(event).is_none() {
        return false;
    }
    let Some(data) = event_data(event) else { return false };
    let Ok(v) = serde_json::from_str::<Value>(&data) else { return false };
    usage::fold_event(dialect, &v, acc);
    dialect == Dialect::OpenAi
        && v.get("usage").is_some_and(Value::is_object)
        && v.get("choices").and_then(Value::as_array).is_some_and(|c| c.is_empty())
}

fn memchr_usage(b: &[u8]) -> Option<usize> {
    b.windows(7).position(|w| w == b"\"usage\"")
}

/// The body the upstream gets: the client's bytes unless the gateway had to edit the JSON.
pub fn body_for_upstream(raw: &Bytes, edited: Option<&Value>) -> Bytes {
    match edited {
        Some(v) => Bytes::from(serde_json::to_vec(v).unwrap_or_else(|_| raw.to_vec())),
        None => raw.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closing_events_are_recognised_in_both_dialects() {
        assert!(is_closing(Dialect::OpenAi, b"data: [DONE]\n\n"));
        assert!(is_closing(Dialect::OpenAi, b"data:[DONE]\r\n\r\n"));
        assert!(!is_closing(Dialect::OpenAi, b"data: {\"choices\":[]}\n\n"));
        assert!(is_closing(Dialect::Anthropic, b"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"));
        assert!(!is_closing(Dialect::Anthropic, b"event: message_delta\ndata: {}\n\n"));
    }

    #[test]
    fn provider_messages_come_from_either_envelope_or_the_text() {
        let openai = br#"{"error":{"message":"model overloaded","type":"server_error"}}"#;
        let anthropic = br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert_eq!(provider_message(openai).as_deref(), Some("model overloaded"));
        assert_eq!(provider_message(anthropic).as_deref(), Some("Overloaded"));
        assert_eq!(provider_message(b"  bad gateway \n").as_deref(), Some("bad gateway"));
        assert_eq!(provider_message(b""), None);
        assert_eq!(provider_message(&[b'x'; 2000]).map(|m| m.len()), Some(500));
    }
}
