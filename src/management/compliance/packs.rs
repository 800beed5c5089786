//! `/v1/compliance/packs`: the packs a tenant has in force (baseline and its own), and tenant
//! packs put and removed as raw YAML.

use std::sync::Arc;

use serde::Serialize;
use utoipa::ToSchema;

use super::super::handler::{Caller, Handled, Reply, Req};
use super::super::openapi_parts::{Authenticated, Conflicting, Manager, Missing};
use super::coverage::CoverageMap;
use crate::app::App;
use crate::compliance::pack::{self, Pack, PackSet, PackSummary, Source};
use crate::compliance::{pack_sets, DISCLAIMER, SCOPE};
use crate::config::Origin;
use crate::error::{ApiError, ErrorKind};
use crate::store;

/// The packs in force, in the list shape (one page: `nextCursor` is always null).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(in super::super) struct PackList<'a> {
    data: Vec<PackSummary<'a>>,
    #[schema(value_type = Option<String>)]
    next_cursor: Option<()>,
    /// The version of this set of packs, stamped on receipts written under it.
    pack_set_version: &'a str,
    scope: &'static str,
    disclaimer: &'static str,
}

/// A pack just put, as its coverage map, and the version of the set it is now part of.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(in super::super) struct PutPack<'a> {
    #[serde(flatten)]
    map: CoverageMap<'a>,
    pack_set_version: String,
}

/// The compliance packs in force (baseline and the tenant's own)
#[utoipa::path(get, path = "/v1/compliance/packs", operation_id = "listPacks", tag = "compliance",
    responses((status = 200, description = "The packs in force", body = PackList), Authenticated))]
pub async fn list(app: &App, caller: &Caller) -> Handled {
    let snap = app.snapshot.load();
    let set = snap.packs(caller.tenant());
    let body = PackList {
        data: set.in_force(),
        next_cursor: None,
        pack_set_version: &set.version,
        scope: SCOPE,
        disclaimer: DISCLAIMER,
    };
    Ok(Reply::json(200, &body))
}

fn check_framework(framework: &str) -> Result<(), ApiError> {
    if pack::valid_framework(framework) {
        Ok(())
    } else {
        Err(ApiError::invalid(format!(
            "framework `{framework}` must be 1-64 characters of a-z, 0-9, `-` and `.` (e.g. `eu-ai-act`)"
        )))
    }
}

/// The tenant's own packs in force, without `framework`.
fn own_packs_except(set: &PackSet, framework: &str) -> Vec<Arc<Pack>> {
    set.packs.iter().filter(|p| p.source == Source::Tenant && p.framework != framework).cloned().collect()
}

/// Put a tenant pack as raw YAML, beside or in place of a baseline pack (manager)
#[utoipa::path(put, path = "/v1/compliance/packs/{framework}", operation_id = "putPack", tag = "compliance",
    params(("framework" = String, Path, pattern = "^[a-z0-9.-]{1,64}$", description = "e.g. `eu-ai-act`")),
    request_body(content = String, content_type = "application/yaml",
        description = "The pack YAML: framework (equal to the path's), version, title, status, effectiveDate, disclaimer, controls"),
    responses((status = 200, description = "Replaced", body = PutPack), (status = 201, description = "Created", body = PutPack),
        Manager, Authenticated))]
pub async fn put(app: &App, caller: &Caller, framework: &str, req: &Req) -> Handled {
    caller.require_manager()?;
    check_framework(framework)?;
    let tenant = caller.tenant();
    let raw = std::str::from_utf8(&req.body).map_err(|_| ApiError::invalid("the body must be pack YAML in UTF-8"))?;
    super::super::nul::check_text("the pack YAML", raw)?;
    let parsed = Pack::parse(raw, Origin::Body, Source::Tenant).map_err(ApiError::invalid)?;
    if parsed.framework != framework {
        return Err(ApiError::invalid(format!(
            "field `framework` is `{}` but the path names `{framework}`; they must be equal",
            parsed.framework
        )));
    }
    let parsed = Arc::new(parsed);
    // The new set is recorded before any receipt can be stamped with its version.
    let mut own = own_packs_except(app.snapshot.load().packs(tenant), framework);
    own.push(parsed.clone());
    pack_sets::record(&app.store, tenant, &PackSet::with_tenant_packs(own)).await?;
    let created = store::packs::put(&app.store, tenant, framework, &parsed.hash, raw).await?;
    let version = reload(app, tenant).await?;
    let body = PutPack { map: CoverageMap::of(&parsed), pack_set_version: version };
    Ok(Reply::json(if created { 201 } else { 200 }, &body))
}

/// Delete a tenant pack; baseline packs cannot be deleted (manager)
#[utoipa::path(delete, path = "/v1/compliance/packs/{framework}", operation_id = "deletePack", tag = "compliance",
    params(("framework" = String, Path)),
    responses((status = 204, description = "Deleted: the baseline pack of that framework, if any, is in force again"),
        Manager, Missing, Conflicting, Authenticated))]
pub async fn delete(app: &App, caller: &Caller, framework: &str) -> Handled {
    caller.require_manager()?;
    let tenant = caller.tenant();
    let snap = app.snapshot.load();
    let set = snap.packs(tenant);
    match set.get(framework).map(|p| p.source) {
        None => return Err(ApiError::not_found("compliance pack")),
        Some(Source::Baseline) => {
            let msg =
                format!("`{framework}` is a baseline pack: only tenant packs can be deleted (PUT one to replace it)");
            return Err(ApiError::new(ErrorKind::Conflict, msg));
        }
        Some(Source::Tenant) => {}
    }
    pack_sets::record(&app.store, tenant, &PackSet::with_tenant_packs(own_packs_except(set, framework))).await?;
    if !store::packs::delete(&app.store, tenant, framework).await? {
        return Err(ApiError::not_found("compliance pack"));
    }
    reload(app, tenant).await?;
    Ok(Reply::NoContent)
}

/// Swaps the new packs in and records the set now in force (idempotent; covers a concurrent
/// change the set recorded before the write did not include). Returns its version.
async fn reload(app: &App, tenant: &str) -> Result<String, ApiError> {
    app.snapshot.changed().await?;
    let snap = app.snapshot.load();
    let set = snap.packs(tenant);
    pack_sets::record(&app.store, tenant, set).await?;
    Ok(set.version.clone())
}
