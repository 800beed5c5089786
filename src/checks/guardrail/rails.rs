//! [`Guardrails`]: a tenant's guardrails sections merged and compiled once per snapshot.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use regex::RegexSetBuilder;

use super::detector::{custom_regex, short, Detector, Kind};
use super::detectors::Builtin;
use super::resolve;
use super::scan::{Finding, Inner};
use super::stream::StreamScanner;
use crate::checks::policy::document::{Direction, GuardAction, GuardrailsDoc};

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
