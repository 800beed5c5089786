//! `BUDGET`: key, team-pool and tenant budgets. Reserve at request start (the request's
//! answer cap priced from the table), settle on the real cost, so concurrent requests can
//! overspend by at most one reservation.
//!
//! In one process the spend is the [`Ledger`]'s; with `cluster.redis_url` the reservation is
//! one atomic script in Redis over every budget that applies (exact across instances), and the
//! settlement a second one off the answer's path. The ledger still counts every cost (webhook
//! thresholds, and the fallback when Redis does not answer).

use std::sync::Arc;

use crate::checks::budget::shared::Held;
use crate::checks::budget::{Exceeded, Ledger, Limit, Period};
use crate::checks::pipeline::shared::{Answer, Ask};
use crate::checks::pipeline::{Check, Ctx, Exchange, Outcome, Verdict};
use crate::checks::shared::Cluster;
use crate::error::{ApiError, ErrorKind};
use crate::providers::Usage;
use crate::receipts::{CheckName, CheckResult, Kind};

/// What a request holds until it ends: a reservation in this process's ledger, or (`cluster`)
/// one prepared for, then made in, the shared store.
enum Hold {
    Local(crate::checks::budget::Reservation),
    Shared(Held),
}

pub struct Budget {
    ledger: Arc<Ledger>,
    shared: Option<Arc<Cluster>>,
}

impl Budget {
    pub fn new(ledger: Arc<Ledger>, shared: Option<Arc<Cluster>>) -> Self {
        Budget { ledger, shared }
    }

    /// What the request holds until it settles: its answer cap (or tool call) priced.
    fn amount(ex: &Exchange) -> f64 {
        match ex.kind {
            Kind::ToolCall => ex.snap.pricing.tool_cost(&ex.provider, ex.tool.as_deref().unwrap_or_default()),
            Kind::ModelCall => {
                let model = ex.priced_as.as_deref().unwrap_or(&ex.model);
                ex.snap.pricing.cost(model, &Usage::plain(ex.prompt_tokens_est, ex.completion_tokens_cap()))
            }
            // Never on the gateway: management calls cost nothing.
            Kind::Admin => 0.0,
        }
    }

    fn local(&self, ex: &Exchange, cx: &mut Ctx, limits: &[Limit]) -> Verdict {
        match self.ledger.reserve(ex.tenant_id(), ex.key_id(), ex.team_id(), limits, Self::amount(ex), ex.now) {
            Ok(r) => {
                cx.keep(Hold::Local(r));
                Verdict::Pass(CheckResult::Pass)
            }
            Err(x) => exceeded(&x),
        }
    }

    /// Redis does not answer: `cluster.on_redis_down` decides.
    fn without_store(&self, c: &Cluster, ex: &Exchange, cx: &mut Ctx, why: &str) -> Verdict {
        c.fell_back("BUDGET");
        if c.fail_open() {
            let limits = limits(ex);
            return self.local(ex, cx, &limits);
        }
        Verdict::Block(
            CheckResult::Block,
            ApiError::new(
                ErrorKind::Unavailable,
                format!("budgets are shared across gateway instances and the shared state is unreachable ({why}); retry shortly"),
            )
            .with_headers(vec![("retry-after", "1".into())]),
        )
    }
}

/// Every limit the request counts against, its end user's included.
fn limits(ex: &Exchange) -> Vec<crate::checks::budget::Limit> {
    ex.snap.budgets.limits_with_end_user(ex.tenant_id(), ex.key_id(), ex.team_id(), ex.end_user.as_deref())
}

fn exceeded(x: &Exceeded) -> Verdict {
    let period = match x.period {
        Period::Monthly => "monthly",
        Period::Total => "total",
    };
    if x.scope == "end_user" {
        let user = crate::checks::budget::end_user_of(&x.scope_id);
        return Verdict::Block(
            CheckResult::Block,
            ApiError::new(
                ErrorKind::BudgetExceeded,
                format!(
                    "the {period} end-user budget of ${:.4} for end user \"{user}\" would be exceeded (spent \
                     ${:.4}); ask for more with POST /v1/budgets/requests",
                    x.amount_usd, x.spent_usd
                ),
            ),
        );
    }
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

impl Check for Budget {
    fn name(&self) -> CheckName {
        CheckName::Budget
    }

    /// Applies when a budget covers the key, its team or the tenant; 402 when the request's
    /// reservation does not fit in one of them.
    fn on_request(&self, ex: &mut Exchange, cx: &mut Ctx) -> Verdict {
        let limits = limits(ex);
        if limits.is_empty() {
            return Verdict::Skip;
        }
        match &self.shared {
            None => self.local(ex, cx, &limits),
            Some(c) if c.is_up() => {
                let entries = crate::checks::shared::budget_entries(&limits, ex.now);
                let amount_usd = Self::amount(ex);
                let amount = crate::checks::budget::shared::nanos(amount_usd).max(0);
                cx.keep(Hold::Shared(Held { entries: entries.clone(), amount, bucket: 0 }));
                Verdict::Ask(Ask::Budget { entries, amount_usd })
            }
            Some(c) => self.without_store(c, ex, cx, &c.reason()),
        }
    }

    /// Its reservation is prepared only ([`Hold::Shared`]), dropped on `NotAsked`; a local
    /// reservation made meanwhile is released when the request ends.
    fn joins_asks(&self) -> bool {
        true
    }

    fn on_answer(&self, ex: &mut Exchange, cx: &mut Ctx, answer: Answer) -> Verdict {
        let held = match cx.take::<Hold>() {
            Some(Hold::Shared(h)) => Some(h),
            _ => None,
        };
        match (answer, &self.shared) {
            (Answer::NotAsked, _) => Verdict::Skip,
            (Answer::Budget(Ok(bucket)), _) => {
                if let Some(h) = held {
                    cx.keep(Hold::Shared(Held { bucket, ..h }));
                }
                Verdict::Pass(CheckResult::Pass)
            }
            (Answer::Budget(Err((i, used))), _) => {
                let Some(e) = held.as_ref().and_then(|h| h.entries.get(i)) else {
                    return exceeded(&Exceeded {
                        scope: "key",
                        scope_id: ex.key_id().to_string(),
                        budget_id: None,
                        amount_usd: 0.0,
                        spent_usd: used,
                        period: Period::Total,
                    });
                };
                let period = if e.period_key == crate::checks::budget::TOTAL { Period::Total } else { Period::Monthly };
                exceeded(&Exceeded {
                    scope: e.scope,
                    scope_id: e.scope_id.clone(),
                    budget_id: None,
                    amount_usd: e.limit_usd,
                    spent_usd: used,
                    period,
                })
            }
            (Answer::Unavailable(why), Some(c)) => self.without_store(c, ex, cx, &why),
            _ => {
                let limits = limits(ex);
                self.local(ex, cx, &limits)
            }
        }
    }

    /// Every request's real cost counts toward its key's spend, with a budget or without.
    fn on_complete(&self, done: &Outcome, cx: &mut Ctx) {
        let ex = done.ex;
        let (local, shared) = match cx.take::<Hold>() {
            Some(Hold::Local(r)) => (Some(r), None),
            Some(Hold::Shared(h)) => (None, Some(h)),
            None => (None, None),
        };
        let who = (ex.tenant_id(), ex.key_id(), ex.team_id(), ex.end_user.as_deref());
        self.ledger.settle_as(local, who, done.cost_usd, ex.now);
        if let Some(c) = &self.shared {
            c.settle_budget(shared, done.cost_usd);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::budget::BudgetBook;
    use crate::checks::fixtures::snapshot;
    use crate::checks::pipeline::UpstreamOutcome;
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
        let check = Budget::new(Arc::new(Ledger::new()), None);

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
