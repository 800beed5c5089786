//! `policy`: the tenant's rules (docs/API.md "Policy language"): any matching `deny` wins.

use crate::checks::pipeline::{Check, Ctx, Exchange, Verdict};
use crate::checks::policy::{Decision, Facts};
use crate::error::{ApiError, ErrorKind};
use crate::receipts::{CheckName, CheckResult};

pub struct Policy;

/// What the rules and allowlists match on, read off the exchange.
pub fn facts(ex: &Exchange) -> Facts<'_> {
    let team_id = ex.team_id();
    Facts {
        kind: ex.kind,
        model: &ex.model,
        provider: &ex.provider,
        tool: ex.tool.as_deref(),
        betas: &ex.betas,
        key_class: &ex.key.record.key_class,
        role: &ex.key.record.role,
        team_id,
        team_name: team_id.and_then(|t| ex.snap.teams.get(t)).map(String::as_str),
        max_tokens: ex.max_tokens,
        prompt_tokens: ex.prompt_tokens_est,
        now: ex.now,
    }
}

impl Check for Policy {
    fn name(&self) -> CheckName {
        CheckName::Policy
    }

    /// Applies when an enabled policy of the tenant has rules: `allow`, or `deny` with 403.
    fn on_request(&self, ex: &mut Exchange, _cx: &mut Ctx) -> Verdict {
        let policy = ex.snap.policy(ex.tenant_id());
        if !policy.has_rules() {
            return Verdict::Skip;
        }
        match policy.evaluate(&facts(ex)) {
            Decision::Allow => Verdict::Pass(CheckResult::Allow),
            Decision::Deny { rule_id, reason } => {
                let why = if reason.is_empty() { String::new() } else { format!(": {reason}") };
                Verdict::Block(
                    CheckResult::Deny,
                    ApiError::new(ErrorKind::PolicyDenied, format!("denied by policy rule `{rule_id}`{why}")),
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::allowlist::Allowlist;
    use crate::checks::fixtures::exchange;
    use serde_json::json;

    #[test]
    fn deny_rules_and_allowlists() {
        let yaml = "rules:\n  - {id: no-o1, match: {model: \"o1*\"}, action: deny, reason: costly}\n\
                    allowlist:\n  models: [\"gpt-4o-mini\", \"o1*\"]\n";
        let mut ex = exchange(yaml, json!({"model": "o1-mini", "messages": []}));
        match Policy.on_request(&mut ex, &mut Ctx::default()) {
            Verdict::Block(CheckResult::Deny, e) => {
                assert!(e.message.contains("no-o1") && e.message.contains("costly"))
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(Allowlist.on_request(&mut ex, &mut Ctx::default()), Verdict::Pass(CheckResult::Pass)));
        let mut ex = exchange(yaml, json!({"model": "gpt-4o", "messages": []}));
        assert!(matches!(Policy.on_request(&mut ex, &mut Ctx::default()), Verdict::Pass(CheckResult::Allow)));
        assert!(matches!(Allowlist.on_request(&mut ex, &mut Ctx::default()), Verdict::Block(CheckResult::Block, _)));
        let mut ex = exchange("cache: {mode: exact}\n", json!({"model": "gpt-4o", "messages": []}));
        assert!(matches!(Policy.on_request(&mut ex, &mut Ctx::default()), Verdict::Skip));
        assert!(matches!(Allowlist.on_request(&mut ex, &mut Ctx::default()), Verdict::Skip));
    }
}
