//! Answers the routes that are not model calls (`aside.rs`), through the same stages as every
//! route (`lifecycle.rs`): admit, then forward. They need a valid key but leave no receipt, are
//! not billed, do not count against the key's rpm, tpm or budgets, and the checks' pipeline
//! does not see them (docs/decisions/gateway.md, "Model lists and count_tokens", "OpenAI
//! Responses API"). An MCP `tools/call` is not one of them: it has the checks and a receipt.

use std::sync::Arc;

use bytes::Bytes;
use pingora::proxy::Session;
use serde_json::Value;

use super::aside::Aside;
use super::client::presented_key;
use super::context::Ctx;
use super::ending::Ending;
use super::mcp::Passing;
use super::state::Gateway;
use super::stored::{references, StoredRef};
use super::{body, catalog, relay, request};
use crate::checks::guardrail::plugin as guardrail;
use crate::checks::pipeline;
use crate::checks::policy::{Decision, Facts};
use crate::checks::rate_limit;
use crate::error::{ApiError, ErrorKind};
use crate::providers::catalog::ListShape;
use crate::providers::route::NativeOp;
use crate::providers::Flavor;
use crate::providers::ProviderName;
use crate::providers::{self, Dialect, Target};
use crate::receipts::Kind;
use crate::snapshot::KeyEntry;
use crate::upstream::UpstreamResponse;

/// A side call the admit stage let in.
pub(super) enum SideCall {
    /// Answered by the gateway itself: a model list, a message MCP does not take.
    Answered(Ending),
    /// Passed to a provider as the client sent it (count_tokens, calls on stored responses).
    /// Boxed: it carries the answer-side checks' state, and the other variants are small.
    Provider(Box<ProviderSide>),
    /// Passed to a tool server (`mcp.rs`).
    Mcp(Passing),
}

/// A side call to a provider's own path (the client's path, normalised).
pub(super) struct ProviderSide {
    key: Arc<KeyEntry>,
    provider: ProviderName,
    method: &'static str,
    body: Bytes,
    /// The client asked for a stream.
    stream: bool,
    /// What the client speaks, and its error envelope.
    dialect: Dialect,
    flavor: Flavor,
    /// The answer-side checks' state, apart from `ctx.cx`: nothing of this call is recorded.
    cx: pipeline::Ctx,
}

impl Gateway {
    /// Admit a side call: the key (not kept in `ctx`: a request with a key in `ctx` leaves a
    /// receipt), then what the route asks.
    pub(super) async fn admit_side_call(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        aside: Aside,
    ) -> Result<SideCall, ApiError> {
        let key = presented_key(session).and_then(|k| ctx.snap.key(k)).cloned().ok_or_else(ApiError::unauthorized)?;
        if key.is_auditor() {
            return Err(ApiError::auditor_refused("the gateway"));
        }
        key.touch();
        match aside {
            Aside::Models => Ok(SideCall::Answered(self.model_list(session, ctx, &key)?)),
            Aside::Model(id) => Ok(SideCall::Answered(self.model_info(session, ctx, &key, &id)?)),
            Aside::CountTokens => {
                self.admit_count_tokens(session, ctx, key).await.map(|s| SideCall::Provider(Box::new(s)))
            }
            Aside::Mcp(_) => Err(ApiError::internal("unreachable: MCP is admitted by admit_mcp")),
            Aside::ResponseRetrieve(_)
            | Aside::ResponseDelete(_)
            | Aside::ResponseInputItems(_)
            | Aside::ResponseInputTokens => {
                self.admit_stored(session, ctx, key, &aside).await.map(|s| SideCall::Provider(Box::new(s)))
            }
        }
    }

    /// Forward a side call: to its provider or tool server, or the answer the gateway made.
    pub(super) async fn forward_side_call(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        call: SideCall,
    ) -> Result<Ending, ApiError> {
        match call {
            SideCall::Answered(ending) => Ok(ending),
            SideCall::Provider(side) => self.forward_provider_side(session, ctx, *side).await,
            SideCall::Mcp(pass) => self.forward_passing(session, ctx, pass).await,
        }
    }

    /// The provider's credential, the call on the client's path, and its answer relayed as it
    /// is.
    async fn forward_provider_side(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        mut side: ProviderSide,
    ) -> Result<Ending, ApiError> {
        let cred = self.credential(ctx, &side.key, side.provider)?;
        let provider = providers::provider(side.provider);
        let path = providers::route::normalize(session.req_header().uri.path_and_query().map_or("", |p| p.as_str()))
            .to_string();
        let target = Target::Native { path: &path, stream: side.stream };
        let mut call = self.prepare_call(session, ctx, provider, &cred, target, side.body).await?;
        call.method = side.method;
        if side.method != "POST" {
            call.headers.retain(|(k, _)| *k != "content-type");
        }
        let resp = self.send_upstream(ctx, side.provider, &cred, call).await?;
        let headers = ctx.answer_headers();
        let route = (side.dialect, side.flavor, side.provider, side.stream);
        Ok(self.relay_aside(session, ctx, resp, route, &headers, &mut side.cx).await)
    }

    fn model_list(&self, session: &Session, ctx: &Ctx, key: &KeyEntry) -> Result<Ending, ApiError> {
        let models = catalog::models(&ctx.snap, key, chrono::Utc::now());
        let created = catalog::created(&ctx.snap);
        let req = session.req_header();
        let body = ListShape::of(&req.headers).list(&models, req.uri.query(), created)?;
        Ok(Ending::json(200, serde_json::to_vec(&body).unwrap_or_default(), &ctx.answer_headers()))
    }

    fn model_info(&self, session: &Session, ctx: &Ctx, key: &KeyEntry, id: &str) -> Result<Ending, ApiError> {
        let models = catalog::models(&ctx.snap, key, chrono::Utc::now());
        let m = models.iter().find(|m| m.id == id).ok_or_else(|| ApiError::not_found(&format!("model `{id}`")))?;
        let created = catalog::created(&ctx.snap);
        let body = ListShape::of(&session.req_header().headers).entry(m, created);
        Ok(Ending::json(200, serde_json::to_vec(&body).unwrap_or_default(), &ctx.answer_headers()))
    }

    /// Admit a count_tokens call: passed to Anthropic with the tenant's credential; the key's
    /// allowlist and policies apply to the model it names, and its own per-minute rate.
    async fn admit_count_tokens(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        key: Arc<KeyEntry>,
    ) -> Result<ProviderSide, ApiError> {
        let rpm = ctx.snap.config.limits.count_tokens_rpm;
        if rpm > 0 {
            let ask = rate_limit::TokenAsk::new(0, None, 0);
            let now_ms = chrono::Utc::now().timestamp_millis();
            let mut rate_headers = Vec::new();
            if let Err(limited) =
                rate_limit::acquire(&key.state.count_tokens, Some(rpm), None, ask, now_ms, &mut rate_headers)
            {
                let message = format!("{} (count_tokens has its own limit: limits.count_tokens_rpm)", limited.message);
                return Err(ApiError::new(ErrorKind::RateLimited, message).with_headers(limited.headers));
            }
        }
        let raw = body::read(session, ctx.snap.config.limits.max_body_bytes).await?;
        ctx.model = count_tokens_model(&raw)?;
        let op = NativeOp::COUNT_TOKENS;
        ctx.provider = Some(op.provider);
        self.allow_model(ctx, &key, &providers::requested_betas(&session.req_header().headers))?;
        Ok(ProviderSide {
            key,
            provider: op.provider,
            method: "POST",
            body: raw,
            stream: false,
            dialect: op.dialect,
            flavor: op.flavor,
            cx: pipeline::Ctx::default(),
        })
    }

    /// Admit a call on stored responses that is not a model call: retrieve, delete, input
    /// items, or an input token count. Only the caller's tenant's responses are reached. The
    /// answer guardrails still see a retrieved response (its text is the model's answer
    /// again), and the request guardrails a counted input (it leaves for OpenAI).
    async fn admit_stored(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        key: Arc<KeyEntry>,
        aside: &Aside,
    ) -> Result<ProviderSide, ApiError> {
        let op = NativeOp::STORED_RESPONSES;
        ctx.provider = Some(op.provider);
        let raw = body::read(session, ctx.snap.config.limits.max_body_bytes).await?;
        let tenant = key.tenant_id();
        let (method, body, stream) = match aside {
            Aside::ResponseRetrieve(id) | Aside::ResponseDelete(id) | Aside::ResponseInputItems(id) => {
                self.owners.check(tenant, &[StoredRef::response(id)]).await?;
                let method = if matches!(aside, Aside::ResponseDelete(_)) { "DELETE" } else { "GET" };
                let stream =
                    matches!(aside, Aside::ResponseRetrieve(_)) && query_streams(session.req_header().uri.query());
                (method, Bytes::new(), stream)
            }
            _ => ("POST", self.counted_input(ctx, &key, raw).await?, false),
        };
        let mut cx = pipeline::Ctx::default();
        if matches!(aside, Aside::ResponseRetrieve(_)) {
            guardrail::arm_answer_scan(&ctx.snap, tenant, &mut cx);
        }
        let (provider, dialect, flavor) = (op.provider, op.dialect, op.flavor);
        Ok(ProviderSide { key, provider, method, body, stream, dialect, flavor, cx })
    }

    /// The body of an input token count: the model it names is one this key may call, the
    /// responses it names are the tenant's, and the request guardrails have seen it.
    async fn counted_input(&self, ctx: &mut Ctx, key: &KeyEntry, raw: Bytes) -> Result<Bytes, ApiError> {
        let tenant = key.tenant_id();
        let mut json = request::json_object(&raw)?;
        if let Some(m) = json.get("model").and_then(Value::as_str) {
            ctx.model = m.chars().take(256).collect();
            self.allow_model(ctx, key, &[])?;
        }
        self.owners.check(tenant, &references(&json)?).await?;
        Ok(match guardrail::scan_side_request(&ctx.snap, tenant, &mut json)? {
            true => Bytes::from(serde_json::to_vec(&json).unwrap_or_default()),
            false => raw,
        })
    }

    /// Relays a provider's answer to an aside call as it is (no translation, cache or receipt);
    /// `route` is the dialect and error flavor the client speaks, the provider, and whether the
    /// client asked for a stream.
    async fn relay_aside(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        resp: UpstreamResponse<'_>,
        route: (Dialect, Flavor, ProviderName, bool),
        headers: &[(&'static str, String)],
        cx: &mut pipeline::Ctx,
    ) -> Ending {
        let (dialect, flavor, provider, stream) = route;
        let plan = relay::RelayPlan {
            dialect,
            wire: dialect,
            stream,
            translation: None,
            flavor,
            provider: provider.as_str(),
            hide_usage_chunk: false,
            headers,
            pipeline: &self.pipeline,
            cx,
            capture_limit: None,
            read_model: false,
            stored: None,
        };
        let relayed = Box::pin(relay::relay(session, resp, plan)).await;
        ctx.upstream = relayed.outcome;
        ctx.status = relayed.status;
        relayed.ending
    }

    /// The tenant's allowlists and policies on a request that names only a model.
    fn allow_model(&self, ctx: &Ctx, key: &KeyEntry, betas: &[String]) -> Result<(), ApiError> {
        let policy = ctx.snap.policy(key.tenant_id());
        let team_id = key.record.team_id.as_deref();
        let facts = Facts {
            kind: Kind::ModelCall,
            model: &ctx.model,
            provider: ctx.provider.map_or("", ProviderName::as_str),
            tool: None,
            betas,
            key_class: &key.record.key_class,
            role: &key.record.role,
            team_id,
            team_name: team_id.and_then(|t| ctx.snap.teams.get(t)).map(String::as_str),
            max_tokens: None,
            prompt_tokens: 0,
            now: chrono::Utc::now(),
        };
        if let Some(why) = policy.allowlist_violation(&facts) {
            return Err(ApiError::new(ErrorKind::PolicyDenied, why));
        }
        if policy.has_rules() {
            if let Decision::Deny { rule_id, .. } = policy.evaluate(&facts) {
                return Err(ApiError::new(ErrorKind::PolicyDenied, format!("denied by policy rule `{rule_id}`")));
            }
        }
        Ok(())
    }
}

/// The `model` of a count_tokens body (the rest passes through as sent).
fn count_tokens_model(raw: &[u8]) -> Result<String, ApiError> {
    let v: Value = serde_json::from_slice(raw)
        .map_err(|e| ApiError::new(ErrorKind::InvalidRequest, format!("the body is not valid JSON: {e}")))?;
    match v.get("model") {
        Some(Value::String(m)) if !m.is_empty() => Ok(m.clone()),
        Some(_) => Err(ApiError::new(ErrorKind::InvalidRequest, "field `model` must be a non-empty string")),
        None => Err(ApiError::new(ErrorKind::InvalidRequest, "field `model` is required")),
    }
}

/// `stream=true` in a retrieve's query (a background response's events, replayed).
fn query_streams(query: Option<&str>) -> bool {
    query.is_some_and(|q| q.split('&').any(|kv| kv == "stream=true"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_tokens_needs_a_model() {
        assert_eq!(count_tokens_model(br#"{"model":"claude-haiku-4-5","messages":[]}"#).unwrap(), "claude-haiku-4-5");
        for bad in [&b"{"[..], br#"{"messages":[]}"#, br#"{"model":3}"#] {
            assert_eq!(count_tokens_model(bad).unwrap_err().kind, ErrorKind::InvalidRequest);
        }
    }
}
