//! RFC 6962 / RFC 9162 Merkle tree over SHA-256 (docs/receipts.md §3): roots, audit paths and their
//! verification. Pure functions: the caller supplies leaf hashes (`leaf_hash` of each receipt's
//! raw 32-byte `thisHash`), so one tree shape serves the writer, the API and offline auditors.

use sha2::{Digest, Sha256};

pub type Hash = [u8; 32];

/// `SHA-256(0x00 || data)`: the domain prefix keeps a leaf from being passed off as a node.
pub fn leaf_hash(data: &[u8]) -> Hash {
    let mut h = Sha256::new();
    h.update([0x00]);
    h.update(data);
    h.finalize().into()
}

/// `SHA-256(0x01 || l || r)`.
pub fn node_hash(l: &Hash, r: &Hash) -> Hash {
    let mut h = Sha256::new();
    h.update([0x01]);
    h.update(l);
    h.update(r);
    h.finalize().into()
}

/// The root of a tree with no leaves: `SHA-256("")`.
pub fn empty_root() -> Hash {
    Sha256::digest([]).into()
}

/// The largest power of two strictly smaller than `n` (`n >= 2`): where RFC 6962 splits.
fn split(n: usize) -> usize {
    debug_assert!(n >= 2);
    1 << (usize::BITS - 1 - (n - 1).leading_zeros())
}

/// Root over leaf hashes (already leaf-hashed), splitting at the largest power of two < n.
/// n - 1 node hashes, recursion depth O(log n), no allocation.
pub fn root(leaves: &[Hash]) -> Hash {
    match leaves.len() {
        0 => empty_root(),
        _ => subtree_root(leaves),
    }
}

fn subtree_root(leaves: &[Hash]) -> Hash {
    if leaves.len() == 1 {
        return leaves[0];
    }
    let k = split(leaves.len());
    node_hash(&subtree_root(&leaves[..k]), &subtree_root(&leaves[k..]))
}

/// RFC 9162 §2.1.3.1 audit path for leaf `index` in a tree of `leaves.len()`, bottom-up.
/// `None` if `index >= leaves.len()`. The sibling subtrees partition the other leaves, so the
/// whole path costs O(n) hashes.
pub fn inclusion_proof(leaves: &[Hash], index: usize) -> Option<Vec<Hash>> {
    if index >= leaves.len() {
        return None;
    }
    let mut path = Vec::with_capacity(usize::BITS as usize);
    collect_path(leaves, index, &mut path);
    Some(path)
}

/// PATH(m, D[n]): the recursive call comes first, so siblings are appended deepest first.
fn collect_path(leaves: &[Hash], m: usize, path: &mut Vec<Hash>) {
    if leaves.len() <= 1 {
        return;
    }
    let k = split(leaves.len());
    if m < k {
        collect_path(&leaves[..k], m, path);
        path.push(subtree_root(&leaves[k..]));
    } else {
        collect_path(&leaves[k..], m - k, path);
        path.push(subtree_root(&leaves[..k]));
    }
}

/// RFC 9162 §2.1.3.2 verification, in full: `index < tree_size`, the early-exhaustion check
/// (`sn` reaches 0 while the path still has elements → false), the path fully consumed
/// (`sn == 0` at the end) and the computed root equal to `root`.
pub fn verify_inclusion(leaf: &Hash, index: u64, tree_size: u64, proof: &[Hash], root: &Hash) -> bool {
    if index >= tree_size {
        return false;
    }
    let mut fnode = index;
    let mut snode = tree_size - 1;
    let mut r = *leaf;
    for p in proof {
        if snode == 0 {
            return false;
        }
        if fnode & 1 == 1 || fnode == snode {
            r = node_hash(p, &r);
            if fnode & 1 == 0 {
                // The leaf's subtree is the right edge: skip the levels where it has no sibling.
                while fnode & 1 == 0 && fnode != 0 {
                    fnode >>= 1;
                    snode >>= 1;
                }
            }
        } else {
            r = node_hash(&r, p);
        }
        fnode >>= 1;
        snode >>= 1;
    }
    snode == 0 && r == *root
}

/// A streaming root for large periods: leaf hashes pushed one at a time, memory O(log n).
///
/// The stack holds roots of perfect subtrees of strictly decreasing size, merged like a binary
/// counter; that is exactly RFC 6962's decomposition, so folding it right to left at `finish`
/// reproduces `root` for any n.
#[derive(Debug, Clone, Default)]
pub struct RootBuilder {
    /// (subtree root, height): heights strictly decrease from bottom to top.
    stack: Vec<(Hash, u32)>,
    len: u64,
}

impl RootBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, leaf: Hash) {
        let mut cur = (leaf, 0u32);
        while let Some(&(top, height)) = self.stack.last() {
            if height != cur.1 {
                break;
            }
            self.stack.pop();
            cur = (node_hash(&top, &cur.0), height + 1);
        }
        self.stack.push(cur);
        self.len += 1;
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn finish(self) -> Hash {
        let mut it = self.stack.into_iter().rev();
        let Some((mut acc, _)) = it.next() else {
            return empty_root();
        };
        for (left, _) in it {
            acc = node_hash(&left, &acc);
        }
        acc
    }
}

/// A streaming audit path (RFC 9162 §2.1.3.1) and root for one leaf of a large period: leaves
/// are pushed in order, memory O(log n). The sibling subtrees of the path are disjoint ranges of
/// leaf positions, known from `tree_size` and `index` alone, so each pushed leaf feeds exactly one
/// of them (or is the leaf itself).
#[derive(Debug, Clone)]
pub struct ProofBuilder {
    /// Sibling ranges `[start, end)` in path order (bottom-up), each with its streaming root.
    siblings: Vec<(u64, u64, RootBuilder)>,
    root: RootBuilder,
    index: u64,
    tree_size: u64,
    pos: u64,
    leaf: Option<Hash>,
}

impl ProofBuilder {
    /// `None` when `index >= tree_size`.
    pub fn new(tree_size: u64, index: u64) -> Option<Self> {
        if index >= tree_size {
            return None;
        }
        let mut ranges = Vec::new();
        sibling_ranges(0, tree_size, index, &mut ranges);
        Some(ProofBuilder {
            siblings: ranges.into_iter().map(|(a, b)| (a, b, RootBuilder::new())).collect(),
            root: RootBuilder::new(),
            index,
            tree_size,
            pos: 0,
            leaf: None,
        })
    }

    /// The next leaf hash (already `leaf_hash`ed), in position order.
    pub fn push(&mut self, leaf: Hash) {
        let p = self.pos;
        self.pos += 1;
        self.root.push(leaf);
        if p == self.index {
            self.leaf = Some(leaf);
        } else if let Some(s) = self.siblings.iter_mut().find(|(a, b, _)| (*a..*b).contains(&p)) {
            s.2.push(leaf);
        }
    }

    /// `(leaf, audit path, root)`, or `None` when fewer or more than `tree_size` leaves came.
    pub fn finish(self) -> Option<(Hash, Vec<Hash>, Hash)> {
        if self.pos != self.tree_size {
            return None;
        }
        let path = self.siblings.into_iter().map(|(_, _, b)| b.finish()).collect();
        Some((self.leaf?, path, self.root.finish()))
    }
}

/// The sibling ranges of PATH(m, D[start..end]), deepest first (the order `collect_path` uses).
fn sibling_ranges(start: u64, end: u64, m: u64, out: &mut Vec<(u64, u64)>) {
    let n = end - start;
    if n <= 1 {
        return;
    }
    let k = split(n as usize) as u64;
    if m < k {
        sibling_ranges(start, start + k, m, out);
        out.push((start + k, end));
    } else {
        sibling_ranges(start + k, end, m - k, out);
        out.push((start, start + k));
    }
}

/// Lowercase hex, as roots and hashes appear on the wire.
pub fn to_hex(h: &Hash) -> String {
    hex::encode(h)
}

/// Exactly 64 lowercase hex digits; anything else (uppercase included) is `None`, so a hash has
/// one textual form.
pub fn from_hex(s: &str) -> Option<Hash> {
    if s.len() != 64 || !s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return None;
    }
    let mut out = [0u8; 32];
    hex::decode_to_slice(s, &mut out).ok()?;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(s: &str) -> Hash {
        from_hex(s).expect("test vector is 64 lowercase hex digits")
    }

    // Leaf inputs and roots for sizes 1..=8: transparency-dev/merkle `testonly/constants.go`
    // (`LeafInputs`, `RootHashes`), the same values as `roots` in `proof/verify_test.go`.
    const LEAF_INPUTS: [&str; 8] =
        ["", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f"];
    const ROOTS: [&str; 8] = [
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
        "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
        "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
        "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
    ];
    const EMPTY: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    // transparency-dev/merkle `proof/verify_test.go` `inclusionProofs`: (leaf, size, path),
    // where `leaf` there is 1-based (the test uses `p.leaf-1`); stored here 0-based.
    fn published_proofs() -> Vec<(usize, usize, Vec<Hash>)> {
        vec![
            (
                0,
                8,
                vec![
                    h("96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7"),
                    h("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
                    h("6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"),
                ],
            ),
            (
                5,
                8,
                vec![
                    h("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"),
                    h("ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0"),
                    h("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"),
                ],
            ),
            (2, 3, vec![h("fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125")]),
            (
                1,
                5,
                vec![
                    h("6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"),
                    h("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
                    h("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"),
                ],
            ),
        ]
    }

    fn published_leaves() -> Vec<Hash> {
        LEAF_INPUTS.iter().map(|s| leaf_hash(&hex::decode(s).unwrap())).collect()
    }

    /// Distinct synthetic leaves for the exhaustive sizes.
    fn leaves(n: usize) -> Vec<Hash> {
        (0..n).map(|i| leaf_hash(&(i as u64).to_be_bytes())).collect()
    }

    fn flip(mut x: Hash, byte: usize, bit: u8) -> Hash {
        x[byte] ^= 1 << bit;
        x
    }

    #[test]
    fn empty_tree_root_is_sha256_of_nothing() {
        assert_eq!(to_hex(&empty_root()), EMPTY);
        assert_eq!(root(&[]), h(EMPTY));
        assert_eq!(RootBuilder::new().finish(), h(EMPTY));
        assert_eq!(inclusion_proof(&[], 0), None);
    }

    #[test]
    fn published_roots_for_sizes_1_to_8() {
        let lv = published_leaves();
        for n in 1..=8 {
            assert_eq!(to_hex(&root(&lv[..n])), ROOTS[n - 1], "root of size {n}");
            let mut b = RootBuilder::new();
            lv[..n].iter().for_each(|l| b.push(*l));
            assert_eq!(b.len(), n as u64);
            assert_eq!(to_hex(&b.finish()), ROOTS[n - 1], "builder root of size {n}");
        }
        // First leaf hash is the published NodeHashes()[0][0].
        assert_eq!(to_hex(&lv[0]), "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d");
    }

    #[test]
    fn published_inclusion_proofs() {
        let lv = published_leaves();
        for (index, size, path) in published_proofs() {
            let got = inclusion_proof(&lv[..size], index).unwrap();
            assert_eq!(got, path, "proof for leaf {index} in size {size}");
            let r = h(ROOTS[size - 1]);
            assert!(verify_inclusion(&lv[index], index as u64, size as u64, &path, &r));
            // transparency-dev's corruption probes that must all fail.
            let (i, n) = (index as u64, size as u64);
            assert!(!verify_inclusion(&lv[index], i.wrapping_sub(1), n, &path, &r));
            assert!(!verify_inclusion(&lv[index], i + 1, n, &path, &r));
            assert!(!verify_inclusion(&lv[index], i ^ 2, n, &path, &r));
            assert!(!verify_inclusion(&lv[index], i, n * 2, &path, &r));
            assert!(!verify_inclusion(&lv[index], i, n / 2, &path, &r));
            assert!(!verify_inclusion(&lv[index], i, n, &path, &h(EMPTY)));
            let mut longer = path.clone();
            longer.push(r);
            assert!(!verify_inclusion(&lv[index], i, n, &longer, &r));
            let mut prefixed = vec![r];
            prefixed.extend_from_slice(&path);
            assert!(!verify_inclusion(&lv[index], i, n, &prefixed, &r));
            if path.len() > 1 {
                let mut inserted = vec![path[0], [0xab; 32]];
                inserted.extend_from_slice(&path[1..]);
                assert!(!verify_inclusion(&lv[index], i, n, &inserted, &r));
            }
        }
    }

    #[test]
    fn single_leaf_tree() {
        let l = leaf_hash(b"data");
        assert_eq!(root(&[l]), l);
        assert_eq!(inclusion_proof(&[l], 0), Some(vec![]));
        assert!(verify_inclusion(&l, 0, 1, &[], &l));
        assert!(!verify_inclusion(&l, 0, 1, &[], &h(EMPTY)));
        assert!(!verify_inclusion(&h(EMPTY), 0, 1, &[], &l));
        // RFC 9162 probes with no proof: index >= size, including the empty tree.
        for (i, n) in [(0, 0), (1, 0), (2, 1), (1, 1)] {
            assert!(!verify_inclusion(&l, i, n, &[], &l), "index {i} size {n}");
            assert!(!verify_inclusion(&l, i, n, &[], &h(EMPTY)), "index {i} size {n}");
        }
    }

    #[test]
    fn every_index_of_sizes_1_to_70() {
        for n in 1..=70usize {
            let lv = leaves(n);
            let r = root(&lv);
            let mut b = RootBuilder::new();
            lv.iter().for_each(|l| b.push(*l));
            assert_eq!(b.finish(), r, "builder root of size {n}");
            assert_eq!(inclusion_proof(&lv, n), None);
            for i in 0..n {
                let p = inclusion_proof(&lv, i).unwrap();
                let (iu, nu) = (i as u64, n as u64);
                assert!(verify_inclusion(&lv[i], iu, nu, &p, &r), "leaf {i} size {n}");
                assert!(!verify_inclusion(&lv[i], nu, nu, &p, &r));
                assert!(!verify_inclusion(&lv[i], iu + nu, nu, &p, &r));
                // Another leaf's hash at this index.
                let other = leaf_hash(b"not a leaf");
                assert!(!verify_inclusion(&other, iu, nu, &p, &r));
                // One bit flipped anywhere in the leaf, the root or any proof element.
                for (byte, bit) in [(0, 0), (13, 5), (31, 7)] {
                    assert!(!verify_inclusion(&flip(lv[i], byte, bit), iu, nu, &p, &r));
                    assert!(!verify_inclusion(&lv[i], iu, nu, &p, &flip(r, byte, bit)));
                    for k in 0..p.len() {
                        let mut bad = p.clone();
                        bad[k] = flip(bad[k], byte, bit);
                        assert!(!verify_inclusion(&lv[i], iu, nu, &bad, &r), "elem {k}");
                    }
                }
                // One hash too short, one too long.
                if !p.is_empty() {
                    assert!(!verify_inclusion(&lv[i], iu, nu, &p[..p.len() - 1], &r));
                }
                let mut long = p.clone();
                long.push(r);
                assert!(!verify_inclusion(&lv[i], iu, nu, &long, &r));
            }
        }
    }

    /// A path that still has elements when `sn` reaches 0 must fail even if the extra element
    /// would hash to the claimed root: here the claimed root is exactly what a naive verifier
    /// (no exhaustion check) computes, so only the check rejects it.
    #[test]
    fn early_exhaustion_is_rejected() {
        for n in 1..=20usize {
            let lv = leaves(n);
            let r = root(&lv);
            for i in 0..n {
                let mut p = inclusion_proof(&lv, i).unwrap();
                let extra = leaf_hash(b"extra");
                p.push(extra);
                // Naive continuation: the computed root is hashed once more with the extra
                // element (the index bit is 0 at this point, so the extra goes on the right).
                let naive = node_hash(&r, &extra);
                assert!(!verify_inclusion(&lv[i], i as u64, n as u64, &p, &naive), "{i}/{n}");
                let naive_left = node_hash(&extra, &r);
                assert!(!verify_inclusion(&lv[i], i as u64, n as u64, &p, &naive_left));
            }
        }
    }

    /// A path that matches a larger tree's proof for the same leaf must not verify when the
    /// claimed size is smaller (sn not exhausted at the end → false).
    #[test]
    fn path_must_be_fully_consumed() {
        let lv = leaves(8);
        let p = inclusion_proof(&lv, 0).unwrap();
        let r8 = root(&lv);
        assert!(verify_inclusion(&lv[0], 0, 8, &p, &r8));
        assert!(!verify_inclusion(&lv[0], 0, 16, &p, &r8));
        assert!(!verify_inclusion(&lv[0], 0, 9, &p, &r8));
    }

    #[test]
    fn hex_round_trip_and_strictness() {
        let x = leaf_hash(b"x");
        assert_eq!(from_hex(&to_hex(&x)), Some(x));
        assert_eq!(from_hex(&EMPTY.to_uppercase()), None);
        assert_eq!(from_hex(&EMPTY[..62]), None);
        assert_eq!(from_hex(&format!("{EMPTY}00")), None);
        assert_eq!(from_hex(&EMPTY.replace('e', "g")), None);
    }

    #[test]
    fn streaming_proofs_equal_the_recursive_ones() {
        for n in 1..=70usize {
            let ls = leaves(n);
            for i in 0..n {
                let mut b = ProofBuilder::new(n as u64, i as u64).expect("index in range");
                ls.iter().for_each(|l| b.push(*l));
                let (leaf, path, r) = b.finish().expect("all leaves pushed");
                assert_eq!(leaf, ls[i]);
                assert_eq!(path, inclusion_proof(&ls, i).unwrap(), "n={n} i={i}");
                assert_eq!(r, root(&ls));
            }
        }
        assert!(ProofBuilder::new(3, 3).is_none());
        let mut short = ProofBuilder::new(3, 0).unwrap();
        short.push(leaves(1)[0]);
        assert!(short.finish().is_none(), "fewer leaves than the tree size");
    }

    #[test]
    fn split_is_largest_power_of_two_below_n() {
        for (n, k) in [(2, 1), (3, 2), (4, 2), (5, 4), (8, 4), (9, 8), (70, 64)] {
            assert_eq!(split(n), k, "n={n}");
        }
    }
}
