//! Relays an answer's bytes as they come, each chunk shown to a transform, the last one held
//! back as the ending.

use bytes::Bytes;
use http::header::HeaderValue;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;

use super::plan::{answer_fields, RelayPlan, Relayed};
use crate::checks::pipeline::UpstreamOutcome;
use crate::gateway::ending::Ending;
use crate::gateway::header;
use crate::upstream::UpstreamResponse;

/// What a passthrough relay does with one chunk.
pub(super) enum Piece {
    /// Send these bytes (none, when a check holds them back).
    Pass(Bytes),
    /// The answer ends with these bytes (a check refused it): nothing more is read.
    End(Bytes),
}

/// Relays an answer's bytes as they come (`kept` first), each shown to `inspect`, the last
/// chunk held back as the ending.
pub(super) async fn relay_passthrough(
    session: &mut Session,
    mut resp: UpstreamResponse<'_>,
    plan: &RelayPlan<'_>,
    kept: Vec<Bytes>,
    mut out: Relayed,
    transform: &mut (dyn FnMut(Bytes) -> Piece + Send),
) -> Relayed {
    let header = passthrough_header(session, &resp, plan, out.status);
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

/// The answer's header: the upstream's length when the chunks pass unchanged, else chunked
/// (HTTP/1.1; HTTP/2 frames its own).
fn passthrough_header(
    session: &Session,
    resp: &UpstreamResponse<'_>,
    plan: &RelayPlan<'_>,
    status: u16,
) -> ResponseHeader {
    // A relay that may rewrite chunks cannot promise the upstream's length.
    let upstream_len =
        resp.header().headers.get(http::header::CONTENT_LENGTH).cloned().filter(|_| !plan.cx.scan_answer);
    let mut fields = answer_fields(resp, plan);
    match upstream_len {
        Some(len) => {
            fields.insert(http::header::CONTENT_LENGTH, len);
        }
        None if !session.is_http2() => {
            fields.insert(http::header::TRANSFER_ENCODING, HeaderValue::from_static("chunked"));
        }
        None => {}
    }
    header::response(status, fields)
}
