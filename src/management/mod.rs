//! The management API (`/v1/...`, `/status`): a Pingora HTTP app in the gateway's process.
//!
//! Authentication and tenant scoping happen once, in [`ManagementApp::dispatch`]: every handler
//! receives the caller's [`Caller`] and only ever queries with its tenant id, so another
//! tenant's ids simply are not found (404, never 403).

mod keys;
mod providers;
mod status;

use std::sync::Arc;

use async_trait::async_trait;
use bytes::BytesMut;
use http::{Method, Response};
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::app::App;
use crate::error::{ApiError, ErrorKind, Flavor};
use crate::metrics::METRICS;
use crate::snapshot::KeyEntry;

pub struct ManagementApp {
    app: Arc<App>,
}

impl ManagementApp {
    pub fn new(app: Arc<App>) -> Self {
        ManagementApp { app }
    }
}

/// The authenticated key behind a management call.
pub struct Caller {
    pub key: Arc<KeyEntry>,
}

impl Caller {
    pub fn tenant(&self) -> &str {
        self.key.tenant_id()
    }
    pub fn require_manager(&self) -> Result<(), ApiError> {
        if self.key.is_manager() {
            Ok(())
        } else {
            Err(ApiError::forbidden())
        }
    }
}

/// A handler's answer.
pub enum Reply {
    Json(u16, Value),
    NoContent,
}

pub type Handled = Result<Reply, ApiError>;

/// One request as the handlers see it.
pub struct Req {
    pub method: Method,
    pub segments: Vec<String>,
    pub query: Vec<(String, String)>,
    pub body: bytes::Bytes,
}

impl Req {
    /// The body as JSON of type `T`; errors name the offending field. An empty body reads as `{}`.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, ApiError> {
        let body: &[u8] = if self.body.iter().all(u8::is_ascii_whitespace) { b"{}" } else { &self.body };
        let mut de = serde_json::Deserializer::from_slice(body);
        let parsed: Result<T, _> = serde_path_to_error::deserialize(&mut de);
        parsed.map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            let msg = inner.to_string();
            let msg = msg.split(" at line ").next().unwrap_or(&msg).to_string();
            if inner.is_syntax() || inner.is_eof() {
                ApiError::invalid(format!("request body is not valid JSON: {msg}"))
            } else if path.is_empty() || path == "." {
                ApiError::invalid(format!("invalid request body: {msg}"))
            } else {
                ApiError::invalid(format!("field `{path}`: {msg}"))
            }
        })
    }

    pub fn query(&self, name: &str) -> Option<&str> {
        self.query.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    fn seg(&self) -> Vec<&str> {
        self.segments.iter().map(String::as_str).collect()
    }
}

fn parse_query(q: Option<&str>) -> Vec<(String, String)> {
    let Some(q) = q else { return Vec::new() };
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

pub fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                match u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz"), 16) {
                    Ok(v) => {
                        out.push(v);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn bearer(session: &ServerSession) -> Option<String> {
    let v = session.req_header().headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim().to_string())
}

async fn read_body(session: &mut ServerSession, limit: usize) -> Result<bytes::Bytes, ApiError> {
    let mut buf = BytesMut::new();
    loop {
        match session.read_request_body().await {
            Ok(Some(chunk)) => {
                if buf.len() + chunk.len() > limit {
                    return Err(ApiError::new(
                        ErrorKind::PayloadTooLarge,
                        format!("request body exceeds the limit of {limit} bytes"),
                    ));
                }
                buf.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(buf.freeze()),
            Err(_) => return Err(ApiError::invalid("could not read the request body")),
        }
    }
}

fn method_not_allowed() -> ApiError {
    ApiError::new(ErrorKind::MethodNotAllowed, "method not allowed on this path")
}

impl ManagementApp {
    async fn dispatch(&self, session: &mut ServerSession) -> Handled {
        let header = session.req_header();
        let method = header.method.clone();
        let path = header.uri.path().to_string();
        let query = parse_query(header.uri.query());
        let segments: Vec<String> =
            path.trim_matches('/').split('/').filter(|s| !s.is_empty()).map(percent_decode).collect();

        if segments == ["status"] {
            return match method {
                Method::GET => status::get(&self.app).await,
                _ => Err(method_not_allowed()),
            };
        }
        if segments.first().map(String::as_str) != Some("v1") {
            return Err(ApiError::not_found(&format!("route {path}")));
        }
        let snap = self.app.snapshot.load();
        let key = bearer(session).and_then(|k| snap.key(&k).cloned()).ok_or_else(ApiError::unauthorized)?;
        key.touch();
        let caller = Caller { key };
        let body = read_body(session, self.app.config.limits.management_max_body_bytes).await?;
        let req = Req { method, segments, query, body };
        self.route(&caller, &req).await
    }

    async fn route(&self, caller: &Caller, req: &Req) -> Handled {
        let app = &self.app;
        let m = &req.method;
        match req.seg()[1..] {
            ["keys"] => match *m {
                Method::GET => keys::list(app, caller, req).await,
                Method::POST => keys::create(app, caller, req).await,
                _ => Err(method_not_allowed()),
            },
            ["keys", id] => match *m {
                Method::DELETE => keys::delete(app, caller, id).await,
                _ => Err(method_not_allowed()),
            },
            ["keys", id, "limits"] => match *m {
                Method::PATCH => keys::set_limits(app, caller, id, req).await,
                _ => Err(method_not_allowed()),
            },
            ["providers"] => match *m {
                Method::GET => providers::list(app, caller).await,
                _ => Err(method_not_allowed()),
            },
            ["providers", p] => match *m {
                Method::PUT => providers::put(app, caller, p, req).await,
                _ => Err(method_not_allowed()),
            },
            ["providers", p, "test"] => match *m {
                Method::POST => providers::test(app, caller, p).await,
                _ => Err(method_not_allowed()),
            },
            _ => Err(ApiError::not_found(&format!("route /{}", req.segments.join("/")))),
        }
    }
}

fn json_response(status: u16, body: Vec<u8>) -> Response<Vec<u8>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .header("content-length", body.len())
        .body(body)
        .unwrap_or_else(|_| Response::new(Vec::new()))
}

#[async_trait]
impl ServeHttp for ManagementApp {
    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        let method = session.req_header().method.to_string();
        let resp = match self.dispatch(session).await {
            Ok(Reply::Json(status, v)) => json_response(status, serde_json::to_vec(&v).unwrap_or_default()),
            Ok(Reply::NoContent) => Response::builder().status(204).body(Vec::new()).unwrap_or_default(),
            Err(e) => {
                METRICS.errors.with_label_values(&[e.kind.type_name(), "management"]).inc();
                let mut r = json_response(e.status(), e.body(Flavor::Plain));
                if e.status() == 413 {
                    // The rest of the body was not read: the connection cannot be reused.
                    r.headers_mut().insert("connection", http::HeaderValue::from_static("close"));
                }
                r
            }
        };
        METRICS.management_requests.with_label_values(&[&method, resp.status().as_str()]).inc();
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("eu-ai-act%3Aart-12"), "eu-ai-act:art-12");
        assert_eq!(percent_decode("a+b%20c"), "a b c");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
    }
}
