//! Reading the whole request body, bounded by the configured limit.

use bytes::{Bytes, BytesMut};
use pingora::proxy::Session;

use crate::error::{ApiError, ErrorKind};

fn too_large(limit: usize) -> ApiError {
    ApiError::new(ErrorKind::PayloadTooLarge, format!("request body exceeds the limit of {limit} bytes"))
}

/// How long an over-limit body is still read and discarded, so the client sees the 413
/// instead of a connection reset (closing a socket with unread data makes the kernel send RST).
const DISCARD_FOR: std::time::Duration = std::time::Duration::from_secs(2);

async fn discard_rest(session: &mut Session) {
    let _ = tokio::time::timeout(DISCARD_FOR, session.drain_request_body()).await;
}

pub async fn read(session: &mut Session, limit: usize) -> Result<Bytes, ApiError> {
    let declared = session
        .req_header()
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<usize>().ok());
    // Refuse before reading a byte when the client says up front it is too large.
    if declared.is_some_and(|n| n > limit) {
        discard_rest(session).await;
        return Err(too_large(limit));
    }
    // A body that arrives as one chunk (most chat requests) is kept as it is, not copied.
    let mut first: Option<Bytes> = None;
    let mut buf = BytesMut::new();
    loop {
        match session.read_request_body().await {
            Ok(Some(chunk)) => {
                let have = first.as_ref().map_or(0, Bytes::len) + buf.len();
                if have + chunk.len() > limit {
                    discard_rest(session).await;
                    return Err(too_large(limit));
                }
                if first.is_none() && buf.is_empty() {
                    first = Some(chunk);
                    continue;
                }
                if let Some(f) = first.take() {
                    buf.reserve(declared.unwrap_or(8 * 1024).min(limit).max(f.len() + chunk.len()));
                    buf.extend_from_slice(&f);
                }
                buf.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(first.unwrap_or_else(|| buf.freeze())),
            Err(e) => {
                return Err(ApiError::invalid(format!("could not read the request body: {}", e.etype().as_str())))
            }
        }
    }
}
