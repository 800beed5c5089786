//! The management API (`/v1/...`, `/status`): a Pingora HTTP app in the gateway's process.
//!
//! Authentication and tenant scoping happen once, in [`ManagementApp::dispatch`]: every handler
//! receives the caller's [`Caller`] and only ever queries with its tenant id, so another
//! tenant's ids simply are not found (404, never 403).

mod analytics;
mod budget_requests;
mod budgets;
mod compliance;
mod keys;
mod members;
mod policies;
mod providers;
mod receipts;
mod status;
mod teams;

use std::sync::Arc;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use http::Method;
use pingora::apps::{HttpPersistentSettings, HttpServerApp, ReusedHttpStream};
use pingora::http::ResponseHeader;
use pingora::protocols::http::ServerSession;
use pingora::server::ShutdownWatch;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
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
    /// A body produced piece by piece (exports), so large answers never sit in memory whole.
    Stream {
        headers: Vec<(&'static str, String)>,
        body: Box<dyn BodyStream>,
    },
}

/// A streamed response body.
#[async_trait]
pub trait BodyStream: Send {
    /// The next piece; `Ok(None)` at the end. An error ends the response early.
    async fn next(&mut self) -> Result<Option<Bytes>, ApiError>;
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

/// `?limit=` of a cursor-paginated list: default 50, at most 200.
fn page_limit(req: &Req) -> Result<i64, ApiError> {
    match req.query("limit") {
        None => Ok(50),
        Some(v) => v
            .parse::<i64>()
            .ok()
            .filter(|n| (1..=200).contains(n))
            .ok_or_else(|| ApiError::invalid("query `limit` must be an integer from 1 to 200")),
    }
}

/// Cuts `limit + 1` fetched rows to a page and the cursor of the next one (the last id shown,
/// when there is more).
fn paginate<T>(mut rows: Vec<T>, limit: i64, id: impl Fn(&T) -> &str) -> (Vec<T>, Option<String>) {
    let more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    let next = if more { rows.last().map(|r| id(r).to_string()) } else { None };
    (rows, next)
}

/// Distinguishes an absent field (outer None: leave unchanged) from `null` (clear it).
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// A money amount from a body: finite and not negative.
fn usd(field: &str, v: f64) -> Result<f64, ApiError> {
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(ApiError::invalid(format!("field `{field}` must be a non-negative number")))
    }
}

/// A team id from a body must name a team of the caller's tenant.
async fn tenant_team(app: &App, caller: &Caller, field: &str, id: &str) -> Result<(), ApiError> {
    match crate::store::teams::get(&app.store, caller.tenant(), id).await? {
        Some(_) => Ok(()),
        None => Err(ApiError::invalid(format!("field `{field}`: unknown team `{id}`"))),
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
            ["policies"] => match *m {
                Method::GET => policies::list(app, caller, req).await,
                Method::POST => policies::create(app, caller, req).await,
                _ => Err(method_not_allowed()),
            },
            ["policies", id] => match *m {
                Method::GET => policies::get(app, caller, id).await,
                Method::PUT => policies::replace(app, caller, id, req).await,
                Method::DELETE => policies::delete(app, caller, id).await,
                _ => Err(method_not_allowed()),
            },
            ["receipts"] => match *m {
                Method::GET => receipts::list(app, caller, req).await,
                _ => Err(method_not_allowed()),
            },
            ["receipts", "export"] => match *m {
                Method::GET => receipts::export(app, caller, req).await,
                _ => Err(method_not_allowed()),
            },
            ["receipts", id] => match *m {
                Method::GET => receipts::get(app, caller, id).await,
                _ => Err(method_not_allowed()),
            },
            ["receipts", id, "verify-chain"] => match *m {
                Method::GET => receipts::verify_chain(app, caller, id, req).await,
                _ => Err(method_not_allowed()),
            },
            ["anomalies"] => match *m {
                Method::GET => analytics::anomalies(app, caller, req).await,
                _ => Err(method_not_allowed()),
            },
            ["cache"] => match *m {
                Method::GET => analytics::cache(app, caller, req).await,
                _ => Err(method_not_allowed()),
            },
            ["team", "teams"] => match *m {
                Method::GET => teams::list(app, caller, req).await,
                Method::POST => teams::create(app, caller, req).await,
                _ => Err(method_not_allowed()),
            },
            ["team", "teams", id] => match *m {
                Method::GET => teams::get(app, caller, id).await,
                Method::PATCH => teams::update(app, caller, id, req).await,
                Method::DELETE => teams::delete(app, caller, id).await,
                _ => Err(method_not_allowed()),
            },
            ["team", "members"] => match *m {
                Method::GET => members::list(app, caller).await,
                Method::POST => members::create(app, caller, req).await,
                _ => Err(method_not_allowed()),
            },
            ["team", "members", id] => match *m {
                Method::PATCH => members::update(app, caller, id, req).await,
                Method::DELETE => members::delete(app, caller, id).await,
                _ => Err(method_not_allowed()),
            },
            ["budgets"] => match *m {
                Method::GET => budgets::list(app, caller, req).await,
                Method::POST => budgets::create(app, caller, req).await,
                _ => Err(method_not_allowed()),
            },
            ["budgets", "requests"] => match *m {
                Method::GET => budget_requests::list(app, caller, req).await,
                Method::POST => budget_requests::create(app, caller, req).await,
                _ => Err(method_not_allowed()),
            },
            ["budgets", "requests", id, decision @ ("approve" | "deny")] => match *m {
                Method::POST => budget_requests::decide(app, caller, id, decision == "approve").await,
                _ => Err(method_not_allowed()),
            },
            ["budgets", id] => match *m {
                Method::GET => budgets::get(app, caller, id).await,
                Method::PATCH => budgets::update(app, caller, id, req).await,
                Method::DELETE => budgets::delete(app, caller, id).await,
                _ => Err(method_not_allowed()),
            },
            ["compliance", "attestation"] => match *m {
                Method::GET => compliance::attestation(app, caller, req).await,
                _ => Err(method_not_allowed()),
            },
            ["compliance", "attestation", "receipts", id, "inclusion"] => match *m {
                Method::GET => compliance::inclusion(app, caller, id, req).await,
                _ => Err(method_not_allowed()),
            },
            ["compliance", "evidence-bundle"] => match *m {
                Method::GET => compliance::evidence_bundle(app, caller, req).await,
                _ => Err(method_not_allowed()),
            },
            ["compliance", "signing-keys"] => match *m {
                Method::GET => compliance::signing_keys(app, caller).await,
                _ => Err(method_not_allowed()),
            },
            ["compliance", "packs"] => match *m {
                Method::GET => compliance::packs::list(app, caller).await,
                _ => Err(method_not_allowed()),
            },
            ["compliance", "packs", framework] => match *m {
                Method::PUT => compliance::packs::put(app, caller, framework, req).await,
                Method::DELETE => compliance::packs::delete(app, caller, framework).await,
                _ => Err(method_not_allowed()),
            },
            ["compliance", "coverage", framework] => match *m {
                Method::GET => compliance::coverage::coverage(app, caller, framework).await,
                _ => Err(method_not_allowed()),
            },
            ["compliance", "coverage", framework, "controls", control, "receipts"] => match *m {
                Method::GET => compliance::coverage::control_receipts(app, caller, framework, control, req).await,
                _ => Err(method_not_allowed()),
            },
            ["compliance", "receipts", id, "controls"] => match *m {
                Method::GET => compliance::controls::receipt_controls(app, caller, id, req).await,
                _ => Err(method_not_allowed()),
            },
            _ => Err(ApiError::not_found(&format!("route /{}", req.segments.join("/")))),
        }
    }
}

fn json_header(status: u16, len: usize) -> ResponseHeader {
    let mut h = ResponseHeader::build(status, Some(3)).expect("valid status");
    let _ = h.insert_header("content-type", "application/json");
    let _ = h.insert_header("content-length", len.to_string());
    h
}

impl ManagementApp {
    /// Writes the answer; false when the connection cannot be reused.
    async fn answer(&self, http: &mut ServerSession, reply: Handled) -> bool {
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
            Ok(Reply::Stream { headers, body }) => (200, write_stream(http, headers, body).await),
            Err(e) => {
                METRICS.errors.with_label_values(&[e.kind.type_name(), "management"]).inc();
                let body = e.body(Flavor::Plain);
                let mut h = json_header(e.status(), body.len());
                if e.status() == 413 {
                    // The rest of the body was not read: the connection cannot be reused.
                    let _ = h.insert_header("connection", "close");
                    http.set_keepalive(None);
                }
                (e.status(), write_whole(http, h, body).await)
            }
        };
        METRICS.management_requests.with_label_values(&[&method, &status.to_string()]).inc();
        written
    }
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

#[async_trait]
impl HttpServerApp for ManagementApp {
    async fn process_new_http(
        self: &Arc<Self>,
        mut http: ServerSession,
        shutdown: &ShutdownWatch,
    ) -> Option<ReusedHttpStream> {
        match http.read_request().await {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => {
                log::debug!("management: cannot read request: {e}");
                return None;
            }
        }
        http.set_keepalive(if *shutdown.borrow() { None } else { Some(60) });
        let reply = self.dispatch(&mut http).await;
        if !self.answer(&mut http, reply).await {
            return None;
        }
        let settings = HttpPersistentSettings::for_session(&http);
        match http.finish().await {
            Ok(stream) => stream.map(|s| ReusedHttpStream::from_reusable_stream(s, settings)),
            Err(_) => None,
        }
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
