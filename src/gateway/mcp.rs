//! `/mcp/{server}`: MCP over Streamable HTTP to a tenant's tool server (docs/decisions.md, "MCP
//! tool-call gateway").
//!
//! The client authenticates with its Tollgate key; the server gets its registered headers and
//! the MCP session headers, never the key. Every message passes through, except:
//! - `tools/call` runs the checks (allowlist, policy, rate limit, budget, guardrails on the
//!   arguments and on the result) and leaves one `tool_call` receipt; a refusal is a JSON-RPC
//!   error object the client reads, and the server never sees the call;
//! - a `tools/list` answer holds only the tools the key may call;
//! - a JSON-RPC batch or a malformed message is refused (HTTP 400 with a JSON-RPC error).
//!
//! The answer to a `tools/call` (a JSON body, or the event of an SSE stream that carries it) is
//! the answer's [`Ending`]: it leaves only once the receipt is committed.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use http::header::HeaderMap;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use serde_json::Value;

use super::body;
use super::checked::Checked;
use super::client::{end_user_header, presented_key};
use super::context::Ctx;
use super::ending::Ending;
use super::header;
use super::relay::UpstreamOutcome;
use super::sse::{event_data, SseSplitter};
use super::state::Gateway;
use crate::checks::pipeline::{Cached, Exchange, JsonBody, ResponsePiece};
use crate::checks::policy::{Decision, Facts};
use crate::error::{ApiError, ErrorKind};
use crate::providers::Dialect;
use crate::receipts::{CheckResult, Kind};
use crate::snapshot::{KeyEntry, Snapshot};
use crate::tool_servers::ToolServer;
use crate::upstream::{UpstreamError, UpstreamResponse};

/// Answers held whole (JSON) up to this size; a larger JSON answer is the server's failure.
const WHOLE_BODY_CAP: usize = 16 << 20;

/// Request headers of the MCP transport passed to the server as the client sent them.
const PASSED_REQUEST_HEADERS: &[&str] = &["accept", "mcp-session-id", "mcp-protocol-version", "last-event-id"];

/// A tool name as a metric label: names are the client's to choose, so an unusual one (long,
/// or outside the usual characters) is counted as `other` rather than growing the label set.
pub fn tool_label(tool: &str) -> std::borrow::Cow<'_, str> {
    let plain = !tool.is_empty()
        && tool.len() <= 64
        && tool.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'/' | b':'));
    if plain {
        tool.into()
    } else {
        "other".into()
    }
}

/// What the gateway does with the answer to the client's message.
enum Watch {
    /// Nothing: relayed as it comes.
    None,
    /// The answer to this `tools/list` request: filtered to the tools this key may call.
    List(Value, Arc<KeyEntry>),
    /// The answer to this `tools/call` request: checked, and the receipt's `UPSTREAM`.
    Call(Value),
}

impl Watch {
    fn id(&self) -> Option<&Value> {
        match self {
            Watch::None => None,
            Watch::List(id, _) | Watch::Call(id) => Some(id),
        }
    }
}

/// A JSON-RPC refusal in HTTP 200, so the MCP client reads it as the answer to its request.
fn rpc_refusal(e: &ApiError, id: &Value, headers: Vec<(&'static str, String)>) -> Ending {
    let mut headers = headers;
    headers.extend(e.headers.iter().cloned());
    Ending::json(200, serde_json::to_vec(&e.jsonrpc(id)).unwrap_or_default(), &headers)
}

/// A message that is not one valid JSON-RPC message: HTTP 400 with a JSON-RPC error (the
/// transport's answer to a message it cannot take), no id.
fn malformed(code: i64, message: &str, headers: &[(&'static str, String)]) -> Ending {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": Value::Null,
        "error": {"code": code, "message": message, "data": {"type": "invalid_request", "status": 400}},
    });
    let mut h = headers.to_vec();
    h.push(("x-should-retry", "false".into()));
    Ending::json(400, serde_json::to_vec(&body).unwrap_or_default(), &h)
}

/// Whether the key may call `tool` on `server`: the allowlists' `tools` and the policy rules
/// with `kind: tool_call` / `tool:` (the same engine as the checks).
pub fn tool_allowed(snap: &Snapshot, key: &KeyEntry, server: &str, tool: &str) -> bool {
    let policy = snap.policy(key.tenant_id());
    let team_id = key.record.team_id.as_deref();
    let facts = Facts {
        kind: Kind::ToolCall,
        model: tool,
        provider: server,
        tool: Some(tool),
        betas: &[],
        key_class: &key.record.key_class,
        role: &key.record.role,
        team_id,
        team_name: team_id.and_then(|t| snap.teams.get(t)).map(String::as_str),
        max_tokens: None,
        prompt_tokens: 0,
        now: chrono::Utc::now(),
    };
    if policy.allowlist_violation(&facts).is_some() {
        return false;
    }
    !(policy.has_rules() && matches!(policy.evaluate(&facts), Decision::Deny { .. }))
}

/// The tool name of a `tools/call`: a printable string of at most 256 characters.
fn tool_name(msg: &Value) -> Result<String, ApiError> {
    match msg.pointer("/params/name") {
        Some(Value::String(n)) if !n.is_empty() && n.chars().count() <= 256 && !n.chars().any(char::is_control) => {
            Ok(n.clone())
        }
        Some(_) => Err(ApiError::invalid("`params.name` must be a tool name of 1 to 256 printable characters")),
        None => Err(ApiError::invalid("`params.name` is required: the name of the tool to call")),
    }
}

/// An MCP `tools/call` the admit stage let in: it has the checks and one `tool_call` receipt.
pub(super) struct ToolCall {
    server: Arc<ToolServer>,
    key: Arc<KeyEntry>,
    /// The JSON-RPC id its answer carries.
    id: Value,
    /// The message; it moves into the checks' exchange.
    msg: Value,
    /// The message as the client sent it, forwarded unless a check edited it.
    raw: Bytes,
    tool: String,
}

/// An MCP message passed to the tool server without the checks or a receipt: any message but
/// a `tools/call`, the server's own stream (GET), the end of a session (DELETE).
pub(super) struct Passing {
    server: Arc<ToolServer>,
    method: &'static str,
    body: Bytes,
    watch: Watch,
}

/// What the admit stage makes of an `/mcp/{server}` request.
pub(super) enum McpAdmitted {
    Call(ToolCall),
    Pass(Passing),
    /// Refused in the transport's or JSON-RPC's own terms (an answer, not an error envelope).
    Answered(Ending),
}

impl Checked for ToolCall {
    fn exchange(&mut self, _session: &Session, ctx: &Ctx) -> Exchange {
        Exchange {
            snap: ctx.snap.clone(),
            key: self.key.clone(),
            end_user: ctx.end_user.as_deref().map(Into::into),
            kind: Kind::ToolCall,
            route: "/mcp",
            dialect: Dialect::CHAT,
            provider: self.server.name.clone().into(),
            model: self.tool.clone(),
            tool: Some(std::mem::take(&mut self.tool)),
            betas: Vec::new(),
            stream: false,
            max_tokens: None,
            prompt_tokens_est: 0,
            body: JsonBody::parsed(self.msg.take()),
            body_changed: false,
            no_cache: true,
            now: chrono::Utc::now(),
            priced_as: None,
        }
    }

    fn edits_body(&self, ex: &Exchange) -> bool {
        ex.body_changed
    }

    fn refused(&self, ctx: &mut Ctx, e: ApiError) -> Result<Ending, ApiError> {
        ctx.error = Some(e.kind);
        Ok(rpc_refusal(&e, &self.id, ctx.answer_headers()))
    }

    /// The cache never serves tool calls (plugins/cache.rs).
    fn served(&self, ctx: &mut Ctx, _hit: Cached) -> Result<Ending, ApiError> {
        Ok(rpc_refusal(&ApiError::internal("a tool call cannot be cached"), &self.id, ctx.answer_headers()))
    }
}

/// What the gateway watches in the answer to this JSON-RPC message, or why the message is not
/// one it takes (a JSON-RPC error code and message).
fn rpc_watch(msg: &Value, key: &Arc<KeyEntry>) -> Result<Watch, (i64, &'static str)> {
    let obj = match msg {
        Value::Object(o) => o,
        // MCP 2025-06-18 dropped JSON-RPC batches; taking them would also let a `tools/call`
        // ride in a batch past the per-call checks.
        Value::Array(_) => return Err((-32600, "JSON-RPC batches are not supported: send one message per request")),
        _ => return Err((-32600, "a JSON-RPC message must be a JSON object")),
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err((-32600, "`jsonrpc` must be \"2.0\""));
    }
    let id = obj.get("id").filter(|v| v.is_string() || v.is_number()).cloned();
    if obj.get("id").is_some_and(|v| !(v.is_string() || v.is_number() || v.is_null())) {
        return Err((-32600, "`id` must be a string or a number"));
    }
    let method = match obj.get("method") {
        Some(Value::String(m)) => Some(m.as_str()),
        Some(_) => return Err((-32600, "`method` must be a string")),
        // A response to a request of the server's, or not JSON-RPC at all.
        None if id.is_some() && (obj.contains_key("result") || obj.contains_key("error")) => None,
        None => return Err((-32600, "a JSON-RPC request needs `method`")),
    };
    Ok(match (method, id) {
        (Some("tools/call"), Some(id)) => Watch::Call(id),
        (Some("tools/call"), None) => return Err((-32600, "`tools/call` is a request: it needs an `id`")),
        (Some("tools/list"), Some(id)) => Watch::List(id, key.clone()),
        _ => Watch::None,
    })
}

impl Gateway {
    /// Admit `/mcp/{server}`: the key and the tenant's server, then the message.
    pub(super) async fn admit_mcp(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        name: &str,
    ) -> Result<McpAdmitted, ApiError> {
        // The key is put into `ctx` only for a `tools/call`: that alone leaves a receipt.
        let key = presented_key(session).and_then(|k| ctx.snap.key(k)).cloned().ok_or_else(ApiError::unauthorized)?;
        if key.is_auditor() {
            return Err(ApiError::auditor_refused("the gateway"));
        }
        key.touch();
        // Another tenant's server is not found, exactly like a name nobody registered.
        let server = ctx.snap.tool_server(key.tenant_id(), name).cloned().ok_or_else(|| {
            ApiError::not_found(&format!("tool server `{name}`: register it with POST /v1/tool-servers"))
        })?;
        let pass = |method| {
            McpAdmitted::Pass(Passing { server: server.clone(), method, body: Bytes::new(), watch: Watch::None })
        };
        match session.req_header().method.as_str() {
            // The server's own stream, and the end of a session: passed through as they are.
            "GET" => Ok(pass("GET")),
            "DELETE" => Ok(pass("DELETE")),
            "POST" => self.admit_mcp_message(session, ctx, key, server).await,
            _ => Err(ApiError::new(ErrorKind::MethodNotAllowed, "MCP takes POST, GET and DELETE on /mcp/{server}")),
        }
    }

    /// Admit a POSTed JSON-RPC message: a `tools/call` becomes a checked call with a receipt;
    /// any other message passes.
    async fn admit_mcp_message(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        key: Arc<KeyEntry>,
        server: Arc<ToolServer>,
    ) -> Result<McpAdmitted, ApiError> {
        let raw = body::read(session, ctx.snap.config.limits.max_body_bytes).await?;
        let headers = ctx.answer_headers();
        let msg: Value = match serde_json::from_slice(&raw) {
            Ok(v) => v,
            Err(e) => {
                let message = format!("parse error: the body is not JSON: {e}");
                return Ok(McpAdmitted::Answered(malformed(-32700, &message, &headers)));
            }
        };
        let id = match rpc_watch(&msg, &key) {
            Ok(Watch::Call(id)) => id,
            Ok(watch) => return Ok(McpAdmitted::Pass(Passing { server, method: "POST", body: raw, watch })),
            Err((code, message)) => return Ok(McpAdmitted::Answered(malformed(code, message, &headers))),
        };
        // A tool call: from here on the request has a receipt.
        ctx.key = Some(key.clone());
        ctx.tool = Some(server.clone());
        ctx.end_user = end_user_header(session)?;
        let tool = match tool_name(&msg) {
            Ok(t) => t,
            Err(e) => return Ok(McpAdmitted::Answered(rpc_refusal(&e, &id, ctx.answer_headers()))),
        };
        ctx.model = tool.clone();
        Ok(McpAdmitted::Call(ToolCall { server, key, id, msg, raw, tool }))
    }

    /// Forward a tool call to its server: the message as a check left it.
    pub(super) async fn forward_tool_call(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        call: ToolCall,
        json: Option<Value>,
    ) -> Result<Ending, ApiError> {
        let body = match json {
            Some(edited) => Bytes::from(serde_json::to_vec(&edited).unwrap_or_default()),
            None => call.raw,
        };
        self.mcp_forward(session, ctx, &call.server, "POST", body, Watch::Call(call.id)).await
    }

    /// Forward an MCP message that passes without the checks.
    pub(super) async fn forward_passing(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        pass: Passing,
    ) -> Result<Ending, ApiError> {
        self.mcp_forward(session, ctx, &pass.server, pass.method, pass.body, pass.watch).await
    }
    /// Sends one message to the server and relays its answer.
    async fn mcp_forward(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        server: &ToolServer,
        method: &str,
        body: Bytes,
        watch: Watch,
    ) -> Result<Ending, ApiError> {
        let headers = server_headers(&session.req_header().headers, server, method);
        let sent = Box::pin(self.upstream.send(&server.url.base, method, &server.url.path, &headers, body)).await;
        let resp = match sent {
            Ok(r) => r,
            Err(e) => {
                ctx.upstream = UpstreamOutcome::from_error(&e);
                log::warn!("request {}: tool server {}: {e}", ctx.request_id, server.name);
                let err = match e {
                    UpstreamError::Timeout(_) => ApiError::new(
                        ErrorKind::UpstreamTimeout,
                        format!("tool server `{}` did not answer in time", server.name),
                    ),
                    UpstreamError::Failed(_) => ApiError::new(
                        ErrorKind::UpstreamError,
                        format!("could not reach tool server `{}`; retry later", server.name),
                    ),
                };
                return match watch.id() {
                    Some(id) => Ok(rpc_refusal(&err, id, ctx.answer_headers())),
                    None => Err(err),
                };
            }
        };
        let status = resp.header().status.as_u16();
        let content_type = resp
            .header()
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase();
        // 400 and 404 (an unknown or expired session) are the transport's answers the client
        // acts on, so they pass; any other failure is the server's, and a request reads it as
        // its JSON-RPC error.
        if !(200..300).contains(&status) && !matches!(status, 400 | 404) {
            return Ok(self.mcp_failed(resp, ctx, server, status, &watch).await);
        }
        if (200..300).contains(&status) && content_type.starts_with("text/event-stream") {
            return Ok(self.mcp_events(session, resp, ctx, server, watch).await);
        }
        Ok(self.mcp_whole(resp, ctx, server, status, watch).await)
    }

    /// The server answered an error status.
    async fn mcp_failed(
        &self,
        mut resp: UpstreamResponse<'_>,
        ctx: &mut Ctx,
        server: &ToolServer,
        status: u16,
        watch: &Watch,
    ) -> Ending {
        let _ = resp.read_all(64 << 10).await;
        resp.release().await;
        ctx.upstream = UpstreamOutcome::Fail;
        let what = match status {
            401 | 403 => " (check the headers registered for it)",
            _ => "",
        };
        let e = ApiError::new(
            ErrorKind::UpstreamError,
            format!("tool server `{}` answered HTTP {status}{what}", server.name),
        );
        match watch.id() {
            Some(id) => rpc_refusal(&e, id, ctx.answer_headers()),
            None => Ending::error(&e, crate::providers::Flavor::Plain, ctx.answer_headers()),
        }
    }

    /// A whole answer (JSON, `202 Accepted`, a transport error): read, checked, and handed back
    /// as the ending.
    async fn mcp_whole(
        &self,
        mut resp: UpstreamResponse<'_>,
        ctx: &mut Ctx,
        server: &ToolServer,
        status: u16,
        watch: Watch,
    ) -> Ending {
        let body = match resp.read_all(WHOLE_BODY_CAP).await {
            Ok(b) => b,
            Err(e) => {
                ctx.upstream = UpstreamOutcome::from_error(&e);
                log::warn!("request {}: tool server {}: {e}", ctx.request_id, server.name);
                let err = ApiError::new(
                    ErrorKind::UpstreamError,
                    format!("tool server `{}`'s answer broke off", server.name),
                );
                return match watch.id() {
                    Some(id) => rpc_refusal(&err, id, ctx.answer_headers()),
                    None => Ending::error(&err, crate::providers::Flavor::Plain, ctx.answer_headers()),
                };
            }
        };
        let mut header = answer_header(&resp, status, &ctx.answer_headers());
        resp.release().await;
        let body = match (&watch, (200..300).contains(&status)) {
            (Watch::None, _) => body,
            (_, false) => {
                ctx.upstream = UpstreamOutcome::Fail;
                body
            }
            _ => match serde_json::from_slice::<Value>(&body) {
                Ok(v) => match self.answered(ctx, server, &watch, v) {
                    Ok(Some(v)) => Bytes::from(serde_json::to_vec(&v).unwrap_or_default()),
                    Ok(None) => body,
                    Err(refusal) => Bytes::from(serde_json::to_vec(&refusal).unwrap_or_default()),
                },
                Err(_) => {
                    ctx.upstream = UpstreamOutcome::Fail;
                    let e = ApiError::new(
                        ErrorKind::UpstreamError,
                        format!("tool server `{}` answered no JSON", server.name),
                    );
                    let id = watch.id().cloned().unwrap_or_default();
                    return rpc_refusal(&e, &id, ctx.answer_headers());
                }
            },
        };
        let _ = header.insert_header(http::header::CONTENT_LENGTH, body.len().to_string());
        Ending::Whole(Box::new(header), body)
    }

    /// The server's answer to a watched request: the receipt's `UPSTREAM`, the answer-side
    /// checks and the tool-list filter. `Ok(Some)` is the answer to send instead (changed),
    /// `Ok(None)` the answer as it came, `Err` a refusal in its place.
    fn answered(
        &self,
        ctx: &mut Ctx,
        server: &ToolServer,
        watch: &Watch,
        mut v: Value,
    ) -> Result<Option<Value>, Value> {
        match watch {
            Watch::None => Ok(None),
            Watch::List(_, key) => {
                let Some(Value::Array(tools)) = v.pointer_mut("/result/tools") else { return Ok(None) };
                let before = tools.len();
                tools.retain(|t| {
                    t.get("name").and_then(Value::as_str).is_some_and(|n| tool_allowed(&ctx.snap, key, &server.name, n))
                });
                Ok((tools.len() != before).then_some(v))
            }
            Watch::Call(id) => {
                ctx.upstream = if v.get("error").is_some() || v.get("result").is_none() {
                    UpstreamOutcome::Fail
                } else {
                    UpstreamOutcome::Pass
                };
                ctx.tool_error = v.pointer("/result/isError").and_then(Value::as_bool).unwrap_or(false);
                if ctx.upstream == UpstreamOutcome::Pass {
                    ctx.cost_usd = ctx.snap.pricing.tool_cost(&server.name, &ctx.model);
                }
                if !ctx.cx.scan_answer || v.get("result").is_none() {
                    return Ok(None);
                }
                let mut answer = JsonBody::parsed(v);
                match self.pipeline.on_response(&mut ResponsePiece::Json(&mut answer), &mut ctx.cx) {
                    Ok(()) => {
                        let redacted = ctx.cx.response_checks.iter().any(|c| c.result == CheckResult::Redact);
                        Ok(redacted.then(|| answer.take_json()))
                    }
                    Err(e) => {
                        ctx.error = Some(e.kind);
                        Err(e.jsonrpc(id))
                    }
                }
            }
        }
    }

    /// An SSE answer: events pass as they come; the event that answers a watched request is
    /// checked and held back as the ending (the receipt is committed before it leaves).
    async fn mcp_events(
        &self,
        session: &mut Session,
        mut resp: UpstreamResponse<'_>,
        ctx: &mut Ctx,
        server: &ToolServer,
        watch: Watch,
    ) -> Ending {
        let status = resp.header().status.as_u16();
        let mut header = answer_header(&resp, status, &ctx.answer_headers());
        if !session.is_http2() {
            let _ = header.insert_header(http::header::TRANSFER_ENCODING, "chunked");
        }
        if session.write_response_header(Box::new(header), false).await.is_err() {
            return Ending::Gone;
        }
        let mut sse = SseSplitter::default();
        let mut held: Option<Bytes> = None;
        loop {
            let (events, last) = match resp.next_chunk().await {
                Ok(Some(chunk)) => (sse.push(&chunk), false),
                Ok(None) => (sse.finish().into_iter().collect(), true),
                Err(e) => {
                    log::warn!("request {}: tool server {} broke off its stream: {e}", ctx.request_id, server.name);
                    if watch.id().is_some() && held.is_none() {
                        ctx.upstream = UpstreamOutcome::from_error(&e);
                    }
                    break;
                }
            };
            let mut out = BytesMut::new();
            for e in events {
                self.mcp_event(ctx, server, &watch, e, &mut out, &mut held);
            }
            if !out.is_empty() && session.write_response_body(Some(out.freeze()), false).await.is_err() {
                return Ending::Gone;
            }
            if last {
                break;
            }
        }
        resp.release().await;
        stream_ending(ctx, server, &watch, held)
    }

    /// One event of an SSE answer: appended to `out`, or (the watched answer) put in `held`.
    fn mcp_event(
        &self,
        ctx: &mut Ctx,
        server: &ToolServer,
        watch: &Watch,
        event: Bytes,
        out: &mut BytesMut,
        held: &mut Option<Bytes>,
    ) {
        let Some(id) = watch.id().filter(|_| held.is_none()) else {
            out.extend_from_slice(&event);
            return;
        };
        let parsed = event_data(&event).and_then(|d| serde_json::from_str::<Value>(&d).ok());
        let answers = parsed.as_ref().is_some_and(|v| {
            v.get("id") == Some(id)
                && (v.get("result").is_some() || v.get("error").is_some())
                && v.get("method").is_none()
        });
        let (true, Some(v)) = (answers, parsed) else {
            out.extend_from_slice(&event);
            return;
        };
        *held = Some(match self.answered(ctx, server, watch, v) {
            Ok(None) => event,
            Ok(Some(changed)) => rewrite_event(&event, &changed),
            Err(refusal) => rewrite_event(&event, &refusal),
        });
    }
}

/// The ending of a tool server's stream: the held answer, or (the stream ended without it)
/// the answer the client still gets.
fn stream_ending(ctx: &mut Ctx, server: &ToolServer, watch: &Watch, held: Option<Bytes>) -> Ending {
    match (watch.id(), held) {
        (_, Some(last)) => Ending::Tail { bytes: Some(last), stream: None },
        (None, None) => Ending::Tail { bytes: None, stream: None },
        (Some(id), None) => {
            // The stream ended without the answer: the client still gets one.
            if ctx.upstream == UpstreamOutcome::Skipped || ctx.upstream == UpstreamOutcome::Pass {
                ctx.upstream = UpstreamOutcome::Fail;
            }
            let e = ApiError::new(
                ErrorKind::UpstreamError,
                format!("tool server `{}` ended its stream without an answer", server.name),
            );
            Ending::Tail { bytes: Some(sse_event(&e.jsonrpc(id))), stream: None }
        }
    }
}

/// The headers the tool server gets: the MCP transport's, as the client sent them, then the
/// server's registered ones.
fn server_headers(client: &HeaderMap, server: &ToolServer, method: &str) -> Vec<(http::HeaderName, String)> {
    let mut headers: Vec<(http::HeaderName, String)> = Vec::with_capacity(server.headers.len() + 5);
    for name in PASSED_REQUEST_HEADERS {
        if let Some(v) = client.get(*name).and_then(|v| v.to_str().ok()) {
            headers.push((http::HeaderName::from_static(name), v.to_string()));
        }
    }
    if method == "POST" {
        headers.push((http::header::CONTENT_TYPE, "application/json".into()));
        if !headers.iter().any(|(k, _)| k == http::header::ACCEPT) {
            headers.push((http::header::ACCEPT, "application/json, text/event-stream".into()));
        }
    }
    // The registered headers last: they are the server's credentials, and the client's
    // `Authorization` (its Tollgate key) is never among the headers passed on.
    headers.extend(server.headers.iter().map(|(k, v)| (k.clone(), v.expose().to_string())));
    headers
}

/// `event` with its data replaced by `data` (its other lines, e.g. `id:`, kept).
fn rewrite_event(event: &[u8], data: &Value) -> Bytes {
    let text = String::from_utf8_lossy(event);
    let mut out = BytesMut::new();
    for line in text.lines().filter(|l| !l.is_empty() && !l.starts_with("data:")) {
        out.extend_from_slice(line.as_bytes());
        out.extend_from_slice(b"\n");
    }
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(&serde_json::to_vec(data).unwrap_or_default());
    out.extend_from_slice(b"\n\n");
    out.freeze()
}

fn sse_event(data: &Value) -> Bytes {
    rewrite_event(b"event: message\n", data)
}

fn answer_header(resp: &UpstreamResponse<'_>, status: u16, ours: &[(&'static str, String)]) -> ResponseHeader {
    let upstream = &resp.header().headers;
    let mut map = HeaderMap::with_capacity(upstream.len() + ours.len() + 1);
    header::copy_end_to_end(&mut map, upstream);
    header::set_ours(&mut map, ours);
    header::response(status, map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_json_rpc_errors_with_the_request_id() {
        let e = ApiError::new(ErrorKind::PolicyDenied, "tool `shell.exec` is not in the tenant's allowlist");
        let v = e.jsonrpc(&Value::from(7));
        assert_eq!(v["jsonrpc"], "2.0");
        assert_eq!(v["id"], 7);
        assert_eq!(v["error"]["code"], -32001);
        assert_eq!(v["error"]["data"]["type"], "policy_denied");
    }

    #[test]
    fn events_keep_their_other_lines() {
        let e = rewrite_event(b"event: message\nid: 3\ndata: {\"a\":1}\n\n", &serde_json::json!({"b": 2}));
        assert_eq!(&e[..], b"event: message\nid: 3\ndata: {\"b\":2}\n\n");
    }
}
