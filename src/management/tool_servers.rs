//! `/v1/tool-servers`: the tenant's MCP tool servers (`POST /mcp/{name}` on the gateway).
//! Header values are secrets: sealed at rest with the master key like provider credentials, sent
//! only to the server, and never returned or logged (a listing shows their names).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::handler::{Caller, Handled, Reply, Req};
use super::openapi_parts::{string_enum, Authenticated, Conflicting, Manager, Missing};
use crate::app::App;
use crate::error::{ApiError, ErrorKind};
use crate::store::tool_servers::{self, ToolServerRow};
use crate::tool_servers::{self as registry, Source};

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct CreateToolServer {
    /// The `{server}` of `/mcp/{server}`: letters, digits, `.`, `_`, `-`.
    #[schema(min_length = 1, max_length = 64, pattern = "^[A-Za-z0-9][A-Za-z0-9._-]*$")]
    name: String,
    /// The server's Streamable HTTP endpoint, e.g. `https://tools.example.com/mcp`.
    #[schema(min_length = 1, max_length = 2048)]
    url: String,
    /// Headers sent to the server with every message (e.g. its own `authorization`). Write-only.
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

/// `config` (listed in tollgate.yaml) or `api` (registered here).
struct ToolServerSource;

impl utoipa::PartialSchema for ToolServerSource {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        string_enum([Source::Config.as_str(), Source::Api.as_str()])
    }
}

impl ToSchema for ToolServerSource {}

/// A registered tool server, without its header values.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct ToolServerView {
    name: String,
    url: String,
    /// The names of the registered headers (their values are never shown).
    header_names: Vec<String>,
    #[schema(value_type = ToolServerSource)]
    source: &'static str,
    /// When it was registered; null for config entries.
    created_at: Option<String>,
}

fn view(row: &ToolServerRow) -> ToolServerView {
    ToolServerView {
        name: row.name.clone(),
        url: row.url.clone(),
        header_names: row.header_names.split(',').filter(|n| !n.is_empty()).map(str::to_string).collect(),
        source: Source::Api.as_str(),
        created_at: Some(row.created_at.clone()),
    }
}

fn invalid(field: &str, why: String) -> ApiError {
    ApiError::invalid(format!("field `{field}` {why}"))
}

/// Register a tool server (manager)
#[utoipa::path(post, path = "/v1/tool-servers", operation_id = "createToolServer", tag = "tool-servers",
    request_body = CreateToolServer,
    responses((status = 201, description = "The tool server (header names only)", body = ToolServerView),
        Manager, Conflicting, Authenticated))]
pub async fn create(app: &App, caller: &Caller, req: &Req) -> Handled {
    caller.require_manager()?;
    let body: CreateToolServer = req.json()?;
    registry::check_name(&body.name).map_err(|e| invalid("name", e))?;
    registry::ServerUrl::parse(&body.url).map_err(|e| invalid("url", e))?;
    registry::check_headers(body.headers.iter()).map_err(|e| ApiError::invalid(format!("field `headers`: {e}")))?;
    let taken = || {
        ApiError::new(
            ErrorKind::Conflict,
            format!(
                "a tool server named `{}` already exists in this tenant; delete it first or pick another name",
                body.name
            ),
        )
    };
    let snap = app.snapshot.load();
    if snap.tool_server(caller.tenant(), &body.name).is_some_and(|s| s.source == Source::Config) {
        return Err(taken());
    }
    // Lower-case names: HTTP header names are case-insensitive, and the upstream sees them so.
    let mut headers: Vec<(String, String)> =
        body.headers.iter().map(|(k, v)| (k.to_ascii_lowercase(), v.clone())).collect();
    headers.sort();
    headers.dedup_by(|a, b| a.0 == b.0);
    let names: Vec<&str> = headers.iter().map(|(k, _)| k.as_str()).collect();
    let row = ToolServerRow {
        tenant_id: caller.tenant().to_string(),
        name: body.name.clone(),
        url: body.url.trim().to_string(),
        sealed_headers: registry::encrypt_headers(&app.master, caller.tenant(), &body.name, &headers),
        header_names: names.join(","),
        created_at: String::new(),
    };
    let row = tool_servers::create(&app.store, row).await?.ok_or_else(taken)?;
    app.snapshot.changed().await?;
    log::info!("tool server {} registered for tenant {}", row.name, caller.tenant());
    Ok(Reply::json(201, &view(&row)))
}

/// List the tenant's tool servers
#[utoipa::path(get, path = "/v1/tool-servers", operation_id = "listToolServers", tag = "tool-servers",
    responses((status = 200, description = "The tenant's tool servers, by name", body = Vec<ToolServerView>),
        Authenticated))]
pub async fn list(app: &App, caller: &Caller) -> Handled {
    let rows = tool_servers::for_tenant(&app.store, caller.tenant()).await?;
    let mut out: Vec<ToolServerView> = app
        .config
        .tool_servers
        .iter()
        .filter(|c| c.tenant == caller.tenant())
        .map(|c| ToolServerView {
            name: c.name.clone(),
            url: c.url.clone(),
            header_names: c.headers.keys().map(|k| k.to_ascii_lowercase()).collect(),
            source: Source::Config.as_str(),
            created_at: None,
        })
        .collect();
    out.extend(rows.iter().filter(|r| !out.iter().any(|c| c.name == r.name)).map(view).collect::<Vec<_>>());
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Reply::json(200, &out))
}

/// Remove a tool server (manager)
#[utoipa::path(delete, path = "/v1/tool-servers/{name}", operation_id = "deleteToolServer", tag = "tool-servers",
    params(("name" = String, Path, description = "Tool server name")),
    responses((status = 204, description = "Removed"), Manager, Missing, Conflicting, Authenticated))]
pub async fn delete(app: &App, caller: &Caller, name: &str) -> Handled {
    caller.require_manager()?;
    if app.config.tool_servers.iter().any(|c| c.tenant == caller.tenant() && c.name == name) {
        return Err(ApiError::new(
            ErrorKind::Conflict,
            format!("tool server `{name}` is listed in the configuration file; remove it there"),
        ));
    }
    if !tool_servers::delete(&app.store, caller.tenant(), name).await? {
        return Err(ApiError::not_found("tool server"));
    }
    app.snapshot.changed().await?;
    Ok(Reply::NoContent)
}
