//! Answers the routes that are not model calls (`aside.rs`). They need a valid key but leave no
//! receipt, are not billed and do not count against the key's rpm, tpm or budgets
//! (docs/decisions/gateway.md, "Model lists and count_tokens", "OpenAI Responses API"). A
//! `tools/call` over MCP is the exception: it goes through the lifecycle like a model call.

use super::aside::{anthropic_shaped, Aside};
use super::client::{anthropic_betas, presented_key};
use super::context::Ctx;
use super::ending::Ending;
use super::state::Gateway;
use super::stored::{references, StoredRef};
use super::{body, catalog, relay, request, routes};
use crate::checks::guardrail::plugin as guardrail;
use crate::checks::policy::{Decision, Facts};
use crate::checks::rate_limit;
use crate::config::ProviderName;
use crate::error::{ApiError, ErrorKind, Flavor};
use crate::providers::{self, Dialect, Target};
use crate::receipts::Kind;
use crate::snapshot::KeyEntry;

use std::sync::Arc;

use bytes::Bytes;
use pingora::proxy::Session;
use serde_json::Value;

impl Gateway {
    /// Answers an aside route.
    pub(super) async fn aside(&self, session: &mut Session, ctx: &mut Ctx, aside: &Aside) -> Result<Ending, ApiError> {
        if let Aside::Mcp(name) = aside {
            return self.mcp(session, ctx, name).await;
        }
        // The key is not kept in `ctx`: a request with a key in `ctx` leaves a receipt.
        let key = presented_key(session).and_then(|k| ctx.snap.key(k)).cloned().ok_or_else(ApiError::unauthorized)?;
        key.touch();
        let headers = ctx.answer_headers();
        match aside {
            Aside::Models => Ok(self.model_list(session, ctx, &key, &headers)?),
            Aside::Model(id) => Ok(self.model_info(session, ctx, &key, id, &headers)?),
            Aside::CountTokens => self.count_tokens(session, ctx, key).await,
            Aside::Mcp(_) => Err(ApiError::internal("unreachable: answered above")),
            Aside::ResponseRetrieve(_)
            | Aside::ResponseDelete(_)
            | Aside::ResponseInputItems(_)
            | Aside::ResponseInputTokens => {
                // Boxed: inlined, it would grow every request's future by its own size.
                Box::pin(self.stored_responses(session, ctx, key, aside)).await
            }
        }
    }

    fn model_list(
        &self,
        session: &Session,
        ctx: &Ctx,
        key: &KeyEntry,
        headers: &[(&'static str, String)],
    ) -> Result<Ending, ApiError> {
        let models = catalog::models(&ctx.snap, key, chrono::Utc::now());
        let created = catalog::created(&ctx.snap);
        let req = session.req_header();
        let body = if anthropic_shaped(&req.headers) {
            let page = catalog::AnthropicPage::parse(req.uri.query())?;
            catalog::anthropic_list(&models, &page, &created.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        } else {
            catalog::openai_list(&models, created.timestamp())
        };
        Ok(Ending::json(200, serde_json::to_vec(&body).unwrap_or_default(), headers))
    }

    fn model_info(
        &self,
        session: &Session,
        ctx: &Ctx,
        key: &KeyEntry,
        id: &str,
        headers: &[(&'static str, String)],
    ) -> Result<Ending, ApiError> {
        let models = catalog::models(&ctx.snap, key, chrono::Utc::now());
        let m = models.iter().find(|m| m.id == id).ok_or_else(|| ApiError::not_found(&format!("model `{id}`")))?;
        let created = catalog::created(&ctx.snap);
        let body = if anthropic_shaped(&session.req_header().headers) {
            catalog::anthropic_model(m, &created.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        } else {
            catalog::openai_model(m, created.timestamp())
        };
        Ok(Ending::json(200, serde_json::to_vec(&body).unwrap_or_default(), headers))
    }

    /// Passed to Anthropic with the tenant's credential; the key's allowlist and policies apply
    /// to the model it names, and its own per-minute rate.
    async fn count_tokens(&self, session: &mut Session, ctx: &mut Ctx, key: Arc<KeyEntry>) -> Result<Ending, ApiError> {
        let headers = ctx.answer_headers();
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
        let model = count_tokens_model(&raw)?;
        ctx.model = model;
        ctx.provider = Some(ProviderName::Anthropic);
        self.admit_model(ctx, &key, &anthropic_betas(&session.req_header().headers))?;
        let cred = self.credential(ctx, &key, ProviderName::Anthropic)?;
        let path = routes::normalize(session.req_header().uri.path_and_query().map_or("", |p| p.as_str())).to_string();
        let client_header = |name: &str| -> Option<String> {
            session.req_header().headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string)
        };
        let env = providers::Env { config: &ctx.snap.config, tokens: &self.app.tokens };
        let provider = providers::provider(ProviderName::Anthropic);
        let target = Target::Native { path: &path, stream: false };
        let call = provider.prepare(&env, &cred, target, raw, &client_header).await?;
        let resp = self.send_upstream(ctx, ProviderName::Anthropic, &cred, call).await?;
        let mut cx = crate::checks::pipeline::Ctx::default();
        let route = (Dialect::Anthropic, Flavor::Anthropic, ProviderName::Anthropic, false);
        Ok(self.relay_aside(session, ctx, resp, route, &headers, &mut cx).await)
    }

    /// Relays a provider's answer to an aside call as it is (no translation, cache or receipt);
    /// `route` is the dialect and error flavor the client speaks, the provider, and whether the
    /// client asked for a stream.
    pub(super) async fn relay_aside(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        resp: crate::upstream::UpstreamResponse<'_>,
        route: (Dialect, Flavor, ProviderName, bool),
        headers: &[(&'static str, String)],
        cx: &mut crate::checks::pipeline::Ctx,
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
    pub(super) fn admit_model(&self, ctx: &Ctx, key: &KeyEntry, betas: &[String]) -> Result<(), ApiError> {
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

    /// A call on stored responses that is not a model call: retrieve, delete, input items, or an
    /// input token count. Only the caller's tenant's responses are reached; it leaves no receipt
    /// and is not billed. The answer guardrails still see a retrieved response (its text is the
    /// model's answer again), and the request guardrails a counted input (it leaves for OpenAI).
    pub(super) async fn stored_responses(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        key: Arc<KeyEntry>,
        aside: &Aside,
    ) -> Result<Ending, ApiError> {
        ctx.provider = Some(ProviderName::OpenAi);
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
            _ => {
                let mut json = request::json_object(&raw)?;
                // The model, when named, is one this key may call.
                if let Some(m) = json.get("model").and_then(Value::as_str) {
                    ctx.model = m.chars().take(256).collect();
                    self.admit_model(ctx, &key, &[])?;
                }
                self.owners.check(tenant, &references(&json)?).await?;
                let body = match guardrail::scan_side_request(&ctx.snap, tenant, &mut json)? {
                    true => Bytes::from(serde_json::to_vec(&json).unwrap_or_default()),
                    false => raw,
                };
                ("POST", body, false)
            }
        };
        // The answer-side state lives here, not in `ctx.cx`: nothing of this call is recorded.
        let mut cx = crate::checks::pipeline::Ctx::default();
        if matches!(aside, Aside::ResponseRetrieve(_)) {
            guardrail::arm_answer_scan(&ctx.snap, tenant, &mut cx);
        }
        let cred = self.credential(ctx, &key, ProviderName::OpenAi)?;
        let provider = providers::provider(ProviderName::OpenAi);
        let req = session.req_header();
        let path = routes::normalize(req.uri.path_and_query().map_or("", |p| p.as_str())).to_string();
        let client_header = |name: &str| req.headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
        let env = providers::Env { config: &ctx.snap.config, tokens: &self.app.tokens };
        let target = Target::Native { path: &path, stream };
        let mut call = provider.prepare(&env, &cred, target, body, &client_header).await?;
        call.method = method;
        if method != "POST" {
            call.headers.retain(|(k, _)| *k != "content-type");
        }
        let resp = self.send_upstream(ctx, ProviderName::OpenAi, &cred, call).await?;
        let headers = ctx.answer_headers();
        let route = (Dialect::Responses, Flavor::OpenAi, ProviderName::OpenAi, stream);
        Ok(self.relay_aside(session, ctx, resp, route, &headers, &mut cx).await)
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
