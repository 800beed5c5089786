//! The chain auditor: a background pass that walks each tenant's whole memo blocks not yet in
//! the verified-span memo, so attestations and bundles find them warm. It is the same walk an
//! attestation does (hashes, links, Ed25519), and records the blocks that verify. A block that
//! does not verify is remembered and not walked again by this process: attestations report it.

use std::collections::{BTreeSet, HashSet};

use super::attestation;
use super::memo::{self, MemoKey};
use super::period::Period;
use crate::receipts::signer;
use crate::store::{self, Store, StoreError};

/// Blocks walked per pass at most (4 096 receipts each by default): a pass over a long cold
/// chain is spread over several intervals instead of taking both cores for minutes.
const BLOCKS_PER_PASS: u64 = 32;

#[derive(Default)]
pub struct Auditor {
    /// `(tenant, block_start)` of blocks that did not verify.
    failed: HashSet<(String, u64)>,
}

impl Auditor {
    /// One pass; returns how many blocks it walked.
    pub async fn pass(&mut self, store: &Store, key: &MemoKey) -> Result<u64, StoreError> {
        let block = memo::block_len();
        let registry = signer::registry(store).await?;
        let mut budget = BLOCKS_PER_PASS;
        for (tenant, head) in store::receipts::chain_heads(store).await? {
            let whole = head / block;
            if whole == 0 || budget == 0 {
                continue;
            }
            let last_start = (whole - 1) * block + 1;
            let known: BTreeSet<u64> = store::spans::in_range(store, &tenant, 1, last_start)
                .await?
                .into_iter()
                .filter(|s| s.block_len == block)
                .map(|s| s.block_start)
                .collect();
            let missing: Vec<u64> = (0..whole)
                .map(|k| k * block + 1)
                .filter(|b| !known.contains(b) && !self.failed.contains(&(tenant.clone(), *b)))
                .take(budget as usize)
                .collect();
            budget -= missing.len() as u64;
            // Consecutive missing blocks are walked as one period.
            let mut i = 0;
            while i < missing.len() {
                let mut j = i;
                while j + 1 < missing.len() && missing[j + 1] == missing[j] + block {
                    j += 1;
                }
                self.walk(store, key, &registry, &tenant, missing[i], missing[j] + block - 1).await?;
                i = j + 1;
            }
        }
        Ok(BLOCKS_PER_PASS - budget)
    }

    async fn walk(
        &mut self,
        store: &Store,
        key: &MemoKey,
        registry: &[signer::RegisteredKey],
        tenant: &str,
        from_seq: u64,
        to_seq: u64,
    ) -> Result<(), StoreError> {
        let period = Period {
            label: "chain audit".into(),
            days: 0,
            from_seq,
            to_seq,
            from_ts: String::new(),
            to_ts: String::new(),
        };
        let (_, writing) = attestation::walk_period(store, tenant, &period, registry, Some(key)).await?;
        if let Some(w) = writing {
            let _ = w.await;
        }
        let recorded: BTreeSet<u64> =
            store::spans::in_range(store, tenant, from_seq, to_seq).await?.into_iter().map(|s| s.block_start).collect();
        let block = memo::block_len();
        for start in (from_seq..=to_seq).step_by(block as usize) {
            if !recorded.contains(&start) {
                log::warn!("chain audit: tenant {tenant} seq {start}..{} does not verify", start + block - 1);
                self.failed.insert((tenant.to_string(), start));
            }
        }
        Ok(())
    }
}
