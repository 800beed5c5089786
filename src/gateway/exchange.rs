//! The upstream leg: send the request, stream the answer back chunk by chunk, read usage, and
//! let the answer-side checks see it (response guardrails) when one asked to.

use bytes::{Bytes, BytesMut};
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use serde_json::Value;

use super::sse::{event_data, SseSplitter};
use crate::error::{ApiError, ErrorKind, Flavor};
use crate::guardrails::{event_text, set_event_text};
use crate::pipeline::{Cached, Ctx, JsonBody, Pipeline, ResponsePiece};
use crate::providers::usage::{self, Dialect, Usage};
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
}

/// What the relay learnt on the way.
pub struct Relayed {
    pub status: u16,
    pub usage: Option<Usage>,
    pub outcome: UpstreamOutcome,
    /// The client went away before the answer was complete.
    pub client_gone: bool,
    /// The answer as the client got it, when it was asked for (cache) and complete.
    pub captured: Option<Cached>,
}

/// How the answer is to be relayed.
pub struct RelayPlan<'a> {
    pub dialect: Dialect,
    pub flavor: Flavor,
    /// Drop OpenAI's usage-only chunk the gateway asked for on the client's behalf.
    pub hide_usage_chunk: bool,
    /// Headers every answer carries (request and receipt ids, rate-limit state).
    pub headers: &'a [(&'static str, String)],
    pub pipeline: &'a Pipeline,
    pub cx: &'a mut Ctx,
    /// Keep a copy of the answer up to this size (for the cache).
    pub capture_limit: Option<usize>,
}

/// Non-streamed answers are kept (up to this) to read their usage at the end, and whole when
/// an answer-side check must see them before they leave.
const USAGE_BODY_CAP: usize = 16 << 20;

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
    let is_sse = content_type(&resp).starts_with("text/event-stream");
    let ok = resp.header().status.is_success();
    if plan.cx.scan_answer && ok && !is_sse {
        relay_whole(session, resp, plan).await
    } else {
        relay_streaming(session, resp, plan, is_sse).await
    }
}

/// A JSON answer an answer-side check must see whole: read it, check it, then send it.
async fn relay_whole(session: &mut Session, mut resp: UpstreamResponse<'_>, plan: RelayPlan<'_>) -> Relayed {
    let status = resp.header().status.as_u16();
    let ctype = content_type(&resp);
    let mut out = Relayed { status, usage: None, outcome: UpstreamOutcome::Fail, client_gone: false, captured: None };
    let body = match resp.read_all(USAGE_BODY_CAP).await {
        Ok(b) => b,
        Err(e) => {
            out.outcome = UpstreamOutcome::from_error(&e);
            log::warn!("upstream answer could not be read whole: {e}");
            let err = ApiError::new(ErrorKind::UpstreamError, "the provider's answer could not be read");
            out.status = err.status();
            out.client_gone = super::respond::error(session, &err, plan.flavor, plan.headers.to_vec()).await.is_err();
            return out;
        }
    };
    out.outcome = UpstreamOutcome::Pass;
    out.usage = usage::from_json_bytes(plan.dialect, &body);
    // Checks read the bytes; a JSON tree is built only if one of them needs it (to redact).
    let mut answer = JsonBody::lazy(body.clone());
    let mut sent = body;
    match plan.pipeline.on_response(&mut ResponsePiece::Json(&mut answer), plan.cx) {
        Ok(()) => {
            if let Some(v) = answer.built().filter(|_| plan.cx.response_checks.iter().any(|c| c.result == "REDACT")) {
                sent = serde_json::to_vec(v).map(Bytes::from).unwrap_or(sent);
            }
        }
        Err(e) => {
            out.status = e.status();
            out.client_gone = super::respond::error(session, &e, plan.flavor, plan.headers.to_vec()).await.is_err();
            resp.release().await;
            return out;
        }
    }
    let Some(mut header) = answer_header(&resp, status, plan.headers) else { return out };
    let _ = header.insert_header(http::header::CONTENT_LENGTH, sent.len().to_string());
    if session.write_response_header(Box::new(header), false).await.is_err()
        || session.write_response_body(Some(sent.clone()), true).await.is_err()
    {
        out.client_gone = true;
        return out;
    }
    if plan.capture_limit.is_some_and(|l| sent.len() <= l) {
        out.captured = Some(Cached { status, content_type: ctype, body: sent, usage: Usage::default(), cost_usd: 0.0 });
    }
    resp.release().await;
    out
}

/// Streams the answer chunk by chunk (SSE event by event), scanning streamed text when asked.
async fn relay_streaming(
    session: &mut Session,
    mut resp: UpstreamResponse<'_>,
    plan: RelayPlan<'_>,
    is_sse: bool,
) -> Relayed {
    let status = resp.header().status.as_u16();
    let ctype = content_type(&resp);
    let upstream_len = resp.header().headers.get(http::header::CONTENT_LENGTH).cloned();
    let mut out = Relayed { status, usage: None, outcome: UpstreamOutcome::Fail, client_gone: false, captured: None };
    let Some(mut header) = answer_header(&resp, status, plan.headers) else { return out };
    match (&upstream_len, is_sse) {
        // Unchanged bytes: keep the upstream's length so the client can frame it.
        (Some(len), false) => {
            let _ = header.insert_header(http::header::CONTENT_LENGTH, len.clone());
        }
        _ if !session.is_http2() => {
            let _ = header.insert_header(http::header::TRANSFER_ENCODING, "chunked");
        }
        _ => {}
    }
    if session.write_response_header(Box::new(header), false).await.is_err() {
        out.client_gone = true;
        return out;
    }

    let scan = plan.cx.scan_answer && is_sse && (200..300).contains(&status);
    let mut scanner = EventScanner { pipeline: plan.pipeline, template: None, blocked: None };
    let mut capture = plan.capture_limit.filter(|_| (200..300).contains(&status)).map(|_| BytesMut::new());
    let mut sse = SseSplitter::default();
    // Non-streamed answers: chunks are kept (shared, not copied) to read usage at the end, and
    // one chunk is held back so the last one goes out with end-of-stream in a single write.
    let mut kept: Vec<Bytes> = Vec::new();
    let mut kept_len = 0usize;
    let mut held: Option<Bytes> = None;
    loop {
        let chunk = match resp.next_chunk().await {
            Ok(Some(c)) => c,
            Ok(None) => break,
            Err(e) => {
                out.outcome = UpstreamOutcome::from_error(&e);
                log::warn!("upstream broke off mid-answer: {e}");
                return out;
            }
        };
        let forward = if is_sse {
            let mut buf = BytesMut::new();
            for event in sse.push(&chunk) {
                if read_event(plan.dialect, &event, &mut out.usage) && plan.hide_usage_chunk {
                    continue;
                }
                if scan {
                    scanner.event(&event, plan.cx, &mut buf);
                    if scanner.blocked.is_some() {
                        break;
                    }
                } else {
                    buf.extend_from_slice(&event);
                }
            }
            buf.freeze()
        } else {
            if kept_len + chunk.len() <= USAGE_BODY_CAP {
                kept_len += chunk.len();
                kept.push(chunk.clone());
            }
            match held.replace(chunk) {
                Some(previous) => previous,
                None => continue,
            }
        };
        if let Some(c) = capture.as_mut() {
            c.extend_from_slice(&forward);
        }
        if !forward.is_empty() && session.write_response_body(Some(forward), false).await.is_err() {
            out.client_gone = true;
            break;
        }
        if let Some(e) = scanner.blocked.take() {
            // Headers are out: the refusal travels as the stream's last event.
            let _ = session.write_response_body(Some(error_event(plan.dialect, plan.flavor, &e)), true).await;
            out.outcome = UpstreamOutcome::Pass;
            out.usage = out.usage.or(Some(Usage::default()));
            return out;
        }
    }
    if let Some(rest) = sse.finish() {
        read_event(plan.dialect, &rest, &mut out.usage);
        if scan {
            let mut buf = BytesMut::new();
            scanner.event(&rest, plan.cx, &mut buf);
            held = Some(buf.freeze());
        } else {
            held = Some(rest);
        }
    }
    if scan {
        let mut buf = BytesMut::new();
        scanner.flush(plan.cx, &mut buf);
        if !buf.is_empty() {
            let tail = held.take().unwrap_or_default();
            buf.extend_from_slice(&tail);
            held = Some(buf.freeze());
        }
    }
    if !is_sse {
        out.usage = match kept.len() {
            1 => usage::from_json_bytes(plan.dialect, &kept[0]),
            _ => usage::from_json_bytes(plan.dialect, &kept.concat()),
        };
    }
    if let (Some(c), Some(h)) = (capture.as_mut(), held.as_ref()) {
        c.extend_from_slice(h);
    }
    if !out.client_gone && session.write_response_body(held, true).await.is_err() {
        out.client_gone = true;
    }
    out.outcome = if (200..300).contains(&status) { UpstreamOutcome::Pass } else { UpstreamOutcome::Fail };
    if !out.client_gone {
        if let Some(c) = capture.filter(|c| plan.capture_limit.is_some_and(|l| c.len() <= l)) {
            out.captured =
                Some(Cached { status, content_type: ctype, body: c.freeze(), usage: Usage::default(), cost_usd: 0.0 });
        }
        resp.release().await;
    }
    out
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
fn error_event(dialect: Dialect, flavor: Flavor, e: &ApiError) -> Bytes {
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
