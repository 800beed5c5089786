//! The tenant log (docs/log.md): every receipt of a tenant, in `seq` order, as the leaves of one
//! RFC 9162 Merkle tree whose interior hashes are stored as C2SP tiles while the receipts are
//! written (`store::tiles`). Here: reading the tree at any size ([`tree`]: roots, inclusion and
//! consistency proofs, tiles), signed checkpoints ([`checkpoint`]) and the tile paths of the
//! C2SP tlog-tiles read API ([`tile_path`]), and retention with legal holds ([`retention`]).

pub mod audit;
pub mod checkpoint;
pub mod cosignature;
pub mod publisher;
pub mod retention;
pub mod tile_path;
pub mod timestamp;
pub mod tree;
pub mod witness;

#[cfg(test)]
mod tests;
