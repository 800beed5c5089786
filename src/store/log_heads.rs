//! The newest checkpoint of each tenant's log this process made or read, with the right edge of
//! the tree at its size (log.md §2: "the root at the head is kept up to date"), kept in memory
//! with the [`Store`](super::Store) it belongs to, so that a checkpoint of a log that grew by a
//! few receipts is the root of the edge extended by their leaves, not a walk over stored tiles.
//!
//! The **right edge** of a tree of `size` leaves is the roots of its complete subtrees, one per
//! bit set in `size`, largest first (the "compact range" or frontier): `O(log size)` hashes from
//! which both the root and the edge after one more leaf follow without any other hash. The
//! stored tiles stay the reference (`tenant_log::tree`); an edge is seeded from them and is
//! only ever extended by leaves read after its own last one (see `tenant_log::checkpoint`).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use tlog_tiles::tlog::{node_hash, record_hash, Hash, EMPTY_HASH};

/// A hash or a leaf's data (as `store::tiles::Bytes32`; this file imports nothing of the store).
type Bytes32 = [u8; 32];

/// A checkpoint as published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointRow {
    pub size: u64,
    /// Hex.
    pub root: String,
    /// The signed note: body and the log's signature line.
    pub note: String,
    pub key_id: String,
    pub created_at: String,
}

/// The right edge of a tenant's tree at `size`, and the data of its last leaf (the `thisHash`
/// of receipt `size`, which commits to every receipt before it: the edge is valid for a store
/// exactly when that store's receipt `size` has the same `thisHash`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edge {
    size: u64,
    last_leaf: Bytes32,
    /// One subtree root per bit set in `size`, the largest subtree first.
    roots: Vec<Bytes32>,
}

impl Edge {
    /// The edge of an empty tree.
    pub fn empty() -> Edge {
        Edge { size: 0, last_leaf: [0; 32], roots: Vec::new() }
    }

    /// The edge of `size` leaves from its subtree roots (largest first, as
    /// `tlog::sub_tree_index(0, size)` names them) and the last leaf's data; None when the
    /// count of roots does not fit `size`.
    pub fn new(size: u64, last_leaf: Bytes32, roots: &[Hash]) -> Option<Edge> {
        let roots = roots.iter().map(|h| h.0).collect::<Vec<_>>();
        (roots.len() as u32 == size.count_ones()).then_some(Edge { size, last_leaf, roots })
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn last_leaf(&self) -> &Bytes32 {
        &self.last_leaf
    }

    /// Appends leaf `data`: its record hash merges with one subtree root per trailing one bit
    /// of the old size (RFC 9162 §2.1.1 builds the same subtrees).
    pub fn push(&mut self, data: &Bytes32) {
        let mut h = record_hash(data);
        let mut s = self.size;
        while s & 1 == 1 {
            let left = self.roots.pop().expect("one root per bit set");
            h = node_hash(Hash(left), h);
            s >>= 1;
        }
        self.roots.push(h.0);
        self.size += 1;
        self.last_leaf = *data;
    }

    /// The tree's root (RFC 9162 §2.1.1; `SHA-256("")` for none): the subtree roots folded
    /// from the right, as `tlog::tree_hash` folds the same hashes read from storage.
    pub fn root(&self) -> Bytes32 {
        let mut it = self.roots.iter().rev();
        let Some(last) = it.next() else { return EMPTY_HASH.0 };
        it.fold(Hash(*last), |right, left| node_hash(Hash(*left), right)).0
    }
}

/// A tenant's newest checkpoint known to this process, under `origin`, and the edge of its tree.
#[derive(Debug, Clone)]
pub struct KeptHead {
    pub origin: String,
    pub edge: Edge,
    pub checkpoint: CheckpointRow,
}

/// Every tenant's [`KeptHead`], shared by the clones of one `Store`.
#[derive(Debug, Default)]
pub struct KeptHeads(Mutex<HashMap<String, KeptHead>>);

impl KeptHeads {
    /// The tenant's head under `origin`, if one is kept.
    pub fn get(&self, tenant: &str, origin: &str) -> Option<KeptHead> {
        let map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        map.get(tenant).filter(|h| h.origin == origin).cloned()
    }

    /// Keeps `head` unless one as large under the same origin is kept (a concurrent call
    /// got further).
    pub fn put(&self, tenant: &str, head: KeptHead) {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match map.get(tenant) {
            Some(h) if h.origin == head.origin && h.edge.size >= head.edge.size => {}
            _ => {
                map.insert(tenant.to_string(), head);
            }
        }
    }

    /// Forgets the tenant's head (its edge no longer matches the store's leaves).
    pub fn forget(&self, tenant: &str) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).remove(tenant);
    }
}
