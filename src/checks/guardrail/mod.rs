//! Guardrails: find PII, secrets, prompt injection and custom patterns in request and response
//! text, and redact or block them. Pure: no I/O, no clock.
//!
//! Settings are the `guardrails` sections of a tenant's enabled policies (docs/API.md "Policy
//! language"). [`Guardrails::compile`] merges them once per snapshot into an immutable value
//! shared by every request; `apply` on text with no finding allocates nothing.
//!
//! - `detectors`: PII and secrets (regex + validator); `luhn_iban`: the checksums
//! - `injection`: prompt-injection heuristics; `resolve`: overlaps and replacement
//! - `stream`: streamed responses, delta by delta; `json_text`: the text fields of provider
//!   bodies and SSE events; `json_scan`: the same fields read from a body's bytes, for the
//!   common clean body that needs no tree

mod detectors;
mod injection;
mod json_scan;
mod json_text;
mod luhn_iban;
pub mod plugin;
mod resolve;
mod stream;

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use regex::{Regex, RegexBuilder, RegexSet, RegexSetBuilder};

use crate::checks::policy::document::GuardrailsDoc;
pub use crate::checks::policy::document::{Direction, GuardAction};
pub use json_scan::{request_is_clean, response_is_clean};
pub use json_text::{
    apply_to_request_json, apply_to_response_json, apply_to_tool_call, apply_to_tool_result, event_text,
    set_event_text, JsonOutcome,
};
pub use stream::{StreamOut, StreamScanner};

use detectors::Builtin;
use resolve::Cand;

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

/// The result of [`Guardrails::apply`].
#[derive(Debug, Clone, PartialEq)]
pub struct Applied<'a> {
    /// The text with every `redact` finding replaced by `[REDACTED:<CATEGORY>]`. `block`
    /// findings are masked too, so a caller that logs blocked text leaks nothing.
    pub text: Cow<'a, str>,
    /// Every finding (flag, redact, block), in text order, never overlapping.
    pub findings: Vec<Finding>,
    /// A `block` finding occurred: the caller refuses the request / stops the response.
    pub blocked: bool,
}

/// Compiled guardrails: immutable, `Send + Sync`, cheap to clone (one `Arc`).
#[derive(Clone)]
pub struct Guardrails {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    request: bool,
    response: bool,
    detectors: Vec<Detector>,
    /// One pattern per detector (same order): which detectors have anything to look at.
    set: Option<RegexSet>,
}

pub(crate) struct Detector {
    kind: Kind,
    category: String,
    /// `[REDACTED:<CATEGORY>]`, built once.
    marker: String,
    action: GuardAction,
}

pub(crate) enum Kind {
    Builtin(Builtin),
    Injection,
    Custom(Regex),
}

/// Bounds what one tenant's custom pattern may cost in memory.
const CUSTOM_SIZE_LIMIT: usize = 1 << 20;

impl Guardrails {
    /// Nothing active, applies to nothing.
    pub fn none() -> Guardrails {
        Guardrails { inner: Arc::new(Inner { request: false, response: false, detectors: Vec::new(), set: None }) }
    }

    /// Merges the guardrails sections of all enabled policies of a tenant: the strictest action
    /// per category wins, `applyTo` is the union, patterns are concatenated (`off` ones
    /// dropped). `Err` names the bad pattern.
    pub fn compile(docs: &[&GuardrailsDoc]) -> Result<Guardrails, String> {
        let (mut request, mut response) = (false, false);
        let mut builtin = [GuardAction::Off; 6];
        let mut injection = GuardAction::Off;
        let mut custom = Vec::new();
        for doc in docs {
            for d in &doc.apply_to {
                match d {
                    Direction::Request => request = true,
                    Direction::Response => response = true,
                }
            }
            let p = &doc.pii;
            for (slot, a) in builtin.iter_mut().zip([p.email, p.phone, p.credit_card, p.iban, p.ssn, p.secret]) {
                *slot = (*slot).max(a.unwrap_or(GuardAction::Off));
            }
            injection = injection.max(doc.prompt_injection.unwrap_or(GuardAction::Off));
            for pat in &doc.patterns {
                if pat.action != GuardAction::Off {
                    custom.push(Detector::new(Kind::Custom(custom_regex(&pat.pattern)?), &pat.category, pat.action));
                }
            }
        }
        let mut detectors: Vec<Detector> = Builtin::ALL
            .into_iter()
            .zip(builtin)
            .filter(|(_, a)| *a != GuardAction::Off)
            .map(|(b, a)| Detector::new(Kind::Builtin(b), b.category(), a))
            .collect();
        if injection != GuardAction::Off {
            detectors.push(Detector::new(Kind::Injection, "prompt_injection", injection));
        }
        detectors.extend(custom);
        let set = if detectors.is_empty() {
            None
        } else {
            let patterns: Vec<Cow<'_, str>> = detectors.iter().map(Detector::prefilter).collect();
            let set = RegexSetBuilder::new(patterns.iter().map(|p| p.as_ref()))
                .build()
                .map_err(|e| format!("guardrails patterns are too large together: {}", short(&e)))?;
            Some(set)
        };
        Ok(Guardrails { inner: Arc::new(Inner { request, response, detectors, set }) })
    }

    pub fn applies_to(&self, d: Direction) -> bool {
        match d {
            Direction::Request => self.inner.request,
            Direction::Response => self.inner.response,
        }
    }

    /// Nothing active (every category off, no pattern).
    pub fn is_empty(&self) -> bool {
        self.inner.detectors.is_empty()
    }

    /// Scans `text`: redacted text, all findings, and whether a `block` finding occurred.
    pub fn apply<'a>(&self, text: &'a str) -> Applied<'a> {
        let cands = self.inner.candidates(text, 0);
        if cands.is_empty() {
            return Applied { text: Cow::Borrowed(text), findings: Vec::new(), blocked: false };
        }
        let kept = resolve::resolve(cands, &self.inner.detectors);
        let out = resolve::render(text, 0, &kept, &self.inner.detectors);
        let (findings, blocked) = self.inner.findings(&kept, |p| p);
        Applied { text: out, findings, blocked }
    }

    /// `text` holds something a detector would report (what [`Guardrails::apply`] would find
    /// without rendering it).
    pub fn finds_anything(&self, text: &str) -> bool {
        !self.inner.candidates(text, 0).is_empty()
    }

    /// A scanner for one streamed response.
    pub fn stream(&self) -> StreamScanner {
        StreamScanner::new(self.inner.clone())
    }
}

impl Default for Guardrails {
    fn default() -> Self {
        Guardrails::none()
    }
}

impl fmt::Debug for Guardrails {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let active: Vec<(&str, GuardAction)> =
            self.inner.detectors.iter().map(|d| (d.category.as_str(), d.action)).collect();
        f.debug_struct("Guardrails")
            .field("request", &self.inner.request)
            .field("response", &self.inner.response)
            .field("active", &active)
            .finish()
    }
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

impl Detector {
    fn new(kind: Kind, category: &str, action: GuardAction) -> Detector {
        // The marker must stay one clean token whatever the policy author wrote.
        let label: String =
            category.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }).collect();
        Detector { kind, category: category.to_string(), marker: format!("[REDACTED:{label}]"), action }
    }

    fn prefilter(&self) -> Cow<'static, str> {
        match &self.kind {
            Kind::Builtin(b) => Cow::Borrowed(b.prefilter()),
            Kind::Injection => Cow::Owned(injection::prefilter()),
            Kind::Custom(re) => Cow::Owned(re.as_str().to_string()),
        }
    }
}

fn custom_regex(pattern: &str) -> Result<Regex, String> {
    let re = RegexBuilder::new(pattern)
        .size_limit(CUSTOM_SIZE_LIMIT)
        .build()
        .map_err(|e| format!("guardrails pattern `{pattern}` is not a valid regular expression: {}", short(&e)))?;
    if re.is_match("") {
        return Err(format!("guardrails pattern `{pattern}` matches empty text, so it would match everywhere"));
    }
    Ok(re)
}

/// Regex syntax errors span several lines (pattern, caret, message); the message is the last.
fn short(e: &regex::Error) -> String {
    let s = e.to_string();
    let last = s.lines().map(str::trim).rfind(|l| !l.is_empty()).unwrap_or_default();
    last.trim_start_matches("error: ").to_string()
}

#[cfg(test)]
mod tests;
