//! A native Bedrock `converse-stream` answer: AWS event-stream frames, decoded on the way for
//! usage and, when a check asked to see the answer, written anew around the checked text.

use bytes::{Bytes, BytesMut};
use pingora::proxy::Session;
use serde_json::Value;

use super::passthrough::{relay_passthrough, Piece};
use super::plan::{RelayPlan, Relayed};
use crate::checks::pipeline::UpstreamOutcome;
use crate::checks::pipeline::{Ctx, Pipeline, ResponsePiece};
use crate::error::ApiError;
use crate::providers::eventstream;
use crate::providers::usage::{self, Dialect, Usage};
use crate::upstream::UpstreamResponse;

/// A native Bedrock `converse-stream` answer: its frames pass through as they come, decoded on
/// the way for usage; the last chunk (the `metadata` frame) is held back as the ending. When an
/// answer check asked to see the answer, text deltas go through it and the frames are written
/// anew ([`FrameScanner`]).
pub(super) async fn relay_frames(session: &mut Session, resp: UpstreamResponse<'_>, plan: RelayPlan<'_>) -> Relayed {
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
                log::warn!("{} stream could not be decoded: {e}", plan.provider);
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
        log::error!("an event-stream frame could not be written: {e}");
        Vec::new()
    })
}
