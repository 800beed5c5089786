//! Writing gateway answers that do not come from an upstream (errors, mostly).

use bytes::Bytes;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;

use crate::error::{ApiError, Flavor};
use crate::pipeline::Cached;

pub async fn json(
    session: &mut Session,
    status: u16,
    body: Vec<u8>,
    headers: &[(&'static str, String)],
) -> pingora::Result<()> {
    let mut h = ResponseHeader::build(status, Some(2 + headers.len()))?;
    h.insert_header("content-type", "application/json")?;
    h.insert_header("content-length", body.len().to_string())?;
    for (k, v) in headers {
        h.insert_header(*k, v.as_str())?;
    }
    session.write_response_header(Box::new(h), false).await?;
    session.write_response_body(Some(Bytes::from(body)), true).await
}

pub async fn error(
    session: &mut Session,
    e: &ApiError,
    flavor: Flavor,
    mut headers: Vec<(&'static str, String)>,
) -> pingora::Result<()> {
    headers.extend(e.headers.iter().cloned());
    json(session, e.status(), e.body(flavor), &headers).await
}

/// Replays a cached answer (JSON, or the SSE bytes a streamed request was answered with).
pub async fn cached(session: &mut Session, hit: &Cached, headers: &[(&'static str, String)]) -> pingora::Result<()> {
    let mut h = ResponseHeader::build(hit.status, Some(2 + headers.len()))?;
    h.insert_header("content-type", hit.content_type.as_str())?;
    h.insert_header("content-length", hit.body.len().to_string())?;
    for (k, v) in headers {
        h.insert_header(*k, v.as_str())?;
    }
    session.write_response_header(Box::new(h), false).await?;
    session.write_response_body(Some(hit.body.clone()), true).await
}
