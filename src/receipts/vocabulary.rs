//! The receipt's words: check names, check results and `upstreamStatus`, exactly as docs/API.md
//! §Checks writes them, and the one ranking of results.
//!
//! The request path records only these words. Receipts read back (from the database, from an
//! evidence bundle) may hold words this build does not know — written by a later version, or
//! altered — and must still re-hash to the bytes that were signed, so a stored word is a
//! [`Term`]: a known word, or the verbatim text of an unknown one (docs/decisions.md, "Checks").

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A closed list of words with fixed texts.
pub trait Word: Copy + Eq + 'static {
    fn as_str(self) -> &'static str;
    /// The word whose text is exactly `text` (case matters: `policy` but `BUDGET`).
    fn parse(text: &str) -> Option<Self>;
}

/// Every word is a metric label (`tollgate_checks_total{check,result}`).
impl<W: Word> crate::metrics::local::Label for W {
    fn label(self) -> &'static str {
        self.as_str()
    }
}

/// A text that is not a word of the list it was parsed for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownWord(pub String);

impl fmt::Display for UnknownWord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown word `{}`", self.0)
    }
}

impl std::error::Error for UnknownWord {}

/// An enum whose variants are spelled by `as_str()`, parsed back by `FromStr` and written by
/// serde as that same text.
macro_rules! words {
    ($(#[$doc:meta])* pub enum $name:ident { $($(#[$vdoc:meta])* $variant:ident => $text:literal,)+ }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vdoc])* $variant,)+
        }

        impl $name {
            /// Every word, in docs/API.md's order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }
        }

        impl Word for $name {
            fn as_str(self) -> &'static str {
                $name::as_str(self)
            }

            fn parse(text: &str) -> Option<Self> {
                match text {
                    $($text => Some($name::$variant),)+
                    _ => None,
                }
            }
        }

        impl FromStr for $name {
            type Err = UnknownWord;

            fn from_str(text: &str) -> Result<Self, UnknownWord> {
                <$name as Word>::parse(text).ok_or_else(|| UnknownWord(text.to_string()))
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }
    };
}

words! {
    /// A check's `name` (docs/API.md §Checks). The order the checks run in is `checks::ORDER`.
    pub enum CheckName {
        Policy => "policy",
        Allowlist => "ALLOWLIST",
        RateLimit => "RATELIMIT",
        Budget => "BUDGET",
        Guardrail => "GUARDRAIL",
        Cache => "CACHE",
        Upstream => "UPSTREAM",
        /// The authorization of a management call, on `admin` receipts (docs/log.md §8).
        Authz => "authz",
    }
}

words! {
    /// A check's `result` (docs/API.md §Checks; [`CheckName::results`] says which name takes which).
    pub enum CheckResult {
        Allow => "allow",
        Deny => "deny",
        Pass => "PASS",
        Block => "BLOCK",
        Redact => "REDACT",
        Hit => "HIT",
        Miss => "MISS",
        Bypass => "BYPASS",
        Fail => "FAIL",
        Timeout => "TIMEOUT",
        Skipped => "SKIPPED",
        /// `authz` let the management call through (lower case, as docs/log.md §8 writes it).
        Granted => "pass",
    }
}

words! {
    /// A receipt's `upstreamStatus`.
    pub enum UpstreamStatus {
        Ok => "ok",
        Error => "error",
        Timeout => "timeout",
        Skipped => "skipped",
    }
}

impl CheckName {
    /// The results this check records: docs/API.md's table, row by row.
    pub const fn results(self) -> &'static [CheckResult] {
        use CheckResult::*;
        match self {
            CheckName::Policy => &[Allow, Deny],
            CheckName::Allowlist | CheckName::RateLimit | CheckName::Budget => &[Pass, Block],
            CheckName::Guardrail => &[Pass, Redact, Block],
            CheckName::Cache => &[Hit, Miss, Bypass],
            CheckName::Upstream => &[Pass, Fail, Timeout, Skipped],
            CheckName::Authz => &[Granted, Deny],
        }
    }
}

/// How strongly a result speaks about a request, weakest first. The one ranking of results:
/// the answer side keeps each check's strongest, compliance reads a control by its most telling
/// check, and a receipt holding a `Stopped` result is an enforcement action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// The check did not act (`SKIPPED`).
    NotRun,
    /// Let through unchanged (`PASS`, `allow`, `HIT`, `MISS`, `BYPASS`).
    Passed,
    /// Let through changed (`REDACT`).
    Changed,
    /// The provider failed (`FAIL`, `TIMEOUT`).
    Failed,
    /// Refused (`BLOCK`, `deny`).
    Stopped,
}

impl CheckResult {
    pub const fn severity(self) -> Severity {
        match self {
            CheckResult::Skipped => Severity::NotRun,
            CheckResult::Pass
            | CheckResult::Allow
            | CheckResult::Hit
            | CheckResult::Miss
            | CheckResult::Bypass
            | CheckResult::Granted => Severity::Passed,
            CheckResult::Redact => Severity::Changed,
            CheckResult::Fail | CheckResult::Timeout => Severity::Failed,
            CheckResult::Block | CheckResult::Deny => Severity::Stopped,
        }
    }
}

impl UpstreamStatus {
    /// The `UPSTREAM` check result that goes with this status.
    pub const fn check_result(self) -> CheckResult {
        match self {
            UpstreamStatus::Ok => CheckResult::Pass,
            UpstreamStatus::Error => CheckResult::Fail,
            UpstreamStatus::Timeout => CheckResult::Timeout,
            UpstreamStatus::Skipped => CheckResult::Skipped,
        }
    }
}

/// A word as a receipt holds it: known to this build, or kept verbatim so the receipt's signed
/// bytes are written back exactly as they were read.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Term<W> {
    Known(W),
    Unknown(Box<str>),
}

impl<W: Word> Term<W> {
    pub fn parse(text: &str) -> Term<W> {
        W::parse(text).map_or_else(|| Term::Unknown(text.into()), Term::Known)
    }

    pub fn as_str(&self) -> &str {
        match self {
            Term::Known(w) => w.as_str(),
            Term::Unknown(text) => text,
        }
    }

    pub fn known(&self) -> Option<W> {
        match self {
            Term::Known(w) => Some(*w),
            Term::Unknown(_) => None,
        }
    }
}

impl Term<CheckResult> {
    /// An unknown result ranks as [`Severity::Passed`]: nothing says it stopped or changed
    /// anything, so it neither counts as enforcement nor outranks a known result.
    pub fn severity(&self) -> Severity {
        self.known().map_or(Severity::Passed, CheckResult::severity)
    }
}

impl<W: Word> PartialEq<W> for Term<W> {
    fn eq(&self, other: &W) -> bool {
        self.known() == Some(*other)
    }
}

impl<W: Word> From<W> for Term<W> {
    fn from(w: W) -> Term<W> {
        Term::Known(w)
    }
}

impl<W: Word> From<&str> for Term<W> {
    fn from(text: &str) -> Term<W> {
        Term::parse(text)
    }
}

impl<W: Word> From<String> for Term<W> {
    fn from(text: String) -> Term<W> {
        match W::parse(&text) {
            Some(w) => Term::Known(w),
            None => Term::Unknown(text.into_boxed_str()),
        }
    }
}

impl<W: Word> fmt::Display for Term<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<W: Word> Serialize for Term<W> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de, W: Word> Deserialize<'de> for Term<W> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Text<W>(std::marker::PhantomData<W>);
        impl<W: Word> serde::de::Visitor<'_> for Text<W> {
            type Value = Term<W>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Term<W>, E> {
                Ok(Term::parse(v))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Term<W>, E> {
                Ok(Term::from(v))
            }
        }
        d.deserialize_str(Text(std::marker::PhantomData))
    }
}

/// One `{name, result}` of a receipt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Check {
    /// `policy`, `ALLOWLIST`, `RATELIMIT`, `BUDGET`, `GUARDRAIL`, `CACHE`, `UPSTREAM`, ...
    #[schema(value_type = String)]
    pub name: Term<CheckName>,
    /// `PASS`, `BLOCK`, `REDACT`, `allow`, `deny`, `HIT`, `MISS`, ...
    #[schema(value_type = String)]
    pub result: Term<CheckResult>,
}

impl Check {
    pub fn new(name: CheckName, result: CheckResult) -> Check {
        Check { name: Term::Known(name), result: Term::Known(result) }
    }

    /// Both words, when this build knows them.
    pub fn known(&self) -> Option<(CheckName, CheckResult)> {
        Some((self.name.known()?, self.result.known()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/API.md §Checks, copied row by row: `| name | results |` and the `upstreamStatus` line.
    const API_MD: &str = "
| `policy` | `allow`, `deny` |
| `ALLOWLIST` | `PASS`, `BLOCK` |
| `RATELIMIT` | `PASS`, `BLOCK` |
| `BUDGET` | `PASS`, `BLOCK` |
| `GUARDRAIL` | `PASS`, `REDACT`, `BLOCK` |
| `CACHE` | `HIT`, `MISS`, `BYPASS` |
| `UPSTREAM` | `PASS`, `FAIL`, `TIMEOUT`, `SKIPPED` |
`upstreamStatus` on a receipt is `ok`, `error`, `timeout` or `skipped`.";

    fn quoted(s: &str) -> Vec<&str> {
        s.split('`').skip(1).step_by(2).collect()
    }

    #[test]
    fn the_words_are_api_md_s_table() {
        let mut rows = API_MD.lines().filter(|l| l.starts_with('|'));
        // `authz` is docs/log.md §8's, on admin receipts only: `pass` or `deny`.
        assert_eq!(CheckName::Authz.results(), [CheckResult::Granted, CheckResult::Deny]);
        for name in CheckName::ALL.iter().filter(|n| **n != CheckName::Authz) {
            let row = rows.next().unwrap();
            let cells: Vec<&str> = row.split('|').collect();
            assert_eq!(quoted(cells[1]), [name.as_str()]);
            let results: Vec<&str> = name.results().iter().map(|r| r.as_str()).collect();
            assert_eq!(quoted(cells[2]), results, "{name}");
        }
        assert!(rows.next().is_none());
        let statuses: Vec<&str> = UpstreamStatus::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(quoted(API_MD.lines().last().unwrap())[1..], statuses);
        // Every result belongs to some check, and each text parses back to its word.
        for r in CheckResult::ALL {
            assert!(CheckName::ALL.iter().any(|n| n.results().contains(r)), "{r}");
            assert_eq!(r.as_str().parse::<CheckResult>(), Ok(*r));
        }
        for n in CheckName::ALL {
            assert_eq!(n.as_str().parse::<CheckName>(), Ok(*n));
        }
        for s in UpstreamStatus::ALL {
            assert_eq!(s.as_str().parse::<UpstreamStatus>(), Ok(*s));
            assert!(CheckName::Upstream.results().contains(&s.check_result()));
        }
        assert!("Policy".parse::<CheckName>().is_err() && "Pass".parse::<CheckResult>().is_err());
    }

    #[test]
    fn one_ranking_orders_every_result() {
        use CheckResult::*;
        let ranked = [Skipped, Pass, Redact, Fail, Block];
        assert!(ranked.windows(2).all(|w| w[0].severity() < w[1].severity()));
        assert_eq!(Deny.severity(), Block.severity());
        assert_eq!(Timeout.severity(), Fail.severity());
        for r in [Allow, Hit, Miss, Bypass] {
            assert_eq!(r.severity(), Pass.severity());
        }
        assert_eq!(Term::<CheckResult>::parse("FLAG").severity(), Severity::Passed);
    }

    #[test]
    fn stored_words_round_trip_byte_for_byte() {
        let text = r#"[{"name":"UPSTREAM","result":"PASS"},{"name":"NEXT\"CHECK","result":"allow\u0000é"}]"#;
        let checks: Vec<Check> = serde_json::from_str(text).unwrap();
        assert_eq!(checks[0], Check::new(CheckName::Upstream, CheckResult::Pass));
        assert_eq!(checks[1].name, Term::Unknown("NEXT\"CHECK".into()));
        assert_eq!(checks[1].known(), None);
        assert_eq!(serde_json::to_string(&checks).unwrap(), text);
        assert!(checks[0].name == CheckName::Upstream && checks[1].name != CheckName::Upstream);
        assert_eq!(Term::<UpstreamStatus>::from("ok".to_string()), UpstreamStatus::Ok);
    }
}
