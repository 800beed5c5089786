//! A streamed answer (SSE): events go out as they arrive, read for usage and failure, scanned
//! when a check asked to; the stream's closing event is held back as the ending.

use bytes::{Bytes, BytesMut};
use http::header::HeaderValue;
use pingora::proxy::Session;
use serde_json::Value;

use super::plan::{answer_fields, content_type, RelayPlan, Relayed};
use super::translating::Translating;
use crate::checks::guardrail::{event_text, set_event_text};
use crate::checks::pipeline::UpstreamOutcome;
use crate::checks::pipeline::{Cached, Ctx, Pipeline, ResponsePiece};
use crate::error::{ApiError, ErrorKind};
use crate::gateway::ending::{error_event, Ending};
use crate::gateway::header;
use crate::gateway::responses::{self, SaidText};
use crate::gateway::sse::{event_data, event_json, other_lines, write_event, SseSplitter};
use crate::providers::usage::{self, Dialect, Usage};
use crate::upstream::{UpstreamError, UpstreamResponse};

/// A streamed answer (SSE): events go out as they arrive, scanned when a check asked to; the
/// stream's closing event is held back as the ending. Stages: open (the header), then per chunk
/// read → sort its events → write, then close (the held tail) and keep (the cache copy).
pub(super) async fn relay_events(
    session: &mut Session,
    mut resp: UpstreamResponse<'_>,
    mut plan: RelayPlan<'_>,
) -> Relayed {
    let status = resp.header().status.as_u16();
    let stream = Some((plan.dialect, plan.flavor));
    let mut out = Relayed::unfinished(status);
    if !open(session, &resp, &plan, status).await {
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
        if !st.write(session, forward).await {
            out.ending = Ending::Gone;
            return out;
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

/// Open: the answer's header, sent at once; false when the client is gone.
async fn open(session: &mut Session, resp: &UpstreamResponse<'_>, plan: &RelayPlan<'_>, status: u16) -> bool {
    let mut fields = answer_fields(resp, plan);
    if !session.is_http2() {
        fields.insert(http::header::TRANSFER_ENCODING, HeaderValue::from_static("chunked"));
    }
    session.write_response_header(Box::new(header::response(status, fields)), false).await.is_ok()
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

    /// Write: what may go out now (kept for the cache too); false when the client is gone.
    async fn write(&mut self, session: &mut Session, forward: BytesMut) -> bool {
        if forward.is_empty() {
            return true;
        }
        let forward = forward.freeze();
        if let Some(c) = self.capture.as_mut() {
            c.extend_from_slice(&forward);
        }
        session.write_response_body(Some(forward), false).await.is_ok()
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
        && event_json(event).is_some_and(|v| v.get("error").is_some_and(|e| !e.is_null()))
}

/// The event that closes a stream, in the stream's dialect.
fn is_closing(dialect: Dialect, event: &[u8]) -> bool {
    match dialect {
        Dialect::Responses => responses::is_terminal(event),
        _ => dialect.is_closing_event(event.trim_ascii()),
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
    let marker = dialect.usage_marker();
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
    dialect == Dialect::CHAT
        && v.get("usage").is_some_and(Value::is_object)
        && v.get("choices").and_then(Value::as_array).is_some_and(|c| c.is_empty())
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
}
