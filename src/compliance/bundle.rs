//! The evidence bundle (docs/receipts.md §4), written piece by piece: its head, the leaves of the
//! period's pruned receipts (docs/log.md §7) page by page, the receipts page by page (walked as
//! they go out), then the Merkle root and the attestation computed from that same walk. Memory
//! stays at one page however long the period.

use std::sync::Arc;

use serde_json::{json, Value};

use super::attestation::{self, PeriodReader};
use super::memo::MemoKey;
use super::period::Period;
use super::walk::Walk;
use super::{DISCLAIMER, SCOPE};
use crate::receipts::canonical::{self, GENESIS};
use crate::receipts::signer::{RegisteredKey, Signer};
use crate::receipts::StoredReceipt;
use crate::store::{self, timestamps, Store, StoreError};
use crate::tenant_log::{checkpoint, tree};

pub const FORMAT: &str = "tollgate-evidence-bundle/v1";

/// Pruned leaves per read.
const PRUNED_PAGE: i64 = 10_000;

pub struct BundleWriter {
    opening: Option<Vec<u8>>,
    /// The next seq of the `prunedLeaves` member to read (None once it is closed), and the last
    /// seq that can be a pruned one.
    pruned_from: Option<u64>,
    pruned_to: u64,
    pruned_listed: u64,
    reader: PeriodReader,
    walk: Option<Walk>,
    store: Store,
    first: bool,
    packs: Value,
    signer: Arc<Signer>,
    tenant: String,
    period: Period,
    generated_at: String,
    /// The memo rows this walk recorded, being written.
    pub writing: Option<tokio::task::JoinHandle<()>>,
    /// The tenant log's origin prefix: when set, the bundle ends with the `log` member.
    log_origin: Option<String>,
}

impl BundleWriter {
    pub async fn start(
        store: &Store,
        tenant: &str,
        period: Period,
        registry: Vec<RegisteredKey>,
        packs_in_force: Value,
        signer: Arc<Signer>,
        memo_key: Option<&MemoKey>,
    ) -> Result<BundleWriter, StoreError> {
        let anchor = attestation::anchor_hash(store, tenant, period.from_seq).await?;
        let mut walk = Walk::new(&registry, period.from_seq, period.to_seq, anchor.clone());
        if let Some(key) = memo_key {
            walk = walk.with_memo(attestation::load_memo(store, tenant, &period, key).await);
        }
        let generated_at = attestation::now_rfc3339();
        // Every pruned seq is at most `pruned_through`: a period above it has none to list.
        let pruned_through = store::retention::get(store, tenant).await?.pruned_through;
        let head = json!({
            "format": FORMAT,
            "tenantId": tenant,
            "generatedAt": generated_at,
            "scope": SCOPE,
            "disclaimer": DISCLAIMER,
            "period": period,
            // A missing anchor row shows as zeros, which then fails the first link, as it should.
            "anchor": {"seq": period.from_seq - 1, "thisHash": anchor.clone().unwrap_or_else(|| GENESIS.to_string())},
            "signingKeys": registry,
            // docs/log.md §7: receipts below this seq may have been pruned (null: none was).
            "prunedBefore": (pruned_through > 0).then_some(pruned_through + 1),
        });
        // The head object without its closing brace; the pruned leaves, then the receipts follow.
        let mut opening = serde_json::to_vec(&head).unwrap_or_default();
        opening.pop();
        opening.extend_from_slice(b",\"prunedLeaves\":[");
        Ok(BundleWriter {
            opening: Some(opening),
            pruned_from: Some(period.from_seq.max(1)),
            pruned_to: period.to_seq.min(pruned_through),
            pruned_listed: 0,
            reader: PeriodReader::new(store, tenant, &period),
            walk: Some(walk),
            store: store.clone(),
            first: true,
            packs: packs_in_force,
            signer,
            tenant: tenant.to_string(),
            period,
            generated_at,
            writing: None,
            log_origin: None,
        })
    }

    /// Ends the bundle with the `log` member (docs/log.md §6): the current checkpoint of the
    /// tenant's log and the inclusion proof of the period's last receipt in it.
    pub fn with_log(mut self, origin_prefix: &str) -> Self {
        self.log_origin = Some(origin_prefix.to_string());
        self
    }

    /// The next piece of the document; `None` after the last.
    pub async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>, StoreError> {
        if let Some(opening) = self.opening.take() {
            return Ok(Some(opening));
        }
        if let Some(from) = self.pruned_from.take() {
            return self.pruned_page(from).await.map(Some);
        }
        let Some(walk) = self.walk.take() else { return Ok(None) };
        if let Some(rows) = self.reader.next().await? {
            let (walk, rows) = attestation::feed(walk, rows).await?;
            self.walk = Some(walk);
            let mut out = Vec::with_capacity(rows.len() * 700);
            // A pruned receipt has no contents to show: its leaf is in `prunedLeaves`.
            for r in rows.iter().filter(|r| !r.pruned) {
                if !self.first {
                    out.push(b',');
                }
                self.first = false;
                entry(&mut out, r);
            }
            return Ok(Some(out));
        }
        let mut walked = walk.finish();
        self.writing = attestation::after_walk(&self.store, &self.tenant, &mut walked);
        let doc = attestation::document(
            &self.tenant,
            &self.period,
            &walked,
            std::mem::take(&mut self.packs),
            &self.signer,
            &self.generated_at,
        );
        let mut tail = json!({"merkle": doc["merkle"], "attestation": doc});
        if let Some(prefix) = &self.log_origin {
            tail["log"] = log_member(&self.store, &self.signer, prefix, &self.tenant, &self.period).await?;
        }
        let tail = serde_json::to_vec(&tail).unwrap_or_default();
        let mut out = b"],".to_vec();
        out.extend_from_slice(&tail[1..]);
        Ok(Some(out))
    }

    /// The next page of `prunedLeaves` (`{seq, thisHash}` of each pruned receipt of the period,
    /// ascending), and the member's end and the receipts' start after the last page.
    async fn pruned_page(&mut self, from: u64) -> Result<Vec<u8>, StoreError> {
        let rows = if from <= self.pruned_to {
            store::retention::pruned_leaves(&self.store, &self.tenant, from, self.pruned_to, PRUNED_PAGE).await?
        } else {
            Vec::new()
        };
        let mut out = Vec::with_capacity(rows.len() * 100);
        for (seq, hash) in &rows {
            if self.pruned_listed > 0 {
                out.push(b',');
            }
            self.pruned_listed += 1;
            out.extend_from_slice(&serde_json::to_vec(&json!({"seq": seq, "thisHash": hash})).unwrap_or_default());
        }
        match rows.last() {
            Some((last, _)) if rows.len() as i64 == PRUNED_PAGE => self.pruned_from = Some(last + 1),
            _ => out.extend_from_slice(b"],\"receipts\":["),
        }
        Ok(out)
    }
}

/// `{"checkpoint", "consistencyFrom": null, "timestamp", "inclusion"}`: a checkpoint at or after
/// the period's `toSeq` and the RFC 9162 inclusion proof of `toSeq` in its tree (null for a
/// period without receipts). The checkpoint is the newest timestamped one that covers the
/// period, with `timestamp` = `{genTime, tsr}` (log.md §6), so the bundle ties the period to a
/// time a TSA vouches for; until one is stamped, the checkpoint at the log's current size with
/// `timestamp: null`.
async fn log_member(
    store: &Store,
    signer: &Signer,
    prefix: &str,
    tenant: &str,
    period: &Period,
) -> Result<Value, StoreError> {
    let fail = |e: crate::error::ApiError| StoreError::Other(e.message);
    let (note, size, timestamp) = match timestamps::newest_from(store, tenant, period.to_seq).await? {
        Some(t) => (t.note, t.size, json!({"genTime": t.gen_time, "tsr": t.tsr})),
        None => {
            let c = checkpoint::current(store, signer, prefix, tenant).await.map_err(fail)?;
            (c.note, c.size, Value::Null)
        }
    };
    let note = checkpoint::with_cosignatures(store, tenant, note, size).await.map_err(fail)?;
    let inclusion = if period.to_seq >= period.from_seq.max(1) && period.to_seq <= size {
        let p = tree::inclusion(store, tenant, size, period.to_seq - 1).await.map_err(fail)?;
        json!({
            "seq": period.to_seq, "leafIndex": period.to_seq - 1, "size": size,
            "leafHash": hex::encode(p.from_root), "root": hex::encode(p.to_root),
            "proof": p.path.iter().map(hex::encode).collect::<Vec<_>>(),
        })
    } else {
        Value::Null
    };
    Ok(json!({"checkpoint": note, "consistencyFrom": null, "timestamp": timestamp, "inclusion": inclusion}))
}

/// One receipt as the bundle lists it: the canonical members, then the chain fields.
fn entry(out: &mut Vec<u8>, r: &StoredReceipt) {
    let mut bytes = canonical::receipt_bytes(&r.receipt);
    bytes.pop(); // the closing brace
    out.extend_from_slice(&bytes);
    let tail = json!({
        "thisHash": r.this_hash, "signature": r.signature, "keyId": r.key_id,
        "kind": r.kind, "receiptPackVersion": r.pack_version,
    });
    let tail = serde_json::to_vec(&tail).unwrap_or_default();
    out.push(b',');
    out.extend_from_slice(&tail[1..]);
}
