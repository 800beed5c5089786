//! Stored receipts as the receipt API and the compliance walks read them: the store's plain
//! rows (`store::receipts`), their `checks` parsed and their `upstreamStatus` read as a term.

use super::canonical::{Check, Receipt, ReceiptView};
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
///
/// Written from a view that borrows the row's columns, not from an owned [`StoredReceipt`]: the
/// journal's applier rebuilds every receipt's bytes to sign them, and the owned receipt was a
/// dozen strings allocated, copied and freed a receipt. A unit test holds the two equal.
pub fn canonical_of(row: ReceiptRow<&str>) -> Result<Vec<u8>, String> {
    LAST_CHECKS.with_borrow_mut(|last| {
        let checks = match last {
            Some((text, checks)) if text == row.checks => checks,
            last => {
                let checks: Vec<Check> = serde_json::from_str(row.checks).map_err(|e| format!("checks column: {e}"))?;
                &last.insert((row.checks.to_owned(), checks)).1
            }
        };
        Ok(canonical_with(row, checks))
    })
}

thread_local! {
    /// The `checks` column [`canonical_of`] parsed last on this thread, and its checks.
    ///
    /// Why: consecutive receipts mostly carry the same checks (a tenant's configuration decides
    /// them), and parsing the column was ~3 % of the journal applier's time with every check on
    /// (0.3–0.4 µs a receipt of its ~14, session 51); the comparison is a `memcmp` of ~250 bytes.
    static LAST_CHECKS: std::cell::RefCell<Option<(String, Vec<Check>)>> = const { std::cell::RefCell::new(None) };
}

/// [`canonical_of`] with the row's `checks` column parsed.
fn canonical_with(row: ReceiptRow<&str>, checks: &[Check]) -> Vec<u8> {
    let upstream_status = Term::<super::UpstreamStatus>::parse(row.upstream_status);
    let view = ReceiptView {
        v: row.v,
        tenant_id: row.tenant_id,
        seq: row.seq,
        receipt_id: row.receipt_id,
        request_id: row.request_id,
        actor: row.actor,
        provider: row.provider,
        model: row.model,
        prompt_tokens: row.prompt_tokens,
        completion_tokens: row.completion_tokens,
        cost_usd: row.cost_usd,
        checks,
        upstream_status: upstream_status.as_str(),
        ts: row.ts,
        prev_hash: row.prev_hash,
        subject: (row.kind == "admin").then_some(row.subject),
    };
    let mut out = Vec::with_capacity(512 + checks.len() * 40);
    super::canonical::write_receipt(&view, &mut out);
    out
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

#[cfg(test)]
mod tests {
    use super::*;

    fn row<'a>(kind: &'a str, subject: &'a str, status: &'a str, checks: &'a str) -> ReceiptRow<&'a str> {
        ReceiptRow {
            v: 1,
            tenant_id: "t-1",
            seq: 42,
            receipt_id: "01a22d5f-6e05-71d0-9b64-d4546f3a8297",
            request_id: "req \"quoted\" \u{1F600}",
            actor: "key:k-1 é",
            provider: "openai",
            model: "gpt-4o-mini",
            prompt_tokens: 175,
            completion_tokens: 5,
            cost_usd: 0.00000585,
            checks,
            upstream_status: status,
            ts: "2026-11-30 16:52:38.534",
            prev_hash: "08f1aae6a1bac07dec242a63f364b2d966a5ea1971b4d012974dff2295d10f9b",
            this_hash: "1b8d6acf0756766ddcd534c6cdf9290f5fd5e2b7d34d68774b9160dc7761ade4",
            signature: "",
            key_id: "",
            kind,
            pack_version: "ps-1",
            subject,
            latency_us: Some(1298),
            pruned: false,
        }
    }

    /// The borrowed fast path of `canonical_of` against its reference: the owned receipt a
    /// verifier reads back, written by `receipt_bytes`.
    #[test]
    fn canonical_of_writes_the_bytes_of_the_owned_receipt() {
        let checks = r#"[{"name":"ALLOWLIST","result":"PASS"},{"name":"policy","result":"allow"},{"name":"SOMETHING_NEW","result":"odd"}]"#;
        for r in [
            row("model_call", "", "ok", checks),
            row("model_call", "ignored: not an admin receipt", "error", checks),
            row("admin", "keys/k-1", "ok", "[]"),
            row("tool_call", "", "a status this version does not know", checks),
        ] {
            let owned = StoredReceipt::of(r.clone(), serde_json::from_str(r.checks).unwrap());
            assert_eq!(canonical_of(r).unwrap(), super::super::canonical::receipt_bytes(&owned.receipt));
        }
        assert!(canonical_of(row("model_call", "", "ok", "not json")).is_err());
    }

    /// The memo of the last `checks` column against a fresh parse of each row's: rows whose
    /// columns alternate, repeat, differ by one byte, or fail to parse between two that do.
    #[test]
    fn canonical_of_with_the_last_checks_remembered_writes_what_a_fresh_parse_writes() {
        let a = r#"[{"name":"ALLOWLIST","result":"PASS"},{"name":"policy","result":"allow"}]"#;
        let b = r#"[{"name":"ALLOWLIST","result":"PASS"},{"name":"policy","result":"deny"}]"#;
        let c = r#"[{"name":"ALLOWLIST","result":"PASS"},{"name":"policy","result":"denY"}]"#;
        for checks in [a, a, b, a, "[]", "[]", a, "not json", a, b, c, b, "", a] {
            let r = row("model_call", "", "ok", checks);
            match serde_json::from_str(checks) {
                Ok(parsed) => {
                    let owned = StoredReceipt::of(r.clone(), parsed);
                    let want = super::super::canonical::receipt_bytes(&owned.receipt);
                    assert_eq!(canonical_of(r).unwrap(), want, "checks {checks}");
                }
                Err(_) => assert!(canonical_of(r).is_err(), "checks {checks}"),
            }
        }
    }
}
