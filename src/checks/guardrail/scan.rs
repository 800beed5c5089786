//! The merged detectors of one tenant and the scan that finds their candidates in a text,
//! shared by whole-text scans ([`super::Guardrails::apply`]) and streams.

use regex::RegexSet;

use super::detector::{Detector, Kind};
use super::resolve::{self, Cand};
use super::{detectors, injection};
use crate::checks::policy::document::GuardAction;

/// One match. Positions are byte offsets into the original text (for a stream: into the
/// whole stream as received), always on char boundaries.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    /// `email`, `phone`, `credit_card`, `iban`, `ssn`, `secret`, `prompt_injection`, or a
    /// custom pattern's category.
    pub category: String,
    pub action: GuardAction,
    pub start: usize,
    pub end: usize,
}

pub(crate) struct Inner {
    pub(super) request: bool,
    pub(super) response: bool,
    pub(super) detectors: Vec<Detector>,
    /// One pattern per detector (same order): which detectors have anything to look at.
    pub(super) set: Option<RegexSet>,
}

impl Inner {
    /// Validated candidates starting at or after `from`, numbers inside longer identifiers
    /// already dropped; overlaps not yet resolved.
    pub(crate) fn candidates(&self, text: &str, from: usize) -> Vec<Cand> {
        let Some(set) = &self.set else { return Vec::new() };
        if !set.is_match_at(text, from) {
            return Vec::new();
        }
        let mut cands = Vec::new();
        for i in set.matches_at(text, from).iter() {
            let mut push = |start, end| cands.push(Cand { det: i, start, end });
            match &self.detectors[i].kind {
                Kind::Builtin(b) => b.scan(text, from, &mut push),
                Kind::Injection => injection::scan(text, from, &mut push),
                Kind::Custom(re) => detectors::validated(re, text, from, &mut push, |_, s, e| Some((s, e))),
            }
        }
        resolve::drop_contained(&mut cands, &self.detectors);
        cands
    }

    /// Public findings for resolved candidates; `pos` maps a position to the reported one.
    pub(crate) fn findings(&self, kept: &[Cand], pos: impl Fn(usize) -> usize) -> (Vec<Finding>, bool) {
        let mut blocked = false;
        let findings = kept
            .iter()
            .map(|c| {
                let d = &self.detectors[c.det];
                blocked |= d.action == GuardAction::Block;
                Finding { category: d.category.clone(), action: d.action, start: pos(c.start), end: pos(c.end) }
            })
            .collect();
        (findings, blocked)
    }
}
