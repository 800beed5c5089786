//! `/v1/log/…`: the tenant log (docs/log.md §2–§4, §6) — the signed checkpoint, the verifier keys,
//! published checkpoints and their RFC 3161 timestamps, inclusion and consistency proofs, and
//! the C2SP tlog-tiles read API.

use serde::Serialize;
use utoipa::{IntoParams, ToSchema};

use super::handler::{number, page_limit, Caller, Handled, Page, Reply, Req};
use super::openapi_parts::{Authenticated, PageQuery};
use crate::app::App;
use crate::error::ApiError;
use crate::receipts::signer;
use crate::store::checkpoints;
use crate::store::receipts as stored;
use crate::store::tiles;
use crate::store::timestamps as stamps;
use crate::tenant_log::checkpoint::{self, origin};
use crate::tenant_log::tile_path::{self, TilePath};
use crate::tenant_log::tree;

const NOTE_TYPE: &str = "text/plain; charset=utf-8";

/// The latest checkpoint, as a C2SP signed note
#[utoipa::path(get, path = "/v1/log/checkpoint", operation_id = "getLogCheckpoint", tag = "log",
    responses((status = 200, description = "The checkpoint (C2SP tlog-checkpoint in a signed note); it covers \
        every receipt whose answer was sent", content_type = "text/plain; charset=utf-8", body = String), Authenticated))]
pub async fn checkpoint(app: &App, caller: &Caller) -> Handled {
    let note = checkpoint::current_served(&app.store, &app.signer, &app.log_origin, caller.tenant()).await?;
    Ok(Reply::Bytes { headers: vec![("content-type", NOTE_TYPE.into())], body: note.into_bytes() })
}

/// One published checkpoint.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct PublishedCheckpoint {
    size: u64,
    /// Hex.
    root: String,
    /// The signed note.
    checkpoint: String,
    key_id: String,
    created_at: String,
}

/// Published checkpoints, newest first
#[utoipa::path(get, path = "/v1/log/checkpoints", operation_id = "listLogCheckpoints", tag = "log",
    params(PageQuery),
    responses((status = 200, description = "One page; `nextCursor` for the next", body = Page<PublishedCheckpoint>),
        Authenticated))]
pub async fn checkpoints(app: &App, caller: &Caller, req: &Req) -> Handled {
    let limit = page_limit(req)?;
    let below = size_cursor(req)?;
    let mut rows = checkpoints::page(&app.store, caller.tenant(), below, limit + 1).await?;
    let more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    let next_cursor = if more { rows.last().map(|r| r.size.to_string()) } else { None };
    let mut data = Vec::with_capacity(rows.len());
    for r in rows {
        let checkpoint = checkpoint::served(&app.store, caller.tenant(), &r).await?;
        data.push(PublishedCheckpoint {
            size: r.size,
            root: r.root,
            checkpoint,
            key_id: r.key_id,
            created_at: r.created_at,
        });
    }
    Ok(Reply::json(200, &Page { data, next_cursor }))
}

/// One RFC 3161 timestamp of a published checkpoint.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct LogTimestamp {
    size: u64,
    /// The signed note stamped; the TSA hashed its body (the text up to and including the root's
    /// newline) with SHA-256.
    checkpoint: String,
    /// The token's genTime, RFC 3339 UTC.
    gen_time: String,
    /// Base64 of the DER `TimeStampResp` as the TSA sent it (`openssl ts -verify -in`).
    tsr: String,
}

/// RFC 3161 timestamps of published checkpoints, newest first
#[utoipa::path(get, path = "/v1/log/timestamps", operation_id = "listLogTimestamps", tag = "log",
    params(PageQuery),
    responses((status = 200, description = "One page; `nextCursor` for the next. `openssl ts -verify -data <body> \
        -in <tsr> -CAfile <the TSA's root>` succeeds on each", body = Page<LogTimestamp>), Authenticated))]
pub async fn timestamps(app: &App, caller: &Caller, req: &Req) -> Handled {
    let limit = page_limit(req)?;
    let below = size_cursor(req)?;
    let mut rows = stamps::page(&app.store, caller.tenant(), below, limit + 1).await?;
    let more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    let next_cursor = if more { rows.last().map(|r| r.size.to_string()) } else { None };
    let data = rows
        .into_iter()
        .map(|r| LogTimestamp { size: r.size, checkpoint: r.note, gen_time: r.gen_time, tsr: r.tsr })
        .collect();
    Ok(Reply::json(200, &Page { data, next_cursor }))
}

/// `cursor`: a `nextCursor` of a size-ordered list (the smallest size of the previous page).
fn size_cursor(req: &Req) -> Result<Option<u64>, ApiError> {
    match req.query("cursor") {
        None | Some("") => Ok(None),
        Some(c) => Ok(Some(c.parse::<u64>().map_err(|_| ApiError::invalid("query `cursor` must be a `nextCursor`"))?)),
    }
}

/// The log's verifier keys.
#[derive(Serialize, ToSchema)]
pub(super) struct VerifierKeys {
    origin: String,
    keys: Vec<VerifierKey>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct VerifierKey {
    /// As in `GET /v1/compliance/signing-keys`.
    key_id: String,
    /// `<name>+<key hash>+<base64(0x01 || public key)>` (C2SP signed-note).
    verifier_key: String,
    /// The key signing new checkpoints now.
    active: bool,
}

/// Every signing key as a signed-note verifier key for this tenant's log
#[utoipa::path(get, path = "/v1/log/verifier-keys", operation_id = "getLogVerifierKeys", tag = "log",
    responses((status = 200, description = "One key per key of the registry, so old checkpoints verify after \
        rotation", body = VerifierKeys), Authenticated))]
pub async fn verifier_keys(app: &App, caller: &Caller) -> Handled {
    let name = origin(&app.log_origin, caller.tenant());
    let registry = signer::registry(&app.store).await?;
    let keys = checkpoint::verifier_keys(&name, &registry)
        .into_iter()
        .map(|(key_id, verifier_key)| VerifierKey { active: key_id == app.signer.key_id, key_id, verifier_key })
        .collect();
    Ok(Reply::json(200, &VerifierKeys { origin: name, keys }))
}

#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // describes the query string; the handler reads it
pub(super) struct InclusionQuery {
    /// The receipt's `seq` (leaf `seq - 1`).
    #[param(minimum = 1)]
    seq: u64,
    /// The tree size; default the current size.
    #[param(minimum = 1)]
    size: Option<u64>,
}

/// An inclusion proof (RFC 9162 §2.1.3.1).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct LogInclusion {
    seq: u64,
    leaf_index: u64,
    size: u64,
    /// `SHA-256(0x00 || thisHash bytes)`, hex.
    leaf_hash: String,
    /// Hex.
    root: String,
    /// Hex, leaf to root.
    proof: Vec<String>,
}

/// The inclusion proof of one receipt in the log
#[utoipa::path(get, path = "/v1/log/inclusion", operation_id = "getLogInclusion", tag = "log",
    params(InclusionQuery),
    responses((status = 200, description = "The proof", body = LogInclusion), Authenticated))]
pub async fn inclusion(app: &App, caller: &Caller, req: &Req) -> Handled {
    let tenant = caller.tenant();
    let current = stored::head_seq(&app.store, tenant).await?;
    let seq = number(req, "seq", 1, u64::MAX)?.ok_or_else(|| ApiError::invalid("query `seq` is required"))?;
    let size = number(req, "size", 1, u64::MAX)?.unwrap_or(current);
    if seq > size || size > current {
        return Err(ApiError::invalid(format!(
            "need seq <= size <= {current} (the log's size); got seq {seq}, size {size}"
        )));
    }
    let p = tree::inclusion(&app.store, tenant, size, seq - 1).await?;
    let body = LogInclusion {
        seq,
        leaf_index: seq - 1,
        size,
        leaf_hash: hex::encode(p.from_root),
        root: hex::encode(p.to_root),
        proof: p.path.iter().map(hex::encode).collect(),
    };
    Ok(Reply::json(200, &body))
}

#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // describes the query string; the handler reads it
pub(super) struct ConsistencyQuery {
    /// The older size.
    #[param(minimum = 0)]
    from: u64,
    /// The newer size, at most the current one.
    #[param(minimum = 0)]
    to: u64,
}

/// A consistency proof (RFC 9162 §2.1.4.1).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct LogConsistency {
    from: u64,
    to: u64,
    /// Hex.
    from_root: String,
    /// Hex.
    to_root: String,
    /// Hex; empty when `from` is 0 or equals `to`.
    proof: Vec<String>,
}

/// The consistency proof between two sizes of the log
#[utoipa::path(get, path = "/v1/log/consistency", operation_id = "getLogConsistency", tag = "log",
    params(ConsistencyQuery),
    responses((status = 200, description = "The proof", body = LogConsistency), Authenticated))]
pub async fn consistency(app: &App, caller: &Caller, req: &Req) -> Handled {
    let tenant = caller.tenant();
    let current = stored::head_seq(&app.store, tenant).await?;
    let required = |name: &str| ApiError::invalid(format!("query `{name}` is required"));
    let from = number(req, "from", 0, u64::MAX)?.ok_or_else(|| required("from"))?;
    let to = number(req, "to", 0, u64::MAX)?.ok_or_else(|| required("to"))?;
    if from > to || to > current {
        return Err(ApiError::invalid(format!(
            "need from <= to <= {current} (the log's size); got from {from}, to {to}"
        )));
    }
    let p = tree::consistency(&app.store, tenant, from, to).await?;
    let body = LogConsistency {
        from,
        to,
        from_root: hex::encode(p.from_root),
        to_root: hex::encode(p.to_root),
        proof: p.path.iter().map(hex::encode).collect(),
    };
    Ok(Reply::json(200, &body))
}

/// A tile or entry bundle (C2SP tlog-tiles)
#[utoipa::path(get, path = "/v1/log/tile/{tilePath}", operation_id = "getLogTile", tag = "log",
    params(("tilePath" = String, Path, description = "`<L>/<N>[.p/<W>]` or `entries/<N>[.p/<W>]`, `<N>` in \
        groups of three digits, all but the last prefixed `x` (C2SP tlog-tiles); may span several segments")),
    responses((status = 200, description = "The tile's 32-byte hashes, or the entry bundle (2-byte length, then \
        the 32 bytes of each receipt's thisHash)", content_type = "application/octet-stream", body = Vec<u8>),
        (status = 404, description = "No such tile yet", body = crate::error::ErrorEnvelope), Authenticated))]
pub async fn tile(app: &App, caller: &Caller, req: &Req) -> Handled {
    let missing = || ApiError::not_found("tile");
    let segments = req.seg();
    let path = tile_path::parse(segments.get(3..).unwrap_or_default()).ok_or_else(missing)?;
    let tenant = caller.tenant();
    let size = stored::head_seq(&app.store, tenant).await?;
    let body = match path.level {
        Some(level) => tree::tile_hashes(&app.store, tenant, size, level, path.index, path.width).await?,
        None => entries(app, tenant, size, path).await?,
    };
    let body = body.ok_or_else(missing)?;
    // Full tiles never change; a partial one is replaced by a wider one as the log grows.
    let cache = if path.width == tiles::WIDTH { "public, max-age=31536000, immutable" } else { "no-cache" };
    let headers = vec![("content-type", "application/octet-stream".into()), ("cache-control", cache.into())];
    Ok(Reply::Bytes { headers, body })
}

/// The entry bundle of leaves `[256 index, 256 index + width)`, if the log has them.
async fn entries(app: &App, tenant: &str, size: u64, p: TilePath) -> Result<Option<Vec<u8>>, ApiError> {
    let Some(end) = p.index.checked_mul(tiles::WIDTH).and_then(|s| s.checked_add(p.width)) else { return Ok(None) };
    if end > size {
        return Ok(None);
    }
    let leaves = tiles::leaves(&app.store, tenant, p.index * tiles::WIDTH, end).await?;
    Ok(Some(leaves.iter().flat_map(|l| [&[0u8, 32][..], &l[..]].concat()).collect()))
}
