//! Inclusion proofs (docs/seed.md, "Inclusion proof", RFC 9162 §2.1.3): the audit path of one receipt's
//! leaf in the period's tree, built while streaming the period's chain hashes (memory O(log n)).

use super::period::Period;
use crate::receipts::merkle::{self, Hash, ProofBuilder};
use crate::store::{self, Store, StoreError};

/// Leaves per read.
const PAGE: i64 = 20_000;

#[derive(Debug, Clone, PartialEq)]
pub struct Inclusion {
    pub index: u64,
    pub tree_size: u64,
    pub leaf: Hash,
    pub proof: Vec<Hash>,
    pub root: Hash,
    /// RFC 9162 §2.1.3.2 run on the result, server-side.
    pub verified: bool,
}

fn leaf_of(this_hash: &str) -> Hash {
    // Same rule as the walk: a stored hash that is not hex cannot be a leaf of a sound chain;
    // hash its text so the tree still has a leaf there and the root cannot match a sound one.
    merkle::leaf_hash(&merkle::from_hex(this_hash).unwrap_or_else(|| {
        use sha2::Digest;
        sha2::Sha256::digest(this_hash.as_bytes()).into()
    }))
}

/// Calls `f(position, seq, leaf)` for every receipt of the period, in seq order.
async fn each_leaf(
    store: &Store,
    tenant: &str,
    period: &Period,
    mut f: impl FnMut(u64, u64, Hash),
) -> Result<u64, StoreError> {
    let (mut from, mut pos) = (period.from_seq, 0u64);
    while from <= period.to_seq {
        let rows = store::period::leaves(store, tenant, from, period.to_seq, PAGE).await?;
        for (seq, hash) in &rows {
            f(pos, *seq, leaf_of(hash));
            pos += 1;
        }
        match rows.last() {
            Some((last, _)) if rows.len() as i64 == PAGE => from = last + 1,
            _ => break,
        }
    }
    Ok(pos)
}

/// The proof for the receipt at `seq`, which must lie in the period (`None` otherwise).
pub async fn prove(store: &Store, tenant: &str, period: &Period, seq: u64) -> Result<Option<Inclusion>, StoreError> {
    if !period.contains(seq) {
        return Ok(None);
    }
    // Without gaps the leaf position is seq - fromSeq. A chain with a gap (rows deleted around
    // the writer) still gets a proof for the leaves that exist: count them first.
    let mut size = period.leaf_count();
    let mut index = seq - period.from_seq;
    for attempt in 0..2 {
        let Some(mut builder) = ProofBuilder::new(size, index) else { return Ok(None) };
        let mut seen_index = None;
        let count = each_leaf(store, tenant, period, |pos, s, leaf| {
            if s == seq {
                seen_index = Some(pos);
            }
            if pos < size {
                builder.push(leaf);
            }
        })
        .await?;
        if count == size && seen_index == Some(index) {
            let Some((leaf, proof, root)) = builder.finish() else { return Ok(None) };
            let verified = merkle::verify_inclusion(&leaf, index, size, &proof, &root);
            return Ok(Some(Inclusion { index, tree_size: size, leaf, proof, root, verified }));
        }
        if attempt == 0 {
            let Some(i) = seen_index else { return Ok(None) };
            (size, index) = (count, i);
        }
    }
    Ok(None)
}
