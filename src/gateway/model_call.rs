//! The model-call route kind: chat completions, messages, embeddings, Responses creates and the
//! native Bedrock and Vertex paths. Its admit parses and routes the body; its forward builds
//! the provider's call, relays the answer and reads its usage.

use std::sync::Arc;

use bytes::Bytes;
use pingora::proxy::Session;
use serde_json::Value;

use super::checked::Checked;
use super::client::{end_user, end_user_header, presented_key};
use super::context::Ctx;
use super::ending::Ending;
use super::state::Gateway;
use super::{body, relay, request};
use crate::checks::pipeline::{self, Cached, Exchange, JsonBody};
use crate::error::ApiError;
use crate::providers::translate;
use crate::providers::Route;
use crate::providers::{self, Dialect, Provider, Target, Usage};
use crate::receipts::{CheckResult, Kind};
use crate::routing::{ModelRoute, RouteTarget};
use crate::snapshot::KeyEntry;
use crate::upstream::UpstreamResponse;

/// A model call the admit stage let in: its route, key and parsed request.
pub(super) struct ModelCall {
    pub(super) route: Route,
    pub(super) key: Arc<KeyEntry>,
    pub(super) parsed: request::ParsedRequest,
    /// The model route the client's model has, if any (`fallback.rs` forwards it).
    pub(super) model_route: Option<Arc<ModelRoute>>,
}

impl ModelCall {
    /// An OpenAI-shaped request for a provider that speaks another API.
    fn translated(&self) -> bool {
        self.route == Route::ChatCompletions && providers::provider(self.parsed.provider).dialect() != Dialect::CHAT
    }

    /// The model the provider addresses by id (Bedrock's path, a translated call); the other
    /// calls carry it in the client's body, and build nothing here.
    pub(super) fn upstream_model(&self, ctx: &Ctx) -> String {
        let by_id = self.translated() || matches!(self.route, Route::Converse | Route::ConverseStream);
        match by_id {
            true => request::upstream_model(self.parsed.provider, &ctx.model).to_string(),
            false => String::new(),
        }
    }

    /// The body the provider gets, and whether the usage-only chunk the gateway asked for on
    /// the client's behalf must be hidden from it. The client's bytes unless the body was
    /// edited (redaction, stream usage) or translated.
    pub(super) fn upstream_body(
        &self,
        ctx: &Ctx,
        provider: &dyn Provider,
        model: &str,
        mut json: Option<Value>,
    ) -> Result<(Bytes, bool), ApiError> {
        let stream = self.parsed.stream;
        if self.translated() {
            let j = json.take().unwrap_or_default();
            let hide = stream && !translate::include_usage(&j);
            let native = provider.request_from_chat(&j, model)?;
            return Ok((Bytes::from(serde_json::to_vec(&native).unwrap_or_default()), hide));
        }
        let mut hide = false;
        if let Some(j) = json.as_mut() {
            if stream && self.route == Route::ChatCompletions {
                hide = providers::ensure_stream_usage(j);
            }
        }
        let edited = json.filter(|_| ctx.body_changed || hide);
        Ok((body_for_upstream(&self.parsed.raw, edited.as_ref()), hide))
    }

    /// Where the call goes on the provider's API. `native_path` is Vertex's own path, as the
    /// client addressed it (its project, region and query).
    pub(super) fn target<'a>(&self, native_path: Option<&'a str>, model: &'a str) -> Target<'a> {
        let stream = self.parsed.stream;
        match (native_path, self.route) {
            (Some(path), _) => Target::Native { path, stream },
            (None, Route::Converse | Route::ConverseStream) => Target::Model { model, stream },
            _ if self.translated() => Target::Model { model, stream },
            _ => Target::Path(self.route.upstream_path()),
        }
    }
}

impl ModelCall {
    /// A routed request as the checks see it: the provider of the first target it may use
    /// (serves its route, has its credential, passes the tenant's allowlist and deny rules with
    /// its own provider and model id; else the first that serves), and its budget reservation
    /// priced at the dearest of those targets (the client's model name has no price).
    fn route_view(&mut self, ctx: &Ctx, ex: &mut Exchange, route: &ModelRoute) {
        let tenant = self.key.tenant_id();
        let policy = ctx.snap.policy(tenant);
        let usable = |t: &&RouteTarget| {
            request::serves(self.route, t.provider) && ctx.snap.credential(tenant, t.provider, &t.credential).is_some()
        };
        if let Some(t) = route.targets.iter().filter(usable).find(|t| request::target_allowed(ex, &policy, t)) {
            ex.provider = t.provider.as_str().into();
            self.parsed.provider = t.provider;
        }
        let usage = Usage::plain(ex.prompt_tokens_est, ex.completion_tokens_cap());
        let cost = |t: &&RouteTarget| ctx.snap.pricing.cost(&t.model, &usage);
        let dearest = route.targets.iter().filter(usable).max_by(|a, b| cost(a).total_cmp(&cost(b)));
        ex.priced_as = dearest.map(|t| t.model.to_string());
    }
}

impl Checked for ModelCall {
    fn exchange(&mut self, session: &Session, ctx: &Ctx) -> Exchange {
        let headers = &session.req_header().headers;
        let no_cache =
            headers.get_all(http::header::CACHE_CONTROL).iter().filter_map(|v| v.to_str().ok()).any(|v| {
                v.split(',').any(|d| matches!(d.trim().to_ascii_lowercase().as_str(), "no-cache" | "no-store"))
            });
        let parsed = &mut self.parsed;
        let mut ex = Exchange {
            snap: ctx.snap.clone(),
            key: self.key.clone(),
            end_user: ctx.end_user.as_deref().map(Into::into),
            kind: Kind::ModelCall,
            route: self.route.upstream_path(),
            dialect: self.route.dialect(),
            provider: parsed.provider.as_str().into(),
            model: ctx.model.clone(),
            tool: None,
            betas: providers::requested_betas(headers),
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
            priced_as: None,
        };
        if let Some(route) = self.model_route.clone() {
            self.route_view(ctx, &mut ex, &route);
        }
        ex
    }

    /// A redaction, a stream that must report usage, a translation, or a route (each target
    /// names its own model).
    fn edits_body(&self, ex: &Exchange) -> bool {
        ex.body_changed
            || (ex.stream && self.route == Route::ChatCompletions)
            || self.translated()
            || self.model_route.is_some()
    }

    fn refused(&self, _ctx: &mut Ctx, e: ApiError) -> Result<Ending, ApiError> {
        Err(e)
    }

    fn served(&self, ctx: &mut Ctx, hit: Cached) -> Result<Ending, ApiError> {
        ctx.status = hit.status;
        let mut h = ctx.answer_headers();
        h.push(("x-tollgate-cache", CheckResult::Hit.as_str().to_string()));
        Ok(Ending::cached(&hit, &h))
    }
}

impl Gateway {
    /// Admit a model call: the key, the route, the bounded body, the parse, and the stored
    /// responses it names.
    pub(super) async fn admit_model_call(&self, session: &mut Session, ctx: &mut Ctx) -> Result<ModelCall, ApiError> {
        // An unknown route answers 404 with or without a key; with a valid one it has a receipt.
        ctx.key = presented_key(session).and_then(|k| ctx.snap.key(k)).cloned();
        if ctx.key.as_ref().is_some_and(|k| k.is_auditor()) {
            // Refused before anything is read: an auditor's attempt leaves no receipt, like a 401.
            ctx.key = None;
            return Err(ApiError::auditor_refused("the gateway"));
        }
        let req = session.req_header();
        let route = Route::resolve(&req.method, req.uri.path())
            .ok_or_else(|| ApiError::not_found(&format!("route {} {}", req.method, req.uri.path())))?;
        ctx.route = Some(route);
        let key = ctx.key.clone().ok_or_else(ApiError::unauthorized)?;
        key.touch();
        ctx.end_user = end_user_header(session)?;

        let path_model = route.path_model(session.req_header().uri.path());
        let raw = body::read(session, ctx.snap.config.limits.max_body_bytes).await?;
        let parsed = match &path_model {
            Some(m) => request::parse_native(route, raw, m, &mut ctx.model),
            None => request::parse(route, raw, &ctx.snap, key.tenant_id(), &mut ctx.model),
        };
        let parsed = parsed.inspect_err(|_| {
            // A refused request still names the provider its model routes to, when known.
            ctx.provider = route.native_provider().or_else(|| ctx.snap.route(&ctx.model));
        })?;
        ctx.provider = Some(parsed.provider);
        if ctx.end_user.is_none() {
            // OpenAI's `user`, else Anthropic's `metadata.user_id` (`request::parse`).
            ctx.end_user =
                end_user("field `user` (or `metadata.user_id`)", parsed.user.as_deref().unwrap_or_default())?;
        }
        if !parsed.refs.is_empty() {
            Box::pin(self.owners.check(key.tenant_id(), &parsed.refs)).await?;
        }
        // `/v1/responses` is never routed (`request::serves`); a native path's model is its path's.
        let model_route = match route {
            Route::Responses => None,
            _ => ctx.snap.model_route(key.tenant_id(), &ctx.model).cloned(),
        };
        if let (Some(r), Some(_)) = (&model_route, &path_model) {
            request::first_serving(route, r)?;
        }
        Ok(ModelCall { route, key, parsed, model_route })
    }

    /// Forward a model call: the provider's credential, the upstream call, and the relay of
    /// its answer.
    pub(super) async fn forward_model_call(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        call: ModelCall,
        json: Option<Value>,
    ) -> Result<Ending, ApiError> {
        if let Some(route) = call.model_route.clone() {
            return Box::pin(self.forward_routed(session, ctx, call, json, route)).await;
        }
        let name = call.parsed.provider;
        let provider = providers::provider(name);
        let cred = self.credential(ctx, &call.key, name)?;
        let model = call.upstream_model(ctx);
        let (body, hide_usage_chunk) = call.upstream_body(ctx, provider, &model, json)?;
        // The client's native path, which the provider maps onto its own API.
        let native_path = matches!(call.route, Route::Generate | Route::GenerateStream)
            .then(|| session.req_header().uri.path_and_query().map_or("", |p| p.as_str()));
        let target = call.target(native_path, &model);
        if let Some(t) = ctx.trace.as_mut() {
            t.prompt(&body);
        }
        let mut up = self.prepare_call(session, ctx, provider, &cred, target, body).await?;
        if let Some(t) = &ctx.trace {
            t.propagate(&mut up.headers);
        }
        let resp = self.send_upstream(ctx, name, &cred, up).await?;
        let relayed = self.relay_model_call(session, ctx, &call, (provider, model, hide_usage_chunk), resp).await;
        Ok(self.relayed(ctx, relayed))
    }

    /// Relays the provider's answer to a model call. `wire` is the provider, the model it
    /// served, and whether to hide the usage-only chunk.
    pub(super) async fn relay_model_call(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        call: &ModelCall,
        wire: (&'static dyn Provider, String, bool),
        resp: UpstreamResponse<'_>,
    ) -> relay::Relayed {
        let (provider, model, hide_usage_chunk) = wire;
        let headers = ctx.answer_headers();
        let capture_limit = ctx.cx.capture_answer.then_some(ctx.snap.config.limits.cache_max_entry_bytes);
        let translation = call.translated().then(|| relay::Translation {
            provider,
            model,
            id: format!("chatcmpl-{}", ctx.receipt_id),
            created: chrono::Utc::now().timestamp(),
        });
        // A create's answer names the stored response and its items: they become the tenant's.
        let owners = &self.owners;
        let claim = |id: &str| owners.claim(&call.key.tenant, id);
        let responses = call.route == Route::Responses;
        let plan = relay::RelayPlan {
            dialect: call.route.dialect(),
            // The Responses API is OpenAI's too, with its own answer and stream shapes.
            wire: if responses { Dialect::Responses } else { provider.dialect() },
            stream: call.parsed.stream,
            translation,
            flavor: call.route.flavor(),
            provider: call.parsed.provider.as_str(),
            hide_usage_chunk,
            headers: &headers,
            pipeline: &self.pipeline,
            cx: &mut ctx.cx,
            capture_limit,
            read_model: ctx.trace.is_some(),
            stored: responses.then_some(&claim as &(dyn Fn(&str) + Sync)),
        };
        Box::pin(relay::relay(session, resp, plan)).await
    }

    /// What the relay learnt goes into the request's context (status, usage, cost, the copy
    /// for the cache); its ending is the answer's.
    pub(super) fn relayed(&self, ctx: &mut Ctx, relayed: relay::Relayed) -> Ending {
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
        relayed.ending
    }
}

/// The body the upstream gets: the client's bytes unless the gateway had to edit the JSON.
fn body_for_upstream(raw: &Bytes, edited: Option<&Value>) -> Bytes {
    match edited {
        Some(v) => Bytes::from(serde_json::to_vec(v).unwrap_or_else(|_| raw.to_vec())),
        None => raw.clone(),
    }
}
