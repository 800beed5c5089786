//! A tenant's policies merged into one immutable [`TenantPolicy`], held in the snapshot.
//!
//! Merge rules (docs/API.md "Policy language"): any matching `deny` wins, no match allows;
//! allowlists intersect; guardrail sections are kept raw for the guardrails engine (strictest
//! action per category wins there); exact caching is on when some policy asks for it and none
//! turns it off, with the smallest TTL.

use foldhash::{HashMap, HashMapExt};
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::allowlist::Allowlist;
use super::document::{CacheMode, GuardrailsDoc, PolicyDoc, RuleAction};
use super::facts::Facts;
use super::rules::Rule;
use crate::store::tenants::Tenant;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Deny { rule_id: String, reason: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheSettings {
    pub ttl: Duration,
}

/// One policy (an API row or a file), parsed, validated and with its rules compiled.
#[derive(Debug)]
pub struct CompiledPolicy {
    source_id: String,
    yaml: String,
    doc: PolicyDoc,
    rules: Vec<Rule>,
}

impl CompiledPolicy {
    /// `source_id` is the API policy id or `file:<file name>`; `doc` is `yaml` already
    /// parsed and validated (`validate::parse_api` / `parse_file`).
    pub fn compile(source_id: impl Into<String>, yaml: &str, doc: PolicyDoc) -> Result<CompiledPolicy, String> {
        let rules = doc.rules.iter().map(Rule::compile).collect::<Result<_, _>>()?;
        Ok(CompiledPolicy { source_id: source_id.into(), yaml: yaml.to_string(), doc, rules })
    }

    pub fn source_id(&self) -> &str {
        &self.source_id
    }

    pub fn yaml(&self) -> &str {
        &self.yaml
    }

    pub fn doc(&self) -> &PolicyDoc {
        &self.doc
    }

    /// File policies: no `tenant` applies to every tenant, otherwise to the one named (id or name).
    pub fn applies_to(&self, tenant_id: &str, tenant_name: &str) -> bool {
        match self.doc.tenant.as_deref() {
            None => true,
            Some(t) => t == tenant_id || t == tenant_name,
        }
    }
}

#[derive(Debug)]
pub struct TenantPolicy {
    id: String,
    sources: Vec<Arc<CompiledPolicy>>,
    allowlist: Allowlist,
    guardrails: Vec<GuardrailsDoc>,
    /// The guardrail sections merged and compiled once (None when none is active).
    rails: Option<Arc<crate::checks::guardrail::Guardrails>>,
    cache: Option<CacheSettings>,
}

impl TenantPolicy {
    pub fn empty() -> TenantPolicy {
        TenantPolicy::merge(Vec::new())
    }

    /// Merges policies in evaluation order (API policies by creation, then files by name).
    pub fn merge(sources: Vec<Arc<CompiledPolicy>>) -> TenantPolicy {
        let mut allowlist = Allowlist::default();
        let mut guardrails = Vec::new();
        let (mut exact_ttl, mut cache_off) = (None::<u64>, false);
        let mut h = Sha256::new();
        for p in &sources {
            h.update(p.source_id.as_bytes());
            h.update([0]);
            h.update(p.yaml.as_bytes());
            h.update([0]);
            if let Some(a) = &p.doc.allowlist {
                allowlist.add(a);
            }
            if let Some(g) = &p.doc.guardrails {
                guardrails.push(g.clone());
            }
            match &p.doc.cache {
                Some(c) if c.mode == CacheMode::Exact => {
                    exact_ttl = Some(exact_ttl.map_or(c.ttl_seconds, |t| t.min(c.ttl_seconds)))
                }
                Some(_) => cache_off = true,
                None => {}
            }
        }
        let id = if sources.is_empty() { "none".to_string() } else { hex::encode(&h.finalize()[..6]) };
        let cache = match exact_ttl {
            Some(ttl) if !cache_off => Some(CacheSettings { ttl: Duration::from_secs(ttl) }),
            _ => None,
        };
        let rails = if guardrails.is_empty() {
            None
        } else {
            let docs: Vec<&GuardrailsDoc> = guardrails.iter().collect();
            match crate::checks::guardrail::Guardrails::compile(&docs) {
                Ok(g) if g.is_empty() => None,
                Ok(g) => Some(Arc::new(g)),
                Err(e) => {
                    // Patterns are checked when a policy is accepted, so this is a bug, not input.
                    log::error!("policy set {id}: guardrails could not be compiled: {e}");
                    None
                }
            }
        };
        TenantPolicy { id, sources, allowlist, guardrails, rails, cache }
    }

    /// Whether the `policy` check applies (some policy has rules).
    pub fn has_rules(&self) -> bool {
        self.sources.iter().any(|p| !p.rules.is_empty())
    }

    /// Any matching deny wins; no matching deny allows.
    pub fn evaluate(&self, f: &Facts) -> Decision {
        let deny = self.sources.iter().flat_map(|p| &p.rules).find(|r| r.action == RuleAction::Deny && r.matches(f));
        match deny {
            Some(r) => Decision::Deny {
                rule_id: r.id.clone(),
                reason: r.reason.clone().unwrap_or_else(|| format!("denied by policy rule `{}`", r.id)),
            },
            None => Decision::Allow,
        }
    }

    pub fn has_allowlist(&self) -> bool {
        !self.allowlist.is_empty()
    }

    /// Why the request is outside the tenant's allowlist (e.g. "model `o1` is not in the
    /// tenant's allowlist"), or None when it passes.
    pub fn allowlist_violation(&self, f: &Facts) -> Option<String> {
        self.allowlist.violation(f)
    }

    /// The tenant's guardrails, merged (strictest per category) and compiled.
    pub fn guardrails(&self) -> Option<&Arc<crate::checks::guardrail::Guardrails>> {
        self.rails.as_ref()
    }

    /// Raw guardrail sections in policy order, for the guardrails engine to merge.
    pub fn guardrail_docs(&self) -> &[GuardrailsDoc] {
        &self.guardrails
    }

    /// Some when exact-match caching is on.
    pub fn cache(&self) -> Option<CacheSettings> {
        self.cache
    }

    /// A short hash of the merged sources ("none" when there are none), for logs and status.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Ids of the merged policies (API ids, `file:<name>`), in evaluation order.
    pub fn sources(&self) -> impl Iterator<Item = &str> {
        self.sources.iter().map(|p| p.source_id.as_str())
    }
}

/// Every tenant's merged policy: its enabled API policies (`api`, by tenant id, in creation
/// order) then the file policies that apply to it. Tenants with none get no entry. Tenants with
/// the same sources share one `Arc` (file policies for all tenants are the common case).
///
/// A merged policy of `previous` (the snapshot being replaced) whose sources are the very same
/// compiled policies is reused as it is. Merging compiles the guardrails (a `RegexSet` of every
/// detector): ~12 M instructions for the load benchmark's policy, which the snapshot refresh
/// paid every 2 s for every tenant with guardrails, and each time the requests' regex caches
/// started cold. Pointer identity is sound here: `previous` holds its sources, so an address
/// seen in it cannot belong to another policy.
pub fn build_all(
    tenants: &[Tenant],
    api: &HashMap<String, Vec<Arc<CompiledPolicy>>>,
    files: &[Arc<CompiledPolicy>],
    previous: &HashMap<String, Arc<TenantPolicy>>,
) -> HashMap<String, Arc<TenantPolicy>> {
    let mut out = HashMap::new();
    let mut shared: HashMap<Vec<*const CompiledPolicy>, Arc<TenantPolicy>> =
        previous.values().map(|p| (p.sources.iter().map(Arc::as_ptr).collect(), p.clone())).collect();
    for t in tenants {
        let mut sources: Vec<Arc<CompiledPolicy>> = api.get(&t.id).cloned().unwrap_or_default();
        sources.extend(files.iter().filter(|f| f.applies_to(&t.id, &t.name)).cloned());
        if sources.is_empty() {
            continue;
        }
        let identity: Vec<*const CompiledPolicy> = sources.iter().map(Arc::as_ptr).collect();
        let merged = shared.entry(identity).or_insert_with(|| Arc::new(TenantPolicy::merge(sources))).clone();
        out.insert(t.id.clone(), merged);
    }
    out
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;
    use crate::checks::policy::validate;
    use crate::receipts::Kind;

    fn policy(id: &str, yaml: &str) -> Arc<CompiledPolicy> {
        let doc = validate::parse_file(yaml, id).unwrap();
        Arc::new(CompiledPolicy::compile(id, yaml, doc).unwrap())
    }

    fn tp(yamls: &[&str]) -> TenantPolicy {
        TenantPolicy::merge(yamls.iter().enumerate().map(|(i, y)| policy(&format!("p{i}"), y)).collect())
    }

    /// A model call at Wednesday 2025-01-15 12:00 UTC.
    fn facts() -> Facts<'static> {
        Facts {
            kind: Kind::ModelCall,
            model: "gpt-4o",
            provider: "openai",
            tool: None,
            betas: &[],
            key_class: "interactive",
            role: "developer",
            team_id: Some("team-1"),
            team_name: Some("research"),
            max_tokens: Some(1000),
            prompt_tokens: 50,
            now: chrono::Utc.with_ymd_and_hms(2025, 1, 15, 12, 0, 0).unwrap(),
        }
    }

    fn at(h: u32, m: u32, day: u32) -> chrono::DateTime<chrono::Utc> {
        // 2025-01-13 is a Monday.
        chrono::Utc.with_ymd_and_hms(2025, 1, 13 + day, h, m, 0).unwrap()
    }

    fn rule(m: &str) -> TenantPolicy {
        tp(&[&format!("rules:\n  - id: r\n    match: {m}\n    action: deny\n    reason: nope\n")])
    }

    fn denied(p: &TenantPolicy, f: &Facts) -> bool {
        matches!(p.evaluate(f), Decision::Deny { .. })
    }

    #[test]
    fn every_condition_matches_and_mismatches() {
        let f = facts();
        let cases: &[(&str, bool)] = &[
            ("{}", true),
            ("{model: \"gpt-4*\"}", true),
            ("{model: [\"o1*\", \"gpt-4?\"]}", false),
            ("{model: [\"o1*\", \"*-4o\"]}", true),
            ("{model: claude-*}", false),
            ("{provider: [anthropic, openai]}", true),
            ("{provider: anthropic}", false),
            ("{kind: model_call}", true),
            ("{kind: [tool_call]}", false),
            ("{tool: \"*\"}", false),
            ("{keyClass: [service, interactive]}", true),
            ("{keyClass: agent}", false),
            ("{role: dev*}", true),
            ("{role: manager}", false),
            ("{team: research}", true),
            ("{team: team-1}", true),
            ("{team: [ops, \"team-9\"]}", false),
            ("{maxTokensAbove: 999}", true),
            ("{maxTokensAbove: 1000}", false),
            ("{promptTokensAbove: 49}", true),
            ("{promptTokensAbove: 50}", false),
            ("{model: \"gpt-*\", provider: openai, role: developer}", true),
            ("{model: \"gpt-*\", provider: openai, role: manager}", false),
        ];
        for (m, want) in cases {
            assert_eq!(denied(&rule(m), &f), *want, "match {m}");
        }
        // No max_tokens in the request: never above a threshold.
        let f2 = Facts { max_tokens: None, team_id: None, team_name: None, ..facts() };
        assert!(!denied(&rule("{maxTokensAbove: 0}"), &f2));
        assert!(!denied(&rule("{team: \"*\"}"), &f2));
    }

    #[test]
    fn tool_rules_match_tool_calls_only() {
        let p = rule("{tool: [\"shell.*\"]}");
        assert!(!denied(&p, &facts()));
        let t =
            Facts { kind: Kind::ToolCall, model: "shell.exec", provider: "fs", tool: Some("shell.exec"), ..facts() };
        assert!(denied(&p, &t));
        assert!(!denied(&p, &Facts { tool: Some("search"), ..t.clone() }));
        assert!(denied(&rule("{kind: tool_call, provider: fs}"), &t));
    }

    #[test]
    fn time_windows_and_days() {
        let night = rule("{time: {hours: \"22:00-06:00\"}}");
        for (h, m, want) in
            [(22, 0, true), (23, 59, true), (0, 0, true), (5, 59, true), (6, 0, false), (12, 0, false), (21, 59, false)]
        {
            assert_eq!(denied(&night, &Facts { now: at(h, m, 2), ..facts() }), want, "{h}:{m}");
        }
        let office = rule("{time: {hours: \"09:00-17:30\"}}");
        for (h, m, want) in [(8, 59, false), (9, 0, true), (17, 29, true), (17, 30, false)] {
            assert_eq!(denied(&office, &Facts { now: at(h, m, 0), ..facts() }), want, "{h}:{m}");
        }
        let weekend = rule("{time: {days: [sat, sun]}}");
        assert!(denied(&weekend, &Facts { now: at(12, 0, 5), ..facts() }));
        assert!(denied(&weekend, &Facts { now: at(12, 0, 6), ..facts() }));
        assert!(!denied(&weekend, &Facts { now: at(12, 0, 4), ..facts() }));
        let both = rule("{time: {days: [fri], hours: \"22:00-24:00\"}}");
        assert!(denied(&both, &Facts { now: at(23, 0, 4), ..facts() }));
        assert!(!denied(&both, &Facts { now: at(21, 0, 4), ..facts() }));
        assert!(!denied(&both, &Facts { now: at(23, 0, 3), ..facts() }));
    }

    #[test]
    fn a_deny_anywhere_wins_over_allows() {
        let p = tp(&[
            "rules:\n  - {id: ok, match: {model: \"gpt-*\"}, action: allow}\n",
            "rules:\n  - {id: other, match: {model: \"claude-*\"}, action: deny}\n",
            "rules:\n  - {id: big, match: {model: \"gpt-4*\"}, action: deny, reason: \"Large models need approval\"}\n",
        ]);
        assert!(p.has_rules());
        assert_eq!(
            p.evaluate(&facts()),
            Decision::Deny { rule_id: "big".into(), reason: "Large models need approval".into() }
        );
        assert_eq!(p.evaluate(&Facts { model: "gpt-3.5-turbo", ..facts() }), Decision::Allow);
        let p = tp(&["rules:\n  - {id: x, action: deny}\n"]);
        assert_eq!(
            p.evaluate(&facts()),
            Decision::Deny { rule_id: "x".into(), reason: "denied by policy rule `x`".into() }
        );
        let empty = TenantPolicy::empty();
        assert!(!empty.has_rules() && !empty.has_allowlist());
        assert_eq!(empty.evaluate(&facts()), Decision::Allow);
        assert_eq!(empty.id(), "none");
        assert!(!tp(&["cache: {mode: exact}\n"]).has_rules());
    }

    #[test]
    fn allowlists_intersect() {
        let p = tp(&[
            "allowlist:\n  models: [\"gpt-*\", \"claude-*\"]\n  providers: [openai, anthropic]\n",
            "allowlist:\n  models: [\"gpt-4o*\", \"claude-3-5-*\"]\n  tools: [search]\n",
            "rules: []\n",
        ]);
        assert!(p.has_allowlist());
        assert_eq!(p.allowlist_violation(&facts()), None);
        assert_eq!(p.allowlist_violation(&Facts { model: "gpt-4o-mini", ..facts() }), None);
        // Passes the first policy's list, not the second's.
        assert_eq!(
            p.allowlist_violation(&Facts { model: "gpt-3.5-turbo", ..facts() }).as_deref(),
            Some("model `gpt-3.5-turbo` is not in the tenant's allowlist")
        );
        assert_eq!(
            p.allowlist_violation(&Facts { model: "o1", ..facts() }).as_deref(),
            Some("model `o1` is not in the tenant's allowlist")
        );
        assert_eq!(
            p.allowlist_violation(&Facts { provider: "bedrock", ..facts() }).as_deref(),
            Some("provider `bedrock` is not in the tenant's allowlist")
        );
        let tool = Facts { kind: Kind::ToolCall, model: "search", provider: "mcp1", tool: Some("search"), ..facts() };
        assert_eq!(p.allowlist_violation(&tool), None, "tool calls are not held to the providers list");
        assert_eq!(
            p.allowlist_violation(&Facts { tool: Some("shell"), model: "shell", ..tool }).as_deref(),
            Some("tool `shell` is not in the tenant's allowlist")
        );
        // No policy lists tools: any tool passes.
        let models_only = tp(&["allowlist: {models: [\"gpt-*\"]}\n"]);
        let t = Facts { kind: Kind::ToolCall, model: "x", provider: "y", tool: Some("x"), ..facts() };
        assert_eq!(models_only.allowlist_violation(&t), None);
        assert!(!tp(&["allowlist: {}\n"]).has_allowlist());
    }

    #[test]
    fn cache_merges_to_the_smallest_ttl_unless_turned_off() {
        assert_eq!(tp(&["rules: []\n"]).cache(), None);
        assert_eq!(tp(&["cache: {mode: exact}\n"]).cache(), Some(CacheSettings { ttl: Duration::from_secs(300) }));
        let p =
            tp(&["cache: {mode: exact, ttlSeconds: 600}\n", "cache: {mode: exact, ttlSeconds: 60}\n", "rules: []\n"]);
        assert_eq!(p.cache(), Some(CacheSettings { ttl: Duration::from_secs(60) }));
        assert_eq!(tp(&["cache: {mode: exact, ttlSeconds: 600}\n", "cache: {mode: off}\n"]).cache(), None);
    }

    #[test]
    fn guardrail_sections_are_kept_in_order_and_ids_follow_sources() {
        let a = "guardrails:\n  pii: {email: redact}\n";
        let b = "guardrails:\n  pii: {email: block}\n  promptInjection: flag\n";
        let p = tp(&[a, "rules: []\n", b]);
        assert_eq!(p.guardrail_docs().len(), 2);
        assert_eq!(p.guardrail_docs()[1].prompt_injection, Some(crate::checks::policy::document::GuardAction::Flag));
        assert_eq!(p.id().len(), 12);
        assert_eq!(p.id(), tp(&[a, "rules: []\n", b]).id());
        assert_ne!(p.id(), tp(&[a, b]).id());
        assert_eq!(p.sources().collect::<Vec<_>>(), ["p0", "p1", "p2"]);
    }

    #[test]
    fn file_policies_apply_by_tenant_id_or_name_and_are_shared() {
        let all = policy("file:all.yaml", "rules: []\n");
        let acme = policy("file:acme.yaml", "tenant: acme\nrules: []\n");
        let by_id = policy("file:t2.yaml", "tenant: t2\nrules: []\n");
        let tenants = [
            Tenant { id: "t1".into(), name: "acme".into() },
            Tenant { id: "t2".into(), name: "beta".into() },
            Tenant { id: "t3".into(), name: "gamma".into() },
        ];
        let mut api = HashMap::new();
        api.insert("t3".to_string(), vec![policy("api-1", "rules: []\n")]);
        let none = HashMap::new();
        let m = build_all(&tenants, &api, &[all.clone(), acme, by_id], &none);
        assert_eq!(m["t1"].sources().collect::<Vec<_>>(), ["file:all.yaml", "file:acme.yaml"]);
        assert_eq!(m["t2"].sources().collect::<Vec<_>>(), ["file:all.yaml", "file:t2.yaml"]);
        assert_eq!(m["t3"].sources().collect::<Vec<_>>(), ["api-1", "file:all.yaml"]);
        let only_all = build_all(&tenants[1..], &HashMap::new(), std::slice::from_ref(&all), &none);
        assert!(Arc::ptr_eq(&only_all["t2"], &only_all["t3"]), "same sources share one merged policy");
        assert!(build_all(&tenants, &HashMap::new(), &[], &none).is_empty());

        // The next rebuild reuses what did not change, and merges anew what did.
        let again =
            build_all(&tenants, &api, &[all.clone(), m["t1"].sources[1].clone(), m["t2"].sources[1].clone()], &m);
        for t in ["t1", "t2", "t3"] {
            assert!(Arc::ptr_eq(&again[t], &m[t]), "{t}: same sources, the same merged policy");
        }
        let edited = policy("file:acme.yaml", "tenant: acme\nrules: []\n");
        let after_edit = build_all(&tenants, &api, &[all, edited, m["t2"].sources[1].clone()], &m);
        assert!(!Arc::ptr_eq(&after_edit["t1"], &m["t1"]), "a source compiled anew: merged anew");
        assert!(Arc::ptr_eq(&after_edit["t2"], &m["t2"]));
    }
}

#[cfg(test)]
mod beta_tests {
    use super::*;
    use crate::checks::policy::validate;

    #[test]
    fn an_allowlist_of_betas_refuses_any_other_beta_and_nothing_else() {
        let yaml = "allowlist:\n  betas: [\"token-counting-*\"]\n";
        let doc = validate::parse_api(yaml).unwrap();
        let p = TenantPolicy::merge(vec![Arc::new(CompiledPolicy::compile("t", yaml, doc).unwrap())]);
        let f = |betas: &'static [String]| Facts {
            kind: crate::receipts::Kind::ModelCall,
            model: "claude-haiku-4-5",
            provider: "anthropic",
            tool: None,
            betas,
            key_class: "interactive",
            role: "developer",
            team_id: None,
            team_name: None,
            max_tokens: None,
            prompt_tokens: 0,
            now: chrono::Utc::now(),
        };
        assert_eq!(p.allowlist_violation(&f(&[])), None, "no beta asked: no refusal, any model");
        let ok: &'static [String] = Box::leak(Box::new(["token-counting-2024-11-01".to_string()]));
        assert_eq!(p.allowlist_violation(&f(ok)), None);
        let bad: &'static [String] =
            Box::leak(Box::new(["token-counting-2024-11-01".to_string(), "computer-use-2025-01-24".to_string()]));
        assert!(p.allowlist_violation(&f(bad)).unwrap().contains("computer-use-2025-01-24"));
    }
}
