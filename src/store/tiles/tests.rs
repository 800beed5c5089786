use super::*;
use sha2::{Digest, Sha256};

/// The reference: RFC 9162's MTH over leaf data, computed naively.
fn mth(leaves: &[Bytes32]) -> Bytes32 {
    match leaves.len() {
        0 => Sha256::digest([]).into(),
        1 => record_hash(&leaves[0]).0,
        n => {
            let k = n.next_power_of_two() / 2;
            let mut h = Sha256::new();
            h.update([1u8]);
            h.update(mth(&leaves[..k]));
            h.update(mth(&leaves[k..]));
            h.finalize().into()
        }
    }
}

fn leaf(i: u64) -> Bytes32 {
    Sha256::digest(i.to_be_bytes()).into()
}

/// Grows a log batch by batch as the append paths do (reading what `needs` asks from the
/// tiles and leaves made so far) and returns every tile made.
fn grow(all: &[Bytes32], batches: impl Iterator<Item = usize>) -> Vec<TileRow> {
    let mut tiles: Vec<TileRow> = Vec::new();
    let mut old = 0usize;
    for b in batches {
        let new = (old + b).min(all.len());
        let stored: Vec<Vec<Bytes32>> = needs(old as u64, new as u64)
            .iter()
            .map(|n| match n.level {
                0 => all[n.from as usize..n.to as usize].to_vec(),
                l => (n.from..n.to)
                    .map(|i| tiles.iter().find(|t| t.level == l - 1 && t.index == i).expect("stored below").root)
                    .collect(),
            })
            .collect();
        tiles.extend(build(old as u64, &all[old..new], &stored));
        old = new;
        if old == all.len() {
            break;
        }
    }
    tiles
}

#[test]
fn nothing_is_read_or_written_until_a_tile_completes() {
    assert_eq!(needs(0, 255), vec![]);
    assert_eq!(needs(10, 200), vec![]);
    assert_eq!(needs(0, 256), vec![]);
    assert_eq!(needs(300, 512), vec![Need { level: 0, from: 256, to: 300 }]);
    assert_eq!(
        needs(65_535, 65_536),
        vec![Need { level: 0, from: 65_280, to: 65_535 }, Need { level: 1, from: 0, to: 255 }]
    );
    let leaves: Vec<Bytes32> = (0..255).map(leaf).collect();
    assert!(build(0, &leaves, &[]).is_empty());
}

#[test]
fn tiles_grown_in_any_batches_are_the_tree_s_own_hashes() {
    let n = 65_536 + 700;
    let all: Vec<Bytes32> = (0..n).map(leaf).collect();
    // Batches of varied sizes, some crossing several tiles at once, some of one receipt.
    let sizes = [1usize, 255, 1, 300, 7, 1000, 256, 3].into_iter().cycle();
    let tiles = grow(&all, sizes);
    assert_eq!(tiles.iter().filter(|t| t.level == 0).count(), n as usize / 256);
    assert_eq!(tiles.iter().filter(|t| t.level == 1).count(), 1);
    for t in &tiles {
        let span = 256usize.pow(u32::from(t.level));
        let base = t.index as usize * 256 * span;
        for i in [0usize, 1, 77, 255] {
            let expected = mth(&all[base + i * span..base + (i + 1) * span]);
            assert_eq!(&t.hashes[i * 32..(i + 1) * 32], &expected, "tile {}/{} hash {i}", t.level, t.index);
        }
        assert_eq!(t.root, mth(&all[base..base + 256 * span]), "root of tile {}/{}", t.level, t.index);
    }
    // The same log in one batch makes the same tiles.
    let mut once = grow(&all, std::iter::once(n as usize));
    let mut many = tiles;
    once.sort_by_key(|t| (t.level, t.index));
    many.sort_by_key(|t| (t.level, t.index));
    assert_eq!(once, many);
}

#[test]
fn a_short_read_below_writes_no_shifted_tile() {
    let all: Vec<Bytes32> = (0..600).map(leaf).collect();
    // 44 stored leaves were asked for; 43 came back.
    let rows = build(300, &all[300..600], &[all[256..299].to_vec()]);
    assert!(rows.is_empty());
}
