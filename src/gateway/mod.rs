//! The gateway: the only `impl ProxyHttp`. Each phase delegates in a few lines.
//!
//! `request_filter` does the whole exchange: authenticate, read the bounded body, parse, route,
//! run the upstream leg with our own pooled client and stream the answer back, then return
//! `Ok(true)` ("answered"). Pingora keeps the client connection, HTTP/1.1 and HTTP/2 framing,
//! keep-alive and shutdown; we never let it proxy a body, because it can only replay 64 KiB
//! (docs/architecture.md, "The request path and the 64 KiB trap"). `logging` runs for every request and records metrics.

mod aside;
mod body;
mod catalog;
mod ending;
mod header;
mod mcp;
mod relay;
mod request;
mod responses;
mod routes;
mod sse;

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use pingora::upstreams::peer::HttpPeer;
use pingora::{Error, ErrorType};

use crate::app::App;
use crate::checks::pipeline::{self, Cached, Exchange, JsonBody, Outcome, Pipeline, Step, UpstreamOutcome};
use crate::config::{CommitMode, ProviderName};
use crate::error::{ApiError, ErrorKind};
use crate::metrics::{self, METRICS};
use crate::providers::translate;
use crate::providers::Flavor;
use crate::providers::ProviderCred;
use crate::providers::{self, Dialect, Target, Usage};
use crate::receipts::writer::InFlight;
use crate::receipts::{self, CacheSide, Check, CheckName, CheckResult, Draft, Kind};
use crate::snapshot::{KeyEntry, Snapshot};
use crate::telemetry::RequestSpan;
use crate::upstream::{UpstreamClient, UpstreamError, UpstreamResponse};
use aside::Aside;
use bytes::Bytes;
use ending::Ending;
use routes::Route;

pub struct Gateway {
    app: Arc<App>,
    upstream: UpstreamClient,
    pipeline: Pipeline,
    /// Which tenant created which stored OpenAI response.
    owners: responses::Owners,
}

impl Gateway {
    pub fn new(app: Arc<App>) -> Self {
        let upstream = UpstreamClient::new(App::upstream_timeouts(&app.config), &app.config.upstream.ca_file);
        let mut pipeline =
            Pipeline::new(crate::checks::table(app.ledger.clone(), app.cache.clone(), app.cluster.clone()));
        if let Some(c) = app.cluster.clone() {
            pipeline = pipeline.with_shared(c);
        }
        let owners = responses::Owners::new(app.store.clone());
        Gateway { app, upstream, pipeline, owners }
    }
}

/// Everything one request learns on its way through, read again in `logging`.
pub struct Ctx {
    started: Instant,
    snap: Arc<Snapshot>,
    request_id: String,
    receipt_id: String,
    end_user: Option<String>,
    /// This request's span when tracing is on. Before `_in_flight`: a span never finished still
    /// ends (on drop) before shutdown can see the request as done and flush the exporter.
    trace: Option<RequestSpan>,
    /// Keeps the receipt writer from finishing its shutdown drain while this request runs.
    _in_flight: InFlight,
    route: Option<Route>,
    /// A route that is not a model call (then `route` is None).
    aside: Option<Aside>,
    key: Option<Arc<KeyEntry>>,
    provider: Option<ProviderName>,
    model: String,
    status: u16,
    error: Option<ErrorKind>,
    usage: Option<Usage>,
    cost_usd: f64,
    upstream: UpstreamOutcome,
    /// The request as the checks saw it (None until it was parsed and routed).
    exchange: Option<Exchange>,
    /// A check changed the request body (redaction).
    body_changed: bool,
    /// The checks' per-request state and results.
    cx: pipeline::Ctx,
    /// The answer as the client got it, for the cache.
    captured: Option<Cached>,
    /// The tool server of a `tools/call` (then the receipt is a `tool_call`).
    tool: Option<Arc<crate::tool_servers::ToolServer>>,
    /// The tool answered with `isError: true` (a result, not a JSON-RPC error).
    tool_error: bool,
}

fn header_str(session: &Session, name: &str) -> Option<String> {
    let v = session.req_header().headers.get(name)?.to_str().ok()?.trim();
    (!v.is_empty()).then(|| v.chars().take(128).collect())
}

impl Ctx {
    /// Identifiers every gateway answer carries; the receipt id only when a receipt will exist.
    fn answer_headers(&self) -> Vec<(&'static str, String)> {
        let mut h = Vec::with_capacity(2 + self.cx.headers.len());
        h.push(("x-request-id", self.request_id.clone()));
        if self.key.is_some() {
            h.push(("x-tollgate-receipt-id", self.receipt_id.clone()));
        }
        h.extend(self.cx.headers.iter().cloned());
        h
    }

    /// The receipt of this request; None when no valid key was presented. Runs last: it moves
    /// the request's ids, model and checks into the receipt instead of copying them.
    fn take_draft(&mut self) -> Option<Draft> {
        let key = self.key.clone()?;
        let actor = match &self.end_user {
            Some(u) => format!("{}/{u}", key.id).into(),
            None => key.id.clone(),
        };
        let status = self.upstream.status();
        let usage = self.usage.unwrap_or_default();
        let mut checks = std::mem::take(&mut self.cx.checks);
        let cache_result = checks.iter().find(|c| c.name == CheckName::Cache).and_then(|c| c.result.known());
        checks.push(Check::new(CheckName::Upstream, status.check_result()));
        checks.append(&mut self.cx.response_checks);
        let saved = self.cx.saved.unwrap_or_default();
        Some(Draft {
            tenant_id: key.tenant.clone(),
            receipt_id: std::mem::take(&mut self.receipt_id),
            request_id: std::mem::take(&mut self.request_id),
            actor,
            provider: match &self.tool {
                Some(server) => server.name.clone().into(),
                None => self.provider.map(|p| p.as_str()).unwrap_or_default().into(),
            },
            model: std::mem::take(&mut self.model),
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            cost_usd: self.cost_usd,
            checks,
            upstream_status: status,
            ts: receipts::receipt_ts(chrono::Utc::now()),
            kind: match self.tool {
                Some(_) => Kind::ToolCall,
                None => self.exchange.as_ref().map(|e| e.kind).unwrap_or(Kind::ModelCall),
            },
            pack_version: if self.snap.config.compliance.stamp_pack_version {
                self.snap.packs(key.tenant_id()).version.clone()
            } else {
                String::new()
            },
            cache: CacheSide {
                result: cache_result.map_or("", |r| r.as_str()),
                saved_tokens: saved.tokens,
                saved_usd: saved.usd,
            },
            events: std::mem::take(&mut self.cx.events),
            key_id: key.id.clone(),
            outbox: Vec::new(),
        })
    }
}

/// A fresh UUIDv7 in its hyphenated lower-case form, written straight into an exact-size
/// string (`to_string` goes through the formatter and grows its buffer).
fn new_id() -> String {
    let mut buf = [0u8; uuid::fmt::Hyphenated::LENGTH];
    uuid::Uuid::now_v7().hyphenated().encode_lower(&mut buf).to_owned()
}

/// The presented key: `Authorization: Bearer …`, or `x-api-key` (Anthropic clients).
fn presented_key(session: &Session) -> Option<&str> {
    let h = &session.req_header().headers;
    if let Some(v) = h.get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()) {
        let (scheme, token) = v.trim().split_once(' ')?;
        return scheme.eq_ignore_ascii_case("bearer").then(|| token.trim());
    }
    h.get("x-api-key").and_then(|v| v.to_str().ok()).map(str::trim)
}

/// The Anthropic beta features a request asks for: every `anthropic-beta` header, comma-separated.
fn anthropic_betas(headers: &http::HeaderMap) -> Vec<String> {
    headers
        .get_all("anthropic-beta")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|b| !b.is_empty())
        .map(str::to_string)
        .collect()
}

/// What the request stage learnt: the parsed request and the body the upstream gets.
struct Admitted {
    route: Route,
    key: Arc<KeyEntry>,
    parsed: request::ParsedRequest,
}

impl Admitted {
    /// An OpenAI-shaped request for a provider that speaks another API.
    fn translated(&self) -> bool {
        self.route == Route::ChatCompletions && providers::provider(self.parsed.provider).dialect() != Dialect::OpenAi
    }
}

impl Gateway {
    /// Runs one request up to its ending; an `Err` is answered as an envelope.
    async fn handle(&self, session: &mut Session, ctx: &mut Ctx) -> Result<Ending, ApiError> {
        let mut admitted = self.admit(session, ctx).await?;
        let (step, json) = self.decide(session, ctx, &mut admitted).await;
        match step {
            Step::Continue => {}
            Step::Block(e) => return Err(e),
            Step::Serve(hit) => {
                ctx.status = hit.status;
                let mut h = ctx.answer_headers();
                h.push(("x-tollgate-cache", CheckResult::Hit.as_str().to_string()));
                return Ok(Ending::cached(&hit, &h));
            }
        }
        self.forward(session, ctx, admitted, json).await
    }

    /// Admit: the key, the route, the bounded body, the parse, and the stored responses it names.
    async fn admit(&self, session: &mut Session, ctx: &mut Ctx) -> Result<Admitted, ApiError> {
        // An unknown route answers 404 with or without a key; with a valid one it has a receipt.
        ctx.key = presented_key(session).and_then(|k| ctx.snap.key(k)).cloned();
        let req = session.req_header();
        let route = Route::resolve(&req.method, req.uri.path())
            .ok_or_else(|| ApiError::not_found(&format!("route {} {}", req.method, req.uri.path())))?;
        ctx.route = Some(route);
        let key = ctx.key.clone().ok_or_else(ApiError::unauthorized)?;
        key.touch();
        ctx.end_user = header_str(session, "x-tollgate-actor");

        let path_model = route.path_model(session.req_header().uri.path());
        let raw = body::read(session, ctx.snap.config.limits.max_body_bytes).await?;
        let parsed = match &path_model {
            Some(m) => request::parse_native(route, raw, m, &mut ctx.model),
            None => request::parse(route, raw, &ctx.snap, &mut ctx.model),
        };
        let parsed = match parsed {
            Ok(p) => p,
            Err(e) => {
                // A refused request still names the provider its model routes to, when known.
                ctx.provider = route.native_provider().or_else(|| ctx.snap.route(&ctx.model));
                return Err(e);
            }
        };
        ctx.provider = Some(parsed.provider);
        if ctx.end_user.is_none() {
            ctx.end_user = parsed.user.clone();
        }
        if !parsed.refs.is_empty() {
            Box::pin(self.owners.check(key.tenant_id(), &parsed.refs)).await?;
        }
        Ok(Admitted { route, key, parsed })
    }

    /// Decide: the checks, in table order. Returns how the request phase ended and, when the
    /// upstream needs an edited body, its JSON.
    async fn decide(&self, session: &Session, ctx: &mut Ctx, a: &mut Admitted) -> (Step, Option<serde_json::Value>) {
        let mut ex = self.exchange(session, ctx, a);
        let step = self.pipeline.on_request(&mut ex, &mut ctx.cx).await;
        ctx.body_changed = ex.body_changed;
        // The request checks are done with the body: it moves on to the upstream when the
        // gateway must edit it (a redaction, or a stream that must report usage).
        let json = (ex.body_changed || (ex.stream && a.route == Route::ChatCompletions) || a.translated())
            .then(|| ex.body.take_json());
        ctx.exchange = Some(ex);
        (step, json)
    }

    /// The provider-neutral request the checks see.
    fn exchange(&self, session: &Session, ctx: &Ctx, a: &mut Admitted) -> Exchange {
        let headers = &session.req_header().headers;
        let no_cache =
            headers.get_all(http::header::CACHE_CONTROL).iter().filter_map(|v| v.to_str().ok()).any(|v| {
                v.split(',').any(|d| matches!(d.trim().to_ascii_lowercase().as_str(), "no-cache" | "no-store"))
            });
        let parsed = &mut a.parsed;
        Exchange {
            snap: ctx.snap.clone(),
            key: a.key.clone(),
            kind: Kind::ModelCall,
            route: a.route.upstream_path(),
            dialect: a.route.dialect(),
            provider: parsed.provider.as_str().into(),
            model: ctx.model.clone(),
            tool: None,
            betas: anthropic_betas(headers),
            stream: parsed.stream,
            max_tokens: parsed.max_tokens,
            prompt_tokens_est: pipeline::estimate_prompt_tokens(parsed.raw.len()),
            body: match parsed.json.take() {
                Some(json) => JsonBody::parsed(json),
                None => JsonBody::lazy(parsed.raw.clone()),
            },
            body_changed: false,
            no_cache,
            now: chrono::Utc::now(),
        }
    }

    /// Forward: the provider's credential, the upstream call, and the relay of its answer.
    async fn forward(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        a: Admitted,
        mut json: Option<serde_json::Value>,
    ) -> Result<Ending, ApiError> {
        let translated = a.translated();
        let Admitted { route, key, parsed } = a;
        let provider = providers::provider(parsed.provider);
        let cred = self.credential(ctx, &key, parsed.provider)?;
        // The model the provider addresses by id (Bedrock's path, a translated call); the other
        // calls carry it in the client's body, and build nothing here.
        let by_id = translated || matches!(route, Route::Converse | Route::ConverseStream);
        let model =
            if by_id { request::upstream_model(parsed.provider, &ctx.model).to_string() } else { String::new() };
        let (body, hide_usage_chunk) = if translated {
            let j = json.take().unwrap_or_default();
            let hide = parsed.stream && !translate::include_usage(&j);
            let native = provider.request_from_openai(&j, &model)?;
            (Bytes::from(serde_json::to_vec(&native).unwrap_or_default()), hide)
        } else {
            let mut hide = false;
            if let Some(j) = json.as_mut() {
                if parsed.stream && route == Route::ChatCompletions {
                    hide = providers::ensure_stream_usage(j);
                }
            }
            let edited = json.filter(|_| ctx.body_changed || hide);
            (relay::body_for_upstream(&parsed.raw, edited.as_ref()), hide)
        };
        // Vertex's own path, as the client addressed it (its project, region and query).
        let native_path = matches!(route, Route::Generate | Route::GenerateStream).then(|| {
            routes::vertex_upstream_path(session.req_header().uri.path_and_query().map_or("", |p| p.as_str()))
        });
        let target = match (&native_path, route) {
            (Some(path), _) => Target::Native { path, stream: parsed.stream },
            (None, Route::Converse | Route::ConverseStream) => Target::Model { model: &model, stream: parsed.stream },
            _ if translated => Target::Model { model: &model, stream: parsed.stream },
            _ => Target::Path(route.upstream_path()),
        };
        if let Some(t) = ctx.trace.as_mut() {
            t.prompt(&body);
        }
        let headers = &session.req_header().headers;
        let client_header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
        let env = providers::Env { config: &ctx.snap.config, tokens: &self.app.tokens };
        let mut call = provider.prepare(&env, &cred, target, body, &client_header).await?;
        if let Some(t) = &ctx.trace {
            t.propagate(&mut call.headers);
        }

        let resp = self.send_upstream(ctx, parsed.provider, &cred, call).await?;

        let headers = ctx.answer_headers();
        let capture_limit = ctx.cx.capture_answer.then_some(ctx.snap.config.limits.cache_max_entry_bytes);
        let translation = translated.then(|| relay::Translation {
            provider,
            model,
            id: format!("chatcmpl-{}", ctx.receipt_id),
            created: chrono::Utc::now().timestamp(),
        });
        // A create's answer names the stored response and its items: they become the tenant's.
        let owners = &self.owners;
        let claim = |id: &str| owners.claim(&key.tenant, id);
        let plan = relay::RelayPlan {
            dialect: route.dialect(),
            // The Responses API is OpenAI's too, with its own answer and stream shapes.
            wire: if route == Route::Responses { Dialect::Responses } else { provider.dialect() },
            stream: parsed.stream,
            translation,
            flavor: route.flavor(),
            provider: parsed.provider.as_str(),
            hide_usage_chunk,
            headers: &headers,
            pipeline: &self.pipeline,
            cx: &mut ctx.cx,
            capture_limit,
            read_model: ctx.trace.is_some(),
            stored: (route == Route::Responses).then_some(&claim as &(dyn Fn(&str) + Sync)),
        };
        let relayed = Box::pin(relay::relay(session, resp, plan)).await;
        if let Some(t) = ctx.trace.as_mut() {
            t.response_model(relayed.model);
        }
        ctx.status = relayed.status;
        ctx.upstream = relayed.outcome;
        ctx.usage = relayed.usage;
        if let Some(u) = relayed.usage {
            ctx.cost_usd = ctx.snap.pricing.cost(&ctx.model, &u);
        }
        ctx.captured = relayed.captured.map(|mut c| {
            c.usage = relayed.usage.unwrap_or_default();
            c.cost_usd = ctx.cost_usd;
            c
        });
        if matches!(relayed.ending, Ending::Gone) {
            log::info!("request {}: client disconnected before the answer was complete", ctx.request_id);
        }
        Ok(relayed.ending)
    }

    /// The tenant's credential for `provider`, or the error that says how to set one.
    fn credential(&self, ctx: &Ctx, key: &KeyEntry, provider: ProviderName) -> Result<Arc<ProviderCred>, ApiError> {
        ctx.snap.provider(key.tenant_id(), provider).cloned().ok_or_else(|| {
            ApiError::new(
                ErrorKind::NotConfigured,
                format!("provider {provider} has no credentials for this tenant: set them with PUT /v1/providers/{provider}"),
            )
        })
    }

    /// Sends the upstream call; a failure to get an answer is the client's 502 or 504.
    async fn send_upstream(
        &self,
        ctx: &mut Ctx,
        provider: ProviderName,
        cred: &ProviderCred,
        call: providers::UpstreamCall,
    ) -> Result<UpstreamResponse<'_>, ApiError> {
        let sent_at = Instant::now();
        // The upstream leg's futures are boxed: inlined, they made this future ~12 KiB, which
        // Pingora's boxed `request_filter` copied (and allocated) whole for every request.
        match Box::pin(self.upstream.send(&cred.base_url, call.method, &call.path, &call.headers, call.body)).await {
            Ok(r) => {
                metrics::local::upstream_latency(provider.as_str(), sent_at.elapsed().as_secs_f64());
                Ok(r)
            }
            Err(e) => {
                ctx.upstream = UpstreamOutcome::from_error(&e);
                log::warn!("request {}: {e}", ctx.request_id);
                Err(match e {
                    UpstreamError::Timeout(_) => {
                        ApiError::new(ErrorKind::UpstreamTimeout, format!("{provider} did not answer in time"))
                    }
                    UpstreamError::Failed(_) => {
                        ApiError::new(ErrorKind::UpstreamError, format!("could not reach {provider}; retry later"))
                    }
                })
            }
        }
    }

    /// Account: commit the receipt, settle the checks, then send the answer's ending. With
    /// `receipts.commit: before_answer` (the default) the last byte leaves only after the
    /// commit; an uncommitted receipt turns the ending into a refusal or a cut.
    async fn end(&self, session: &mut Session, ctx: &mut Ctx, ending: Ending) -> pingora::Result<bool> {
        if let Some(status) = ending.status() {
            ctx.status = status;
        }
        self.record_metrics(ctx);
        let outbox = self.webhook_events(ctx);
        let mut draft = ctx.take_draft();
        if let Some(d) = draft.as_mut() {
            d.outbox = outbox;
        }
        if let Some(t) = ctx.trace.as_mut() {
            t.record(ctx.route.map(Route::operation), draft.as_ref());
        }
        let (committed, deferred) = match (draft, self.app.config.receipts.commit) {
            (None, _) => (true, None),
            (Some(d), CommitMode::AfterAnswer) => (true, Some(d)),
            (Some(d), CommitMode::BeforeAnswer) => match self.app.receipts.commit(d).await {
                Ok(()) => (true, None),
                Err(e) => {
                    log::error!("request {}: {e}", ctx.request_id);
                    (false, None)
                }
            },
        };
        self.complete(ctx, committed);
        let ending = if committed {
            ending
        } else {
            let flavor = ctx.route.map(Route::flavor).unwrap_or(Flavor::Plain);
            ctx.status = 503;
            ctx.error = Some(ErrorKind::Unavailable);
            ending.uncommitted(flavor, &[("x-request-id", ctx.request_id.clone())])
        };
        let sent = ending.send(session).await;
        if let Some(d) = deferred {
            self.app.receipts.submit(d).await;
        }
        sent.map(|()| true)
    }

    /// The webhook events this request causes, written with its receipt: a guardrail block, and
    /// each budget threshold its cost crosses. Ids, categories and amounts only: no text.
    fn webhook_events(&self, ctx: &Ctx) -> Vec<crate::store::webhooks::Event> {
        use crate::store::webhooks::Event;
        let mut out = Vec::new();
        let Some(key) = ctx.key.as_ref() else { return out };
        let blocked: Vec<&receipts::GuardEvent> = ctx.cx.events.iter().filter(|e| e.result == "BLOCK").collect();
        if !blocked.is_empty() {
            let mut categories: Vec<&str> = blocked.iter().map(|e| e.category.as_str()).collect();
            categories.dedup();
            let data = serde_json::json!({
                "receiptId": ctx.receipt_id,
                "requestId": ctx.request_id,
                "keyId": &*key.id,
                "model": ctx.model,
                "direction": blocked[0].direction,
                "categories": categories,
            });
            out.push(Event::new(key.tenant_id(), "guardrail.blocked", data));
        }
        if let (Some(ex), true) = (ctx.exchange.as_ref(), ctx.cost_usd > 0.0) {
            let limits = ctx.snap.budgets.limits_for(ex.tenant_id(), ex.key_id(), ex.team_id());
            if !limits.is_empty() {
                let share = f64::from(self.app.config.webhooks.budget_threshold_percent) / 100.0;
                for c in self.app.ledger.crossings(&limits, ctx.cost_usd, share, ex.now) {
                    let kind = if c.level == "exceeded" { "budget.exceeded" } else { "budget.threshold_reached" };
                    let data = serde_json::json!({
                        "budgetId": c.limit.budget_id,
                        "scope": c.limit.scope,
                        "scopeId": c.limit.scope_id,
                        "period": c.limit.period.as_str(),
                        "amountUsd": c.limit.amount_usd,
                        "spentUsd": c.spent_usd,
                        "thresholdPercent": if c.level == "exceeded" { 100 } else { self.app.config.webhooks.budget_threshold_percent },
                        "receiptId": ctx.receipt_id,
                        "keyId": &*key.id,
                    });
                    out.push(Event::new(key.tenant_id(), kind, data));
                }
            }
        }
        out
    }

    /// What this request adds to the counters: its checks (UPSTREAM too), tokens, cost and cache
    /// savings.
    /// Recorded before the receipt takes the request's model and checks.
    fn record_metrics(&self, ctx: &Ctx) {
        for (name, result) in ctx.cx.checks.iter().chain(&ctx.cx.response_checks).filter_map(Check::known) {
            metrics::local::check(name, result);
        }
        if ctx.key.is_some() {
            // The receipt's UPSTREAM check, counted like the others.
            metrics::local::check(receipts::CheckName::Upstream, ctx.upstream.status().check_result());
        }
        if let Some(saved) = ctx.cx.saved {
            METRICS.cache_saved_usd.with_label_values(&[&ctx.model]).inc_by(saved.usd);
        }
        if let Some(u) = ctx.usage {
            let provider = ctx.provider.map(ProviderName::as_str).unwrap_or("none");
            metrics::local::usage(provider, &ctx.model, u.prompt_tokens, u.completion_tokens, ctx.cost_usd);
        }
        if let Some(server) = &ctx.tool {
            let result = match ctx.upstream {
                UpstreamOutcome::Skipped => "blocked",
                UpstreamOutcome::Pass if ctx.tool_error => "tool_error",
                UpstreamOutcome::Pass => "ok",
                UpstreamOutcome::Fail => "error",
                UpstreamOutcome::Timeout => "timeout",
            };
            if ctx.upstream != UpstreamOutcome::Skipped {
                server.state.record(ctx.upstream == UpstreamOutcome::Pass);
            }
            let tool = mcp::tool_label(&ctx.model);
            METRICS.tool_calls.with_label_values(&[server.name.as_str(), tool.as_ref(), result]).inc();
        }
    }

    /// The checks' `on_complete` (settle reservations, fill the cache). A request whose receipt
    /// was not committed is not billed and not cached.
    fn complete(&self, ctx: &mut Ctx, committed: bool) {
        if let Some(ex) = ctx.exchange.as_ref() {
            let done = Outcome {
                ex,
                status: ctx.status,
                upstream: ctx.upstream,
                usage: ctx.usage,
                cost_usd: if committed { ctx.cost_usd } else { 0.0 },
                answer: ctx.captured.take().filter(|_| committed),
            };
            self.pipeline.on_complete(&done, &mut ctx.cx);
        }
    }
}

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
        ctx.trace = self.app.telemetry.as_ref().map(|t| t.start(session.req_header(), &ctx.request_id));
        let req = session.req_header();
        ctx.aside = Aside::resolve(&req.method, req.uri.path());
        let flavor_of_aside = ctx.aside.as_ref().map(|a| a.flavor(&req.headers));
        let handled = match ctx.aside.clone() {
            Some(a) => self.aside(session, ctx, &a).await,
            None => self.handle(session, ctx).await,
        };
        let ending = match handled {
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

#[cfg(test)]
mod tests {
    #[test]
    fn new_ids_are_lower_case_hyphenated_uuid_v7s() {
        let (a, b) = (super::new_id(), super::new_id());
        for id in [&a, &b] {
            let parsed = uuid::Uuid::parse_str(id).unwrap();
            assert_eq!(parsed.get_version_num(), 7);
            assert_eq!(*id, parsed.hyphenated().to_string());
        }
        assert_ne!(a, b);
    }
}
