//! `BUDGET`: key, team-pool and tenant budgets. Reserve at request start (the request's
//! answer cap priced from the table), settle on the real cost, so concurrent requests can
//! overspend by at most one reservation.

use std::sync::Arc;

use crate::budget::Ledger;
use crate::error::{ApiError, ErrorKind};
use crate::pipeline::{Check, Ctx, Exchange, Outcome, Verdict};
use crate::providers::Usage;
use crate::receipts::{CheckName, CheckResult, Kind};

pub struct Budget {
    ledger: Arc<Ledger>,
}

impl Budget {
    pub fn new(ledger: Arc<Ledger>) -> Self {
        Budget { ledger }
    }
}

impl Check for Budget {
    fn name(&self) -> CheckName {
        CheckName::Budget
    }

    /// Applies when a budget covers the key, its team or the tenant; 402 when the request's
    /// reservation does not fit in one of them.
    fn on_request(&self, ex: &mut Exchange, cx: &mut Ctx) -> Verdict {
        let limits = ex.snap.budgets.limits_for(ex.tenant_id(), ex.key_id(), ex.team_id());
        if limits.is_empty() {
            return Verdict::Skip;
        }
        let amount = match ex.kind {
            Kind::ToolCall => ex.snap.pricing.tool_cost(&ex.provider, ex.tool.as_deref().unwrap_or_default()),
            Kind::ModelCall => {
                ex.snap.pricing.cost(&ex.model, &Usage::plain(ex.prompt_tokens_est, ex.completion_tokens_cap()))
            }
        };
        match self.ledger.reserve(ex.tenant_id(), ex.key_id(), ex.team_id(), &limits, amount, ex.now) {
            Ok(r) => {
                cx.budget = Some(r);
                Verdict::Pass(CheckResult::Pass)
            }
            Err(x) => {
                let period = match x.period {
                    crate::budget::Period::Monthly => "monthly",
                    crate::budget::Period::Total => "total",
                };
                Verdict::Block(
                    CheckResult::Block,
                    ApiError::new(
                        ErrorKind::BudgetExceeded,
                        format!(
                            "the {period} {} budget of ${:.4} would be exceeded (spent ${:.4}); ask for more with \
                             POST /v1/budgets/requests",
                            x.scope, x.amount_usd, x.spent_usd
                        ),
                    ),
                )
            }
        }
    }

    /// Every request's real cost counts toward its key's spend, with a budget or without.
    fn on_complete(&self, done: &Outcome, cx: &mut Ctx) {
        let ex = done.ex;
        self.ledger.settle(cx.budget.take(), ex.tenant_id(), ex.key_id(), ex.team_id(), done.cost_usd, ex.now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::BudgetBook;
    use crate::gateway::UpstreamOutcome;
    use crate::plugins::fixtures::snapshot;
    use serde_json::json;

    #[test]
    fn reserves_blocks_with_402_and_settles_the_real_cost() {
        let body = json!({"model": "gpt-4o", "max_tokens": 100, "messages": []});
        let probe = Exchange::fixture(body.clone());
        let mut record = probe.key.record.clone();
        // gpt-4o answers cost $10 per million: 100 tokens reserve $0.001 (plus the prompt).
        record.budget_usd = Some(0.0015);
        let mut snap = snapshot("rules: []\n");
        snap.budgets = Arc::new(BudgetBook::build(&[], [&record], []));
        let snap = Arc::new(snap);
        let key = Arc::new(crate::snapshot::KeyEntry::new(record, Default::default()));
        let check = Budget::new(Arc::new(Ledger::new()));

        let mut first = Exchange::fixture_in(snap.clone(), body.clone());
        first.key = key.clone();
        let mut cx1 = Ctx::default();
        assert!(matches!(check.on_request(&mut first, &mut cx1), Verdict::Pass(CheckResult::Pass)));
        // While the first holds its reservation, a second does not fit.
        let mut second = Exchange::fixture_in(snap.clone(), body.clone());
        second.key = key.clone();
        match check.on_request(&mut second, &mut Ctx::default()) {
            Verdict::Block(CheckResult::Block, e) => assert_eq!(e.status(), 402),
            other => panic!("{other:?}"),
        }
        // The first really cost little: settled, the next one fits.
        let done = Outcome {
            ex: &first,
            status: 200,
            upstream: UpstreamOutcome::Pass,
            usage: None,
            cost_usd: 0.0001,
            answer: None,
        };
        check.on_complete(&done, &mut cx1);
        let mut third = Exchange::fixture_in(snap, body);
        third.key = key;
        assert!(matches!(check.on_request(&mut third, &mut Ctx::default()), Verdict::Pass(CheckResult::Pass)));
    }
}
