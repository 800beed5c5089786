//! The policy language as written (docs/API.md "Policy language"): one YAML document per policy.
//!
//! These are the raw, serde-checked shapes. `deny_unknown_fields` everywhere, so a typo is a
//! 400 (or a rejected file) naming line, column and field, never a silently ignored rule.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer};

use crate::config::Glob;

/// One value or a list of values ("a list means any-of").
#[derive(Debug, Clone, PartialEq)]
pub struct OneOrMany<T>(pub Vec<T>);

impl<T> Default for OneOrMany<T> {
    fn default() -> Self {
        OneOrMany(Vec::new())
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for OneOrMany<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw<T> {
            Many(Vec<T>),
            One(T),
        }
        // Untagged enums lose the inner error; name what is expected instead.
        match Raw::<T>::deserialize(d) {
            Ok(Raw::Many(v)) => Ok(OneOrMany(v)),
            Ok(Raw::One(v)) => Ok(OneOrMany(vec![v])),
            Err(_) => Err(serde::de::Error::custom("expected a value or a list of values of the right kind")),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyDoc {
    /// File policies only (`conf/policies/`): the tenant (id or name) it applies to; absent =
    /// every tenant. Rejected on policies created through the API (they belong to the caller).
    #[serde(default)]
    pub tenant: Option<String>,
    #[serde(default)]
    pub rules: Vec<RuleDoc>,
    #[serde(default)]
    pub guardrails: Option<GuardrailsDoc>,
    #[serde(default)]
    pub allowlist: Option<AllowlistDoc>,
    #[serde(default)]
    pub cache: Option<CacheDoc>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleDoc {
    pub id: String,
    #[serde(default, rename = "match")]
    pub matches: MatchDoc,
    pub action: RuleAction,
    #[serde(default)]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuleAction {
    Allow,
    Deny,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KindDoc {
    ModelCall,
    ToolCall,
}

/// All listed conditions must hold; a list means any-of; strings take `*` globs.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MatchDoc {
    #[serde(default)]
    pub model: OneOrMany<Glob>,
    #[serde(default)]
    pub provider: OneOrMany<Glob>,
    #[serde(default)]
    pub kind: OneOrMany<KindDoc>,
    #[serde(default)]
    pub tool: OneOrMany<Glob>,
    #[serde(default)]
    pub key_class: OneOrMany<Glob>,
    #[serde(default)]
    pub role: OneOrMany<Glob>,
    /// Team name or id of the calling key.
    #[serde(default)]
    pub team: OneOrMany<Glob>,
    /// The request's `max_tokens` / `max_completion_tokens` is above this.
    #[serde(default)]
    pub max_tokens_above: Option<u64>,
    /// The request's estimated prompt tokens are above this.
    #[serde(default)]
    pub prompt_tokens_above: Option<u64>,
    /// UTC time window, e.g. `{days: [sat, sun]}` or `{hours: "22:00-06:00"}`.
    #[serde(default)]
    pub time: Option<TimeDoc>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimeDoc {
    #[serde(default)]
    pub days: Vec<Weekday>,
    /// `HH:MM-HH:MM` in UTC; a window may wrap midnight.
    #[serde(default, deserialize_with = "hours_window")]
    pub hours: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Weekday {
    Mon,
    Tue,
    Wed,
    Thu,
    Fri,
    Sat,
    Sun,
}

/// Strictness order matters: the strictest action per category wins across policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GuardAction {
    Off,
    Flag,
    Redact,
    Block,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    Request,
    Response,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GuardrailsDoc {
    #[serde(default = "both_directions")]
    pub apply_to: Vec<Direction>,
    #[serde(default)]
    pub pii: PiiDoc,
    #[serde(default)]
    pub prompt_injection: Option<GuardAction>,
    #[serde(default)]
    pub patterns: Vec<PatternDoc>,
}

fn both_directions() -> Vec<Direction> {
    vec![Direction::Request, Direction::Response]
}

/// `off | redact | block` per PII category (`flag` records an event without changing text).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PiiDoc {
    pub email: Option<GuardAction>,
    pub phone: Option<GuardAction>,
    pub credit_card: Option<GuardAction>,
    pub iban: Option<GuardAction>,
    pub ssn: Option<GuardAction>,
    pub secret: Option<GuardAction>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PatternDoc {
    /// A Rust `regex`; checked while parsing so the error names its line and column.
    #[serde(deserialize_with = "regex_pattern")]
    pub pattern: String,
    pub action: GuardAction,
    #[serde(default = "custom_category")]
    pub category: String,
}

// Checks that serde cannot express are done inside deserialization, so their errors carry
// the value's line, column and field path like every other error.
fn regex_pattern<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    match regex::Regex::new(&s) {
        Ok(_) => Ok(s),
        Err(e) => {
            let detail = e.to_string();
            // regex errors span several lines (the pattern, a caret, the reason): keep the reason.
            let reason = detail.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("invalid").trim();
            let reason = reason.trim_start_matches("error: ");
            Err(serde::de::Error::custom(format!("not a valid regular expression: {reason}")))
        }
    }
}

fn hours_window<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let s = String::deserialize(d)?;
    parse_hours(&s).map_err(serde::de::Error::custom)?;
    Ok(Some(s))
}

/// `HH:MM-HH:MM` → (start, end) in minutes after midnight UTC, end exclusive (`24:00` = 1440).
/// `end` may be before `start` (the window wraps midnight); equal ends are rejected as ambiguous.
pub fn parse_hours(s: &str) -> Result<(u16, u16), String> {
    let bad = || format!("`{s}` is not a time window: write HH:MM-HH:MM in UTC, e.g. 22:00-06:00");
    let (a, b) = s.trim().split_once('-').ok_or_else(bad)?;
    let minute = |t: &str| -> Option<u16> {
        let (h, m) = t.trim().split_once(':')?;
        if h.len() != 2 || m.len() != 2 {
            return None;
        }
        let (h, m) = (h.parse::<u16>().ok()?, m.parse::<u16>().ok()?);
        // 24:00 is accepted as the end of the day.
        ((h < 24 && m < 60) || (h == 24 && m == 0)).then_some(h * 60 + m)
    };
    let (start, end) = (minute(a).ok_or_else(bad)?, minute(b).ok_or_else(bad)?);
    if start == end || start == 1440 {
        return Err(format!("`{s}` is not a time window: start and end must differ and start must be before 24:00"));
    }
    Ok((start, end))
}

fn custom_category() -> String {
    "custom".into()
}

/// When present, only these pass. Absent lists do not restrict.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllowlistDoc {
    pub models: Option<Vec<Glob>>,
    pub providers: Option<Vec<Glob>>,
    pub tools: Option<Vec<Glob>>,
    /// Anthropic beta features (`anthropic-beta` header values) a request may ask for.
    pub betas: Option<Vec<Glob>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheMode {
    Off,
    Exact,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CacheDoc {
    pub mode: CacheMode,
    #[serde(default = "default_ttl")]
    pub ttl_seconds: u64,
}

fn default_ttl() -> u64 {
    300
}

/// Parses one policy document; errors name the position as `origin` says and the field path.
pub fn parse<'a>(text: &str, origin: impl Into<crate::config::Origin<'a>>) -> Result<PolicyDoc, String> {
    if text.trim().is_empty() {
        return Ok(PolicyDoc::default());
    }
    crate::config::parse_yaml::<PolicyDoc>(text, origin).map_err(|e| e.to_string())
}

/// PII settings by category name, for code that walks them generically.
impl PiiDoc {
    pub fn entries(&self) -> BTreeMap<&'static str, GuardAction> {
        let mut m = BTreeMap::new();
        for (name, v) in [
            ("email", self.email),
            ("phone", self.phone),
            ("credit_card", self.credit_card),
            ("iban", self.iban),
            ("ssn", self.ssn),
            ("secret", self.secret),
        ] {
            if let Some(a) = v {
                m.insert(name, a);
            }
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
rules:
  - id: big-models-need-approval
    match:
      model: ["gpt-4*", "o1*"]
      provider: [openai]
      kind: model_call
      tool: ["shell.*"]
      keyClass: [interactive]
      role: [developer]
      maxTokensAbove: 4000
    action: deny
    reason: "Large models need approval"
guardrails:
  applyTo: [request, response]
  pii:
    email: redact
    phone: redact
    credit_card: block
    iban: redact
    ssn: block
    secret: block
  promptInjection: block
  patterns:
    - {pattern: "(?i)project\\s+nightingale", action: block, category: confidential}
allowlist:
  models: ["gpt-4o-mini", "claude-*"]
  providers: [openai, anthropic]
  tools: ["search", "calculator"]
cache:
  mode: exact
  ttlSeconds: 600
"#;

    #[test]
    fn the_contract_example_parses() {
        let p = parse(EXAMPLE, "example.yaml").unwrap();
        assert_eq!(p.rules.len(), 1);
        let r = &p.rules[0];
        assert_eq!(r.action, RuleAction::Deny);
        assert_eq!(r.matches.model.0.len(), 2);
        assert_eq!(r.matches.kind.0, vec![KindDoc::ModelCall]);
        assert_eq!(r.matches.max_tokens_above, Some(4000));
        let g = p.guardrails.unwrap();
        assert_eq!(g.pii.credit_card, Some(GuardAction::Block));
        assert_eq!(g.prompt_injection, Some(GuardAction::Block));
        assert_eq!(g.patterns[0].category, "confidential");
        assert_eq!(p.allowlist.unwrap().tools.unwrap().len(), 2);
        assert_eq!(p.cache.unwrap(), CacheDoc { mode: CacheMode::Exact, ttl_seconds: 600 });
    }

    #[test]
    fn errors_name_line_column_and_field() {
        let e = parse("rules:\n  - id: x\n    action: maybe\n", "p.yaml").unwrap_err();
        assert!(e.starts_with("p.yaml:3:") && e.contains("rules[0].action"), "{e}");
        let e = parse("guardrails:\n  pii:\n    emali: redact\n", "p.yaml").unwrap_err();
        assert!(e.contains("p.yaml:3:") && e.contains("emali"), "{e}");
        let e = parse("rules: [\n", "p.yaml").unwrap_err();
        assert!(e.starts_with("p.yaml:"), "{e}");
    }
}
