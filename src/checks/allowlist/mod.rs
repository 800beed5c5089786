//! `ALLOWLIST`: when a policy lists models, providers or tools, only those pass.

use crate::checks::pipeline::{Check, Ctx, Exchange, Verdict};
use crate::error::{ApiError, ErrorKind};
use crate::receipts::{CheckName, CheckResult};

pub struct Allowlist;

impl Check for Allowlist {
    fn name(&self) -> CheckName {
        CheckName::Allowlist
    }

    /// Applies when any enabled policy of the tenant has an allowlist (they intersect).
    fn on_request(&self, ex: &mut Exchange, _cx: &mut Ctx) -> Verdict {
        let policy = ex.snap.policy(ex.tenant_id());
        if !policy.has_allowlist() {
            return Verdict::Skip;
        }
        match policy.allowlist_violation(&crate::checks::policy::plugin::facts(ex)) {
            None => Verdict::Pass(CheckResult::Pass),
            Some(why) => Verdict::Block(CheckResult::Block, ApiError::new(ErrorKind::PolicyDenied, why)),
        }
    }
}
