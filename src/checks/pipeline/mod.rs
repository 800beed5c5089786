//! The checks: one trait, the ordered table (`src/checks/mod.rs`), and the pipeline that runs them
//! and records `{name, result}` for the receipt.
//!
//! Checks never see Pingora types and never do I/O: each works on the provider-neutral
//! [`Exchange`] and the typed per-request [`Ctx`], so each is unit-tested with a fixture.
//! Long-lived state (rate windows, the spend ledger, the cache) lives outside the plugin
//! structs and survives policy reloads.

mod exchange;
mod own;
pub mod shared;

pub use exchange::{
    estimate_prompt_tokens, Cached, Exchange, JsonBody, Outcome, ResponsePiece, Saved, UpstreamOutcome,
};

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

    /// Whether this check's `on_request` may run before the check just before it is decided,
    /// so that both ask the shared store in one round trip: it prepares nothing that outlives
    /// an [`shared::Answer::NotAsked`] (no events, no edits of the request).
    fn joins_asks(&self) -> bool {
        false
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

/// The per-request state the checks share with the gateway, and each check's own.
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
    /// What a cache hit saved.
    pub saved: Option<Saved>,
    /// Set by a check that wants to see the answer ([`Check::on_response`]); otherwise the
    /// answer is relayed untouched, byte for byte.
    pub scan_answer: bool,
    /// Set by a check that wants the whole answer when the request ends ([`Outcome::answer`]).
    pub capture_answer: bool,
    own: own::Own,
}

impl Ctx {
    /// The state a check kept for this request, found by its type (each check's is its own).
    pub fn own<T: std::any::Any + Send + Sync>(&mut self) -> Option<&mut T> {
        self.own.get()
    }

    /// Keeps `state` for the rest of the request, in place of any earlier state of its type.
    pub fn keep<T: std::any::Any + Send + Sync>(&mut self, state: T) {
        self.own.put(state)
    }

    /// Takes back the state of type `T`, leaving none.
    pub fn take<T: std::any::Any + Send + Sync>(&mut self) -> Option<T> {
        self.own.take()
    }
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

    /// Runs the request checks in table order until one blocks or serves. Checks that ask the
    /// shared store one after the other (rate limit, then budget) are asked in one round trip,
    /// decided in order there: the store stops at the first refusal, and a check whose ask was
    /// not decided is told so ([`shared::Answer::NotAsked`]) and recorded as not run.
    pub async fn on_request(&self, ex: &mut Exchange, cx: &mut Ctx) -> Step {
        let mut i = 0;
        while i < self.checks.len() {
            let verdict = self.checks[i].on_request(ex, cx);
            let Verdict::Ask(first) = verdict else {
                if let Some(step) = self.apply(i, verdict, cx) {
                    return step;
                }
                i += 1;
                continue;
            };
            // The checks whose asks go in this round trip; a joining check that does not
            // apply (Skip) lets the next one join still (the end user's limits, then a key
            // without limits, then its budget: one round trip).
            let (mut asks, mut asked) = (vec![first], vec![i]);
            let mut next = i + 1;
            let mut after = None;
            while self.checks[i].joins_asks() && next < self.checks.len() && self.checks[next].joins_asks() {
                match self.checks[next].on_request(ex, cx) {
                    Verdict::Ask(a) => {
                        asks.push(a);
                        asked.push(next);
                    }
                    Verdict::Skip => {}
                    other => {
                        after = Some(other);
                        break;
                    }
                }
                next += 1;
            }
            let mut answers = match &self.shared {
                Some(store) => store.ask(asks).await,
                None => vec![shared::Answer::Unavailable("no shared store is configured".into()); asked.len()],
            }
            .into_iter();
            for (pos, &j) in asked.iter().enumerate() {
                let answer = answers.next().unwrap_or(shared::Answer::NotAsked);
                let verdict = self.checks[j].on_answer(ex, cx, answer);
                if let Some(step) = self.apply(j, verdict, cx) {
                    // The checks asked after this one were not decided: they let go of what
                    // they prepared.
                    for &k in &asked[pos + 1..] {
                        let _ = self.checks[k].on_answer(ex, cx, shared::Answer::NotAsked);
                    }
                    return step;
                }
            }
            if let Some(verdict) = after {
                if let Some(step) = self.apply(next, verdict, cx) {
                    return step;
                }
                next += 1;
            }
            i = next;
        }
        Step::Continue
    }

    /// Records check `i`'s verdict; `Some` when it ends the request phase.
    fn apply(&self, i: usize, verdict: Verdict, cx: &mut Ctx) -> Option<Step> {
        let name = self.checks[i].name();
        match verdict {
            Verdict::Skip | Verdict::Ask(_) => None,
            // A name two plugins share (`RATELIMIT`: the end user's limits, then the key's) is
            // recorded once, with the strongest result.
            Verdict::Pass(result) => {
                raise(&mut cx.checks, name, result);
                None
            }
            Verdict::Redact => {
                raise(&mut cx.checks, name, CheckResult::Redact);
                None
            }
            Verdict::Block(result, e) => {
                raise(&mut cx.checks, name, result);
                Some(Step::Block(e))
            }
            Verdict::Serve(hit) => {
                raise(&mut cx.checks, name, CheckResult::Hit);
                Some(Step::Serve(hit))
            }
        }
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
    debug_assert!(name.results().contains(&result), "{name} does not record {result} (docs/API.md §Checks)");
    list.push(Recorded::new(name, result));
}

/// Keeps one entry per check name, holding its strongest result.
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

    /// A check that asks the shared store and passes or blocks on its answer.
    struct Asking(CheckName, std::sync::Arc<std::sync::Mutex<Vec<&'static str>>>);
    impl Check for Asking {
        fn name(&self) -> CheckName {
            self.0
        }
        fn joins_asks(&self) -> bool {
            true
        }
        fn on_request(&self, _ex: &mut Exchange, _cx: &mut Ctx) -> Verdict {
            Verdict::Ask(shared::Ask::Cache { key: [0; 32] })
        }
        fn on_answer(&self, _ex: &mut Exchange, _cx: &mut Ctx, answer: shared::Answer) -> Verdict {
            let (seen, verdict) = match answer {
                shared::Answer::Cache(None) => ("pass", Verdict::Pass(CheckResult::Pass)),
                shared::Answer::NotAsked => ("not asked", Verdict::Skip),
                _ => ("block", Verdict::Block(CheckResult::Block, ApiError::new(ErrorKind::RateLimited, "x"))),
            };
            self.1.lock().unwrap().push(seen);
            verdict
        }
    }

    /// Answers the first `admit` asks of each round trip, then refuses (and decides no more).
    struct Store {
        admit: usize,
        calls: std::sync::Mutex<Vec<usize>>,
    }
    impl shared::SharedStore for Store {
        fn ask(
            &self,
            asks: Vec<shared::Ask>,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Vec<shared::Answer>> + Send + '_>> {
            self.calls.lock().unwrap().push(asks.len());
            let mut out: Vec<_> = (0..self.admit.min(asks.len())).map(|_| shared::Answer::Cache(None)).collect();
            if out.len() < asks.len() {
                out.push(shared::Answer::Unavailable("refused".into()));
            }
            Box::pin(async move { out })
        }
    }

    fn run_asking(admit: usize) -> (Vec<String>, Vec<&'static str>, Vec<usize>) {
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let store = std::sync::Arc::new(Store { admit, calls: Default::default() });
        let p = Pipeline::new(vec![
            Box::new(Fixed(CheckName::Allowlist, || Verdict::Pass(CheckResult::Pass))),
            Box::new(Asking(CheckName::RateLimit, seen.clone())),
            Box::new(Asking(CheckName::Budget, seen.clone())),
            Box::new(Fixed(CheckName::Guardrail, || Verdict::Pass(CheckResult::Pass))),
        ])
        .with_shared(store.clone());
        let mut ex = Exchange::fixture(serde_json::json!({"model": "gpt-4o-mini", "messages": []}));
        let mut cx = Ctx::default();
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let _ = rt.block_on(p.on_request(&mut ex, &mut cx));
        let checks = cx.checks.iter().map(|c| format!("{}:{}", c.name, c.result)).collect();
        let seen = seen.lock().unwrap().clone();
        let calls = store.calls.lock().unwrap().clone();
        (checks, seen, calls)
    }

    /// Adjacent asks go in one round trip and are decided in table order; after a refusal the
    /// later asker is told it was not asked and is not recorded.
    #[test]
    fn adjacent_asks_share_one_round_trip_and_stop_at_the_first_refusal() {
        let (checks, seen, calls) = run_asking(2);
        assert_eq!(calls, [2], "one round trip for both");
        assert_eq!(seen, ["pass", "pass"]);
        assert_eq!(checks, ["ALLOWLIST:PASS", "RATELIMIT:PASS", "BUDGET:PASS", "GUARDRAIL:PASS"]);

        let (checks, seen, calls) = run_asking(0);
        assert_eq!(calls, [2]);
        assert_eq!(seen, ["block", "not asked"]);
        assert_eq!(checks, ["ALLOWLIST:PASS", "RATELIMIT:BLOCK"]);

        let (checks, seen, _) = run_asking(1);
        assert_eq!(seen, ["pass", "block"]);
        assert_eq!(checks, ["ALLOWLIST:PASS", "RATELIMIT:PASS", "BUDGET:BLOCK"]);
    }

    /// A joining check that does not apply.
    struct Skipping;
    impl Check for Skipping {
        fn name(&self) -> CheckName {
            CheckName::RateLimit
        }
        fn joins_asks(&self) -> bool {
            true
        }
    }

    /// A joining check that skips between two that ask: still one round trip, and a refusal of
    /// the first leaves the last not asked.
    #[test]
    fn a_skipping_check_between_two_asks_keeps_one_round_trip() {
        for (admit, want_seen, want_checks) in [
            (2, vec!["pass", "pass"], vec!["RATELIMIT:PASS", "BUDGET:PASS"]),
            (0, vec!["block", "not asked"], vec!["RATELIMIT:BLOCK"]),
        ] {
            let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
            let store = std::sync::Arc::new(Store { admit, calls: Default::default() });
            let p = Pipeline::new(vec![
                Box::new(Asking(CheckName::RateLimit, seen.clone())),
                Box::new(Skipping),
                Box::new(Asking(CheckName::Budget, seen.clone())),
            ])
            .with_shared(store.clone());
            let mut ex = Exchange::fixture(serde_json::json!({"model": "gpt-4o-mini", "messages": []}));
            let mut cx = Ctx::default();
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            let _ = rt.block_on(p.on_request(&mut ex, &mut cx));
            assert_eq!(*store.calls.lock().unwrap(), [2]);
            assert_eq!(*seen.lock().unwrap(), want_seen);
            let checks: Vec<String> = cx.checks.iter().map(|c| format!("{}:{}", c.name, c.result)).collect();
            assert_eq!(checks, want_checks);
        }
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
