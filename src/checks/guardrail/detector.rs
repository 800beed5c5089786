//! One active detector of a tenant's merged guardrails: what it looks for, under which
//! category, and what it does on a match.

use std::borrow::Cow;

use regex::{Regex, RegexBuilder};

use super::detectors::Builtin;
use super::injection;
use crate::checks::policy::document::GuardAction;

pub(crate) struct Detector {
    pub(super) kind: Kind,
    pub(super) category: String,
    /// `[REDACTED:<CATEGORY>]`, built once.
    pub(super) marker: String,
    pub(super) action: GuardAction,
}

pub(crate) enum Kind {
    Builtin(Builtin),
    Injection,
    Custom(Regex),
}

/// Bounds what one tenant's custom pattern may cost in memory.
const CUSTOM_SIZE_LIMIT: usize = 1 << 20;

impl Detector {
    pub(super) fn new(kind: Kind, category: &str, action: GuardAction) -> Detector {
        // The marker must stay one clean token whatever the policy author wrote.
        let label: String =
            category.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }).collect();
        Detector { kind, category: category.to_string(), marker: format!("[REDACTED:{label}]"), action }
    }

    pub(super) fn prefilter(&self) -> Cow<'static, str> {
        match &self.kind {
            Kind::Builtin(b) => Cow::Borrowed(b.prefilter()),
            Kind::Injection => Cow::Owned(injection::prefilter()),
            Kind::Custom(re) => Cow::Owned(re.as_str().to_string()),
        }
    }
}

pub(super) fn custom_regex(pattern: &str) -> Result<Regex, String> {
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
pub(super) fn short(e: &regex::Error) -> String {
    let s = e.to_string();
    let last = s.lines().map(str::trim).rfind(|l| !l.is_empty()).unwrap_or_default();
    last.trim_start_matches("error: ").to_string()
}
