//! Gateway routes that are not model calls: the model list, Anthropic's token counting, and the
//! OpenAI Responses calls on stored responses (`responses.rs`). They need a valid key but leave
//! no receipt, are not billed and do not count against the key's rpm, tpm or budgets
//! (docs/decisions.md, "Model lists and count_tokens", "OpenAI Responses API").

use std::sync::Arc;

use pingora::proxy::Session;
use serde_json::Value;

use super::ending::Ending;
use super::{body, catalog, relay, routes, Ctx, Gateway};
use crate::checks::policy::{Decision, Facts};
use crate::checks::rate_limit;
use crate::config::ProviderName;
use crate::error::{ApiError, ErrorKind};
use crate::providers::Flavor;
use crate::providers::{self, Dialect, Target};
use crate::receipts::Kind;
use crate::snapshot::KeyEntry;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Aside {
    /// `GET /v1/models`.
    Models,
    /// `GET /v1/models/{id}` (an id may hold `/`: `bedrock/amazon.nova-micro-v1:0`).
    Model(String),
    /// `POST /v1/messages/count_tokens`.
    CountTokens,
    /// `/mcp/{server}` (POST, GET, DELETE): MCP to a tenant's tool server (`mcp.rs`).
    Mcp(String),
    /// `GET /v1/responses/{id}`.
    ResponseRetrieve(String),
    /// `DELETE /v1/responses/{id}`.
    ResponseDelete(String),
    /// `GET /v1/responses/{id}/input_items`.
    ResponseInputItems(String),
    /// `POST /v1/responses/input_tokens`.
    ResponseInputTokens,
}

impl Aside {
    pub fn resolve(method: &http::Method, path: &str) -> Option<Aside> {
        if let Some(name) = super::mcp::server_name(path) {
            return Some(Aside::Mcp(name));
        }
        let path = routes::normalize(path);
        if let Some(rest) = path.trim_end_matches('/').strip_prefix("/v1/responses/") {
            return responses_aside(method, rest);
        }
        match (method.as_str(), path) {
            ("GET", "/v1/models") => Some(Aside::Models),
            ("GET", p) => {
                let id = p.strip_prefix("/v1/models/")?;
                let id = percent_encoding::percent_decode_str(id).decode_utf8().ok()?;
                (!id.is_empty()).then(|| Aside::Model(id.into_owned()))
            }
            ("POST", "/v1/messages/count_tokens") => Some(Aside::CountTokens),
            _ => None,
        }
    }

    /// Metric label.
    pub fn label(&self) -> &'static str {
        match self {
            Aside::Models | Aside::Model(_) => "models",
            Aside::CountTokens => "count_tokens",
            Aside::Mcp(_) => "mcp",
            Aside::ResponseRetrieve(_) => "responses_retrieve",
            Aside::ResponseDelete(_) => "responses_delete",
            Aside::ResponseInputItems(_) => "responses_input_items",
            Aside::ResponseInputTokens => "responses_input_tokens",
        }
    }

    /// The error envelope its client reads: Anthropic's when the request is Anthropic-shaped.
    pub fn flavor(&self, headers: &http::HeaderMap) -> Flavor {
        match self {
            Aside::CountTokens => Flavor::Anthropic,
            Aside::Mcp(_) => Flavor::Plain,
            Aside::ResponseRetrieve(_)
            | Aside::ResponseDelete(_)
            | Aside::ResponseInputItems(_)
            | Aside::ResponseInputTokens => Flavor::OpenAi,
            _ if anthropic_shaped(headers) => Flavor::Anthropic,
            _ => Flavor::OpenAi,
        }
    }
}

/// The calls on stored responses, by method and the path after `/v1/responses/`.
/// `input_tokens` is a name on POST only; on GET or DELETE it is an id like any other.
fn responses_aside(method: &http::Method, rest: &str) -> Option<Aside> {
    let id = |s: &str| (!s.is_empty() && !s.contains('/')).then(|| s.to_string());
    match method.as_str() {
        "POST" => (rest == "input_tokens").then_some(Aside::ResponseInputTokens),
        "GET" => match rest.strip_suffix("/input_items") {
            Some(i) => id(i).map(Aside::ResponseInputItems),
            None => id(rest).map(Aside::ResponseRetrieve),
        },
        "DELETE" => id(rest).map(Aside::ResponseDelete),
        _ => None,
    }
}

/// The anthropic SDK sends `anthropic-version` and its key as `x-api-key`.
fn anthropic_shaped(headers: &http::HeaderMap) -> bool {
    headers.contains_key("anthropic-version") || headers.contains_key("x-api-key")
}

impl Gateway {
    /// Answers an aside route.
    pub(super) async fn aside(&self, session: &mut Session, ctx: &mut Ctx, aside: &Aside) -> Result<Ending, ApiError> {
        if let Aside::Mcp(name) = aside {
            return self.mcp(session, ctx, name).await;
        }
        // The key is not kept in `ctx`: a request with a key in `ctx` leaves a receipt.
        let key =
            super::presented_key(session).and_then(|k| ctx.snap.key(k)).cloned().ok_or_else(ApiError::unauthorized)?;
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
        self.admit_model(ctx, &key, &super::anthropic_betas(&session.req_header().headers))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aside_paths() {
        let get = http::Method::GET;
        assert_eq!(Aside::resolve(&get, "/v1/models"), Some(Aside::Models));
        assert_eq!(Aside::resolve(&get, "/v1/v1/models"), Some(Aside::Models));
        assert_eq!(
            Aside::resolve(&get, "/v1/models/bedrock/amazon.nova-micro-v1%3A0"),
            Some(Aside::Model("bedrock/amazon.nova-micro-v1:0".into()))
        );
        assert_eq!(Aside::resolve(&get, "/v1/models/"), None);
        assert_eq!(Aside::resolve(&http::Method::POST, "/v1/messages/count_tokens"), Some(Aside::CountTokens));
        assert_eq!(Aside::resolve(&http::Method::POST, "/v1/v1/messages/count_tokens"), Some(Aside::CountTokens));
        assert_eq!(Aside::resolve(&http::Method::POST, "/v1/models"), None);
        assert_eq!(Aside::resolve(&get, "/v1/messages/count_tokens"), None);
    }

    #[test]
    fn stored_response_paths() {
        use http::Method;
        let r = |m: Method, p: &str| Aside::resolve(&m, p);
        assert_eq!(r(Method::POST, "/v1/responses/input_tokens"), Some(Aside::ResponseInputTokens));
        assert_eq!(r(Method::GET, "/v1/responses/resp_1"), Some(Aside::ResponseRetrieve("resp_1".into())));
        assert_eq!(r(Method::GET, "/v1/responses/resp_1/"), Some(Aside::ResponseRetrieve("resp_1".into())));
        assert_eq!(r(Method::DELETE, "/v1/responses/resp_1"), Some(Aside::ResponseDelete("resp_1".into())));
        assert_eq!(
            r(Method::GET, "/v1/v1/responses/resp_1/input_items"),
            Some(Aside::ResponseInputItems("resp_1".into()))
        );
        for (m, p) in [
            (Method::GET, "/v1/responses"),
            (Method::POST, "/v1/responses"),
            (Method::PUT, "/v1/responses/resp_1"),
            (Method::POST, "/v1/responses/resp_1"),
            (Method::GET, "/v1/responses//input_items"),
            (Method::GET, "/v1/responses/a/b"),
            (Method::DELETE, "/v1/responses/a/input_items"),
        ] {
            assert_eq!(r(m.clone(), p), None, "{m} {p}");
        }
    }

    #[test]
    fn count_tokens_needs_a_model() {
        assert_eq!(count_tokens_model(br#"{"model":"claude-haiku-4-5","messages":[]}"#).unwrap(), "claude-haiku-4-5");
        for bad in [&b"{"[..], br#"{"messages":[]}"#, br#"{"model":3}"#] {
            assert_eq!(count_tokens_model(bad).unwrap_err().kind, ErrorKind::InvalidRequest);
        }
    }
}
