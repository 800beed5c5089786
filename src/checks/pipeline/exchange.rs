//! What the checks see: a provider-neutral view of one request, of its answer text, and of how
//! it ended. No Pingora types here, so every check is testable with a fixture.

use std::sync::Arc;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::providers::{Dialect, Route, Usage, VOCABULARY};
use crate::receipts::{Kind, UpstreamStatus};
use crate::snapshot::{KeyEntry, Snapshot};
use crate::upstream::UpstreamError;

/// One request after authentication, parsing and routing.
pub struct Exchange {
    /// The snapshot pinned for this request (policies, budgets, prices).
    pub snap: Arc<Snapshot>,
    pub key: Arc<KeyEntry>,
    /// Who the request is for, in the key's product (`X-Tollgate-Actor`, OpenAI's `user`,
    /// Anthropic's `metadata.user_id`), validated by the gateway.
    pub end_user: Option<Arc<str>>,
    pub kind: Kind,
    /// The gateway route, e.g. `/v1/chat/completions` (part of the cache key).
    pub route: &'static str,
    pub dialect: Dialect,
    pub provider: std::borrow::Cow<'static, str>,
    pub model: String,
    /// The tool name of a tool call.
    pub tool: Option<String>,
    /// The `anthropic-beta` features the client asks for (passed to Anthropic as sent).
    pub betas: Vec<String>,
    pub stream: bool,
    /// `max_tokens` / `max_completion_tokens` of the request.
    pub max_tokens: Option<u64>,
    /// A conservative estimate, for reservations and `promptTokensAbove`.
    pub prompt_tokens_est: u64,
    /// The body as JSON, built the first time a check asks for it; a check that changes it
    /// sets `body_changed`. Only request-side hooks may read it: after them it may have moved
    /// on to the upstream.
    pub body: JsonBody,
    pub body_changed: bool,
    /// `Cache-Control: no-cache` from the client.
    pub no_cache: bool,
    pub now: DateTime<Utc>,
    /// The model whose price a budget reservation takes when `model` is not priced as itself:
    /// a routed request's dearest target (the client's name for a route has no price).
    pub priced_as: Option<String>,
}

impl Exchange {
    pub fn tenant_id(&self) -> &str {
        self.key.tenant_id()
    }

    pub fn key_id(&self) -> &str {
        &self.key.record.id
    }

    pub fn team_id(&self) -> Option<&str> {
        self.key.record.team_id.as_deref()
    }

    /// Tokens to reserve for the answer: the request's own cap, else the configured default
    /// (embeddings have no answer tokens).
    pub fn completion_tokens_cap(&self) -> u64 {
        // Embeddings and tool calls have no answer tokens.
        if self.route == "/v1/embeddings" || self.kind == Kind::ToolCall {
            return 0;
        }
        self.max_tokens.unwrap_or(self.snap.config.limits.default_completion_tokens)
    }

    /// A fixture for unit tests: a developer key of tenant `t1` on default config.
    pub fn fixture(body: Value) -> Exchange {
        let cfg = Arc::new(crate::config::Config::defaults(&VOCABULARY));
        let pricing = Arc::new(crate::providers::pricing::Pricing::from_config(&cfg).expect("shipped pricing parses"));
        Self::fixture_in(Arc::new(Snapshot::empty(cfg, pricing)), body)
    }

    /// A fixture on a given snapshot (policies of tenant `t1`), for tests and benchmarks.
    pub fn fixture_in(snap: Arc<Snapshot>, body: Value) -> Exchange {
        use crate::store::keys::KeyRecord;
        let record = KeyRecord::fixture("k1", "t1");
        let model = body.get("model").and_then(Value::as_str).unwrap_or_default().to_string();
        let max_tokens = body.get("max_tokens").and_then(Value::as_u64);
        let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
        // A chat completion, as the chat dialect's own provider would get it.
        let route = Route::ChatCompletions;
        Exchange {
            snap,
            key: Arc::new(KeyEntry::new(record, Default::default())),
            end_user: None,
            kind: Kind::ModelCall,
            route: route.upstream_path(),
            dialect: Dialect::CHAT,
            provider: route.default_provider().as_str().into(),
            model,
            tool: None,
            betas: Vec::new(),
            stream,
            max_tokens,
            prompt_tokens_est: estimate_prompt_tokens(body.to_string().len()),
            body: JsonBody::parsed(body),
            body_changed: false,
            no_cache: false,
            now: Utc::now(),
            priced_as: None,
        }
    }
}

/// A JSON body (the request, or a whole answer) as a `serde_json::Value`, built on first use.
/// Most requests need only a few fields, which the gateway reads without building the tree;
/// the tree (an allocation per member and string) is built only when a check must edit the
/// body or read it as a tree (cache key, guardrail redaction) or the gateway must edit it.
pub struct JsonBody {
    raw: Bytes,
    json: Option<Value>,
}

impl JsonBody {
    /// `raw` as received. A request body was already validated as a JSON object; an answer
    /// may not be JSON at all, which [`JsonBody::try_json`] tells.
    pub fn lazy(raw: Bytes) -> Self {
        JsonBody { raw, json: None }
    }

    pub fn parsed(json: Value) -> Self {
        JsonBody { raw: Bytes::new(), json: Some(json) }
    }

    /// The bytes, while no tree was built (so they are still the whole truth).
    pub fn unparsed(&self) -> Option<&[u8]> {
        self.json.is_none().then_some(&self.raw[..])
    }

    /// The tree, or `None` when the bytes are not JSON.
    pub fn try_json(&mut self) -> Option<&mut Value> {
        if self.json.is_none() {
            self.json = Some(serde_json::from_slice(&self.raw).ok()?);
        }
        self.json.as_mut()
    }

    /// The tree built so far, if any: what a check edited.
    pub fn built(&self) -> Option<&Value> {
        self.json.as_ref()
    }

    pub fn json(&mut self) -> &mut Value {
        let raw = &self.raw;
        // Cannot fail for a validated body; an empty object would only drop what the checks see.
        self.json
            .get_or_insert_with(|| serde_json::from_slice(raw).unwrap_or_else(|_| Value::Object(Default::default())))
    }

    /// Moves the JSON out (building it if no check did), leaving `null`.
    pub fn take_json(&mut self) -> Value {
        let v = std::mem::take(self.json());
        self.json = Some(Value::Null);
        v
    }
}

/// A conservative prompt-token estimate from the body size: about four bytes a token, and
/// the JSON syntax around the text makes it an over-estimate, which is what a reservation wants.
pub fn estimate_prompt_tokens(body_len: usize) -> u64 {
    (body_len as u64).div_ceil(4)
}

/// A piece of the answer for the answer-side checks.
pub enum ResponsePiece<'a> {
    /// A whole non-streamed answer (JSON, as far as the upstream said; checks look).
    Json(&'a mut JsonBody),
    /// The text of one streamed event. A check may hold text back (to see what follows) and
    /// release it later; `end` asks it to release everything (`text` is then empty).
    Delta { text: &'a mut String, end: bool },
}

/// A complete answer: what a cache hit replays and what a miss stores.
#[derive(Debug, Clone)]
pub struct Cached {
    pub status: u16,
    pub content_type: String,
    pub body: Bytes,
    pub usage: Usage,
    pub cost_usd: f64,
}

/// What a cache hit saved (unsigned side channel of the receipt).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Saved {
    pub tokens: u64,
    pub usd: f64,
}

/// How a request ended, for `on_complete`.
pub struct Outcome<'a> {
    pub ex: &'a Exchange,
    pub status: u16,
    pub upstream: UpstreamOutcome,
    pub usage: Option<Usage>,
    pub cost_usd: f64,
    /// The answer as the client received it, when it was complete and worth caching.
    pub answer: Option<Cached>,
}

/// How the upstream leg ended, for metrics and the receipt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UpstreamOutcome {
    /// No upstream call was made (a check or an error answered first).
    #[default]
    Skipped,
    /// The provider answered 2xx and the whole answer was relayed.
    Pass,
    /// The provider answered an error status, or the connection failed.
    Fail,
    Timeout,
}

impl UpstreamOutcome {
    pub fn from_error(e: &UpstreamError) -> Self {
        match e {
            UpstreamError::Timeout(_) => UpstreamOutcome::Timeout,
            UpstreamError::Failed(_) => UpstreamOutcome::Fail,
        }
    }

    /// The receipt's `upstreamStatus`.
    pub fn status(self) -> UpstreamStatus {
        match self {
            UpstreamOutcome::Skipped => UpstreamStatus::Skipped,
            UpstreamOutcome::Pass => UpstreamStatus::Ok,
            UpstreamOutcome::Fail => UpstreamStatus::Error,
            UpstreamOutcome::Timeout => UpstreamStatus::Timeout,
        }
    }
}
