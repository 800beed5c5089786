//! The lifecycle every gateway route goes through: admit → decide → forward → end. Each stage
//! is a few lines; what differs per route kind is in the route kind's own module.

use std::sync::Arc;

use bytes::Bytes;
use pingora::proxy::Session;

use super::client::{anthropic_betas, header_str, presented_key};
use super::context::Ctx;
use super::ending::Ending;
use super::routes::{self, Route};
use super::state::Gateway;
use super::{body, relay, request};
use crate::checks::pipeline::{self, Exchange, JsonBody, Step};
use crate::error::ApiError;
use crate::providers::translate;
use crate::providers::{self, Dialect, Target};
use crate::receipts::{CheckResult, Kind};
use crate::snapshot::KeyEntry;

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
    pub(super) async fn handle(&self, session: &mut Session, ctx: &mut Ctx) -> Result<Ending, ApiError> {
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
        let capture_limit = ctx.cx.cache_slot.is_some().then_some(ctx.snap.config.limits.cache_max_entry_bytes);
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
}
