//! The management API (`/v1/...`, `/status`): a Pingora HTTP app in the gateway's process.
//!
//! Authentication and tenant scoping happen once, in [`ManagementApp::dispatch`]: every handler
//! receives the caller's [`Caller`] and only ever queries with its tenant id, so another
//! tenant's ids simply are not found (404, never 403).

mod analytics;
mod billing;
mod budget_requests;
mod budgets;
mod compliance;
mod keys;
mod members;
mod nul;
mod openapi;
mod policies;
mod prompts;
mod providers;
mod receipts;
pub mod routes;
mod status;
mod teams;
mod tool_servers;
mod webhooks;

use std::sync::Arc;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use http::Method;
use pingora::apps::{HttpPersistentSettings, HttpServerApp, ReusedHttpStream};
use pingora::http::ResponseHeader;
use pingora::protocols::http::ServerSession;
use pingora::server::ShutdownWatch;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::app::App;
use crate::error::{ApiError, ErrorKind};
use crate::metrics::METRICS;
use crate::providers::Flavor;
use crate::snapshot::KeyEntry;
use routes::{Found, Op};

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
    /// The key as presented (a prompt run sends it on to the gateway, which checks it again).
    pub presented: crate::secrets::Secret,
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

impl Reply {
    /// A typed answer, serialized as it will be sent (field order kept).
    pub fn json<T: Serialize>(status: u16, body: &T) -> Reply {
        match serde_json::to_value(body) {
            Ok(v) => Reply::Json(status, v),
            Err(e) => Reply::Json(500, ApiError::internal(e.to_string()).envelope(Flavor::Plain)),
        }
    }
}

/// One page of a cursor-paginated list: pass `nextCursor` back as `?cursor=` for the next one.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Page<T> {
    pub data: Vec<T>,
    /// Null on the last page.
    pub next_cursor: Option<String>,
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
        let parsed = parsed.map_err(|e| {
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
        })?;
        nul::check_json(body)?;
        Ok(parsed)
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

/// A query component: `+` is a space, `%XX` a byte (a malformed `%` stays as it is).
pub fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(&s.replace('+', " ")).decode_utf8_lossy().into_owned()
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

        // Only `/v1/...` needs a key; anything else is public (`/status`, `/openapi.json`) or
        // unknown. An unknown `/v1` path still answers 401 first: no route oracle without a key.
        if segments.first().map(String::as_str) != Some("v1") {
            let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
            return match routes::find(method.as_str(), &segs) {
                Found::Route(r, _) if r.op == Op::Status => status::get(&self.app).await,
                Found::Route(r, _) if r.op == Op::OpenApi => Ok(openapi::openapi_json()),
                Found::MethodNotAllowed => Err(method_not_allowed()),
                _ => Err(ApiError::not_found(&format!("route {path}"))),
            };
        }
        let snap = self.app.snapshot.load();
        let presented = bearer(session).ok_or_else(ApiError::unauthorized)?;
        let key = snap.key(&presented).cloned().ok_or_else(ApiError::unauthorized)?;
        key.touch();
        let caller = Caller { key, presented: crate::secrets::Secret::new(presented) };
        let body = read_body(session, self.app.config.limits.management_max_body_bytes).await?;
        nul::check_request(&segments, &query)?;
        let req = Req { method, segments, query, body };
        self.route(&caller, &req).await
    }

    async fn route(&self, caller: &Caller, req: &Req) -> Handled {
        let app = &self.app;
        let (op, p) = match routes::find(req.method.as_str(), &req.seg()) {
            Found::Route(r, params) => (r.op, params),
            Found::MethodNotAllowed => return Err(method_not_allowed()),
            Found::NotFound => return Err(ApiError::not_found(&format!("route /{}", req.segments.join("/")))),
        };
        match op {
            Op::Status | Op::OpenApi => Err(ApiError::not_found(&format!("route /{}", req.segments.join("/")))),
            Op::KeysList => keys::list(app, caller, req).await,
            Op::KeyCreate => keys::create(app, caller, req).await,
            Op::KeyRevoke => keys::delete(app, caller, p[0]).await,
            Op::KeyLimits => keys::set_limits(app, caller, p[0], req).await,
            Op::ProvidersList => providers::list(app, caller).await,
            Op::ProviderPut => providers::put(app, caller, p[0], req).await,
            Op::ProviderTest => providers::test(app, caller, p[0]).await,
            Op::PoliciesList => policies::list(app, caller, req).await,
            Op::PolicyCreate => policies::create(app, caller, req).await,
            Op::PromptsList => prompts::list(app, caller, req).await,
            Op::PromptCreate => prompts::create(app, caller, req).await,
            Op::PromptGet => prompts::get(app, caller, p[0]).await,
            Op::PromptVersionsList => prompts::versions(app, caller, p[0]).await,
            Op::PromptVersionCreate => prompts::add_version(app, caller, p[0], req).await,
            Op::PromptRun => prompts::run(app, caller, req).await,
            Op::PolicyGet => policies::get(app, caller, p[0]).await,
            Op::PolicyReplace => policies::replace(app, caller, p[0], req).await,
            Op::PolicyDelete => policies::delete(app, caller, p[0]).await,
            Op::ReceiptsList => receipts::list(app, caller, req).await,
            Op::ReceiptsExport => receipts::export(app, caller, req).await,
            Op::ReceiptGet => receipts::get(app, caller, p[0]).await,
            Op::ReceiptVerifyChain => receipts::verify_chain(app, caller, p[0], req).await,
            Op::Anomalies => analytics::anomalies(app, caller, req).await,
            Op::Cache => analytics::cache(app, caller, req).await,
            Op::TeamsList => teams::list(app, caller, req).await,
            Op::TeamCreate => teams::create(app, caller, req).await,
            Op::TeamGet => teams::get(app, caller, p[0]).await,
            Op::TeamUpdate => teams::update(app, caller, p[0], req).await,
            Op::TeamDelete => teams::delete(app, caller, p[0]).await,
            Op::MembersList => members::list(app, caller).await,
            Op::MemberCreate => members::create(app, caller, req).await,
            Op::MemberUpdate => members::update(app, caller, p[0], req).await,
            Op::MemberDelete => members::delete(app, caller, p[0]).await,
            Op::BudgetsList => budgets::list(app, caller, req).await,
            Op::BudgetCreate => budgets::create(app, caller, req).await,
            Op::BudgetGet => budgets::get(app, caller, p[0]).await,
            Op::BudgetUpdate => budgets::update(app, caller, p[0], req).await,
            Op::BudgetDelete => budgets::delete(app, caller, p[0]).await,
            Op::BudgetRequestsList => budget_requests::list(app, caller, req).await,
            Op::BudgetRequestCreate => budget_requests::create(app, caller, req).await,
            Op::BudgetRequestApprove => budget_requests::approve(app, caller, p[0]).await,
            Op::BudgetRequestDeny => budget_requests::deny(app, caller, p[0]).await,
            Op::Attestation => compliance::attestation(app, caller, req).await,
            Op::Inclusion => compliance::inclusion(app, caller, p[0], req).await,
            Op::EvidenceBundle => compliance::evidence_bundle(app, caller, req).await,
            Op::SigningKeys => compliance::signing_keys(app, caller).await,
            Op::PacksList => compliance::packs::list(app, caller).await,
            Op::PackPut => compliance::packs::put(app, caller, p[0], req).await,
            Op::PackDelete => compliance::packs::delete(app, caller, p[0]).await,
            Op::Coverage => compliance::coverage::coverage(app, caller, p[0]).await,
            Op::ControlReceipts => compliance::coverage::control_receipts(app, caller, p[0], p[1], req).await,
            Op::ReceiptControls => compliance::controls::receipt_controls(app, caller, p[0], req).await,
            Op::ToolServersList => tool_servers::list(app, caller).await,
            Op::ToolServerCreate => tool_servers::create(app, caller, req).await,
            Op::ToolServerDelete => tool_servers::delete(app, caller, p[0]).await,
            Op::WebhooksList => webhooks::list(app, caller, req).await,
            Op::WebhookCreate => webhooks::create(app, caller, req).await,
            Op::WebhookDelete => webhooks::delete(app, caller, p[0]).await,
            Op::BillingCheckout => billing::checkout(app, caller, req).await,
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
                for (k, v) in &e.headers {
                    let _ = h.insert_header(*k, v.as_str());
                }
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
