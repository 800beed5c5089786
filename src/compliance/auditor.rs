//! The chain auditor: a background pass that walks each tenant's whole memo blocks not yet in
//! the verified-span memo, so attestations and bundles find them warm. It is the same walk an
//! attestation does (hashes, links, Ed25519), and records the blocks that verify. A block that
//! does not verify is remembered and not walked again by this process: attestations report it.
//! A block holding receipts pruned by retention (docs/log.md §7) cannot be vouched for (their
//! signatures are gone): it is remembered too, without a failure event.

use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

use super::attestation;
use super::memo::{self, MemoKey};
use super::period::Period;
use crate::receipts::signer;
use crate::store::{self, Store, StoreError};

/// Blocks walked per pass at most (4 096 receipts each by default): a long cold chain is
/// walked in slices, with pauses between them, instead of taking both cores for minutes.
pub const BLOCKS_PER_PASS: u64 = 32;

/// After a full pass (more may be waiting) the auditor pauses this many times the pass's own
/// duration before the next one: at most a quarter of the time walking while it catches up
/// (about 14 000 receipts/s on two cores), then one pass per interval.
pub const CATCH_UP_PAUSE_FACTOR: u32 = 3;

/// How long to wait before the next pass, after one that walked `walked` blocks in `took`
/// (`None`: it failed), with `interval` between passes when nothing is waiting.
pub fn next_wait(walked: Option<u64>, took: Duration, interval: Duration) -> Duration {
    match walked {
        Some(n) if n >= BLOCKS_PER_PASS => {
            (took * CATCH_UP_PAUSE_FACTOR).clamp(Duration::from_secs(1).min(interval), interval)
        }
        _ => interval,
    }
}

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
            if recorded.contains(&start) {
                continue;
            }
            self.failed.insert((tenant.to_string(), start));
            if !store::retention::pruned_leaves(store, tenant, start, start + block - 1, 1).await?.is_empty() {
                log::debug!("chain audit: tenant {tenant} seq {start}.. holds pruned receipts: not in the memo");
                continue;
            }
            log::warn!("chain audit: tenant {tenant} seq {start}..{} does not verify", start + block - 1);
            // The audit changes nothing in the database: the event is its only write.
            let data = serde_json::json!({"fromSeq": start, "toSeq": start + block - 1});
            let event = store::webhooks::Event::new(tenant, "chain.verification_failed", data);
            if let Err(e) = store::webhooks::enqueue_now(store, vec![event]).await {
                log::warn!("chain audit: the chain.verification_failed event was not written: {e}");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_pass_is_followed_by_a_paused_catch_up_pass() {
        let (s, interval) = (Duration::from_secs, Duration::from_secs(300));
        assert_eq!(next_wait(Some(BLOCKS_PER_PASS), s(2), interval), s(6), "3x the pass");
        assert_eq!(next_wait(Some(BLOCKS_PER_PASS), Duration::from_millis(10), interval), s(1), "at least 1 s");
        assert_eq!(next_wait(Some(BLOCKS_PER_PASS), s(200), interval), interval, "at most the interval");
        assert_eq!(next_wait(Some(BLOCKS_PER_PASS - 1), s(2), interval), interval, "caught up");
        assert_eq!(next_wait(None, s(2), interval), interval, "failed");
        assert_eq!(next_wait(Some(BLOCKS_PER_PASS), s(2), s(1)), s(1), "a 1 s interval");
    }
}
