//! The management listener: a Pingora HTTP app in the gateway's process. It reads a request,
//! finds its route in [`routes`], and writes the handler's answer.
//!
//! Authentication and tenant scoping happen once, in [`ManagementApp::dispatch`]: every handler
//! receives the caller's [`Caller`] and only ever queries with its tenant id, so another
//! tenant's ids simply are not found (404, never 403).

use std::sync::Arc;

use async_trait::async_trait;
use bytes::BytesMut;
use pingora::apps::{HttpPersistentSettings, HttpServerApp, ReusedHttpStream};
use pingora::protocols::http::ServerSession;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;

use super::answer::answer;
use super::console::{self, Console};
use super::handler::{Caller, Handled, Reply, Req};
use super::nul;
use super::query::{parse_query, percent_decode};
use super::routes::{self, Call, Found, KeyedHandler, Route, Serve};
use crate::app::App;
use crate::error::{ApiError, ErrorKind};
use crate::receipts::admin;
use crate::store::audit;

/// Cheap to clone: the listener's service and the console's session sweep share one.
#[derive(Clone)]
pub struct ManagementApp {
    app: Arc<App>,
    console: Arc<Console>,
}

impl ManagementApp {
    pub fn new(app: Arc<App>) -> Self {
        let console = Arc::new(Console::new(&app));
        ManagementApp { app, console }
    }

    /// The background service that ends expired console sessions (see [`SessionSweep`]).
    pub fn session_sweep(&self) -> SessionSweep {
        SessionSweep(self.clone())
    }
}

/// How often expired console sessions are looked for. A session nobody comes back to keeps its
/// own key (a single sign-on session's, `console::run_key`) until then: at most this long past
/// its expiry. A sweep with nothing to do is two small statements.
const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// Ends expired console sessions now and then, revoking their own keys through this listener's
/// own dispatch (admin receipts and `key.revoked` as for any revocation). Several processes on
/// one database may each sweep: a key already revoked counts as done.
pub struct SessionSweep(ManagementApp);

#[async_trait]
impl BackgroundService for SessionSweep {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(SWEEP_EVERY) => {
                    if let Err(e) = console::sweep(&self.0.app, &self.0).await {
                        log::warn!("console: session sweep failed (retried at the next one): {e}");
                    }
                }
                _ = shutdown.changed() => return,
            }
        }
    }
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

/// The client's `X-Request-Id` (printable, at most 128 bytes), else a new UUID.
fn request_id(session: &ServerSession) -> String {
    let given = session.req_header().headers.get("x-request-id").and_then(|v| v.to_str().ok());
    match given.map(str::trim) {
        Some(id) if !id.is_empty() && id.len() <= 128 => id.to_string(),
        _ => uuid::Uuid::now_v7().to_string(),
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
        if segments.first().map(String::as_str) == Some("console") && self.app.config.console.enabled {
            return Ok(self.console(session, segments, query).await);
        }
        if segments.first().map(String::as_str) != Some("v1") {
            return self.public(method.as_str(), &path, &segments).await;
        }
        let caller = self.authenticate(session)?;
        let body = read_body(session, self.app.config.limits.management_max_body_bytes).await?;
        nul::check_request(&segments, &query)?;
        let request_id = request_id(session);
        let req = Req { method, segments, query, body, request_id };
        self.route(&caller, &req).await
    }

    /// A `/console/...` request, to the console (which calls back into [`Self::call`]).
    async fn console(
        &self,
        session: &mut ServerSession,
        mut segments: Vec<String>,
        query: Vec<(String, String)>,
    ) -> Reply {
        segments.remove(0);
        let header =
            |name: &str| session.req_header().headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
        let (cookie, origin, fetch_site) = (header("cookie"), header("origin"), header("sec-fetch-site"));
        let host = header("host").or_else(|| session.req_header().uri.authority().map(|a| a.to_string()));
        let client = session.client_addr().and_then(|a| a.as_inet()).map(|a| a.ip());
        let method = session.req_header().method.clone();
        let body = match read_body(session, self.app.config.limits.management_max_body_bytes).await {
            Ok(b) => b,
            Err(e) => return console::api_error_reply(&e),
        };
        let req = console::Request {
            method,
            path: segments,
            query,
            cookie: cookie.unwrap_or_default(),
            origin,
            host: host.unwrap_or_default(),
            fetch_site,
            body,
            client,
        };
        self.console.serve(&self.app, self, req).await
    }

    /// A path outside `/v1`: served without a key when the table has it, else 404.
    async fn public(&self, method: &str, path: &str, segments: &[String]) -> Handled {
        let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
        match routes::find(method, &segs) {
            Found::Route(r, _) => match r.serve {
                Serve::Public(handler) => handler(&self.app).await,
                Serve::Keyed(_) => Err(ApiError::not_found(&format!("route {path}"))),
            },
            Found::MethodNotAllowed => Err(method_not_allowed()),
            Found::NotFound => Err(ApiError::not_found(&format!("route {path}"))),
        }
    }

    /// The caller behind the request's bearer key (touched as used), or 401.
    fn authenticate(&self, session: &ServerSession) -> Result<Caller, ApiError> {
        let snap = self.app.snapshot.load();
        let presented = bearer(session).ok_or_else(ApiError::unauthorized)?;
        let key = snap.key(&presented).cloned().ok_or_else(ApiError::unauthorized)?;
        key.touch();
        Ok(Caller { key, presented: crate::secrets::Secret::new(presented) })
    }

    /// A `/v1` request of an authenticated caller, to the handler its route names.
    async fn route(&self, caller: &Caller, req: &Req) -> Handled {
        let segs = req.seg();
        let not_found = || ApiError::not_found(&format!("route /{}", req.segments.join("/")));
        match routes::find(req.method.as_str(), &segs) {
            Found::Route(r, params) => match r.serve {
                Serve::Keyed(handler) => self.recorded(r, Call { app: &self.app, caller, req, params }, handler).await,
                Serve::Public(_) => Err(not_found()),
            },
            Found::MethodNotAllowed => Err(method_not_allowed()),
            Found::NotFound => Err(not_found()),
        }
    }

    /// Runs a keyed route's handler, recording a write or an evidence read in the tenant's log
    /// (docs/log.md §8): the handler's write appends its `admin` receipt in its own transaction
    /// (`store::audit`); an action that writes no row of ours is recorded after it; a refused
    /// write (403) is recorded as `deny`, having changed nothing.
    async fn recorded(&self, r: &Route, call: Call<'_>, handler: KeyedHandler) -> Handled {
        let (caller, req) = (call.caller, call.req);
        let subject = call.params.first().map_or(String::new(), |p| p.to_string());
        if caller.key.is_auditor() && !routes::auditor_may(r) {
            let refused = ApiError::auditor_refused(&format!("{} {}", r.method, r.path));
            return self.refused(r, caller, req, subject, refused).await;
        }
        let Some(action) = routes::action(r) else { return handler(call).await };
        let slot = audit::Slot::new(Box::new(self.entry(caller, req, action, true)));
        let out = audit::scope(slot.clone(), handler(call)).await;
        match out {
            Ok(reply) if !slot.taken() => {
                let entry = self.entry(caller, req, action, true);
                audit::scope(audit::Slot::new(Box::new(entry)), self.app.store.note(subject)).await?;
                Ok(reply)
            }
            Err(e) if e.status() == 403 => self.refused(r, caller, req, subject, e).await,
            out => out,
        }
    }

    /// Answers a refused call with `refused`, after recording a refused write as `deny`.
    async fn refused(&self, r: &Route, caller: &Caller, req: &Req, subject: String, refused: ApiError) -> Handled {
        if let (true, Some(action)) = (routes::is_write(r), routes::action(r)) {
            let entry = self.entry(caller, req, action, false);
            audit::scope(audit::Slot::new(Box::new(entry)), self.app.store.note(subject)).await?;
        }
        Err(refused)
    }

    /// The admin receipt of `caller`'s `action`, waiting for its subject.
    fn entry(&self, caller: &Caller, req: &Req, action: &str, granted: bool) -> admin::Entry {
        let call = admin::Call {
            tenant: caller.tenant(),
            actor: &caller.key.id,
            action,
            request_id: req.request_id.clone(),
            granted,
        };
        admin::Entry::new(call, self.app.signer.clone())
    }
}

/// The console's calls: the same route table, checks and records as a request with the key.
#[async_trait]
impl console::Api for ManagementApp {
    async fn call(
        &self,
        caller: &Caller,
        method: http::Method,
        path: &str,
        query: &[(String, String)],
        body: Vec<u8>,
    ) -> Handled {
        let segments: Vec<String> =
            path.trim_matches('/').split('/').filter(|s| !s.is_empty()).map(percent_decode).collect();
        let query = query.to_vec();
        nul::check_request(&segments, &query)?;
        if segments.first().map(String::as_str) != Some("v1") {
            return self.public(method.as_str(), path, &segments).await;
        }
        let request_id = uuid::Uuid::now_v7().to_string();
        let req = Req { method, segments, query, body: body.into(), request_id };
        self.route(caller, &req).await
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
        if !answer(&mut http, reply).await {
            return None;
        }
        let settings = HttpPersistentSettings::for_session(&http);
        match http.finish().await {
            Ok(stream) => stream.map(|s| ReusedHttpStream::from_reusable_stream(s, settings)),
            Err(_) => None,
        }
    }
}
