//! Writing gateway answers that do not come from an upstream (errors, mostly).

use bytes::Bytes;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;

use crate::error::{ApiError, Flavor};

pub async fn json(
    session: &mut Session,
    status: u16,
    body: Vec<u8>,
    request_id: &str,
    extra: &[(&'static str, String)],
) -> pingora::Result<()> {
    let mut h = ResponseHeader::build(status, Some(4 + extra.len()))?;
    h.insert_header("content-type", "application/json")?;
    h.insert_header("content-length", body.len().to_string())?;
    h.insert_header("x-request-id", request_id)?;
    for (k, v) in extra {
        h.insert_header(*k, v.as_str())?;
    }
    session.write_response_header(Box::new(h), false).await?;
    session.write_response_body(Some(Bytes::from(body)), true).await
}

pub async fn error(session: &mut Session, e: &ApiError, flavor: Flavor, request_id: &str) -> pingora::Result<()> {
    let mut extra = Vec::new();
    if let Some(s) = e.retry_after {
        extra.push(("retry-after", s.to_string()));
    }
    json(session, e.status(), e.body(flavor), request_id, &extra).await
}
