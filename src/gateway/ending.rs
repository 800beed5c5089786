//! How an answer ends. Every gateway answer is sent in two parts: whatever may go out at once
//! (headers, earlier stream events) and its [`Ending`], which the gateway sends only after the
//! request's receipt is committed (docs/API.md, "No answer without its receipt").

use bytes::{Bytes, BytesMut};
use http::header::{HeaderMap, HeaderValue};
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use pingora::{Error, ErrorType};

use super::header;
use super::responses;
use super::sse::write_event;
use crate::checks::pipeline::Cached;
use crate::error::{ApiError, ErrorKind};
use crate::providers::Dialect;
use crate::providers::Flavor;

pub enum Ending {
    /// Nothing has been sent: the whole answer.
    Whole(Box<ResponseHeader>, Bytes),
    /// The header and all but these last bytes are out. `stream` is set for event streams,
    /// which can end with an error event instead.
    Tail { bytes: Option<Bytes>, stream: Option<(Dialect, Flavor)> },
    /// The client went away: nothing more can reach it.
    Gone,
    /// The answer cannot end cleanly (the upstream broke off mid-body): the connection is cut.
    Abort,
}

impl Ending {
    pub fn json(status: u16, body: Vec<u8>, headers: &[(&'static str, String)]) -> Ending {
        Self::whole(status, "application/json", Bytes::from(body), headers)
    }

    pub fn error(e: &ApiError, flavor: Flavor, mut headers: Vec<(&'static str, String)>) -> Ending {
        headers.extend(e.headers.iter().cloned());
        // The openai and anthropic SDKs retry 408, 409, 429 and 5xx unless told not to; a refusal
        // that no retry can change (a budget, a policy, a bad body) says so explicitly.
        let status = e.status();
        let final_refusal = (400..500).contains(&status) && !matches!(status, 408 | 409 | 429);
        if final_refusal && !headers.iter().any(|(k, _)| *k == "x-should-retry") {
            headers.push(("x-should-retry", "false".to_string()));
        }
        Self::json(e.status(), e.body(flavor), &headers)
    }

    /// A cached answer (JSON, or the SSE bytes a streamed request was answered with).
    pub fn cached(hit: &Cached, headers: &[(&'static str, String)]) -> Ending {
        Self::whole(hit.status, &hit.content_type, hit.body.clone(), headers)
    }

    fn whole(status: u16, content_type: &str, body: Bytes, headers: &[(&'static str, String)]) -> Ending {
        let mut map = HeaderMap::with_capacity(2 + headers.len());
        match HeaderValue::from_str(content_type) {
            Ok(v) => map.insert(http::header::CONTENT_TYPE, v),
            Err(_) => map.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream")),
        };
        map.insert(http::header::CONTENT_LENGTH, HeaderValue::from(body.len()));
        header::set_ours(&mut map, headers);
        Ending::Whole(Box::new(header::response(status, map)), body)
    }

    /// What the client gets instead when the receipt could not be committed: never a clean
    /// ending. A whole answer becomes 503 `unavailable`, a stream ends with an error event, a
    /// large body already under way is cut off.
    pub fn uncommitted(self, flavor: Flavor, headers: &[(&'static str, String)]) -> Ending {
        let e = ApiError::new(
            ErrorKind::Unavailable,
            "the request's receipt could not be recorded, so its answer is withheld; retry shortly",
        );
        match self {
            Ending::Whole(..) => Ending::error(&e, flavor, headers.to_vec()),
            Ending::Tail { stream: Some((dialect, flavor)), .. } => {
                Ending::Tail { bytes: Some(error_event(dialect, flavor, &e)), stream: None }
            }
            Ending::Tail { stream: None, .. } | Ending::Abort => Ending::Abort,
            Ending::Gone => Ending::Gone,
        }
    }

    /// The status the client sees (for metrics), when this ending decides it.
    pub fn status(&self) -> Option<u16> {
        match self {
            Ending::Whole(h, _) => Some(h.status.as_u16()),
            _ => None,
        }
    }

    /// Sends the ending. `Err` only for [`Ending::Abort`]: Pingora then drops the connection
    /// without ending the answer (see `Gateway::fail_to_proxy`).
    pub async fn send(self, session: &mut Session) -> pingora::Result<()> {
        match self {
            Ending::Whole(header, body) => {
                // A client gone by now is not an error of ours: the receipt is already written.
                if session.write_response_header(header, false).await.is_ok() {
                    let _ = session.write_response_body(Some(body), true).await;
                }
                Ok(())
            }
            Ending::Tail { bytes, .. } => {
                let _ = session.write_response_body(bytes, true).await;
                Ok(())
            }
            Ending::Gone => Ok(()),
            Ending::Abort => Err(Error::explain(ErrorType::WriteError, "the answer is cut off without its end")),
        }
    }
}

/// A refusal in the stream's own format, as its last event.
pub fn error_event(dialect: Dialect, flavor: Flavor, e: &ApiError) -> Bytes {
    let mut out = BytesMut::new();
    if dialect == Dialect::Responses {
        write_event(&mut out, "event: error\n", &responses::error_event(e.envelope(flavor)));
        return out.freeze();
    }
    out.extend_from_slice(dialect.error_event_line());
    write_event(&mut out, "", &e.envelope(flavor));
    out.freeze()
}
