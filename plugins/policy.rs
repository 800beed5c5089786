//! `policy`: the tenant's rules (API.md "Policy language"): any matching `deny` wins.

use crate::error::{ApiError, ErrorKind};
use crate::pipeline::{Check, Ctx, Exchange, Verdict};
use crate::policy::{Decision, Facts};

pub struct Policy;

/// What the rules and allowlists match on, read off the exchange.
pub fn facts(ex: &Exchange) -> Facts<'_> {
    let team_id = ex.team_id();
    Facts {
        kind: ex.kind,
        model: &ex.model,
        provider: &ex.provider,
        tool: ex.tool.as_deref(),
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
    fn name(&self) -> &'static str {
        "policy"
    }

    /// Applies when an enabled policy of the tenant has rules: `allow`, or `deny` with 403.
    fn on_request(&self, ex: &mut Exchange, _cx: &mut Ctx) -> Verdict {
        let policy = ex.snap.policy(ex.tenant_id());
        if !policy.has_rules() {
            return Verdict::Skip;
        }
        match policy.evaluate(&facts(ex)) {
            Decision::Allow => Verdict::Pass("allow"),
            Decision::Deny { rule_id, reason } => {
                let why = if reason.is_empty() { String::new() } else { format!(": {reason}") };
                Verdict::Block(
                    "deny",
                    ApiError::new(ErrorKind::PolicyDenied, format!("denied by policy rule `{rule_id}`{why}")),
                )
            }
        }
    }
}
