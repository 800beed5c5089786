//! The checks: one trait, the ordered table (`plugins/mod.rs`), and the pipeline that runs them
//! and records `{name, result}` for the receipt.
//!
//! Checks never see Pingora types and never do I/O: each works on the provider-neutral
//! [`Exchange`] and the typed per-request [`Ctx`], so each is unit-tested with a fixture.
//! Long-lived state (rate windows, the spend ledger, the cache) lives outside the plugin
//! structs and survives policy reloads.

mod exchange;
pub mod shared;

pub use exchange::{estimate_prompt_tokens, Cached, Exchange, JsonBody, Outcome, ResponsePiece, Saved};

use crate::error::ApiError;
use crate::receipts::{Check as Recorded, CheckName, CheckResult, GuardEvent};

/// One check. Hooks default to doing nothing, so a check implements only what it needs.
pub trait Check: Send + Sync + 'static {
    /// The receipt name: `policy`, `ALLOWLIST`, `RATELIMIT`, `BUDGET`, `GUARDRAIL`, `CACHE`.
    fn name(&self) -> CheckName;

    /// Runs before the upstream call, in table order, until one blocks or serves.
    /// May change the exchange (redaction) and must say so with [`Verdict::Redact`].
    fn on_request(&self, _ex: &mut Exchange, _cx: &mut Ctx) -> Verdict {
        Verdict::Skip
    }

    /// The shared store's answer to the [`Verdict::Ask`] this check returned from
    /// `on_request`; decides as `on_request` does (it may not ask again).
    fn on_answer(&self, _ex: &mut Exchange, _cx: &mut Ctx, _answer: shared::Answer) -> Verdict {
        Verdict::Skip
    }

    /// Runs for each piece of answer text (a streamed delta, or a whole non-streamed text
    /// field), in table order. Only `Skip`, `Pass`, `Redact` and `Block` mean something here.
    fn on_response(&self, _piece: &mut ResponsePiece, _cx: &mut Ctx) -> Verdict {
        Verdict::Skip
    }

    /// Runs once when the request is over, whatever happened (blocked, served, failed,
    /// client gone), in reverse table order: settle reservations, store the answer.
    fn on_complete(&self, _done: &Outcome, _cx: &mut Ctx) {}
}

/// What a check decided. Decisions are values; failures of our own are `ApiError`s.
#[must_use]
#[derive(Debug)]
pub enum Verdict {
    /// Not applicable to this request: nothing is recorded.
    Skip,
    /// Recorded with this result (`PASS`, `allow`, `MISS`, `BYPASS`).
    Pass(CheckResult),
    /// Recorded as `REDACT`: the check changed the request or the answer text.
    Redact,
    /// Recorded with this result (`BLOCK`, `deny`); the request ends with this error.
    Block(CheckResult, ApiError),
    /// Recorded as `HIT`: the answer comes from the cache, not the upstream.
    Serve(Cached),
    /// Undecided until the shared store answers this (several gateway processes share the
    /// counters): the pipeline sends it and calls [`Check::on_answer`]. Request side only.
    Ask(shared::Ask),
}

/// The typed per-request state the checks share (no string-keyed bags).
#[derive(Default)]
pub struct Ctx {
    /// Request-side results, in the order the checks ran.
    pub checks: Vec<Recorded>,
    /// Answer-side results (recorded after `UPSTREAM`).
    pub response_checks: Vec<Recorded>,
    /// Guardrail redactions and blocks, for `GET /v1/anomalies` (no text, only categories).
    pub events: Vec<GuardEvent>,
    /// Headers every answer of this request carries (e.g. `x-ratelimit-*`).
    pub headers: Vec<(&'static str, String)>,
    pub rate: Option<crate::ratelimit::Reservation>,
    pub budget: Option<crate::budget::Reservation>,
    /// The budget holds in the shared store (`cluster`), settled when the request ends.
    pub shared_budget: Option<crate::cluster::budget::Held>,
    /// The answer-side guardrail state (armed by the request side).
    pub response_guard: Option<crate::plugins::guardrail::ResponseGuard>,
    /// The cache slot to fill with this request's answer (a miss or a bypass).
    pub cache_slot: Option<crate::cache::Slot>,
    /// What a cache hit saved.
    pub saved: Option<Saved>,
    /// Set by a check that wants to see the answer ([`Check::on_response`]); otherwise the
    /// answer is relayed untouched, byte for byte.
    pub scan_answer: bool,
}

/// How the request phase ended.
pub enum Step {
    Continue,
    Block(ApiError),
    Serve(Cached),
}

pub struct Pipeline {
    checks: Vec<Box<dyn Check>>,
    /// Where [`Verdict::Ask`]s go; `None` in one process (no check asks then).
    shared: Option<std::sync::Arc<dyn shared::SharedStore>>,
}

impl Pipeline {
    pub fn new(checks: Vec<Box<dyn Check>>) -> Self {
        Pipeline { checks, shared: None }
    }

    pub fn with_shared(mut self, store: std::sync::Arc<dyn shared::SharedStore>) -> Self {
        self.shared = Some(store);
        self
    }

    pub fn names(&self) -> Vec<CheckName> {
        self.checks.iter().map(|c| c.name()).collect()
    }

    pub async fn on_request(&self, ex: &mut Exchange, cx: &mut Ctx) -> Step {
        for check in &self.checks {
            let name = check.name();
            let mut verdict = check.on_request(ex, cx);
            if let Verdict::Ask(ask) = verdict {
                let answer = match &self.shared {
                    Some(store) => store.ask(ask).await,
                    None => shared::Answer::Unavailable("no shared store is configured".into()),
                };
                verdict = check.on_answer(ex, cx, answer);
            }
            match verdict {
                Verdict::Skip | Verdict::Ask(_) => {}
                Verdict::Pass(result) => record(&mut cx.checks, name, result),
                Verdict::Redact => record(&mut cx.checks, name, CheckResult::Redact),
                Verdict::Block(result, e) => {
                    record(&mut cx.checks, name, result);
                    return Step::Block(e);
                }
                Verdict::Serve(hit) => {
                    record(&mut cx.checks, name, CheckResult::Hit);
                    return Step::Serve(hit);
                }
            }
        }
        Step::Continue
    }

    /// [`Pipeline::on_request`] of a pipeline without a shared store, where no check waits:
    /// decided in one poll (benches and tests drive the checks without a runtime).
    pub fn on_request_now(&self, ex: &mut Exchange, cx: &mut Ctx) -> Step {
        assert!(self.shared.is_none(), "a pipeline with a shared store may wait: await on_request");
        let mut f = std::pin::pin!(self.on_request(ex, cx));
        match std::future::Future::poll(f.as_mut(), &mut std::task::Context::from_waker(std::task::Waker::noop())) {
            std::task::Poll::Ready(step) => step,
            std::task::Poll::Pending => unreachable!("no check waits without a shared store"),
        }
    }

    /// Runs the answer-side checks on one piece; `Err` when a check blocked the answer.
    /// Each check's strongest result over the whole answer is what gets recorded.
    pub fn on_response(&self, piece: &mut ResponsePiece, cx: &mut Ctx) -> Result<(), ApiError> {
        for check in &self.checks {
            let name = check.name();
            match check.on_response(piece, cx) {
                Verdict::Skip | Verdict::Serve(_) | Verdict::Ask(_) => {}
                Verdict::Pass(result) => raise(&mut cx.response_checks, name, result),
                Verdict::Redact => raise(&mut cx.response_checks, name, CheckResult::Redact),
                Verdict::Block(result, e) => {
                    raise(&mut cx.response_checks, name, result);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    pub fn on_complete(&self, done: &Outcome, cx: &mut Ctx) {
        for check in self.checks.iter().rev() {
            check.on_complete(done, cx);
        }
    }
}

fn record(list: &mut Vec<Recorded>, name: CheckName, result: CheckResult) {
    debug_assert!(name.results().contains(&result), "{name} does not record {result} (API.md §Checks)");
    list.push(Recorded::new(name, result));
}

/// Keeps one entry per check name on the answer side, holding its strongest result.
fn raise(list: &mut Vec<Recorded>, name: CheckName, result: CheckResult) {
    match list.iter_mut().find(|c| c.name == name) {
        Some(c) if result.severity() > c.result.severity() => c.result = result.into(),
        Some(_) => {}
        None => record(list, name, result),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    struct Fixed(CheckName, fn() -> Verdict);
    impl Check for Fixed {
        fn name(&self) -> CheckName {
            self.0
        }
        fn on_request(&self, _ex: &mut Exchange, _cx: &mut Ctx) -> Verdict {
            (self.1)()
        }
    }

    #[test]
    fn records_in_order_and_stops_at_the_first_block() {
        let p = Pipeline::new(vec![
            Box::new(Fixed(CheckName::Allowlist, || Verdict::Pass(CheckResult::Pass))),
            Box::new(Fixed(CheckName::Policy, || Verdict::Skip)),
            Box::new(Fixed(CheckName::RateLimit, || {
                Verdict::Block(CheckResult::Block, ApiError::new(ErrorKind::RateLimited, "x"))
            })),
            Box::new(Fixed(CheckName::Cache, || Verdict::Pass(CheckResult::Miss))),
        ]);
        let mut ex = Exchange::fixture(serde_json::json!({"model": "gpt-4o-mini", "messages": []}));
        let mut cx = Ctx::default();
        let step = p.on_request_now(&mut ex, &mut cx);
        assert!(matches!(step, Step::Block(e) if e.kind == ErrorKind::RateLimited));
        let got: Vec<_> = cx.checks.iter().map(|c| format!("{}:{}", c.name, c.result)).collect();
        assert_eq!(got, ["ALLOWLIST:PASS", "RATELIMIT:BLOCK"]);
    }

    #[test]
    fn answer_side_keeps_the_strongest_result_per_check() {
        let mut list = Vec::new();
        raise(&mut list, CheckName::Guardrail, CheckResult::Pass);
        raise(&mut list, CheckName::Guardrail, CheckResult::Redact);
        raise(&mut list, CheckName::Guardrail, CheckResult::Pass);
        assert_eq!(list, vec![Recorded::new(CheckName::Guardrail, CheckResult::Redact)]);
        raise(&mut list, CheckName::Guardrail, CheckResult::Block);
        assert_eq!(list, vec![Recorded::new(CheckName::Guardrail, CheckResult::Block)]);
    }
}
