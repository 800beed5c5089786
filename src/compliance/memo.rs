//! The verified-span memo: a walk that has really checked every receipt of an aligned block
//! (recomputed `thisHash`, link, Ed25519 signature) records an HMAC over what it checked, under
//! a key derived from the master key. A later walk still recomputes every hash and checks every
//! link, but for a memoised block it recomputes that HMAC instead of verifying each signature:
//! equal means the same (hash, signature, keyId) triples were verified before, under the same
//! public keys. Anything else falls back to Ed25519. Soundness rests on the master key staying
//! secret (docs/decisions.md, "Verified-span memo").

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::OnceLock;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::key_ring::KeyRing;
use crate::receipts::merkle::Hash;
use crate::receipts::StoredReceipt;
use crate::secrets::at_rest::MasterKey;
/// One memo row (stored by `store::spans`).
pub use crate::store::spans::Span;

/// Receipts per memo block: block `k` covers seq `1 + k*len ..= (k+1)*len`.
pub const DEFAULT_BLOCK: u64 = 4096;

/// Overrides [`DEFAULT_BLOCK`], read once per process. For tests, which need blocks of a few
/// receipts; rows written under another length are ignored (and rewritten), never trusted.
pub const BLOCK_ENV: &str = "TOLLGATE_VERIFIED_SPAN_BLOCK";

/// The label of the memo key's derivation from the master key.
pub const KEY_LABEL: &str = "tollgate verified-span memo v1";

/// The block length in force.
pub fn block_len() -> u64 {
    static LEN: OnceLock<u64> = OnceLock::new();
    *LEN.get_or_init(|| {
        std::env::var(BLOCK_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|n| *n >= 1)
            .unwrap_or(DEFAULT_BLOCK)
    })
}

/// The HMAC key of the memo.
#[derive(Clone)]
pub struct MemoKey([u8; 32]);

impl MemoKey {
    pub fn from_master(master: &MasterKey) -> MemoKey {
        MemoKey(master.derive_key(KEY_LABEL))
    }

    pub fn from_bytes(bytes: [u8; 32]) -> MemoKey {
        MemoKey(bytes)
    }
}

impl fmt::Debug for MemoKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MemoKey(***)")
    }
}

/// The memo as one walk uses it: the key, the block length, the rows read for the period.
pub struct SpanMemo {
    key: MemoKey,
    tenant: String,
    block: u64,
    known: HashMap<u64, Span>,
}

impl SpanMemo {
    /// `known`: the tenant's stored rows; those of another block length are ignored.
    pub fn new(key: MemoKey, tenant: &str, block: u64, known: Vec<Span>) -> SpanMemo {
        let block = block.max(1);
        let known = known.into_iter().filter(|s| s.block_len == block).map(|s| (s.block_start, s)).collect();
        SpanMemo { key, tenant: tenant.to_string(), block, known }
    }

    pub fn block(&self) -> u64 {
        self.block
    }

    /// Whether `seq` starts a block.
    pub fn starts_block(&self, seq: u64) -> bool {
        seq >= 1 && (seq - 1).is_multiple_of(self.block)
    }

    pub fn has(&self, block_start: u64) -> bool {
        self.known.contains_key(&block_start)
    }

    /// The MAC of a block: the tenant, the block's place and length, then for each receipt its
    /// recomputed hash, stored signature and key id, then each key id's public key. Variable
    /// fields are length-prefixed. `None` when a key id is not in the registry.
    fn mac(
        &self,
        block_start: u64,
        rows: &[StoredReceipt],
        hashes: &[Hash],
        keys: &KeyRing,
    ) -> Option<(Hmac<Sha256>, String)> {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.key.0).expect("HMAC takes a key of any length");
        let field = |mac: &mut Hmac<Sha256>, b: &[u8]| {
            mac.update(&(b.len() as u64).to_be_bytes());
            mac.update(b);
        };
        field(&mut mac, self.tenant.as_bytes());
        mac.update(&block_start.to_be_bytes());
        mac.update(&(rows.len() as u64).to_be_bytes());
        let mut ids = BTreeSet::new();
        let mut last: Option<&str> = None;
        for (r, h) in rows.iter().zip(hashes) {
            mac.update(h);
            field(&mut mac, r.signature.as_bytes());
            field(&mut mac, r.key_id.as_bytes());
            if last != Some(r.key_id.as_str()) {
                ids.insert(r.key_id.as_str());
                last = Some(r.key_id.as_str());
            }
        }
        for id in &ids {
            field(&mut mac, id.as_bytes());
            mac.update(&keys.public_bytes(id)?);
        }
        Some((mac, ids.into_iter().collect::<Vec<_>>().join(",")))
    }

    /// True when the block has a row and its digest equals the MAC recomputed from these rows
    /// (compared in constant time).
    pub fn vouches(&self, block_start: u64, rows: &[StoredReceipt], hashes: &[Hash], keys: &KeyRing) -> bool {
        let Some(span) = self.known.get(&block_start) else { return false };
        let Ok(stored) = hex::decode(&span.digest) else { return false };
        match self.mac(block_start, rows, hashes, keys) {
            Some((mac, _)) => mac.verify_slice(&stored).is_ok(),
            None => false,
        }
    }

    /// The row to record for a block whose every receipt was just really verified.
    pub fn record(&self, block_start: u64, rows: &[StoredReceipt], hashes: &[Hash], keys: &KeyRing) -> Option<Span> {
        let (mac, key_ids) = self.mac(block_start, rows, hashes, keys)?;
        Some(Span { block_start, block_len: self.block, digest: hex::encode(mac.finalize().into_bytes()), key_ids })
    }
}
