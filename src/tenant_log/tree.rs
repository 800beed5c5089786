//! The tenant log's tree at any size, read from its stored tiles (`store::tiles`): roots,
//! inclusion and consistency proofs (RFC 9162 §2.1, computed by `tlog_tiles`, the port of Go's
//! `sumdb/tlog`), and the tiles themselves as served.
//!
//! `tlog_tiles` asks for hashes by stored-hash index through a synchronous `HashReader`, and
//! which indexes it asks for depends only on the sizes, never on the hashes. So every
//! computation runs twice: first with a reader that only records the indexes, then, after the
//! tiles holding them were read from the store (O(log N) reads: at most two tiles per level),
//! with one that answers from those tiles.

use std::cell::RefCell;
use std::collections::BTreeMap;

use tlog_tiles::tile::Tile;
use tlog_tiles::tlog::{self, record_hash, Hash, HashReader};

use crate::error::ApiError;
use crate::store::log_heads::Edge;
use crate::store::tiles::{self, WIDTH};
use crate::store::Store;

/// Tile height (C2SP tlog-tiles).
pub const HEIGHT: u8 = 8;

/// The two passes' readers.
enum Hashes {
    /// Records the indexes asked for and answers zeros.
    Record(RefCell<Vec<u64>>),
    /// Answers from tiles read: `(level, index)` → as many hashes as were needed.
    Read(BTreeMap<(u8, u64), Vec<u8>>),
}

impl HashReader for Hashes {
    fn read_hashes(&self, indexes: &[u64]) -> Result<Vec<Hash>, tlog::Error> {
        match self {
            Hashes::Record(seen) => {
                seen.borrow_mut().extend_from_slice(indexes);
                Ok(vec![Hash([0; 32]); indexes.len()])
            }
            Hashes::Read(tiles) => indexes
                .iter()
                .map(|&i| {
                    let t = Tile::from_index(HEIGHT, i);
                    let data = tiles.get(&(t.level(), t.level_index())).ok_or(tlog::Error::IndexesNotInTree)?;
                    let whole = Tile::new(HEIGHT, t.level(), t.level_index(), (data.len() / 32) as u32, false);
                    whole.hash_at_index(data, i)
                })
                .collect(),
        }
    }
}

/// Runs `f` over the hashes of `tenant`'s tree at `size` (see the module comment).
async fn with_hashes<T>(
    store: &Store,
    tenant: &str,
    size: u64,
    f: impl Fn(&Hashes) -> Result<T, tlog::Error>,
) -> Result<T, ApiError> {
    let record = Hashes::Record(RefCell::new(Vec::new()));
    f(&record).map_err(proof_error)?;
    let Hashes::Record(seen) = record else { unreachable!("made above") };
    let mut want: BTreeMap<(u8, u64), u32> = BTreeMap::new();
    for i in seen.into_inner() {
        let t = Tile::from_index(HEIGHT, i);
        let w = want.entry((t.level(), t.level_index())).or_default();
        *w = (*w).max(t.width());
    }
    let mut read = BTreeMap::new();
    for ((level, index), width) in want {
        let data = tile_hashes(store, tenant, size, level, index, u64::from(width)).await?;
        read.insert((level, index), data.ok_or_else(|| ApiError::internal("the log's tiles are incomplete"))?);
    }
    f(&Hashes::Read(read)).map_err(proof_error)
}

fn proof_error(e: tlog::Error) -> ApiError {
    ApiError::internal(format!("log proof: {e}"))
}

/// The first `width` hashes of tile `index` at `level` in the tree of `size` leaves, if the
/// tree has them: from the stored full tile, else from the leaves (level 0) or the roots of
/// the full tiles one level down.
pub async fn tile_hashes(
    store: &Store,
    tenant: &str,
    size: u64,
    level: u8,
    index: u64,
    width: u64,
) -> Result<Option<Vec<u8>>, ApiError> {
    let shift = 8 * u32::from(level);
    let available = if shift >= 64 { 0 } else { size >> shift };
    let Some(end) = index.checked_mul(WIDTH).and_then(|s| s.checked_add(width)) else { return Ok(None) };
    if width == 0 || width > WIDTH || end > available {
        return Ok(None);
    }
    if let Some(full) = tiles::full_tile(store, tenant, level, index).await? {
        return Ok(Some(full[..width as usize * 32].to_vec()));
    }
    let start = index * WIDTH;
    let hashes: Vec<[u8; 32]> = match level {
        0 => tiles::leaves(store, tenant, start, end).await?.iter().map(|l| record_hash(l).0).collect(),
        l => tiles::roots(store, tenant, l - 1, start, end).await?,
    };
    if hashes.len() as u64 != width {
        return Err(ApiError::internal("the log's tiles are incomplete"));
    }
    Ok(Some(hashes.concat()))
}

/// The root of the tree of the first `size` leaves (`SHA-256("")` for none).
pub async fn root(store: &Store, tenant: &str, size: u64) -> Result<[u8; 32], ApiError> {
    with_hashes(store, tenant, size, |r| tlog::tree_hash(size, r)).await.map(|h| h.0)
}

/// The right edge of the tree of the first `size` leaves (`store::log_heads`): the subtree
/// roots `tlog::tree_hash` reads, read from the stored tiles, and the last leaf's data.
pub async fn edge(store: &Store, tenant: &str, size: u64) -> Result<Edge, ApiError> {
    if size == 0 {
        return Ok(Edge::empty());
    }
    let roots = with_hashes(store, tenant, size, |r| r.read_hashes(&tlog::sub_tree_index(0, size, Vec::new()))).await?;
    let last = tiles::leaves(store, tenant, size - 1, size).await?;
    let last = *last.first().ok_or_else(|| ApiError::internal("the log's leaf is missing"))?;
    Edge::new(size, last, &roots).ok_or_else(|| ApiError::internal("the log's edge does not fit its size"))
}

/// An inclusion proof of leaf `index` in the tree of `size` leaves: (leaf hash, root, path).
pub async fn inclusion(store: &Store, tenant: &str, size: u64, index: u64) -> Result<Proof, ApiError> {
    let leaf = tiles::leaves(store, tenant, index, index + 1).await?;
    let leaf = record_hash(leaf.first().ok_or_else(|| ApiError::internal("the log's leaf is missing"))?);
    let (root, path) =
        with_hashes(store, tenant, size, |r| Ok((tlog::tree_hash(size, r)?, tlog::prove_record(size, index, r)?)))
            .await?;
    Ok(Proof { from_root: leaf.0, to_root: root.0, path: path.into_iter().map(|h| h.0).collect() })
}

/// A consistency proof from the tree of `from` leaves to the tree of `to` (`from ≤ to`): both
/// roots and the path, empty when `from` is 0 or equals `to`.
pub async fn consistency(store: &Store, tenant: &str, from: u64, to: u64) -> Result<Proof, ApiError> {
    let (a, b, path) = with_hashes(store, tenant, to, |r| {
        let path = if from == 0 || from == to { Vec::new() } else { tlog::prove_tree(to, from, r)? };
        Ok((tlog::tree_hash(from, r)?, tlog::tree_hash(to, r)?, path))
    })
    .await?;
    Ok(Proof { from_root: a.0, to_root: b.0, path: path.into_iter().map(|h| h.0).collect() })
}

/// A proof and the two hashes it connects (leaf and root, or old root and new root).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proof {
    pub from_root: [u8; 32],
    pub to_root: [u8; 32],
    pub path: Vec<[u8; 32]>,
}
