//! The upstream leg: send the request, stream the answer back chunk by chunk, read usage.

use bytes::{Bytes, BytesMut};
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use serde_json::Value;

use super::sse::{event_data, SseSplitter};
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
}

/// Non-streamed answers are kept (up to this) only to read their usage at the end.
const USAGE_BODY_CAP: usize = 16 << 20;

/// Response headers that describe the upstream hop, not the answer.
const HOP_HEADERS: &[&str] =
    &["connection", "keep-alive", "transfer-encoding", "content-length", "set-cookie", "alt-svc", "proxy-connection"];

pub async fn relay(
    session: &mut Session,
    mut resp: UpstreamResponse<'_>,
    dialect: Dialect,
    hide_usage_chunk: bool,
    ids: &[(&'static str, String)],
) -> Relayed {
    let status = resp.header.status.as_u16();
    let is_sse = resp
        .header
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let upstream_len = resp.header.headers.get(http::header::CONTENT_LENGTH).cloned();

    let mut out = Relayed { status, usage: None, outcome: UpstreamOutcome::Fail, client_gone: false };
    let Ok(mut header) = ResponseHeader::build(status, Some(resp.header.headers.len() + 2)) else {
        return out;
    };
    for (name, value) in resp.header.headers.iter() {
        if !HOP_HEADERS.contains(&name.as_str()) {
            let _ = header.append_header(name.clone(), value.clone());
        }
    }
    for (k, v) in ids {
        let _ = header.insert_header(*k, v.as_str());
    }
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
                if read_event(dialect, &event, &mut out.usage) && hide_usage_chunk {
                    continue;
                }
                buf.extend_from_slice(&event);
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
        if !forward.is_empty() && session.write_response_body(Some(forward), false).await.is_err() {
            out.client_gone = true;
            break;
        }
    }
    if let Some(rest) = sse.finish() {
        read_event(dialect, &rest, &mut out.usage);
        held = Some(rest);
    }
    if !is_sse {
        out.usage = match kept.len() {
            1 => usage::from_json_bytes(dialect, &kept[0]),
            _ => usage::from_json_bytes(dialect, &kept.concat()),
        };
    }
    if !out.client_gone && session.write_response_body(held, true).await.is_err() {
        out.client_gone = true;
    }
    out.outcome = if (200..300).contains(&status) { UpstreamOutcome::Pass } else { UpstreamOutcome::Fail };
    if !out.client_gone {
        resp.release().await;
    }
    out
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

/// Bytes → the body the upstream gets: unchanged unless the gateway had to edit the JSON.
pub fn body_for_upstream(raw: &Bytes, edited: Option<&Value>) -> Bytes {
    match edited {
        Some(v) => Bytes::from(serde_json::to_vec(v).unwrap_or_else(|_| raw.to_vec())),
        None => raw.clone(),
    }
}
