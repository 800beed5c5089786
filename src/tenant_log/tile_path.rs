//! C2SP tlog-tiles paths below `tile/`: `<L>/<N>[.p/<W>]` (hash tiles) and
//! `entries/<N>[.p/<W>]` (entry bundles). `<N>` is written in groups of three digits, each but
//! the last prefixed `x` (`1234067` → `x001/x234/067`); `<W>` is 1 to 255.

/// A tile as a path names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TilePath {
    /// `None` for an entry bundle.
    pub level: Option<u8>,
    pub index: u64,
    /// 256 for a full tile.
    pub width: u64,
}

/// The highest hash tile level a tree of at most 2^63 leaves has (8 levels of 8 bits).
const MAX_LEVEL: u8 = 7;

/// Parses the segments after `tile/`; None when they name no tile.
pub fn parse(segments: &[&str]) -> Option<TilePath> {
    let (first, rest) = segments.split_first()?;
    let level = match *first {
        "entries" => None,
        l => Some(number(l).filter(|&l| l <= u64::from(MAX_LEVEL))? as u8),
    };
    let (index_parts, width) = match rest {
        [head @ .., last, w] if last.ends_with(".p") => {
            let w = number(w).filter(|w| (1..=255).contains(w))?;
            (head.iter().copied().chain([&last[..last.len() - 2]]).collect::<Vec<_>>(), w)
        }
        parts => (parts.to_vec(), 256),
    };
    Some(TilePath { level, index: index(&index_parts)?, width })
}

/// A decimal number without leading zeros (`0` itself allowed).
fn number(s: &str) -> Option<u64> {
    let ok = !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    if ok {
        s.parse().ok()
    } else {
        None
    }
}

/// `x001/x234/067` → 1234067.
fn index(parts: &[&str]) -> Option<u64> {
    let (last, head) = parts.split_last()?;
    let mut n: u64 = 0;
    for p in head {
        n = n.checked_mul(1000)?.checked_add(group(p.strip_prefix('x')?)?)?;
    }
    let n = n.checked_mul(1000)?.checked_add(group(last)?)?;
    // The shortest form only: no leading `x000` group.
    if head.first().is_some_and(|p| *p == "x000") {
        return None;
    }
    Some(n)
}

fn group(s: &str) -> Option<u64> {
    (s.len() == 3 && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok())?
}

/// The path of a tile below `tile/` (the inverse of [`parse`]).
pub fn format(t: TilePath) -> String {
    let mut n = t.index;
    let mut parts = vec![format!("{:03}", n % 1000)];
    while n >= 1000 {
        n /= 1000;
        parts.push(format!("x{:03}", n % 1000));
    }
    parts.reverse();
    let level = t.level.map_or("entries".to_string(), |l| l.to_string());
    let partial = if t.width < 256 { format!(".p/{}", t.width) } else { String::new() };
    format!("{level}/{}{partial}", parts.join("/"))
}
