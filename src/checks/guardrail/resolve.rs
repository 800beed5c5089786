//! From raw candidates to what is reported and replaced.
//!
//! 1. A number inside a validated longer identifier is part of it, not a second finding: the
//!    digits of an IBAN are not a card, the digits of a card are not a phone number.
//! 2. Overlaps go to the strictest action, then the longest span, so replacements never nest.
//! 3. Rendering replaces `redact` and `block` findings with `[REDACTED:<CATEGORY>]`.

use std::borrow::Cow;
use std::collections::BTreeMap;

use super::detector::{Detector, Kind};
use super::detectors::Builtin;
use crate::checks::policy::document::GuardAction;

/// A validated match of detector `det` (an index into the compiled detectors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cand {
    pub det: usize,
    pub start: usize,
    pub end: usize,
}

/// How much a detector's match is "a whole identifier": a match is dropped when it lies
/// inside a match of a higher rank.
fn rank(kind: &Kind) -> Option<u8> {
    match kind {
        Kind::Builtin(Builtin::Phone) => Some(0),
        Kind::Builtin(Builtin::CreditCard | Builtin::Ssn) => Some(1),
        Kind::Builtin(Builtin::Email | Builtin::Iban | Builtin::Secret) => Some(2),
        Kind::Injection | Kind::Custom(_) => None,
    }
}

pub(crate) fn drop_contained(cands: &mut Vec<Cand>, dets: &[Detector]) {
    let ranked = |c: &Cand| rank(&dets[c.det].kind);
    if cands.iter().filter(|c| ranked(c).is_some()).count() < 2 {
        return;
    }
    // For each rank floor: spans of higher rank sorted by start, with the running maximum end,
    // so "is there a container starting at or before s and ending at or after e" is one search.
    let containers = |above: u8| {
        let mut v: Vec<(usize, usize)> =
            cands.iter().filter(|c| ranked(c).is_some_and(|r| r > above)).map(|c| (c.start, c.end)).collect();
        v.sort_unstable();
        let mut max_end = 0;
        let pm: Vec<usize> = v
            .iter()
            .map(|&(_, e)| {
                max_end = max_end.max(e);
                max_end
            })
            .collect();
        (v, pm)
    };
    let by_rank = [containers(0), containers(1)];
    cands.retain(|c| match ranked(c) {
        Some(r @ (0 | 1)) => {
            let (v, pm) = &by_rank[usize::from(r)];
            let k = v.partition_point(|&(s, _)| s <= c.start);
            !(k > 0 && pm[k - 1] >= c.end)
        }
        _ => true,
    });
}

/// Non-overlapping candidates in text order: strictest action first, then the longest span,
/// then the earliest.
pub(crate) fn resolve(mut cands: Vec<Cand>, dets: &[Detector]) -> Vec<Cand> {
    cands.retain(|c| c.start < c.end);
    if cands.len() < 2 {
        return cands;
    }
    cands.sort_by(|a, b| {
        (dets[b.det].action.cmp(&dets[a.det].action))
            .then((b.end - b.start).cmp(&(a.end - a.start)))
            .then(a.start.cmp(&b.start))
            .then(a.det.cmp(&b.det))
    });
    let mut taken: BTreeMap<usize, Cand> = BTreeMap::new();
    for c in cands {
        // Taken spans do not overlap, so only the last one starting before `c.end` can.
        let overlaps = taken.range(..c.end).next_back().is_some_and(|(_, t)| t.end > c.start);
        if !overlaps {
            taken.insert(c.start, c);
        }
    }
    taken.into_values().collect()
}

/// `text` with every `redact`/`block` finding replaced by its marker. `base` is the offset of
/// `text` within the string the candidates' positions refer to. Borrowed when nothing changes.
pub(crate) fn render<'a>(text: &'a str, base: usize, kept: &[Cand], dets: &[Detector]) -> Cow<'a, str> {
    let masks = |c: &&Cand| dets[c.det].action >= GuardAction::Redact;
    if !kept.iter().any(|c| masks(&c)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut at = 0;
    for c in kept.iter().filter(masks) {
        out.push_str(&text[at..c.start - base]);
        out.push_str(&dets[c.det].marker);
        at = c.end - base;
    }
    out.push_str(&text[at..]);
    Cow::Owned(out)
}
