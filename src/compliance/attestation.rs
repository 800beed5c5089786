//! The attestation (docs/seed.md, "Attestation", docs/receipts.md §3): a walk over the period's receipts,
//! the RFC 6962 root over their chain hashes, and a signed tree head that fixes `treeSize` and
//! `root` for auditors checking inclusion proofs.

use std::collections::VecDeque;
use std::sync::Arc;

use serde::Serialize;
use serde_json::{json, Value};

use super::memo::{self, MemoKey, SpanMemo};
use super::period::Period;
use super::walk::{Walk, WalkResult};
use super::{DISCLAIMER, SCOPE};
use crate::receipts::canonical::{self, GENESIS};
use crate::receipts::merkle;
use crate::receipts::signer::{RegisteredKey, Signer};
use crate::receipts::CheckName;
use crate::receipts::StoredReceipt;
use crate::store::{self, Store, StoreError};

pub const VERSION: &str = "v1";
pub const MERKLE_ALGORITHM: &str = "RFC6962-SHA256";
pub const ANCHOR_TYPE: &str = "merkle_root_v1";
pub const ANCHOR_NOTE: &str = "signature = base64(Ed25519(JCS({tenantId, fromSeq, toSeq, leafCount, root}))) with the \
     signing key keyId (GET /v1/compliance/signing-keys). Take treeSize and root for inclusion proofs from this \
     signed head, never from a proof response alone.";

/// Rows per read while walking a period, about: pages hold whole memo blocks, at least two so
/// both halves of a page can be checked in parallel.
const PAGE_ROWS: u64 = 8192;

fn page_len(block: u64) -> u64 {
    block * (PAGE_ROWS / block).max(2)
}

/// Pages read and decoded ahead of the walk.
const IN_FLIGHT: usize = 2;

/// Reads a period's receipts page by page, reading and decoding the next pages while the caller
/// works on the current one. A page is a fixed seq range (the first one up to a memo block
/// boundary, then [`page_len`] seqs), so several can be read at once; periods never extend past
/// the chain head, so the pages of a period are as many as its length needs.
pub struct PeriodReader {
    store: Store,
    tenant: String,
    to_seq: u64,
    block: u64,
    next_from: u64,
    pending: VecDeque<tokio::task::JoinHandle<Result<Vec<StoredReceipt>, StoreError>>>,
}

impl PeriodReader {
    pub fn new(store: &Store, tenant: &str, period: &Period) -> PeriodReader {
        let mut r = PeriodReader {
            store: store.clone(),
            tenant: tenant.to_string(),
            to_seq: period.to_seq,
            block: memo::block_len(),
            next_from: period.from_seq.max(1),
            pending: VecDeque::new(),
        };
        r.fill();
        r
    }

    fn fill(&mut self) {
        while self.pending.len() < IN_FLIGHT && self.next_from <= self.to_seq {
            let from = self.next_from;
            let len = page_len(self.block) - (from - 1) % self.block;
            let to = (from + len - 1).min(self.to_seq);
            self.next_from = to + 1;
            let (store, tenant) = (self.store.clone(), self.tenant.clone());
            self.pending.push_back(tokio::spawn(async move {
                let page = store::receipts::seq_range_packed(&store, &tenant, from, to, len as i64).await?;
                tokio::task::spawn_blocking(move || crate::receipts::stored::unpack(&tenant, &page))
                    .await
                    .map_err(|e| StoreError::Other(format!("period read failed: {e}")))?
            }));
        }
    }

    /// The next page (ascending seq, never empty); `None` at the end of the period.
    pub async fn next(&mut self) -> Result<Option<Vec<StoredReceipt>>, StoreError> {
        while let Some(pending) = self.pending.pop_front() {
            let rows = pending.await.map_err(|e| StoreError::Other(format!("period read failed: {e}")))??;
            self.fill();
            if !rows.is_empty() {
                return Ok(Some(rows));
            }
        }
        Ok(None)
    }
}

/// The verified-span memo rows of the period. Best effort: without them the walk verifies
/// every signature itself.
pub async fn load_memo(store: &Store, tenant: &str, period: &Period, key: &MemoKey) -> SpanMemo {
    let block = memo::block_len();
    let known = if period.leaf_count() == 0 {
        Vec::new()
    } else {
        store::spans::in_range(store, tenant, period.from_seq, period.to_seq).await.unwrap_or_else(|e| {
            log::warn!("verified-span memo of tenant {tenant} unreadable, verifying every signature: {e}");
            Vec::new()
        })
    };
    SpanMemo::new(key.clone(), tenant, block, known)
}

/// After a walk: counts it in the metrics and records its newly verified blocks in the
/// background (a failure is logged, never the caller's). The handle is for the benchmark.
pub fn after_walk(store: &Store, tenant: &str, walked: &mut WalkResult) -> Option<tokio::task::JoinHandle<()>> {
    let m = &crate::metrics::METRICS;
    m.attestation_signatures_verified.inc_by(walked.ed25519_checked);
    m.attestation_memo_blocks.inc_by(walked.memo_blocks);
    let spans = std::mem::take(&mut walked.new_spans);
    if spans.is_empty() {
        return None;
    }
    let (store, tenant) = (store.clone(), tenant.to_string());
    Some(tokio::spawn(async move {
        match store::spans::save(&store, &tenant, spans).await {
            Ok(n) => crate::metrics::METRICS.attestation_memo_spans_written.inc_by(n as u64),
            Err(e) => log::warn!("verified-span memo of tenant {tenant} not recorded: {e}"),
        }
    }))
}

/// The stored `thisHash` the period's first receipt must link to.
pub async fn anchor_hash(store: &Store, tenant: &str, from_seq: u64) -> Result<Option<String>, StoreError> {
    if from_seq <= 1 {
        return Ok(Some(GENESIS.to_string()));
    }
    store::receipts::hash_at(store, tenant, from_seq - 1).await
}

/// Feeds one page to the walk on a blocking thread (signature checks are CPU-bound).
pub async fn feed(walk: Walk, rows: Vec<StoredReceipt>) -> Result<(Walk, Vec<StoredReceipt>), StoreError> {
    tokio::task::spawn_blocking(move || {
        let mut walk = walk;
        walk.feed(&rows);
        (walk, rows)
    })
    .await
    .map_err(|e| StoreError::Other(format!("period walk failed: {e}")))
}

/// [`feed`] without handing the page back: it is freed on the blocking thread too.
async fn feed_and_drop(walk: Walk, rows: Vec<StoredReceipt>) -> Result<Walk, StoreError> {
    tokio::task::spawn_blocking(move || {
        let mut walk = walk;
        walk.feed(&rows);
        drop(rows);
        walk
    })
    .await
    .map_err(|e| StoreError::Other(format!("period walk failed: {e}")))
}

/// Walks the whole period, with the verified-span memo when given its key. The returned
/// result's `new_spans` are being recorded in the background already ([`after_walk`]).
pub async fn walk_period(
    store: &Store,
    tenant: &str,
    period: &Period,
    registry: &[RegisteredKey],
    memo_key: Option<&MemoKey>,
) -> Result<(WalkResult, Option<tokio::task::JoinHandle<()>>), StoreError> {
    let anchor = anchor_hash(store, tenant, period.from_seq).await?;
    let mut walk = Walk::new(registry, period.from_seq, period.to_seq, anchor);
    if let Some(key) = memo_key {
        walk = walk.with_memo(load_memo(store, tenant, period, key).await);
    }
    let mut reader = PeriodReader::new(store, tenant, period);
    while let Some(rows) = reader.next().await? {
        walk = feed_and_drop(walk, rows).await?;
    }
    let mut walked = walk.finish();
    let writing = after_walk(store, tenant, &mut walked);
    Ok((walked, writing))
}

/// The bytes the tree head signature covers (docs/receipts.md §3).
pub fn tree_head_bytes(tenant: &str, from_seq: u64, to_seq: u64, leaf_count: u64, root_hex: &str) -> Vec<u8> {
    canonical::canonical_bytes(&json!({
        "tenantId": tenant, "fromSeq": from_seq, "toSeq": to_seq, "leafCount": leaf_count, "root": root_hex,
    }))
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        return 0.0;
    }
    (part as f64 * 10_000.0 / whole as f64).round() / 100.0
}

/// The attestation document (docs/seed.md, "Attestation"): what a period's receipts prove, and the
/// signed Merkle root that fixes them.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Attestation<'a> {
    pub version: &'static str,
    pub tenant_id: &'a str,
    pub generated_at: &'a str,
    pub scope: &'static str,
    pub disclaimer: &'static str,
    pub period: &'a Period,
    pub totals: Totals,
    pub verification: Verification,
    pub check_coverage: Vec<CheckCoverage>,
    /// One summary per pack in force (`GET /v1/compliance/packs`).
    #[schema(value_type = Vec<super::pack::PackSummary>)]
    pub packs_in_force: Value,
    pub pack_versions_observed: &'a [String],
    pub signing_key_ids: &'a [String],
    pub merkle: MerkleRoot,
    pub anchor: Anchor,
}

/// What the period's receipts show. Every count but `prunedReceipts` is over the kept receipts:
/// a receipt whose contents a retention sweep deleted (docs/log.md §7) has nothing left to count
/// or check, but its `thisHash` is still a leaf of `merkle.root` and the link to the next one.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Totals {
    pub receipts: u64,
    pub model_receipts: u64,
    pub tool_receipts: u64,
    /// `admin` receipts of the period (management writes and evidence reads, docs/log.md §8):
    /// counted here only, not in `receipts` nor any count but the chain's and signatures'.
    pub admin_events: u64,
    pub chain_verified_count: u64,
    pub signatures_verified_count: u64,
    pub policy_evaluated: u64,
    pub policy_evaluated_pct: f64,
    pub enforcement_actions: u64,
    pub upstream_failures: u64,
    pub chain_verified: bool,
    pub signatures_verified: bool,
    /// Receipts of the period pruned by retention: in the tree, not in the other counts.
    pub pruned_receipts: u64,
}

/// Where the walk found the chain or a signature broken; null when nowhere.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Verification {
    pub broken_at_seq: Option<u64>,
    pub gap_at_seq: Option<u64>,
    pub bad_signature_at_seq: Option<u64>,
}

/// How many receipts ran a check, of those it applies to.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckCoverage {
    #[schema(value_type = String)]
    pub name: CheckName,
    pub receipts: u64,
    pub applicable_receipts: u64,
    pub pct: f64,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MerkleRoot {
    pub algorithm: &'static str,
    pub leaf_count: u64,
    pub root: String,
}

/// The signed tree head of the period.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Anchor {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub root: String,
    pub key_id: String,
    pub signature: String,
    pub note: &'static str,
}

/// The attestation document for a walked period.
pub fn document(
    tenant: &str,
    period: &Period,
    w: &WalkResult,
    packs_in_force: Value,
    signer: &Arc<Signer>,
    generated_at: &str,
) -> Value {
    let root = merkle::to_hex(&w.root);
    let head = tree_head_bytes(tenant, period.from_seq, period.to_seq, w.leaf_count, &root);
    let signature = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(signer.sign(&head))
    };
    let check_coverage = w
        .coverage
        .iter()
        .map(|(name, c)| CheckCoverage {
            name: *name,
            receipts: c.receipts,
            applicable_receipts: c.applicable,
            pct: pct(c.receipts, c.applicable),
        })
        .collect();
    let doc = Attestation {
        version: VERSION,
        tenant_id: tenant,
        generated_at,
        scope: SCOPE,
        disclaimer: DISCLAIMER,
        period,
        totals: Totals {
            receipts: w.receipts,
            model_receipts: w.model_receipts,
            tool_receipts: w.tool_receipts,
            admin_events: w.admin_events,
            chain_verified_count: w.chain_verified_count,
            signatures_verified_count: w.signatures_verified_count,
            policy_evaluated: w.policy_evaluated,
            policy_evaluated_pct: pct(w.policy_evaluated, w.receipts),
            enforcement_actions: w.enforcement_actions,
            upstream_failures: w.upstream_failures,
            chain_verified: w.chain_verified(),
            signatures_verified: w.signatures_verified(),
            pruned_receipts: w.pruned,
        },
        verification: Verification {
            broken_at_seq: w.broken_at_seq,
            gap_at_seq: w.gap_at_seq,
            bad_signature_at_seq: w.bad_signature_at_seq,
        },
        check_coverage,
        packs_in_force,
        pack_versions_observed: &w.pack_versions,
        signing_key_ids: &w.key_ids,
        merkle: MerkleRoot { algorithm: MERKLE_ALGORITHM, leaf_count: w.leaf_count, root: root.clone() },
        anchor: Anchor { kind: ANCHOR_TYPE, root, key_id: signer.key_id.clone(), signature, note: ANCHOR_NOTE },
    };
    serde_json::to_value(doc).unwrap_or_default()
}

pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_head_bytes_are_jcs() {
        let b = tree_head_bytes("t1", 1, 8, 8, "ab");
        assert_eq!(
            String::from_utf8(b).unwrap(),
            r#"{"fromSeq":1,"leafCount":8,"root":"ab","tenantId":"t1","toSeq":8}"#
        );
    }

    #[test]
    fn percentages_round_to_two_places_and_survive_zero() {
        assert_eq!(pct(1, 3), 33.33);
        assert_eq!(pct(2, 3), 66.67);
        assert_eq!(pct(0, 0), 0.0);
        assert_eq!(pct(5, 5), 100.0);
    }
}
