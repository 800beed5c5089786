//! `/v1/routes`: the tenant's model routes (a model name a client uses → provider targets, with
//! a strategy, retries and a breaker). Config's routes apply to every tenant; a tenant's own
//! route of the same model takes precedence (docs/decisions/routes.md).

use serde::Serialize;
use utoipa::ToSchema;

use super::handler::{Caller, Handled, Reply, Req};
use super::openapi_parts::{Authenticated, Manager, Missing};
use crate::app::App;
use crate::config::RouteSpec;
use crate::error::ApiError;
use crate::providers::ProviderName;
use crate::store;

/// A route as the API shows it.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct RouteView {
    #[serde(flatten)]
    route: RouteSpec,
    /// `api` (set here) or `config` (tollgate.yaml, for every tenant).
    source: &'static str,
    updated_at: Option<String>,
}

fn stored(row: &store::routes::RouteRow) -> Option<RouteView> {
    let route = serde_json::from_str(&row.spec).ok()?;
    Some(RouteView { route, source: "api", updated_at: Some(row.updated_at.clone()) })
}

fn from_config(route: &RouteSpec) -> RouteView {
    RouteView { route: route.clone(), source: "config", updated_at: None }
}

/// The model from the path, percent-decoded (a model name may hold `/`, sent as `%2F`).
fn model_from_path(raw: &str) -> Result<String, ApiError> {
    let model = percent_encoding::percent_decode_str(raw).decode_utf8_lossy().into_owned();
    crate::config::routes::check_name("model", &model, 256).map_err(ApiError::invalid)?;
    Ok(model)
}

/// List the tenant's model routes
#[utoipa::path(get, path = "/v1/routes", operation_id = "listRoutes", tag = "routes",
    responses((status = 200, description = "The tenant's routes and config's, by model", body = Vec<RouteView>),
        Authenticated))]
pub async fn list(app: &App, caller: &Caller) -> Handled {
    let rows = store::routes::for_tenant(&app.store, caller.tenant()).await?;
    let mut out: Vec<RouteView> = rows.iter().filter_map(stored).collect();
    let config = app.config.routes.models.iter().filter(|c| !rows.iter().any(|r| r.model == c.model));
    out.extend(config.map(from_config));
    out.sort_by(|a, b| a.route.model.cmp(&b.route.model));
    Ok(Reply::json(200, &out))
}

/// Get one model route
#[utoipa::path(get, path = "/v1/routes/{model}", operation_id = "getRoute", tag = "routes",
    params(("model" = String, Path, description = "The model name clients use")),
    responses((status = 200, description = "The route", body = RouteView), Missing, Authenticated))]
pub async fn get(app: &App, caller: &Caller, model: &str) -> Handled {
    let model = model_from_path(model)?;
    let rows = store::routes::for_tenant(&app.store, caller.tenant()).await?;
    let found = rows
        .iter()
        .find(|r| r.model == model)
        .and_then(stored)
        .or_else(|| app.config.routes.models.iter().find(|c| c.model == model).map(from_config));
    let view = found.ok_or_else(|| ApiError::not_found(&format!("routing for model `{model}`")))?;
    Ok(Reply::json(200, &view))
}

/// Create or replace a model route (manager)
///
/// Takes effect for the next request, on every process sharing the database.
#[utoipa::path(put, path = "/v1/routes/{model}", operation_id = "putRoute", tag = "routes",
    params(("model" = String, Path, description = "The model name clients use")),
    request_body = RouteSpec,
    responses((status = 200, description = "The route", body = RouteView), Manager, Authenticated))]
pub async fn put(app: &App, caller: &Caller, model: &str, req: &Req) -> Handled {
    caller.require_manager()?;
    let model = model_from_path(model)?;
    let mut spec: RouteSpec = req.json()?;
    if !spec.model.is_empty() && spec.model != model {
        return Err(ApiError::invalid(format!("field `model` ({}) differs from the path ({model})", spec.model)));
    }
    spec.model = model.clone();
    spec.check(&|p| ProviderName::parse(p).is_some()).map_err(|e| ApiError::invalid(format!("field `{e}")))?;
    let json = serde_json::to_string(&spec).map_err(|e| ApiError::internal(e.to_string()))?;
    let row = store::routes::put(&app.store, caller.tenant(), &model, json).await?;
    app.snapshot.changed().await?;
    log::info!("route {model} replaced for tenant {}", caller.tenant());
    Ok(Reply::json(200, &RouteView { route: spec, source: "api", updated_at: Some(row.updated_at) }))
}

/// Delete a model route (manager)
///
/// A config route of the same model applies again.
#[utoipa::path(delete, path = "/v1/routes/{model}", operation_id = "deleteRoute", tag = "routes",
    params(("model" = String, Path, description = "The model name clients use")),
    responses((status = 204, description = "Deleted"), Missing, Manager, Authenticated))]
pub async fn delete(app: &App, caller: &Caller, model: &str) -> Handled {
    caller.require_manager()?;
    let model = model_from_path(model)?;
    store::routes::delete(&app.store, caller.tenant(), &model)
        .await?
        .ok_or_else(|| ApiError::not_found(&format!("routing for model `{model}`")))?;
    app.snapshot.changed().await?;
    Ok(Reply::NoContent)
}
