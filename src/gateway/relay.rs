//! The upstream leg's answer: relay it to the client, read usage, and let the answer-side checks
//! see it (response guardrails) when one asked to. The relay never ends an answer: it hands
//! back the [`Ending`] (the answer's last bytes, or the whole of it) for the gateway to send once
//! the receipt is committed.

use bytes::{Bytes, BytesMut};
use http::header::{HeaderMap, HeaderValue};
use pingora::proxy::Session;
use serde_json::Value;

use super::ending::{error_event, Ending};
use super::header;
use super::responses::{self, SaidText};
use super::sse::{event_data, other_lines, write_event, SseSplitter};
use crate::checks::guardrail::{event_text, set_event_text};
use crate::checks::pipeline::{Cached, Ctx, JsonBody, Pipeline, ResponsePiece};
use crate::error::{ApiError, ErrorKind, Flavor};
use crate::providers::bedrock::eventstream;
use crate::providers::translate::ChunkTranslator;
use crate::providers::usage::{self, Dialect, Usage};
use crate::providers::Provider;
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
    /// The model the provider says answered, when [`RelayPlan::read_model`] asked for it.
    pub model: Option<String>,
    pub ending: Ending,
}

impl Relayed {
    /// An answer the relay has not finished: failed and cut off unless it gets further.
    fn unfinished(status: u16) -> Relayed {
        Relayed {
            status,
            usage: None,
            outcome: UpstreamOutcome::Fail,
            captured: None,
            model: None,
            ending: Ending::Abort,
        }
    }
}

/// An answer to put into OpenAI's shape: the provider that gives it, and what the translated
/// answer says of itself.
pub struct Translation {
    pub provider: &'static dyn Provider,
    /// The model id the provider served.
    pub model: String,
    pub id: String,
    pub created: i64,
}

/// How the answer is to be relayed.
pub struct RelayPlan<'a> {
    /// What the client speaks.
    pub dialect: Dialect,
    /// What the upstream speaks (the client's dialect unless the answer is translated).
    pub wire: Dialect,
    /// The client asked for a stream.
    pub stream: bool,
    pub translation: Option<Translation>,
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
    /// Read the answering model from the answer (for the trace; off, it costs nothing).
    pub read_model: bool,
    /// Told the id of each stored object the answer creates (a Responses create: the response
    /// and its output items), as soon as the answer names it.
    pub stored: Option<&'a (dyn Fn(&str) + Sync)>,
}

/// Non-streamed answers are held whole up to this size: their last byte waits for the receipt,
/// their usage is read from them, and answer-side checks see them before they leave. Larger
/// ones (big embedding batches) are relayed as they come and only their last chunk waits.
const WHOLE_BODY_CAP: usize = 16 << 20;
/// How much of a provider's error answer is read for its message.
const ERROR_BODY_CAP: usize = 64 << 10;

/// The answer's header fields: the provider's end-to-end ones, then ours (see `header`).
fn answer_fields(resp: &UpstreamResponse<'_>, plan: &RelayPlan<'_>) -> HeaderMap {
    let upstream = &resp.header().headers;
    let mut map = HeaderMap::with_capacity(upstream.len() + plan.headers.len() + 1);
    header::copy_end_to_end(&mut map, upstream);
    if plan.translation.is_some() {
        // The answer is the client's format now, not the provider's.
        let content_type = if plan.stream { "text/event-stream" } else { "application/json" };
        map.insert(http::header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    }
    header::set_ours(&mut map, plan.headers);
    map
}

fn content_type(resp: &UpstreamResponse<'_>) -> String {
    resp.header().headers.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_string()
}

pub async fn relay(session: &mut Session, resp: UpstreamResponse<'_>, plan: RelayPlan<'_>) -> Relayed {
    if !resp.header().status.is_success() {
        return relay_refusal(resp, plan).await;
    }
    let content_type = content_type(&resp);
    if content_type.starts_with("text/event-stream") || (plan.stream && plan.translation.is_some()) {
        relay_events(session, resp, plan).await
    } else if content_type.starts_with(EVENT_STREAM) {
        relay_frames(session, resp, plan).await
    } else {
        relay_body(session, resp, plan).await
    }
}

/// AWS event-stream framing (Bedrock's `converse-stream`).
const EVENT_STREAM: &str = "application/vnd.amazon.eventstream";

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
    // Anthropic's 529 "overloaded" keeps its status on the Anthropic route: the anthropic SDK
    // raises its OverloadedError (and retries) on it; any other 5xx is our 502.
    let overloaded = status == 529 && plan.flavor == Flavor::Anthropic;
    let kind = if status >= 500 && !overloaded { ErrorKind::UpstreamError } else { ErrorKind::ProviderRefused(status) };
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
        model: None,
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
    let mut out = Relayed::unfinished(status);
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
    out.usage = usage::from_json_bytes(plan.wire, &body);
    if let Some(claim) = plan.stored {
        responses::answer_ids(&body).iter().for_each(|id| claim(id));
    }
    let body = match plan.translation.as_ref().map(|t| translate_body(t, &body)) {
        None => body,
        Some(Ok(translated)) => translated,
        Some(Err(e)) => {
            out.outcome = UpstreamOutcome::Fail;
            out.status = e.status();
            out.ending = Ending::error(&e, plan.flavor, plan.headers.to_vec());
            resp.release().await;
            return out;
        }
    };
    if plan.read_model {
        out.model = usage::answer_model(&body);
    }
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
    let mut fields = answer_fields(&resp, &plan);
    fields.insert(http::header::CONTENT_LENGTH, HeaderValue::from(sent.len()));
    let header = header::response(status, fields);
    if plan.capture_limit.is_some_and(|l| sent.len() <= l) {
        let content_type = match plan.translation {
            Some(_) => "application/json".to_string(),
            None => content_type(&resp),
        };
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
    resp: UpstreamResponse<'_>,
    plan: RelayPlan<'_>,
    kept: Vec<Bytes>,
    out: Relayed,
) -> Relayed {
    relay_passthrough(session, resp, &plan, kept, out, &mut Piece::Pass).await
}

/// What a passthrough relay does with one chunk.
enum Piece {
    /// Send these bytes (none, when a check holds them back).
    Pass(Bytes),
    /// The answer ends with these bytes (a check refused it): nothing more is read.
    End(Bytes),
}

/// Relays an answer's bytes as they come (`kept` first), each shown to `inspect`, the last
/// chunk held back as the ending.
async fn relay_passthrough(
    session: &mut Session,
    mut resp: UpstreamResponse<'_>,
    plan: &RelayPlan<'_>,
    kept: Vec<Bytes>,
    mut out: Relayed,
    transform: &mut (dyn FnMut(Bytes) -> Piece + Send),
) -> Relayed {
    // A relay that may rewrite chunks cannot promise the upstream's length.
    let upstream_len =
        resp.header().headers.get(http::header::CONTENT_LENGTH).cloned().filter(|_| !plan.cx.scan_answer);
    let mut fields = answer_fields(&resp, plan);
    match upstream_len {
        Some(len) => {
            fields.insert(http::header::CONTENT_LENGTH, len);
        }
        None if !session.is_http2() => {
            fields.insert(http::header::TRANSFER_ENCODING, HeaderValue::from_static("chunked"));
        }
        None => {}
    }
    let header = header::response(out.status, fields);
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
        let chunk = match transform(chunk) {
            Piece::Pass(c) if c.is_empty() => continue,
            Piece::Pass(c) => c,
            Piece::End(last) => {
                if let Some(previous) = held.take() {
                    if session.write_response_body(Some(previous), false).await.is_err() {
                        out.ending = Ending::Gone;
                        return out;
                    }
                }
                out.outcome = UpstreamOutcome::Pass;
                resp.release().await;
                out.ending = Ending::Tail { bytes: Some(last), stream: None };
                return out;
            }
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
/// stream's closing event is held back as the ending. Stages: open (the header), then per chunk
/// read → sort its events → write, then close (the held tail) and keep (the cache copy).
async fn relay_events(session: &mut Session, mut resp: UpstreamResponse<'_>, mut plan: RelayPlan<'_>) -> Relayed {
    let status = resp.header().status.as_u16();
    let stream = Some((plan.dialect, plan.flavor));
    let mut out = Relayed::unfinished(status);
    let mut fields = answer_fields(&resp, &plan);
    if !session.is_http2() {
        fields.insert(http::header::TRANSFER_ENCODING, HeaderValue::from_static("chunked"));
    }
    if session.write_response_header(Box::new(header::response(status, fields)), false).await.is_err() {
        out.ending = Ending::Gone;
        return out;
    }
    let content_type = match plan.translation {
        Some(_) => "text/event-stream".to_string(),
        None => content_type(&resp),
    };
    let mut st = EventStream::new(&plan);
    loop {
        let chunk = match st.read(&mut resp).await {
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
        let (forward, blocked) = st.sort(&chunk, &mut plan, &mut out);
        if !forward.is_empty() {
            let forward = forward.freeze();
            if let Some(c) = st.capture.as_mut() {
                c.extend_from_slice(&forward);
            }
            if session.write_response_body(Some(forward), false).await.is_err() {
                out.ending = Ending::Gone;
                return out;
            }
        }
        if let Some(e) = blocked {
            // Headers are out: the refusal travels as the stream's last event.
            out.outcome = UpstreamOutcome::Pass;
            out.usage = out.usage.or(Some(Usage::default()));
            out.ending = Ending::Tail { bytes: Some(error_event(plan.dialect, plan.flavor, &e)), stream };
            return out;
        }
    }
    let tail = match st.close(&mut plan, &mut out) {
        Ok(tail) => tail,
        Err(e) => {
            out.outcome = UpstreamOutcome::Pass;
            out.ending = Ending::Tail { bytes: Some(error_event(plan.dialect, plan.flavor, &e)), stream };
            return out;
        }
    };
    out.captured = st.keep(&plan, &tail, status, content_type);
    out.outcome = if st.broke_off { UpstreamOutcome::Fail } else { UpstreamOutcome::Pass };
    resp.release().await;
    out.ending = Ending::Tail { bytes: (!tail.is_empty()).then_some(tail), stream };
    out
}

/// What [`relay_events`] keeps between chunks.
struct EventStream<'a> {
    translating: Option<Translating>,
    /// The upstream has ended (a translated stream still has its last chunks to give).
    ended: bool,
    scanner: Option<EventScanner<'a>>,
    capture: Option<BytesMut>,
    sse: SseSplitter,
    /// The closing events ([DONE], message_stop) and what a check released just before them.
    held: BytesMut,
    /// The provider failed after the stream began (an error event, or a Bedrock exception frame
    /// translated into one): like an error status that is `upstreamStatus: error` (docs/API.md), and
    /// the cache must not keep the answer, or asking again would replay the failure.
    broke_off: bool,
}

impl<'a> EventStream<'a> {
    fn new(plan: &RelayPlan<'a>) -> Self {
        EventStream {
            translating: plan.translation.as_ref().map(Translating::new),
            ended: false,
            scanner: plan.cx.scan_answer.then(|| EventScanner {
                pipeline: plan.pipeline,
                template: None,
                blocked: None,
                said: (plan.dialect == Dialect::Responses).then(SaidText::default),
            }),
            capture: plan.capture_limit.map(|_| BytesMut::new()),
            sse: SseSplitter::default(),
            held: BytesMut::new(),
            broke_off: false,
        }
    }

    /// Read: the next chunk in the client's framing; None at the end.
    async fn read(&mut self, resp: &mut UpstreamResponse<'_>) -> Result<Option<Bytes>, UpstreamError> {
        if self.ended {
            return Ok(None);
        }
        Ok(match resp.next_chunk().await? {
            Some(c) => Some(match self.translating.as_mut() {
                Some(t) => t.push(&c),
                None => c,
            }),
            None => {
                // A translated stream's last chunks (usage, `[DONE]`) come once the upstream ends.
                self.ended = true;
                self.translating.as_mut().map(Translating::finish)
            }
        })
    }

    /// Sort: each whole event of `chunk` is read for usage and failure, scanned, and put out or
    /// held back. Returns what may go out now, and a check's refusal (then nothing more).
    fn sort(&mut self, chunk: &Bytes, plan: &mut RelayPlan<'_>, out: &mut Relayed) -> (BytesMut, Option<ApiError>) {
        let mut forward = BytesMut::new();
        for event in self.sse.push(chunk) {
            self.broke_off |=
                is_error_event(&event) || (plan.dialect == Dialect::Responses && responses::is_failure(&event));
            if read_event(plan.dialect, &event, out, plan.read_model) && plan.hide_usage_chunk {
                continue;
            }
            if let Some(claim) = plan.stored {
                responses::event_ids(&event).iter().for_each(|id| claim(id));
            }
            // Nothing may overtake a held closing event.
            let closing = !self.held.is_empty() || is_closing(plan.dialect, &event);
            let target = if closing { &mut self.held } else { &mut forward };
            match self.scanner.as_mut() {
                Some(s) => {
                    s.event(&event, plan.cx, target);
                    if let Some(e) = s.blocked.take() {
                        return (forward, Some(e));
                    }
                }
                None => target.extend_from_slice(&event),
            }
        }
        (forward, None)
    }

    /// Close: the stream's last event (unterminated), what the scanner still holds, and the held
    /// closing events, as the ending's bytes; or the scanner's refusal.
    fn close(&mut self, plan: &mut RelayPlan<'_>, out: &mut Relayed) -> Result<Bytes, ApiError> {
        let mut tail = BytesMut::new();
        if let Some(s) = self.scanner.as_mut() {
            if let Some(rest) = self.sse.finish() {
                read_event(plan.dialect, &rest, out, plan.read_model);
                s.event(&rest, plan.cx, &mut self.held);
            }
            s.flush(plan.cx, &mut tail);
            if let Some(e) = s.blocked.take() {
                return Err(e);
            }
        } else if let Some(rest) = self.sse.finish() {
            read_event(plan.dialect, &rest, out, plan.read_model);
            self.held.extend_from_slice(&rest);
        }
        tail.extend_from_slice(&self.held);
        Ok(tail.freeze())
    }

    /// Keep: the whole answer for the cache, when asked for, complete, unbroken and small enough.
    fn keep(&mut self, plan: &RelayPlan<'_>, tail: &Bytes, status: u16, content_type: String) -> Option<Cached> {
        let limit = plan.capture_limit?;
        let mut c = self.capture.take().filter(|_| !self.broke_off)?;
        c.extend_from_slice(tail);
        (c.len() <= limit).then(|| Cached {
            status,
            content_type,
            body: c.freeze(),
            usage: Usage::default(),
            cost_usd: 0.0,
        })
    }
}

/// A provider's error mid-stream: OpenAI's and Gemini's `data: {"error": …}`, Anthropic's `event:
/// error` (its data `{"type": "error", "error": …}`), and the OpenAI error object a translated
/// stream ends with. Only an event holding the `"error"` key is parsed (text in a delta has its
/// quotes escaped, so it cannot hold the marker).
fn is_error_event(event: &[u8]) -> bool {
    const MARKER: &[u8] = b"\"error\"";
    event.windows(MARKER.len()).any(|w| w == MARKER)
        && sse_json(event).is_some_and(|v| v.get("error").is_some_and(|e| !e.is_null()))
}

/// The event that closes a stream: OpenAI's `data: [DONE]`, Anthropic's `message_stop`.
fn is_closing(dialect: Dialect, event: &[u8]) -> bool {
    let trimmed = event.trim_ascii();
    match dialect {
        Dialect::OpenAi => trimmed == b"data: [DONE]" || trimmed == b"data:[DONE]",
        Dialect::Anthropic => trimmed.starts_with(b"event: message_stop") || trimmed.starts_with(b"event:message_stop"),
        Dialect::Responses => responses::is_terminal(event),
        // Gemini's stream has no closing event (its end is the end of the body); Converse
        // streams are frames, not SSE.
        Dialect::Converse | Dialect::Gemini => false,
    }
}

/// Passes each streamed text event through the answer-side checks. Text a check holds back is
/// released in a copy of the last text event, just before the next event that carries none.
struct EventScanner<'a> {
    pipeline: &'a Pipeline,
    /// The last text event: its non-data lines and parsed data, to carry released text.
    template: Option<(String, Value)>,
    blocked: Option<ApiError>,
    /// A Responses stream: the answer text each output part was given, so the events that
    /// repeat it whole (`….done`, `response.completed`) say what the deltas said.
    said: Option<SaidText>,
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
            match self.said.as_ref() {
                Some(said) if said.rewrite(&mut v) => write_event(out, &other_lines(event), &v),
                _ => out.extend_from_slice(event),
            }
            return;
        };
        let mut t = text.clone();
        if let Err(e) = self.pipeline.on_response(&mut ResponsePiece::Delta { text: &mut t, end: false }, cx) {
            self.blocked = Some(e);
            return;
        }
        let lines = other_lines(event);
        if let Some(said) = self.said.as_mut() {
            said.add(&v, &t);
        }
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
            if let Some(said) = self.said.as_mut() {
                said.add(&v, &t);
            }
            set_event_text(&mut v, t);
            write_event(out, &lines, &v);
        }
    }
}

/// Folds one event's usage into `out.usage`; true when the event is OpenAI's usage-only chunk.
/// With `read_model`, also reads the answering model (OpenAI's usage chunk and Anthropic's
/// `message_start` both name it).
fn read_event(dialect: Dialect, event: &Bytes, out: &mut Relayed, read_model: bool) -> bool {
    // Parsing every token event would cost more than relaying it; only usage events matter.
    let marker: &[u8] = if dialect == Dialect::Gemini { b"\"usageMetadata\"" } else { b"\"usage\"" };
    if !event.windows(marker.len()).any(|w| w == marker) {
        return false;
    }
    let Some(data) = event_data(event) else { return false };
    let Ok(v) = serde_json::from_str::<Value>(&data) else { return false };
    usage::fold_event(dialect, &v, &mut out.usage);
    if read_model && out.model.is_none() {
        out.model = v
            .get("model")
            .or_else(|| v.pointer("/message/model"))
            .or_else(|| v.pointer("/response/model"))
            .and_then(Value::as_str)
            .map(str::to_string);
    }
    dialect == Dialect::OpenAi
        && v.get("usage").is_some_and(Value::is_object)
        && v.get("choices").and_then(Value::as_array).is_some_and(|c| c.is_empty())
}

/// A whole provider answer in OpenAI's shape; an answer that cannot be read is the provider's
/// failure (502), not the client's.
fn translate_body(t: &Translation, body: &[u8]) -> Result<Bytes, ApiError> {
    let broken = |why: String| {
        log::warn!("{} answer could not be translated: {why}", t.provider.name());
        ApiError::new(ErrorKind::UpstreamError, format!("{}'s answer could not be read: {why}", t.provider.name()))
    };
    let native: Value = serde_json::from_slice(body).map_err(|e| broken(e.to_string()))?;
    let answer = t.provider.to_openai(&native, &t.model, &t.id, t.created).map_err(|e| broken(e.to_string()))?;
    Ok(Bytes::from(serde_json::to_vec(&answer).unwrap_or_default()))
}

/// Upstream stream bytes → the client's SSE bytes (`chat.completion.chunk` events, then
/// `data: [DONE]`), for a translated stream.
struct Translating {
    framing: Framing,
    chunks: Box<dyn ChunkTranslator>,
    /// An error object went out: the stream is over, nothing more is written.
    over: bool,
}

/// How the upstream frames its events.
enum Framing {
    Sse(SseSplitter),
    Frames(eventstream::Decoder),
}

impl Translating {
    fn new(t: &Translation) -> Translating {
        let framing = match t.provider.dialect() {
            Dialect::Converse => Framing::Frames(eventstream::Decoder::default()),
            _ => Framing::Sse(SseSplitter::default()),
        };
        Translating { framing, chunks: t.provider.chunk_translator(&t.model, &t.id, t.created), over: false }
    }

    fn push(&mut self, chunk: &[u8]) -> Bytes {
        let events = match &mut self.framing {
            Framing::Sse(s) => s.push(chunk).iter().filter_map(|e| sse_json(e)).collect(),
            Framing::Frames(d) => d.push(chunk).unwrap_or_else(|e| {
                log::warn!("bedrock stream could not be decoded: {e}");
                vec![serde_json::json!({"internalServerException": {"message": "the provider's stream could not be decoded"}})]
            }),
        };
        let mut out = BytesMut::new();
        for event in events {
            let chunks = self.chunks.on_event(&event);
            self.write(&mut out, chunks);
        }
        out.freeze()
    }

    fn finish(&mut self) -> Bytes {
        let mut out = BytesMut::new();
        if let Framing::Sse(s) = &mut self.framing {
            if let Some(event) = s.finish().as_deref().and_then(sse_json) {
                let chunks = self.chunks.on_event(&event);
                self.write(&mut out, chunks);
            }
        }
        let chunks = self.chunks.finish();
        self.write(&mut out, chunks);
        if !self.over {
            out.extend_from_slice(b"data: [DONE]\n\n");
        }
        out.freeze()
    }

    fn write(&mut self, out: &mut BytesMut, chunks: Vec<Value>) {
        for chunk in chunks {
            if self.over {
                return;
            }
            self.over = chunk.get("error").is_some();
            write_event(out, "", &chunk);
        }
    }
}

fn sse_json(event: &[u8]) -> Option<Value> {
    serde_json::from_str(&event_data(event)?).ok()
}

/// A native Bedrock `converse-stream` answer: its frames pass through as they come, decoded on
/// the way for usage; the last chunk (the `metadata` frame) is held back as the ending. When an
/// answer check asked to see the answer, text deltas go through it and the frames are written
/// anew ([`FrameScanner`]).
async fn relay_frames(session: &mut Session, resp: UpstreamResponse<'_>, plan: RelayPlan<'_>) -> Relayed {
    let out = Relayed::unfinished(resp.header().status.as_u16());
    let mut decoder = eventstream::Decoder::default();
    let mut usage: Option<Usage> = None;
    let mut scanner = plan.cx.scan_answer.then(FrameScanner::default);
    let pipeline = plan.pipeline;
    // The checks' state is lent to the scanner for the relay, and the plan keeps a fresh one.
    let mut cx = std::mem::take(plan.cx);
    // An exception frame from the provider (throttled, failed mid-answer) ends its answer: the
    // receipt says `error`, as for an error status (docs/API.md).
    let mut exception = false;
    let mut relayed = relay_passthrough(session, resp, &plan, Vec::new(), out, &mut |chunk: Bytes| {
        let events = match decoder.push(&chunk) {
            Ok(events) => events,
            Err(e) => {
                log::warn!("bedrock stream could not be decoded: {e}");
                return match scanner {
                    // What cannot be read cannot be checked: the answer stops here.
                    Some(_) => Piece::End(Bytes::from(frame(eventstream::encode_exception(
                        "internalServerException",
                        &serde_json::json!({"message": "the provider's stream could not be decoded"}),
                    )))),
                    None => Piece::Pass(chunk),
                };
            }
        };
        events.iter().for_each(|e| usage::fold_event(Dialect::Converse, e, &mut usage));
        exception |= events
            .iter()
            .any(|e| e.as_object().and_then(|o| o.keys().next()).is_some_and(|k| k.ends_with("Exception")));
        match scanner.as_mut() {
            Some(s) => s.frames(&events, pipeline, &mut cx),
            None => Piece::Pass(chunk),
        }
    })
    .await;
    *plan.cx = cx;
    relayed.usage = usage;
    if exception && relayed.outcome == UpstreamOutcome::Pass {
        relayed.outcome = UpstreamOutcome::Fail;
    }
    relayed
}

/// Passes a Converse stream's text deltas through the answer-side checks and writes the frames
/// anew. Text a check holds back is released in a delta of its own just before the block stops.
#[derive(Default)]
struct FrameScanner {
    /// The content block the last text delta was in.
    block: Option<Value>,
}

impl FrameScanner {
    fn frames(&mut self, events: &[Value], pipeline: &Pipeline, cx: &mut Ctx) -> Piece {
        let mut out = BytesMut::new();
        for event in events {
            let Some((kind, payload)) = event.as_object().and_then(|o| o.iter().next()) else { continue };
            if let Some(text) = payload.pointer("/delta/text").and_then(Value::as_str) {
                let mut t = text.to_string();
                if let Err(e) = pipeline.on_response(&mut ResponsePiece::Delta { text: &mut t, end: false }, cx) {
                    return Piece::End(Self::refusal(out, &e));
                }
                self.block = payload.get("contentBlockIndex").cloned();
                if !t.is_empty() {
                    out.extend_from_slice(&Self::delta(&self.block, t));
                }
                continue;
            }
            if matches!(kind.as_str(), "contentBlockStop" | "messageStop") {
                let mut t = String::new();
                if let Err(e) = pipeline.on_response(&mut ResponsePiece::Delta { text: &mut t, end: true }, cx) {
                    return Piece::End(Self::refusal(out, &e));
                }
                if !t.is_empty() {
                    out.extend_from_slice(&Self::delta(&self.block, t));
                }
            }
            let encoded = match kind.ends_with("Exception") {
                true => eventstream::encode_exception(kind, payload),
                false => eventstream::encode_event(kind, payload),
            };
            out.extend_from_slice(&frame(encoded));
        }
        Piece::Pass(out.freeze())
    }

    fn delta(block: &Option<Value>, text: String) -> Vec<u8> {
        let index = block.clone().unwrap_or(Value::from(0));
        frame(eventstream::encode_event(
            "contentBlockDelta",
            &serde_json::json!({"contentBlockIndex": index, "delta": {"text": text}}),
        ))
    }

    /// What was released before the refusal, then the refusal as an exception frame.
    fn refusal(mut out: BytesMut, e: &ApiError) -> Bytes {
        out.extend_from_slice(&frame(eventstream::encode_exception(
            "validationException",
            &serde_json::json!({"message": e.message}),
        )));
        out.freeze()
    }
}

/// A frame written anew; one that cannot be (a payload over the framing's 16 MiB, which a
/// decoded frame never has) is left out and logged.
fn frame(encoded: Result<Vec<u8>, eventstream::EncodeError>) -> Vec<u8> {
    encoded.unwrap_or_else(|e| {
        log::error!("a bedrock stream frame could not be written: {e}");
        Vec::new()
    })
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
    fn error_events_are_told_from_text_that_mentions_errors() {
        assert!(is_error_event(
            b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n\n"
        ));
        assert!(is_error_event(b"data: {\"error\":{\"message\":\"Too many requests\"}}\r\n\r\n"));
        let text = br#"data: {"choices":[{"delta":{"content":"say \"error\": no"}}]}"#;
        assert!(!is_error_event(text), "a quoted word in a delta is escaped");
        assert!(!is_error_event(br#"data: {"error":null,"choices":[]}"#));
        assert!(!is_error_event(b"data: [DONE]\n\n"));
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
