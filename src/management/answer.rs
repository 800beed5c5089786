//! Writes a handler's answer (or its error, in the one envelope) to the management session,
//! and counts it.

use bytes::Bytes;
use pingora::http::ResponseHeader;
use pingora::protocols::http::ServerSession;

use super::handler::{BodyStream, Handled, Reply};
use crate::error::ApiError;
use crate::metrics::METRICS;
use crate::providers::Flavor;

/// Writes the answer; false when the connection cannot be reused.
pub async fn answer(http: &mut ServerSession, reply: Handled) -> bool {
    let method = http.req_header().method.to_string();
    let (status, written) = match reply {
        Ok(Reply::Json(status, v)) => {
            let body = serde_json::to_vec(&v).unwrap_or_default();
            (status, write_whole(http, json_header(status, body.len()), body).await)
        }
        Ok(Reply::NoContent) => {
            let h = ResponseHeader::build(204, Some(1)).expect("valid status");
            (204, write_whole(http, h, Vec::new()).await)
        }
        Ok(Reply::Bytes { headers, body }) => (200, write_page(http, 200, headers, body).await),
        Ok(Reply::Page { status, headers, body }) => (status, write_page(http, status, headers, body).await),
        Ok(Reply::Stream { headers, body }) => (200, write_stream(http, headers, body).await),
        Err(e) => (e.status(), write_error(http, e).await),
    };
    METRICS.management_requests.with_label_values(&[&method, &status.to_string()]).inc();
    written
}

async fn write_page(
    http: &mut ServerSession,
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
) -> bool {
    let mut h = ResponseHeader::build(status, Some(headers.len() + 1)).expect("valid status");
    for (k, v) in headers {
        let _ = h.append_header(k, v);
    }
    let _ = h.insert_header("content-length", body.len().to_string());
    write_whole(http, h, body).await
}

async fn write_error(http: &mut ServerSession, e: ApiError) -> bool {
    METRICS.errors.with_label_values(&[e.kind.type_name(), "management"]).inc();
    let body = e.body(Flavor::Plain);
    let mut h = json_header(e.status(), body.len());
    for (k, v) in &e.headers {
        let _ = h.insert_header(*k, v.as_str());
    }
    if e.status() == 413 {
        // The rest of the body was not read: the connection cannot be reused.
        let _ = h.insert_header("connection", "close");
        http.set_keepalive(None);
    }
    write_whole(http, h, body).await
}

fn json_header(status: u16, len: usize) -> ResponseHeader {
    let mut h = ResponseHeader::build(status, Some(3)).expect("valid status");
    let _ = h.insert_header("content-type", "application/json");
    let _ = h.insert_header("content-length", len.to_string());
    h
}

async fn write_whole(http: &mut ServerSession, header: ResponseHeader, body: Vec<u8>) -> bool {
    if http.write_response_header(Box::new(header)).await.is_err() {
        return false;
    }
    if body.is_empty() {
        return true;
    }
    http.write_response_body(Bytes::from(body), true).await.is_ok()
}

async fn write_stream(
    http: &mut ServerSession,
    headers: Vec<(&'static str, String)>,
    mut body: Box<dyn BodyStream>,
) -> bool {
    let mut h = ResponseHeader::build(200, Some(headers.len() + 1)).expect("valid status");
    for (k, v) in headers {
        let _ = h.insert_header(k, v);
    }
    if !http.is_http2() {
        let _ = h.insert_header("transfer-encoding", "chunked");
    }
    if http.write_response_header(Box::new(h)).await.is_err() {
        return false;
    }
    loop {
        match body.next().await {
            Ok(Some(chunk)) => {
                if http.write_response_body(chunk, false).await.is_err() {
                    return false;
                }
            }
            Ok(None) => return http.write_response_body(Bytes::new(), true).await.is_ok(),
            Err(e) => {
                // Headers are out: all we can do is cut the response short so it is not mistaken
                // for a complete one.
                log::error!("streamed response failed: {e}");
                return false;
            }
        }
    }
}
