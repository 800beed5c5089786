//! Stored receipts as the receipt API and the compliance walks read them: the store's plain
//! rows (`store::receipts`), their `checks` parsed and their `upstreamStatus` read as a term.

use super::canonical::{Check, Receipt};
use super::Term;
use crate::store::receipts::{self as rows, Filter, ReceiptRow};
use crate::store::{Store, StoreError};

/// A stored receipt: the signed members plus chain fields and side channels.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredReceipt {
    pub receipt: Receipt,
    pub this_hash: String,
    pub signature: String,
    pub key_id: String,
    pub kind: String,
    pub pack_version: String,
    /// Microseconds from the request reaching the gateway to the end of its answer (not
    /// signed); None when unknown.
    pub latency_us: Option<u64>,
    /// Its contents were deleted by a retention sweep (docs/log.md §7): only `seq`, `receiptId`,
    /// `tenantId` and `thisHash` are left; every other member is empty or zero.
    pub pruned: bool,
}

impl StoredReceipt {
    /// The receipt of `row`, whose `checks` column parsed as `checks`.
    fn of<S: Into<String> + AsRef<str>>(row: ReceiptRow<S>, checks: Vec<Check>) -> StoredReceipt {
        let upstream_status = Term::parse(row.upstream_status.as_ref());
        StoredReceipt {
            receipt: Receipt {
                v: row.v,
                tenant_id: row.tenant_id.into(),
                seq: row.seq,
                receipt_id: row.receipt_id.into(),
                request_id: row.request_id.into(),
                actor: row.actor.into(),
                provider: row.provider.into(),
                model: row.model.into(),
                prompt_tokens: row.prompt_tokens,
                completion_tokens: row.completion_tokens,
                cost_usd: row.cost_usd,
                checks,
                upstream_status,
                ts: row.ts.into(),
                prev_hash: row.prev_hash.into(),
                subject: (row.kind.as_ref() == "admin").then(|| row.subject.into()),
            },
            this_hash: row.this_hash.into(),
            signature: row.signature.into(),
            key_id: row.key_id.into(),
            kind: row.kind.into(),
            pack_version: row.pack_version.into(),
            latency_us: row.latency_us,
            pruned: row.pruned,
        }
    }
}

/// The canonical bytes of a stored row: the ones its `thisHash` and signature are over (rebuilt
/// from the columns as a verifier rebuilds them).
pub fn canonical_of(row: ReceiptRow<&str>) -> Result<Vec<u8>, String> {
    let checks: Vec<Check> = serde_json::from_str(row.checks).map_err(|e| format!("checks column: {e}"))?;
    Ok(super::canonical::receipt_bytes(&StoredReceipt::of(row, checks).receipt))
}

/// A row query's row as a receipt.
fn from_row(mut row: ReceiptRow<String>) -> Result<StoredReceipt, StoreError> {
    let checks: Vec<Check> = serde_json::from_str(&std::mem::take(&mut row.checks))
        .map_err(|e| StoreError::Query(sqlx::Error::Decode(format!("checks column: {e}").into())))?;
    Ok(StoredReceipt::of(row, checks))
}

fn from_rows(rows: Vec<ReceiptRow<String>>) -> Result<Vec<StoredReceipt>, StoreError> {
    rows.into_iter().map(from_row).collect()
}

/// One page of a tenant's receipts by `seq` (`store::receipts::page`).
pub async fn page(
    store: &Store,
    tenant_id: &str,
    f: &Filter,
    before: Option<u64>,
    after: Option<u64>,
    limit: i64,
) -> Result<Vec<StoredReceipt>, StoreError> {
    from_rows(rows::page(store, tenant_id, f, before, after, limit).await?)
}

/// A page of the tenant's receipts holding a check named any of `names`
/// (`store::receipts::page_with_any_check`).
pub async fn page_with_any_check(
    store: &Store,
    tenant_id: &str,
    names: &[String],
    before: Option<u64>,
    limit: i64,
) -> Result<Vec<StoredReceipt>, StoreError> {
    from_rows(rows::page_with_any_check(store, tenant_id, names, before, limit).await?)
}

pub async fn by_id(store: &Store, tenant_id: &str, receipt_id: &str) -> Result<Option<StoredReceipt>, StoreError> {
    rows::by_id(store, tenant_id, receipt_id).await?.map(from_row).transpose()
}

/// Receipts with `from <= seq <= to`, ascending, at most `limit` (for chain walks).
pub async fn seq_range(
    store: &Store,
    tenant_id: &str,
    from: u64,
    to: u64,
    limit: i64,
) -> Result<Vec<StoredReceipt>, StoreError> {
    from_rows(rows::seq_range(store, tenant_id, from, to, limit).await?)
}

/// Decodes a page from `store::receipts::seq_range_packed` (CPU-bound: call it on a blocking
/// thread).
pub fn unpack(tenant_id: &str, page: &str) -> Result<Vec<StoredReceipt>, StoreError> {
    // A page holds few distinct check lists: parse each once.
    let mut lists: Vec<(&str, Vec<Check>)> = Vec::new();
    let mut out = Vec::new();
    for row in rows::unpack_rows(tenant_id, page)? {
        let checks = match lists.iter().find(|(t, _)| *t == row.checks) {
            Some((_, c)) => c.clone(),
            None => {
                let c: Vec<Check> = serde_json::from_str(row.checks)
                    .map_err(|e| StoreError::Other(format!("receipt page: checks column: {e}")))?;
                if lists.len() < 32 {
                    lists.push((row.checks, c.clone()));
                }
                c
            }
        };
        out.push(StoredReceipt::of(row, checks));
    }
    Ok(out)
}
