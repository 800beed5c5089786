//! Chain verification over `[from, to]`: re-derive every `thisHash` from the stored signed
//! members and check every `prevHash` link (docs/receipts.md §2). Walks in pages, so a long range
//! never sits in memory at once. A receipt pruned by retention (docs/log.md §7) has only its
//! `thisHash` left: the walk counts it apart and links the next receipt to that kept hash.

use serde::Serialize;

use super::canonical::{self, GENESIS};
use crate::store::{self, Store, StoreError};

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChainReport {
    pub ok: bool,
    pub count: u64,
    pub broken_at_seq: Option<u64>,
    pub gap_at_seq: Option<u64>,
    /// Receipts in the range whose contents retention deleted: not re-derived, not in `count`;
    /// their kept `thisHash` is what the next receipt must link to. Absent when none was.
    #[serde(skip_serializing_if = "none")]
    #[schema(minimum = 1)]
    pub pruned: u64,
}

fn none(n: &u64) -> bool {
    *n == 0
}

const PAGE: i64 = 1000;

pub async fn verify(store: &Store, tenant_id: &str, from: u64, to: u64) -> Result<ChainReport, StoreError> {
    let mut report = ChainReport { ok: true, count: 0, broken_at_seq: None, gap_at_seq: None, pruned: 0 };
    let from = from.max(1);
    if to < from {
        return Ok(report);
    }
    // The link into the range: the stored hash of from-1 (genesis for seq 1).
    let mut prev: Option<String> = if from == 1 {
        Some(GENESIS.to_string())
    } else {
        store::receipts::hash_at(store, tenant_id, from - 1).await?
    };
    let mut expected = from;
    let head = store::receipts::head_seq(store, tenant_id).await?;
    loop {
        let rows = super::stored::seq_range(store, tenant_id, expected, to, PAGE).await?;
        let Some(last) = rows.last().map(|r| r.receipt.seq) else { break };
        for row in &rows {
            let seq = row.receipt.seq;
            if seq != expected && report.gap_at_seq.is_none() {
                report.gap_at_seq = Some(expected);
                prev = None; // the link across a gap cannot be checked
            }
            expected = seq + 1;
            if row.pruned {
                report.pruned += 1;
                prev = Some(row.this_hash.clone());
                continue;
            }
            let recomputed = canonical::sha256_hex(&canonical::canonical_bytes(&row.receipt));
            let linked = prev.as_ref().is_none_or(|p| *p == row.receipt.prev_hash);
            if (recomputed != row.this_hash || !linked) && report.broken_at_seq.is_none() {
                report.broken_at_seq = Some(seq);
            }
            prev = Some(row.this_hash.clone());
            report.count += 1;
        }
        if rows.len() < PAGE as usize || last >= to {
            break;
        }
    }
    // Missing receipts at the end of the range (below the chain head) are a gap too.
    if report.gap_at_seq.is_none() && expected <= to.min(head) {
        report.gap_at_seq = Some(expected);
    }
    report.ok = report.broken_at_seq.is_none() && report.gap_at_seq.is_none();
    Ok(report)
}
