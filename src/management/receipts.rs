//! `/v1/receipts`: list (filters, seq cursor), single receipt with a fresh signature check,
//! streamed JSONL/CSV export, and chain verification.

use async_trait::async_trait;
use bytes::Bytes;
use serde::Serialize;
use serde_json::{json, Map, Value};
use utoipa::{IntoParams, ToSchema};

use super::handler::{number, ts_bound, BodyStream, Caller, Handled, Reply, Req};
use super::openapi_parts::{string_enum, Authenticated, Missing};
use crate::app::App;
use crate::error::ApiError;
use crate::receipts::canonical::Receipt;
use crate::receipts::{canonical, chain, chain::ChainReport, signer, Check, Kind, UpstreamStatus};
use crate::receipts::{stored, StoredReceipt};
use crate::store::receipts::Filter;
use crate::store::{self, Store};

pub const EXPORT_MAX: u64 = 50_000;
const EXPORT_DEFAULT: u64 = 10_000;

fn filter(req: &Req) -> Result<Filter, ApiError> {
    let text = |n: &str| req.query(n).filter(|v| !v.is_empty()).map(str::to_string);
    let upstream_status = text("upstreamStatus");
    if let Some(s) = &upstream_status {
        if s.parse::<UpstreamStatus>().is_err() {
            let all: Vec<&str> = UpstreamStatus::ALL.iter().map(|s| s.as_str()).collect();
            return Err(ApiError::invalid(format!(
                "query `upstreamStatus` must be one of {}; got `{s}`",
                all.join(", ")
            )));
        }
    }
    let kind = text("kind");
    if let Some(k) = &kind {
        if ![Kind::ModelCall, Kind::ToolCall, Kind::Admin].iter().any(|x| x.as_str() == k) {
            return Err(ApiError::invalid(format!("query `kind` must be model_call, tool_call or admin; got `{k}`")));
        }
    }
    Ok(Filter {
        kind,
        from_ts: ts_bound(req, "from")?,
        to_ts: ts_bound(req, "to")?,
        actor: text("actor"),
        provider: text("provider"),
        model: text("model"),
        check: text("check"),
        upstream_status,
        calls_only: false,
    })
}

impl utoipa::PartialSchema for UpstreamStatus {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        string_enum(UpstreamStatus::ALL.iter().map(|s| s.as_str()))
    }
}

impl ToSchema for UpstreamStatus {}

/// `model_call`, `tool_call` or `admin`.
pub(super) struct ReceiptKind;

impl utoipa::PartialSchema for ReceiptKind {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use crate::receipts::Kind;
        string_enum([Kind::ModelCall, Kind::ToolCall, Kind::Admin].map(Kind::as_str))
    }
}

impl ToSchema for ReceiptKind {}

/// The filters of the receipt list and export.
#[derive(IntoParams)]
#[into_params(parameter_in = Query, rename_all = "camelCase")]
#[allow(dead_code)] // describes the query string for the document; `filter` reads it
pub(super) struct ReceiptFilter {
    /// Receipts at or after this instant (RFC 3339).
    #[param(format = DateTime)]
    from: Option<String>,
    /// Receipts at or before this instant (RFC 3339).
    #[param(format = DateTime)]
    to: Option<String>,
    /// The key id that made the request.
    actor: Option<String>,
    provider: Option<String>,
    model: Option<String>,
    /// Receipts with a check of this name.
    check: Option<String>,
    #[param(inline)]
    upstream_status: Option<UpstreamStatus>,
    /// `model_call`, `tool_call` or `admin` (management writes and evidence reads).
    #[param(inline, value_type = Option<ReceiptKind>)]
    kind: Option<String>,
}

/// A receipt in a list: its main fields, without hashes and signature.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct ReceiptEntry<'a> {
    seq: u64,
    receipt_id: &'a str,
    request_id: &'a str,
    actor: &'a str,
    provider: &'a str,
    model: &'a str,
    prompt_tokens: u64,
    completion_tokens: u64,
    cost_usd: f64,
    checks: &'a [Check],
    #[schema(value_type = UpstreamStatus)]
    upstream_status: &'a str,
    ts: &'a str,
    #[schema(value_type = ReceiptKind)]
    kind: &'a str,
    /// Only on `admin` receipts: the resource acted on (signed).
    #[serde(skip_serializing_if = "Option::is_none")]
    subject: Option<&'a str>,
    /// Milliseconds from the request reaching the gateway to the end of its answer (not
    /// signed); null when unknown (admin receipts, receipts older than the field).
    #[schema(minimum = 0)]
    latency_ms: Option<f64>,
}

/// A receipt's `latencyMs`: its stored microseconds in milliseconds (three decimals, exact).
pub(super) fn latency_ms(r: &StoredReceipt) -> Option<f64> {
    r.latency_us.map(|us| us as f64 / 1000.0)
}

pub(super) fn list_entry(r: &StoredReceipt) -> ReceiptEntry<'_> {
    let c = &r.receipt;
    ReceiptEntry {
        seq: c.seq,
        receipt_id: &c.receipt_id,
        request_id: &c.request_id,
        actor: &c.actor,
        provider: &c.provider,
        model: &c.model,
        prompt_tokens: c.prompt_tokens,
        completion_tokens: c.completion_tokens,
        cost_usd: c.cost_usd,
        checks: &c.checks,
        upstream_status: c.upstream_status.as_str(),
        ts: &c.ts,
        kind: &r.kind,
        subject: c.subject.as_deref(),
        latency_ms: latency_ms(r),
    }
}

/// A page of receipts, newest first.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct ReceiptPage<'a> {
    receipts: Vec<ReceiptEntry<'a>>,
    /// The `seq` to pass as `?cursor=` for the next page; null on the last.
    next_cursor: Option<u64>,
    /// Receipts pruned by the log's retention are skipped (docs/log.md §7): every pruned
    /// receipt has a seq below this one (those below it still listed are under a legal hold, or
    /// were newer than the retention at the sweep); null = none was pruned.
    pruned_before: Option<u64>,
}

/// `prunedBefore` of the tenant's lists and bundles: one more than the highest pruned seq, or
/// None when no receipt was pruned.
pub(super) async fn pruned_before(store: &Store, tenant: &str) -> Result<Option<u64>, ApiError> {
    let through = store::retention::get(store, tenant).await?.pruned_through;
    Ok((through > 0).then_some(through + 1))
}

/// List receipts
#[utoipa::path(get, path = "/v1/receipts", operation_id = "listReceipts", tag = "receipts",
    params(ReceiptFilter,
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 200, description = "Page size, default 25"),
        ("cursor" = Option<u64>, Query, minimum = 1, description = "`nextCursor` of the previous page")),
    responses((status = 200, description = "A page of receipts", body = ReceiptPage), Authenticated))]
pub async fn list(app: &App, caller: &Caller, req: &Req) -> Handled {
    let limit = number(req, "limit", 1, 200)?.unwrap_or(25);
    let cursor = number(req, "cursor", 1, u64::MAX >> 11)?;
    let f = filter(req)?;
    let mut rows = stored::page(&app.store, caller.tenant(), &f, cursor, None, limit as i64 + 1).await?;
    let more = rows.len() as u64 > limit;
    rows.truncate(limit as usize);
    let next = if more { rows.last().map(|r| r.receipt.seq) } else { None };
    let receipts = rows.iter().map(list_entry).collect();
    let pruned_before = pruned_before(&app.store, caller.tenant()).await?;
    Ok(Reply::json(200, &ReceiptPage { receipts, next_cursor: next, pruned_before }))
}

/// The signature check of one stored receipt against the registry key it names.
pub async fn verified(store: &Store, r: &StoredReceipt) -> Result<bool, ApiError> {
    let keys = signer::registry(store).await?;
    let Some(public) = keys.iter().find(|k| k.key_id == r.key_id).and_then(signer::public_bytes) else {
        return Ok(false);
    };
    let canonical = canonical::canonical_bytes(&r.receipt);
    Ok(canonical::sha256_hex(&canonical) == r.this_hash
        && canonical::verify_signature(&canonical, &r.signature, &public))
}

/// The signed members as signed (camelCase) plus the chain fields named `names`.
fn full(r: &StoredReceipt, names: [&str; 4]) -> Map<String, Value> {
    let Value::Object(mut m) = serde_json::to_value(&r.receipt).unwrap_or(Value::Null) else { return Map::new() };
    m.insert(names[0].into(), json!(r.this_hash));
    m.insert(names[1].into(), json!(r.signature));
    m.insert(names[2].into(), json!(r.key_id));
    m.insert(names[3].into(), json!(r.kind));
    m
}

/// The signed receipt as signed, its chain fields, and a signature check made now.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct FullReceipt<'a> {
    #[serde(flatten)]
    receipt: &'a Receipt,
    this_hash: &'a str,
    /// Ed25519 over the canonical (JCS) bytes, base64.
    signature: &'a str,
    key_id: &'a str,
    #[schema(value_type = ReceiptKind)]
    kind: &'a str,
    receipt_pack_version: &'a str,
    /// Whether the signature and hash verify now against the signing-key registry.
    verified: bool,
    /// Milliseconds from the request reaching the gateway to the end of its answer (not
    /// signed); null when unknown (admin receipts, receipts older than the field).
    #[schema(minimum = 0)]
    latency_ms: Option<f64>,
    /// A routed request's upstream tries, in order (not signed; absent without a route).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schema(value_type = Vec<AttemptView>)]
    attempts: Vec<crate::store::routes::AttemptRow>,
}

/// One upstream try of a routed request.
#[derive(ToSchema)]
#[allow(dead_code)]
pub(super) struct AttemptView {
    provider: String,
    /// The named credential used.
    credential: String,
    /// The provider's model id.
    model: String,
    /// The upstream's HTTP status; 0 when it gave none (connect error, timeout).
    status: u16,
    /// `ok`, `refused` (a 4xx relayed), `retry` (moved on) or `failed` (the last, failing).
    outcome: String,
    /// Milliseconds until the answer's head (or the failure).
    ms: u64,
}

/// A receipt of the tenant, or 410 when retention pruned it (docs/log.md §7).
pub(super) async fn kept(store: &Store, tenant: &str, id: &str) -> Result<StoredReceipt, ApiError> {
    let r = stored::by_id(store, tenant, id).await?.ok_or_else(|| ApiError::not_found("receipt"))?;
    if r.pruned {
        return Err(ApiError::pruned(r.receipt.seq, &r.this_hash));
    }
    Ok(r)
}

/// Get one receipt, with a fresh signature check
#[utoipa::path(get, path = "/v1/receipts/{id}", operation_id = "getReceipt", tag = "receipts",
    params(("id" = String, Path, description = "Receipt id (`x-tollgate-receipt-id`)")),
    responses((status = 200, description = "The receipt", body = FullReceipt), Missing,
        (status = 410, description = "receipt_pruned: the log's retention deleted its contents; `seq` and \
            `thisHash` are what is left (its leaf in the tenant log)", body = crate::error::PrunedEnvelope),
        Authenticated))]
pub async fn get(app: &App, caller: &Caller, id: &str) -> Handled {
    let r = kept(&app.store, caller.tenant(), id).await?;
    let verified = verified(&app.store, &r).await?;
    let attempts = crate::store::routes::attempts(&app.store, caller.tenant(), id).await?;
    Ok(Reply::json(
        200,
        &FullReceipt {
            receipt: &r.receipt,
            this_hash: &r.this_hash,
            signature: &r.signature,
            key_id: &r.key_id,
            kind: &r.kind,
            receipt_pack_version: &r.pack_version,
            verified,
            latency_ms: latency_ms(&r),
            attempts,
        },
    ))
}

/// Verify the hash chain up to a receipt
#[utoipa::path(get, path = "/v1/receipts/{id}/verify-chain", operation_id = "verifyChain", tag = "receipts",
    params(("id" = String, Path, description = "Receipt id"),
        ("from" = Option<u64>, Query, minimum = 1, description = "First seq, default 1"),
        ("to" = Option<u64>, Query, minimum = 1, description = "Last seq, default the receipt's own")),
    responses((status = 200, description = "The chain report", body = ChainReport), Missing, Authenticated))]
pub async fn verify_chain(app: &App, caller: &Caller, id: &str, req: &Req) -> Handled {
    let r = stored::by_id(&app.store, caller.tenant(), id).await?.ok_or_else(|| ApiError::not_found("receipt"))?;
    let from = number(req, "from", 1, u64::MAX >> 11)?.unwrap_or(1);
    let to = number(req, "to", 1, u64::MAX >> 11)?.unwrap_or(r.receipt.seq);
    if from > to {
        return Err(ApiError::invalid("query `from` must not be greater than `to`"));
    }
    let report = chain::verify(&app.store, caller.tenant(), from, to).await?;
    Ok(Reply::json(200, &report))
}

#[derive(Clone, Copy, PartialEq, ToSchema)]
#[schema(rename_all = "lowercase", as = ExportFormat)]
enum Format {
    Jsonl,
    Csv,
}

/// Export receipts as JSON Lines or CSV, streamed
#[utoipa::path(get, path = "/v1/receipts/export", operation_id = "exportReceipts", tag = "receipts",
    params(ReceiptFilter,
        ("format" = inline(Option<Format>), Query, description = "Default jsonl"),
        ("limit" = Option<u64>, Query, minimum = 1, maximum = 50_000, description = "At most this many, default 10000")),
    responses((status = 200, description = "The receipts, oldest first: one JSON object per line, or CSV with a header row",
            content((String = "application/x-ndjson"), (String = "text/csv")),
            headers(("x-tollgate-truncated" = bool, description = "Whether more receipts matched than `limit`"),
                ("x-tollgate-pruned-through" = u64, description = "The highest seq pruned by the log's retention \
                    (0: none); pruned receipts are never exported"),
                ("content-disposition" = String, description = "attachment; filename=..."))),
        Authenticated))]
pub async fn export(app: &App, caller: &Caller, req: &Req) -> Handled {
    let format = match req.query("format").unwrap_or("jsonl") {
        "jsonl" => Format::Jsonl,
        "csv" => Format::Csv,
        other => return Err(ApiError::invalid(format!("query `format` must be jsonl or csv; got `{other}`"))),
    };
    let limit = number(req, "limit", 1, EXPORT_MAX)?.unwrap_or(EXPORT_DEFAULT);
    let f = filter(req)?;
    // Truncation must be known before the first byte goes out: is there a (limit+1)-th row?
    let truncated = store::receipts::nth_seq(&app.store, caller.tenant(), &f, limit).await?.is_some();
    let until = export_range(&app.store, caller.tenant(), &f, limit, truncated).await?;
    // The admin trail (docs/log.md §8): the read is recorded as the seq range it exports.
    app.store.note(until.map_or(String::new(), |(first, last)| format!("{first}-{last}"))).await?;
    let (ctype, ext) = match format {
        Format::Jsonl => ("application/x-ndjson", "jsonl"),
        Format::Csv => ("text/csv; charset=utf-8", "csv"),
    };
    let headers = vec![
        ("content-type", ctype.to_string()),
        ("content-disposition", format!("attachment; filename=\"receipts.{ext}\"")),
        ("x-tollgate-truncated", truncated.to_string()),
        (
            "x-tollgate-pruned-through",
            store::retention::get(&app.store, caller.tenant()).await?.pruned_through.to_string(),
        ),
    ];
    let body = ExportStream {
        store: app.store.clone(),
        tenant: caller.tenant().to_string(),
        filter: f,
        after: 0,
        until: until.map_or(0, |(_, last)| last),
        remaining: limit,
        format,
        header_done: false,
    };
    Ok(Reply::Stream { headers, body: Box::new(body) })
}

/// The first and last seq an export of `limit` receipts matching `f` holds (None: none match).
async fn export_range(
    store: &Store,
    tenant: &str,
    f: &Filter,
    limit: u64,
    truncated: bool,
) -> Result<Option<(u64, u64)>, ApiError> {
    let Some(first) = store::receipts::nth_seq(store, tenant, f, 0).await? else { return Ok(None) };
    let last = if truncated {
        store::receipts::nth_seq(store, tenant, f, limit - 1).await?
    } else {
        stored::page(store, tenant, f, None, None, 1).await?.first().map(|r| r.receipt.seq)
    };
    Ok(Some((first, last.unwrap_or(first))))
}

struct ExportStream {
    store: Store,
    tenant: String,
    filter: Filter,
    after: u64,
    /// The last seq exported: receipts appended while the export streams (its own admin
    /// receipt among them) are not part of it.
    until: u64,
    remaining: u64,
    format: Format,
    header_done: bool,
}

const EXPORT_PAGE: u64 = 1000;
pub const CSV_HEADER: &str = "seq,receiptId,requestId,ts,actor,provider,model,promptTokens,completionTokens,costUsd,checks,upstreamStatus,this_hash,kind\r\n";

/// RFC 4180: quote a field that holds a comma, quote or line break; double inner quotes.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\r', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn csv_row(r: &StoredReceipt) -> String {
    let c = &r.receipt;
    let checks: Vec<String> = c.checks.iter().map(|k| format!("{}:{}", k.name, k.result)).collect();
    let cost = String::from_utf8(canonical::canonical_bytes(&c.cost_usd)).unwrap_or_default();
    let fields = [
        c.seq.to_string(),
        c.receipt_id.clone(),
        c.request_id.clone(),
        c.ts.clone(),
        c.actor.clone(),
        c.provider.clone(),
        c.model.clone(),
        c.prompt_tokens.to_string(),
        c.completion_tokens.to_string(),
        cost,
        checks.join(";"),
        c.upstream_status.to_string(),
        r.this_hash.clone(),
        r.kind.clone(),
    ];
    let mut line = fields.iter().map(|f| csv_field(f)).collect::<Vec<_>>().join(",");
    line.push_str("\r\n");
    line
}

#[async_trait]
impl BodyStream for ExportStream {
    async fn next(&mut self) -> Result<Option<Bytes>, ApiError> {
        let mut out = String::new();
        if !self.header_done {
            self.header_done = true;
            if self.format == Format::Csv {
                out.push_str(CSV_HEADER);
            }
        }
        if self.remaining > 0 {
            let n = self.remaining.min(EXPORT_PAGE) as i64;
            let mut rows = stored::page(&self.store, &self.tenant, &self.filter, None, Some(self.after), n).await?;
            let fetched = rows.len();
            rows.retain(|r| r.receipt.seq <= self.until);
            let done = (fetched as i64) < n || rows.len() < fetched;
            self.remaining = if done { 0 } else { self.remaining - rows.len() as u64 };
            for r in &rows {
                self.after = r.receipt.seq;
                match self.format {
                    Format::Jsonl => {
                        let line = Value::Object(full(r, ["this_hash", "signature", "key_id", "kind"]));
                        out.push_str(&line.to_string());
                        out.push('\n');
                    }
                    Format::Csv => out.push_str(&csv_row(r)),
                }
            }
        }
        Ok((!out.is_empty()).then(|| Bytes::from(out)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quoting() {
        assert_eq!(csv_field("plain"), "plain");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_field("two\nlines"), "\"two\nlines\"");
    }
}
