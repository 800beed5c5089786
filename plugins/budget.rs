//! `BUDGET`: key, team-pool and tenant budgets. Reserve at request start (the request's
//! answer cap priced from the table), settle on the real cost, so concurrent requests can
//! overspend by at most one reservation.

use std::sync::Arc;

use crate::budget::Ledger;
use crate::error::{ApiError, ErrorKind};
use crate::pipeline::{Check, Ctx, Exchange, Outcome, Verdict};

pub struct Budget {
    ledger: Arc<Ledger>,
}

impl Budget {
    pub fn new(ledger: Arc<Ledger>) -> Self {
        Budget { ledger }
    }
}

impl Check for Budget {
    fn name(&self) -> &'static str {
        "BUDGET"
    }

    /// Applies when a budget covers the key, its team or the tenant; 402 when the request's
    /// reservation does not fit in one of them.
    fn on_request(&self, ex: &mut Exchange, cx: &mut Ctx) -> Verdict {
        let limits = ex.snap.budgets.limits_for(ex.tenant_id(), ex.key_id(), ex.team_id());
        if limits.is_empty() {
            return Verdict::Skip;
        }
        let amount = ex.snap.pricing.cost(&ex.model, ex.prompt_tokens_est, ex.completion_tokens_cap());
        match self.ledger.reserve(ex.tenant_id(), ex.key_id(), ex.team_id(), &limits, amount, ex.now) {
            Ok(r) => {
                cx.budget = Some(r);
                Verdict::Pass("PASS")
            }
            Err(x) => {
                let period = match x.period {
                    crate::budget::Period::Monthly => "monthly",
                    crate::budget::Period::Total => "total",
                };
                Verdict::Block(
                    "BLOCK",
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
