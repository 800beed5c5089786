//! Compliance packs: one framework's controls, each mapped to the receipt checks that prove it.
//!
//! A pack is YAML (`conf/packs/*.yaml` shows the shape). The baseline packs are embedded in the
//! binary; a tenant may add packs or replace a baseline pack of the same framework through the API.
//! `packHash` is SHA-256 of the exact raw bytes, so an auditor can hash the YAML they were shown.
//! The packs a tenant has in force form a [`PackSet`]; its version is what receipts are stamped with.

use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::checks::policy::validate::{find, located};
use crate::compliance::walk::CHECK_ORDER;
use crate::config::Origin;
use crate::receipts::CheckName;

/// Names a control may be proven by: the check names of docs/API.md, plus `RECEIPT` (the signed,
/// chained receipt itself) and `KEY` (a valid virtual key), which every receipt proves.
pub const RECEIPT: &str = "RECEIPT";
pub const KEY: &str = "KEY";

pub fn known_proof(name: &str) -> bool {
    name == RECEIPT || name == KEY || name.parse::<CheckName>().is_ok()
}

/// The baseline packs, embedded: (file name, raw YAML).
pub const BASELINE_FILES: [(&str, &str); 5] = [
    ("conf/packs/eu-ai-act.yaml", include_str!("../../conf/packs/eu-ai-act.yaml")),
    ("conf/packs/nist-ai-rmf.yaml", include_str!("../../conf/packs/nist-ai-rmf.yaml")),
    ("conf/packs/iso-42001.yaml", include_str!("../../conf/packs/iso-42001.yaml")),
    ("conf/packs/owasp-llm-2025.yaml", include_str!("../../conf/packs/owasp-llm-2025.yaml")),
    ("conf/packs/soc2.yaml", include_str!("../../conf/packs/soc2.yaml")),
];

const MAX_CONTROLS: usize = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(as = PackStatus)]
pub enum Status {
    Draft,
    Reviewed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Coverage {
    Enforced,
    Partial,
    External,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(as = PackSource)]
pub enum Source {
    Baseline,
    Tenant,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Baseline => "baseline",
            Source::Tenant => "tenant",
        }
    }
    pub fn parse(s: &str) -> Option<Source> {
        match s {
            "baseline" => Some(Source::Baseline),
            "tenant" => Some(Source::Tenant),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Control {
    pub id: String,
    pub title: String,
    pub coverage: Coverage,
    #[serde(default)]
    pub proven_by: Vec<String>,
    #[serde(default)]
    pub evidence: String,
    #[serde(default)]
    pub gap: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PackDoc {
    framework: String,
    version: String,
    title: String,
    status: Status,
    effective_date: String,
    disclaimer: String,
    controls: Vec<Control>,
}

/// A parsed, validated pack and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Pack {
    pub framework: String,
    pub version: String,
    pub title: String,
    pub status: Status,
    pub effective_date: String,
    pub disclaimer: String,
    pub controls: Vec<Control>,
    /// SHA-256 hex of `raw`.
    pub hash: String,
    pub source: Source,
    pub raw: Arc<str>,
}

/// How many controls a pack has, by coverage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[schema(as = PackSummaryCounts)]
pub struct Summary {
    pub enforced: usize,
    pub partial: usize,
    pub external: usize,
    pub total: usize,
}

pub fn pack_hash(raw: &str) -> String {
    hex::encode(Sha256::digest(raw.as_bytes()))
}

/// Framework ids are path segments and id prefixes: lower-case, digits, `-` and `.`.
pub fn valid_framework(s: &str) -> bool {
    let re = regex_framework();
    re.is_match(s)
}

fn regex_framework() -> &'static regex::Regex {
    static RE: OnceLock<regex::Regex> = OnceLock::new();
    RE.get_or_init(|| regex::Regex::new(r"^[a-z0-9][a-z0-9.-]{0,63}$").expect("static regex"))
}

impl Pack {
    /// Parses and validates `raw`; errors name the position as `origin` says, and the field.
    pub fn parse<'a>(raw: &str, origin: impl Into<Origin<'a>>, source: Source) -> Result<Pack, String> {
        let origin = origin.into();
        if raw.trim().is_empty() {
            return Err(origin.locate(None, "the pack is empty; expected YAML with framework, version, title, status, effectiveDate, disclaimer and controls"));
        }
        let doc: PackDoc = crate::config::parse_yaml(raw, origin).map_err(|e| e.to_string())?;
        validate(&doc, raw, origin)?;
        Ok(Pack {
            framework: doc.framework,
            version: doc.version,
            title: doc.title,
            status: doc.status,
            effective_date: doc.effective_date,
            disclaimer: doc.disclaimer,
            controls: doc.controls,
            hash: pack_hash(raw),
            source,
            raw: Arc::from(raw),
        })
    }

    pub fn summary(&self) -> Summary {
        let mut s = Summary { total: self.controls.len(), ..Summary::default() };
        for c in &self.controls {
            match c.coverage {
                Coverage::Enforced => s.enforced += 1,
                Coverage::Partial => s.partial += 1,
                Coverage::External => s.external += 1,
            }
        }
        s
    }

    /// A control by its full id (`eu-ai-act:art-12`) or by the part after the framework.
    pub fn control(&self, id: &str) -> Option<&Control> {
        self.controls
            .iter()
            .find(|c| c.id == id || c.id.strip_prefix(&self.framework).and_then(|r| r.strip_prefix(':')) == Some(id))
    }
}

fn validate(doc: &PackDoc, raw: &str, origin: Origin) -> Result<(), String> {
    let top = |field: &str, reason: &str| {
        let at = find(raw, &format!(r"(?m)^({field})\s*:"), 0);
        located(origin, at, field, reason)
    };
    if !valid_framework(&doc.framework) {
        return Err(top(
            "framework",
            "must be 1-64 characters of a-z, 0-9, `-` and `.`, starting with a letter or digit (e.g. `eu-ai-act`)",
        ));
    }
    for (field, value) in [("version", &doc.version), ("title", &doc.title), ("disclaimer", &doc.disclaimer)] {
        if value.trim().is_empty() {
            return Err(top(field, "must not be empty"));
        }
    }
    if chrono::NaiveDate::parse_from_str(&doc.effective_date, "%Y-%m-%d").is_err() {
        return Err(top("effectiveDate", "must be a date in the form YYYY-MM-DD"));
    }
    if doc.controls.is_empty() {
        return Err(top("controls", "must list at least one control"));
    }
    if doc.controls.len() > MAX_CONTROLS {
        return Err(top("controls", &format!("at most {MAX_CONTROLS} controls per pack")));
    }
    let prefix = format!("{}:", doc.framework);
    for (i, c) in doc.controls.iter().enumerate() {
        validate_control(doc, i, c, &prefix, raw, origin)?;
    }
    Ok(())
}

/// Control `i` of `doc` (`c`), whose ids must start with `prefix`.
fn validate_control(
    doc: &PackDoc,
    i: usize,
    c: &Control,
    prefix: &str,
    raw: &str,
    origin: Origin,
) -> Result<(), String> {
    // The control is located by its id: the n-th occurrence of `id: <value>`.
    let nth = doc.controls[..i].iter().filter(|o| o.id == c.id).count();
    let at = find(raw, &format!(r#"(?:^|[\s{{,-])(id\s*:\s*["']?{}["']?)"#, regex::escape(&c.id)), nth);
    let bad = |field: &str, reason: &str| located(origin, at, &format!("controls[{i}].{field}"), reason);
    let local = c.id.strip_prefix(prefix).unwrap_or("");
    if local.is_empty() || c.id.len() > 128 || c.id.chars().any(|ch| ch.is_whitespace() || ch == '/') {
        return Err(bad(
            "id",
            &format!(
                "must have the shape `{prefix}<control>` (at most 128 characters, no spaces or `/`); got `{}`",
                c.id
            ),
        ));
    }
    if let Some(first) = doc.controls[..i].iter().position(|o| o.id == c.id) {
        return Err(bad("id", &format!("duplicate control id `{}` (controls[{first}] has it too)", c.id)));
    }
    if c.title.trim().is_empty() {
        return Err(bad("title", "must not be empty"));
    }
    for (j, name) in c.proven_by.iter().enumerate() {
        if !known_proof(name) {
            return Err(bad(
                &format!("provenBy[{j}]"),
                &format!(
                    "unknown check name `{name}`; use one of {}, {RECEIPT}, {KEY}",
                    CHECK_ORDER.map(CheckName::as_str).join(", ")
                ),
            ));
        }
        if c.proven_by[..j].contains(name) {
            return Err(bad(&format!("provenBy[{j}]"), &format!("`{name}` is listed twice")));
        }
    }
    match (c.coverage, c.proven_by.is_empty()) {
        (Coverage::External, false) => {
            return Err(bad("provenBy", "must be empty for an `external` control (no receipt proves it)"))
        }
        (Coverage::Enforced | Coverage::Partial, true) => {
            return Err(bad("provenBy", "must name at least one check for an `enforced` or `partial` control"))
        }
        _ => {}
    }
    Ok(())
}

/// The embedded baseline packs, parsed once. They are tested to parse (see the tests below), so
/// a failure here is a build defect, reported on the first use.
pub fn baseline() -> &'static [Arc<Pack>] {
    static PACKS: OnceLock<Vec<Arc<Pack>>> = OnceLock::new();
    PACKS.get_or_init(|| {
        BASELINE_FILES
            .iter()
            .filter_map(|(origin, raw)| match Pack::parse(raw, origin, Source::Baseline) {
                Ok(p) => Some(Arc::new(p)),
                Err(e) => {
                    log::error!("embedded baseline pack is invalid and not in force: {e}");
                    None
                }
            })
            .collect()
    })
}

/// The baseline packs alone: the set of every tenant without packs of its own.
pub fn baseline_set() -> &'static Arc<PackSet> {
    static SET: OnceLock<Arc<PackSet>> = OnceLock::new();
    SET.get_or_init(|| Arc::new(PackSet::new(baseline().to_vec())))
}

/// The packs one tenant has in force, sorted by framework, and their version.
#[derive(Debug, Clone, PartialEq)]
pub struct PackSet {
    pub version: String,
    pub packs: Vec<Arc<Pack>>,
}

/// One member of a recorded pack set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Member {
    pub framework: String,
    pub pack_hash: String,
    pub source: String,
}

impl PackSet {
    pub fn new(mut packs: Vec<Arc<Pack>>) -> PackSet {
        packs.sort_by(|a, b| a.framework.cmp(&b.framework));
        packs.dedup_by(|later, first| later.framework == first.framework);
        PackSet { version: set_version(packs.iter().map(|p| (p.framework.as_str(), p.hash.as_str()))), packs }
    }

    /// The baseline packs with `tenant` packs in place of (or beside) them.
    pub fn with_tenant_packs(tenant: Vec<Arc<Pack>>) -> PackSet {
        let mut packs = tenant;
        for b in baseline() {
            if !packs.iter().any(|p| p.framework == b.framework) {
                packs.push(b.clone());
            }
        }
        PackSet::new(packs)
    }

    pub fn get(&self, framework: &str) -> Option<&Arc<Pack>> {
        self.packs.iter().find(|p| p.framework == framework)
    }

    pub fn members(&self) -> Vec<Member> {
        self.packs
            .iter()
            .map(|p| Member {
                framework: p.framework.clone(),
                pack_hash: p.hash.clone(),
                source: p.source.as_str().into(),
            })
            .collect()
    }

    /// `packsInForce` of the attestation and the pack list: one summary per pack.
    pub fn in_force(&self) -> Vec<PackSummary<'_>> {
        self.packs.iter().map(|p| PackSummary::of(p)).collect()
    }
}

/// A pack without its controls.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PackSummary<'a> {
    pub framework: &'a str,
    pub version: &'a str,
    pub title: &'a str,
    pub status: Status,
    pub effective_date: &'a str,
    /// SHA-256 hex of the pack's YAML.
    pub pack_hash: &'a str,
    pub source: Source,
    pub summary: Summary,
}

impl<'a> PackSummary<'a> {
    pub fn of(p: &'a Pack) -> PackSummary<'a> {
        PackSummary {
            framework: &p.framework,
            version: &p.version,
            title: &p.title,
            status: p.status,
            effective_date: &p.effective_date,
            pack_hash: &p.hash,
            source: p.source,
            summary: p.summary(),
        }
    }
}

/// `ps-` + the first 12 hex digits of SHA-256 over `framework\npackHash\n` of each member,
/// sorted by framework: the same packs always give the same version, on every instance.
pub fn set_version<'a>(members: impl Iterator<Item = (&'a str, &'a str)>) -> String {
    let mut members: Vec<(&str, &str)> = members.collect();
    members.sort();
    let mut h = Sha256::new();
    for (framework, hash) in members {
        h.update(framework.as_bytes());
        h.update(b"\n");
        h.update(hash.as_bytes());
        h.update(b"\n");
    }
    format!("ps-{}", &hex::encode(h.finalize())[..12])
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXPECTED: [(&str, usize, usize, usize); 5] = [
        ("eu-ai-act", 1, 8, 6),
        ("nist-ai-rmf", 1, 14, 3),
        ("iso-42001", 1, 7, 9),
        ("owasp-llm-2025", 1, 6, 3),
        ("soc2", 2, 5, 4),
    ];

    #[test]
    fn every_baseline_pack_parses_with_the_counts_of_the_notes() {
        assert_eq!(baseline().len(), BASELINE_FILES.len(), "a baseline pack failed to parse");
        for (origin, raw) in BASELINE_FILES {
            let p = Pack::parse(raw, origin, Source::Baseline).unwrap_or_else(|e| panic!("{e}"));
            let (_, enforced, partial, external) =
                EXPECTED.iter().find(|e| e.0 == p.framework).copied().unwrap_or_else(|| panic!("{}", p.framework));
            let s = p.summary();
            assert_eq!((s.enforced, s.partial, s.external), (enforced, partial, external), "{origin}");
            assert_eq!(s.total, p.controls.len());
            assert_eq!(p.hash, hex::encode(Sha256::digest(raw.as_bytes())), "packHash is over the raw bytes");
            assert_eq!(p.disclaimer, crate::compliance::DISCLAIMER, "{origin}: baseline disclaimer");
            for c in &p.controls {
                let (fw, local) = c.id.split_once(':').unwrap_or_else(|| panic!("{}", c.id));
                assert_eq!(fw, p.framework);
                assert!(!local.is_empty() && !local.contains(' '), "{}", c.id);
                assert!(c.proven_by.iter().all(|n| known_proof(n)), "{}", c.id);
                assert_eq!(c.coverage == Coverage::External, c.proven_by.is_empty(), "{}", c.id);
                assert!(!c.evidence.is_empty() && !c.title.is_empty(), "{}", c.id);
            }
        }
    }

    #[test]
    fn known_control_ids_of_the_notes_exist() {
        let set = baseline_set();
        for id in [
            "eu-ai-act:art-12",
            "nist-ai-rmf:MEASURE-2.4",
            "nist-ai-rmf:GOVERN-1.4",
            "iso-42001:A.6.2.8",
            "owasp-llm-2025:LLM01",
            "owasp-llm-2025:LLM10",
            "soc2:CC6.1",
        ] {
            let fw = id.split(':').next().unwrap_or_default();
            assert!(set.get(fw).and_then(|p| p.control(id)).is_some(), "{id}");
        }
    }

    const TENANT: &str = r#"framework: acme-ai
version: "3"
title: Acme AI policy
status: reviewed
effectiveDate: 2026-01-01
disclaimer: Internal mapping.
controls:
  - id: acme-ai:log
    title: Logging
    coverage: enforced
    provenBy: [RECEIPT]
  - id: acme-ai:pii
    title: No PII
    coverage: partial
    provenBy: [GUARDRAIL]
    evidence: guardrail results
    gap: heuristic
"#;

    #[test]
    fn a_tenant_pack_parses_and_joins_the_set() {
        let p = Pack::parse(TENANT, Origin::Body, Source::Tenant).unwrap();
        assert_eq!(p.summary(), Summary { enforced: 1, partial: 1, external: 0, total: 2 });
        assert_eq!(p.control("log").map(|c| c.id.as_str()), Some("acme-ai:log"));
        let set = PackSet::with_tenant_packs(vec![Arc::new(p)]);
        assert_eq!(set.packs.len(), baseline().len() + 1);
        assert_ne!(set.version, baseline_set().version);
        assert!(set.version.starts_with("ps-") && set.version.len() == 15);
        let again = PackSet::new(set.packs.iter().rev().cloned().collect());
        assert_eq!(again.version, set.version, "order does not matter");
    }

    fn err(text: &str) -> String {
        Pack::parse(text, Origin::Body, Source::Tenant).unwrap_err()
    }

    #[test]
    fn errors_name_line_column_and_field() {
        let e = err(&TENANT.replace("provenBy: [GUARDRAIL]", "provenBy: [GUARDRAILS]"));
        assert!(
            e.starts_with("line 12, column ") && e.contains("controls[1].provenBy[0]") && e.contains("GUARDRAILS"),
            "{e}"
        );
        let e = err(&TENANT.replace("id: acme-ai:pii", "id: other:pii"));
        assert!(e.starts_with("line 12, column ") && e.contains("controls[1].id"), "{e}");
        let e = err(&TENANT.replace("id: acme-ai:pii", "id: acme-ai:log"));
        assert!(e.starts_with("line 12, column ") && e.contains("duplicate"), "{e}");
        let e = err(&TENANT.replace("coverage: partial", "coverage: external"));
        assert!(e.contains("controls[1].provenBy") && e.contains("external"), "{e}");
        let e = err(&TENANT.replace("coverage: partial", "coverage: mostly"));
        assert!(e.starts_with("line 14, column ") && e.contains("controls[1].coverage"), "{e}");
        let e = err(&TENANT.replace("status: reviewed", "status: final"));
        assert!(e.starts_with("line 4, column ") && e.contains("status"), "{e}");
        let e = err(&TENANT.replace("effectiveDate: 2026-01-01", "effectiveDate: soon"));
        assert!(e.starts_with("line 5, column 1:") && e.contains("effectiveDate"), "{e}");
        let e = err(&TENANT.replace("framework: acme-ai", "framework: Acme AI"));
        assert!(e.starts_with("line 1, column 1:") && e.contains("framework"), "{e}");
        let e = err(&format!("{TENANT}owner: me\n"));
        assert!(e.contains("owner"), "{e}");
        assert!(err("  ").contains("empty"));
        assert!(err("framework: [").starts_with("line "));
    }
}
