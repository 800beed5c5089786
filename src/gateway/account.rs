//! The end of every request: its receipt committed (or queued), the checks settled, the
//! counters moved, and only then the answer's ending sent (docs/API.md, "No answer without its
//! receipt").

use pingora::proxy::Session;

use super::context::Ctx;
use super::ending::Ending;
use super::mcp::tool_label;
use super::relay::UpstreamOutcome;
use super::state::Gateway;
use crate::checks::budget::Crossing;
use crate::checks::pipeline::{Exchange, Outcome};
use crate::config::CommitMode;
use crate::error::ErrorKind;
use crate::metrics::{self, METRICS};
use crate::providers::Flavor;
use crate::providers::ProviderName;
use crate::providers::Route;
use crate::receipts::{self, Check};

impl Gateway {
    /// Account: commit the receipt, settle the checks, then send the answer's ending. With
    /// `receipts.commit: before_answer` (the default) the last byte leaves only after the
    /// commit; an uncommitted receipt turns the ending into a refusal or a cut.
    pub(super) async fn end(&self, session: &mut Session, ctx: &mut Ctx, ending: Ending) -> pingora::Result<bool> {
        if let Some(status) = ending.status() {
            ctx.status = status;
        }
        self.record_metrics(ctx);
        let outbox = self.webhook_events(ctx);
        let mut draft = ctx.take_draft();
        if let Some(d) = draft.as_mut() {
            d.outbox = outbox;
        }
        if let Some(t) = ctx.trace.as_mut() {
            t.record(ctx.route.map(Route::operation), draft.as_ref());
        }
        let (committed, deferred) = match (draft, self.app.config.receipts.commit) {
            (None, _) => (true, None),
            (Some(d), CommitMode::AfterAnswer) => (true, Some(d)),
            (Some(d), CommitMode::BeforeAnswer) => match self.app.receipts.commit(d).await {
                Ok(()) => (true, None),
                Err(e) => {
                    log::error!("request {}: {e}", ctx.request_id);
                    (false, None)
                }
            },
        };
        self.complete(ctx, committed);
        let ending = if committed {
            ending
        } else {
            let flavor = ctx.route.map(Route::flavor).unwrap_or(Flavor::Plain);
            ctx.status = 503;
            ctx.error = Some(ErrorKind::Unavailable);
            ending.uncommitted(flavor, &[("x-request-id", ctx.request_id.clone())])
        };
        let sent = ending.send(session).await;
        if let Some(d) = deferred {
            self.app.receipts.submit(d).await;
        }
        sent.map(|()| true)
    }

    /// The webhook events this request causes, written with its receipt: a guardrail block, and
    /// each budget threshold its cost crosses. Ids, categories and amounts only: no text.
    pub(super) fn webhook_events(&self, ctx: &Ctx) -> Vec<crate::store::webhooks::Event> {
        use crate::store::webhooks::Event;
        let mut out = Vec::new();
        let Some(key) = ctx.key.as_ref() else { return out };
        let blocked: Vec<&receipts::GuardEvent> = ctx.cx.events.iter().filter(|e| e.result == "BLOCK").collect();
        if !blocked.is_empty() {
            let mut categories: Vec<&str> = blocked.iter().map(|e| e.category.as_str()).collect();
            categories.dedup();
            let data = serde_json::json!({
                "receiptId": ctx.receipt_id,
                "requestId": ctx.request_id,
                "keyId": &*key.id,
                "model": ctx.model,
                "direction": blocked[0].direction,
                "categories": categories,
            });
            out.push(Event::new(key.tenant_id(), "guardrail.blocked", data));
        }
        if let (Some(ex), true) = (ctx.exchange.as_ref(), ctx.cost_usd > 0.0) {
            out.extend(self.budget_events(ctx, ex, &key.id));
        }
        out
    }

    /// `budget.threshold_reached` / `budget.exceeded` for each budget this request's cost takes
    /// across a threshold: the key's, its team's and its tenant's, and the end-user budgets of
    /// its end user (those name the end user: `endUser`, with `scopeId` the budget's own).
    fn budget_events(&self, ctx: &Ctx, ex: &Exchange, key_id: &str) -> Vec<crate::store::webhooks::Event> {
        use crate::store::webhooks::Event;
        let limits =
            ctx.snap.budgets.limits_with_end_user(ex.tenant_id(), ex.key_id(), ex.team_id(), ex.end_user.as_deref());
        if limits.is_empty() {
            return Vec::new();
        }
        let percent = self.app.config.webhooks.budget_threshold_percent;
        let crossings = self.app.ledger.crossings(&limits, ctx.cost_usd, f64::from(percent) / 100.0, ex.now);
        let event = |c: Crossing| {
            let exceeded = c.level == "exceeded";
            let mut data = serde_json::json!({
                "budgetId": c.limit.budget_id,
                "scope": c.limit.scope,
                "scopeId": c.limit.scope_id,
                "period": c.limit.period.as_str(),
                "amountUsd": c.limit.amount_usd,
                "spentUsd": c.spent_usd,
                "thresholdPercent": if exceeded { 100 } else { percent },
                "receiptId": ctx.receipt_id,
                "keyId": key_id,
            });
            if c.limit.scope == "end_user" {
                // `key:<id>/<endUser>`: the budget's scope id is the owner's bare id.
                let (owner, user) = c.limit.scope_id.split_once('/').unwrap_or_default();
                data["scopeId"] = owner.split_once(':').map_or(owner, |(_, id)| id).into();
                data["endUser"] = user.into();
            }
            let kind = if exceeded { "budget.exceeded" } else { "budget.threshold_reached" };
            Event::new(ex.tenant_id(), kind, data)
        };
        crossings.into_iter().map(event).collect()
    }

    /// What this request adds to the counters: its checks (UPSTREAM too), tokens, cost and cache
    /// savings.
    /// Recorded before the receipt takes the request's model and checks.
    pub(super) fn record_metrics(&self, ctx: &Ctx) {
        for (name, result) in ctx.cx.checks.iter().chain(&ctx.cx.response_checks).filter_map(Check::known) {
            metrics::local::check(name, result);
        }
        if ctx.key.is_some() {
            // The receipt's UPSTREAM check, counted like the others.
            metrics::local::check(receipts::CheckName::Upstream, ctx.upstream.status().check_result());
        }
        if let Some(saved) = ctx.cx.saved {
            METRICS.cache_saved_usd.with_label_values(&[&ctx.model]).inc_by(saved.usd);
        }
        if let Some(u) = ctx.usage {
            let provider = ctx.provider.map(ProviderName::as_str).unwrap_or("none");
            metrics::local::usage(provider, &ctx.model, u.prompt_tokens, u.completion_tokens, ctx.cost_usd);
        }
        if let Some(server) = &ctx.tool {
            let result = match ctx.upstream {
                UpstreamOutcome::Skipped => "blocked",
                UpstreamOutcome::Pass if ctx.tool_error => "tool_error",
                UpstreamOutcome::Pass => "ok",
                UpstreamOutcome::Fail => "error",
                UpstreamOutcome::Timeout => "timeout",
            };
            if ctx.upstream != UpstreamOutcome::Skipped {
                server.state.record(ctx.upstream == UpstreamOutcome::Pass);
            }
            let tool = tool_label(&ctx.model);
            METRICS.tool_calls.with_label_values(&[server.name.as_str(), tool.as_ref(), result]).inc();
        }
    }

    /// The checks' `on_complete` (settle reservations, fill the cache). A request whose receipt
    /// was not committed is not billed and not cached.
    pub(super) fn complete(&self, ctx: &mut Ctx, committed: bool) {
        if let Some(ex) = ctx.exchange.as_ref() {
            let done = Outcome {
                ex,
                status: ctx.status,
                upstream: ctx.upstream,
                usage: ctx.usage,
                cost_usd: if committed { ctx.cost_usd } else { 0.0 },
                answer: ctx.captured.take().filter(|_| committed),
            };
            self.pipeline.on_complete(&done, &mut ctx.cx);
        }
    }
}
