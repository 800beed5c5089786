//! `/v1/prompts`: prompts, their numbered versions, and the playground run, which sends the
//! rendered prompt through the gateway's own path (its Unix socket, with the caller's key) so it
//! meets the same checks and routing and leaves the same receipt as any client's call.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::ToSchema;

use super::handler::{page_limit, paginate, Caller, Handled, Page, Reply, Req};
use super::openapi_parts::{Authenticated, Missing, PageQuery};
use crate::app::App;
use crate::error::{ApiError, ErrorKind};
use crate::providers::{usage, Dialect};
use crate::store::prompts::{PromptRecord, VersionRecord};
use crate::store::{self};
use crate::upstream::BaseUrl;

/// What a prompt's text may be: 1 MiB is far beyond any context window's worth of template.
const MAX_CONTENT: usize = 1 << 20;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct PromptBody {
    #[schema(min_length = 1, max_length = 200)]
    name: String,
    /// Default "".
    #[serde(default)]
    description: String,
    /// Version 1's text; `{{name}}` placeholders are filled at run time.
    #[schema(min_length = 1)]
    content: String,
    /// Free-form string labels; a `model` label is the run's default model.
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct VersionBody {
    #[schema(min_length = 1)]
    content: String,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RunBody {
    prompt_id: String,
    version_id: String,
    /// Values of the version's placeholders: a string as it is, anything else as its JSON text.
    #[serde(default)]
    #[schema(value_type = Object)]
    variables: BTreeMap<String, Value>,
    /// Default: the prompt's `model` label.
    #[serde(default)]
    model: Option<String>,
}

/// The seed's prompt run result.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct RunResult {
    output: String,
    input_tokens: u64,
    output_tokens: u64,
    cost_usd: f64,
}

fn content_ok(content: &str) -> Result<(), ApiError> {
    if content.is_empty() || content.len() > MAX_CONTENT {
        return Err(ApiError::invalid(format!("field `content` must be 1 byte to {} MiB", MAX_CONTENT >> 20)));
    }
    Ok(())
}

/// Create a prompt and its version 1
#[utoipa::path(post, path = "/v1/prompts", operation_id = "createPrompt", tag = "prompts", request_body = PromptBody,
    responses((status = 201, description = "The prompt (version 1 is created with it)", body = PromptRecord),
        Authenticated))]
pub async fn create(app: &App, caller: &Caller, req: &Req) -> Handled {
    let body: PromptBody = req.json()?;
    let name = body.name.trim().to_string();
    if name.is_empty() || name.chars().count() > 200 {
        return Err(ApiError::invalid("field `name` must be 1 to 200 characters"));
    }
    content_ok(&body.content)?;
    let (prompt, _) =
        store::prompts::create(&app.store, caller.tenant(), name, body.description, body.labels, body.content).await?;
    Ok(Reply::json(201, &prompt))
}

/// List prompts
#[utoipa::path(get, path = "/v1/prompts", operation_id = "listPrompts", tag = "prompts", params(PageQuery),
    responses((status = 200, description = "A page of prompts", body = Page<PromptRecord>), Authenticated))]
pub async fn list(app: &App, caller: &Caller, req: &Req) -> Handled {
    let limit = page_limit(req)?;
    let rows = store::prompts::list(&app.store, caller.tenant(), req.query("cursor"), limit + 1).await?;
    let (data, next) = paginate(rows, limit, |p| &p.id);
    Ok(Reply::json(200, &Page { data, next_cursor: next }))
}

async fn prompt(app: &App, caller: &Caller, id: &str) -> Result<PromptRecord, ApiError> {
    store::prompts::get(&app.store, caller.tenant(), id).await?.ok_or_else(|| ApiError::not_found("prompt"))
}

/// Get a prompt
#[utoipa::path(get, path = "/v1/prompts/{id}", operation_id = "getPrompt", tag = "prompts",
    params(("id" = String, Path, description = "Prompt id")),
    responses((status = 200, description = "The prompt", body = PromptRecord), Missing, Authenticated))]
pub async fn get(app: &App, caller: &Caller, id: &str) -> Handled {
    Ok(Reply::json(200, &prompt(app, caller, id).await?))
}

/// Add the next version of a prompt
#[utoipa::path(post, path = "/v1/prompts/{id}/versions", operation_id = "createPromptVersion", tag = "prompts",
    params(("id" = String, Path, description = "Prompt id")), request_body = VersionBody,
    responses((status = 201, description = "The new version (numbers are sequential per prompt)", body = VersionRecord),
        Missing, Authenticated))]
pub async fn add_version(app: &App, caller: &Caller, id: &str, req: &Req) -> Handled {
    let body: VersionBody = req.json()?;
    content_ok(&body.content)?;
    let v = store::prompts::add_version(&app.store, caller.tenant(), id, body.content)
        .await?
        .ok_or_else(|| ApiError::not_found("prompt"))?;
    Ok(Reply::json(201, &v))
}

/// List a prompt's versions, oldest first
#[utoipa::path(get, path = "/v1/prompts/{id}/versions", operation_id = "listPromptVersions", tag = "prompts",
    params(("id" = String, Path, description = "Prompt id")),
    responses((status = 200, description = "Every version of the prompt", body = Vec<VersionRecord>), Missing,
        Authenticated))]
pub async fn versions(app: &App, caller: &Caller, id: &str) -> Handled {
    let p = prompt(app, caller, id).await?;
    Ok(Reply::json(200, &store::prompts::versions(&app.store, caller.tenant(), &p.id).await?))
}

/// Run a prompt version through the gateway (the playground)
///
/// Renders the version with `variables` and sends it as one user message to
/// `/v1/chat/completions` on the gateway's own path with the caller's key: the key's checks,
/// routing, limits and budgets apply, and the call leaves a receipt like any other.
#[utoipa::path(post, path = "/v1/prompts/run", operation_id = "runPrompt", tag = "prompts", request_body = RunBody,
    responses((status = 200, description = "The model's answer, its tokens and cost", body = RunResult), Missing,
        Authenticated))]
pub async fn run(app: &App, caller: &Caller, req: &Req) -> Handled {
    let body: RunBody = req.json()?;
    let p = prompt(app, caller, &body.prompt_id).await?;
    let v = store::prompts::version(&app.store, caller.tenant(), &p.id, &body.version_id)
        .await?
        .ok_or_else(|| ApiError::not_found("prompt version"))?;
    let text = crate::prompts::render(&v.content, &body.variables).map_err(|missing| {
        ApiError::invalid(format!("field `variables` lacks the placeholders {}", quoted(&missing)))
    })?;
    let model =
        body.model.filter(|m| !m.is_empty()).or_else(|| p.labels.get("model").cloned()).ok_or_else(|| {
            ApiError::invalid("field `model` is required: give one, or a `model` label on the prompt")
        })?;
    let chat = json!({"model": model, "messages": [{"role": "user", "content": text}]});
    let answer = through_gateway(app, caller, serde_json::to_vec(&chat).unwrap_or_default()).await?;
    let output = answer.pointer("/choices/0/message/content").and_then(Value::as_str).unwrap_or_default();
    let used = usage::from_value(Dialect::CHAT, &answer).unwrap_or_default();
    let cost_usd = app.snapshot.load().pricing.cost(&model, &used);
    // The admin trail records the run as an act on the prompt (its model call has its own receipt).
    app.store.note(p.id.clone()).await?;
    Ok(Reply::json(
        200,
        &RunResult {
            output: output.to_string(),
            input_tokens: used.prompt_tokens,
            output_tokens: used.completion_tokens,
            cost_usd,
        },
    ))
}

fn quoted(names: &[String]) -> String {
    names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
}

/// Largest answer a run reads back.
const ANSWER_CAP: usize = 16 << 20;

/// POSTs a chat completion to the gateway's own socket; its refusal becomes ours.
async fn through_gateway(app: &App, caller: &Caller, body: Vec<u8>) -> Result<Value, ApiError> {
    let headers = vec![
        ("content-type", "application/json".to_string()),
        ("authorization", format!("Bearer {}", caller.presented.expose())),
    ];
    let unreachable = |e: crate::upstream::UpstreamError| {
        log::error!("prompt run: the gateway's own socket {}: {e}", app.local_gateway.display());
        ApiError::new(ErrorKind::Unavailable, "the gateway is not answering on its own socket; retry shortly")
    };
    let base = BaseUrl::unix(&app.local_gateway);
    let mut resp =
        app.upstream.send(&base, "POST", "/v1/chat/completions", &headers, body.into()).await.map_err(unreachable)?;
    let status = resp.header().status.as_u16();
    let retry: Vec<(&'static str, String)> = ["retry-after", "retry-after-ms", "x-should-retry"]
        .into_iter()
        .filter_map(|h| Some((h, resp.header().headers.get(h)?.to_str().ok()?.to_string())))
        .collect();
    let bytes = resp.read_all(ANSWER_CAP).await.map_err(unreachable)?;
    resp.release().await;
    let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    if status == 200 {
        return Ok(v);
    }
    let kind = v.pointer("/error/type").and_then(Value::as_str).unwrap_or_default();
    let message = v.pointer("/error/message").and_then(Value::as_str).unwrap_or("the gateway refused the call");
    Err(ApiError::new(ErrorKind::from_answer(kind, status), message).with_headers(retry))
}
