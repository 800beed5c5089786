//! The only `impl ProxyHttp`. Each phase delegates in a few lines.
//!
//! `request_filter` does the whole exchange: authenticate, read the bounded body, parse, route,
//! run the upstream leg with our own pooled client and stream the answer back, then return
//! `Ok(true)` ("answered"). Pingora keeps the client connection, HTTP/1.1 and HTTP/2 framing,
//! keep-alive and shutdown; we never let it proxy a body, because it can only replay 64 KiB
//! (docs/architecture.md, "The request path and the 64 KiB trap"). `logging` runs for every
//! request and records metrics.

use std::time::Instant;

use async_trait::async_trait;
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use pingora::upstreams::peer::HttpPeer;
use pingora::{Error, ErrorType};

use super::aside::Aside;
use super::context::{new_id, Ctx};
use super::ending::Ending;
use super::relay::UpstreamOutcome;
use super::span::RequestSpan;
use super::state::Gateway;
use crate::checks::pipeline;
use crate::error::ErrorKind;
use crate::metrics::{self, METRICS};
use crate::providers::Flavor;
use crate::providers::ProviderName;
use crate::providers::Route;

#[async_trait]
impl ProxyHttp for Gateway {
    type CTX = Ctx;

    /// Runs first for every request: pins the snapshot this request will see throughout.
    fn new_ctx(&self) -> Ctx {
        Ctx {
            started: Instant::now(),
            snap: self.app.snapshot.load(),
            request_id: String::new(),
            receipt_id: new_id(),
            end_user: None,
            trace: None,
            _in_flight: self.app.receipts.in_flight(),
            route: None,
            aside: None,
            key: None,
            provider: None,
            model: String::new(),
            status: 0,
            error: None,
            usage: None,
            cost_usd: 0.0,
            upstream: UpstreamOutcome::Skipped,
            exchange: None,
            body_changed: false,
            cx: pipeline::Ctx::default(),
            captured: None,
            tool: None,
            tool_error: false,
            attempts: Vec::new(),
        }
    }

    /// Answers every request itself (`Ok(true)`): see the module doc for why. `Err` only when
    /// an answer must be cut off without its end.
    async fn request_filter(&self, session: &mut Session, ctx: &mut Ctx) -> pingora::Result<bool> {
        ctx.started = Instant::now();
        ctx.request_id = session
            .req_header()
            .headers
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty() && v.len() <= 128)
            .map(str::to_string)
            .unwrap_or_else(new_id);
        ctx.trace = self.app.telemetry.as_ref().map(|t| RequestSpan::start(t, session.req_header(), &ctx.request_id));
        let req = session.req_header();
        ctx.aside = Aside::resolve(&req.method, req.uri.path());
        let flavor_of_aside = ctx.aside.as_ref().map(|a| a.flavor(&req.headers));
        let ending = match self.handle(session, ctx).await {
            Ok(ending) => ending,
            Err(e) => {
                let flavor = ctx.route.map(Route::flavor).or(flavor_of_aside).unwrap_or(Flavor::Plain);
                ctx.status = e.status();
                ctx.error = Some(e.kind);
                Ending::error(&e, flavor, ctx.answer_headers())
            }
        };
        self.end(session, ctx, ending).await
    }

    /// Never reached: `request_filter` always answers.
    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut Ctx) -> pingora::Result<Box<HttpPeer>> {
        Err(Error::explain(ErrorType::InternalError, "the gateway does not proxy through pingora"))
    }

    /// `request_filter` fails only to cut an answer off without its end ([`Ending::Abort`]):
    /// nothing more is written, and the connection is not reused.
    async fn fail_to_proxy(&self, _session: &mut Session, _e: &Error, _ctx: &mut Ctx) -> FailToProxy {
        FailToProxy { error_code: 0, can_reuse_downstream: false }
    }

    /// Runs once per request after the answer, also on errors: metrics. (The receipt was
    /// committed, or queued, before the answer ended.)
    async fn logging(&self, _session: &mut Session, e: Option<&Error>, ctx: &mut Ctx) {
        let route = ctx.route.map(Route::label).or(ctx.aside.as_ref().map(Aside::label)).unwrap_or("unknown");
        let provider = ctx.provider.map(ProviderName::as_str).unwrap_or("none");
        let status = if ctx.status == 0 && e.is_some() { 500 } else { ctx.status };
        metrics::local::request(route, provider, status, ctx.started.elapsed().as_secs_f64());
        if let Some(t) = ctx.trace.take() {
            t.finish(status, ctx.error.map(ErrorKind::type_name));
        }
        if let Some(kind) = ctx.error {
            METRICS.errors.with_label_values(&[kind.type_name(), "gateway"]).inc();
        }
    }
}
