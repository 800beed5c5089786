//! Allowances: a busy key's admissions decided in this process, against quota Redis granted
//! this process atomically beside one of its admissions.
//!
//! A request that finds its lane (a key's rate windows; one set of budget entries) busy asks
//! Redis, beside its own admission, for `want` more requests' worth: requests and tokens
//! counted in the key's window, nano-dollars held in every budget entry, exactly as that many
//! admissions would be. Redis grants it only far from the limit: never more than 1/[`SHARE`] of
//! what is left, never fewer than two requests. The next requests of the lane draw on the
//! grant here (no round trip), each as its own admission would have been counted; what is not
//! drawn when the grant ends (used up, [`LIFE`] over, the rate window ending, or the lane's
//! limits changed) is given back: in the lane's next admission call, or by the sweep
//! ([`Allowances::sweep`]) through the settlement batch.
//!
//! What it keeps: no instance admits beyond a limit (a grant is counted before it is drawn
//! on), budget overspend stays at most one reservation, a refusal is still decided by Redis.
//! What it gives up: near a limit another instance's grant (at most 1/32 of what was left
//! when it was granted, for at most a second) can make a request wait for a retry that a
//! per-request decision would have taken. Keys far from their limits, the ones fast enough to
//! need it, lose nothing. Quiet lanes never get a grant (every request decided in Redis).
//!
//! Why: flat out with every check on, one admission call per ~6 requests cost Redis ~14 µs of
//! script a request plus its networking, and the gateway a round trip per request (session 29:
//! 0.44x bare Pingora with Redis against 0.66x without).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::checks::pipeline::shared::{Answer, Ask, BudgetEntry, RateCounts};
use crate::checks::rate_limit::{State, TokenAsk, WINDOW_MS};

/// A grant never takes more than 1/SHARE of what is left under any of its limits.
pub(crate) const SHARE: i64 = 32;
/// The most requests one grant covers.
pub(crate) const MAX_WANT: i64 = 1024;
/// What a lane asks for first, once busy.
const FIRST_WANT: i64 = 8;
/// A lane is busy when its previous admission call is more recent than this.
const BUSY: Duration = Duration::from_millis(100);
/// How long a grant is drawn on at most (budget holds live at least one reservation TTL).
pub(crate) const LIFE: Duration = Duration::from_secs(1);
/// A grant is not drawn on this close to its rate window's end (Redis's clock, estimated).
const WINDOW_MARGIN_MS: i64 = 200;
/// A refill whose answer never came (its request went away) stops blocking the next after this.
const REFILL_STALE: Duration = Duration::from_secs(2);
/// Lanes without a grant idle this long are forgotten.
const IDLE: Duration = Duration::from_secs(30);

/// What a request's ask sends Redis beside itself: how many more requests' worth it asks for
/// (0: none) and the lane's previous grant it gives back.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Plan {
    pub want: i64,
    pub retire: Retire,
}

/// A grant given back: rate requests and tokens not drawn (counted in the window starting at
/// `from`), or nano-dollars not drawn (held in `bucket`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) enum Retire {
    #[default]
    None,
    Rate {
        from: i64,
        req: i64,
        tok: i64,
    },
    Budget {
        bucket: i64,
        amount: i64,
    },
}

/// What Redis granted beside an admission.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Grant {
    Rate { req: i64, tok: i64 },
    Budget { amount: i64 },
}

#[derive(Debug)]
struct RateGrant {
    /// When it arrived, and Redis's clock when it was granted.
    at: Instant,
    now_ms: i64,
    /// The windows with every request counted so far (the next draw's "before").
    state: State,
    req_left: i64,
    tok_left: i64,
}

#[derive(Debug)]
struct BudgetGrant {
    at: Instant,
    bucket: i64,
    left: i64,
}

#[derive(Debug)]
struct Lane<G> {
    grant: Option<G>,
    /// Requests the grant covered and how many drew on it.
    granted: i64,
    used: i64,
    refilling: Option<Instant>,
    next_want: i64,
    last_call: Option<Instant>,
}

impl<G> Default for Lane<G> {
    fn default() -> Self {
        Lane { grant: None, granted: 0, used: 0, refilling: None, next_want: 0, last_call: None }
    }
}

impl<G> Lane<G> {
    /// The lane goes to Redis: takes its grant (to give back in this call) and says how much
    /// to ask for. `spent`: the grant could not serve (used up), as opposed to over in time.
    fn plan(&mut self, now: Instant, spent: bool) -> (Option<G>, i64) {
        let old = self.grant.take();
        if old.is_some() {
            self.next_want = if spent { 2 * self.granted } else { self.used };
        }
        let busy = self.last_call.is_some_and(|t| now.duration_since(t) < BUSY);
        self.last_call = Some(now);
        if self.refilling.is_some_and(|t| now.duration_since(t) < REFILL_STALE) {
            return (old, 0);
        }
        let want = match std::mem::take(&mut self.next_want) {
            0 if busy => FIRST_WANT,
            w => w.min(MAX_WANT),
        };
        if want < 2 {
            return (old, 0);
        }
        self.refilling = Some(now);
        (old, want)
    }

    fn install(&mut self, grant: Option<(G, i64)>) {
        self.refilling = None;
        if let Some((g, requests)) = grant {
            self.grant = Some(g);
            self.granted = requests;
            self.used = 0;
        }
    }
}

#[derive(Debug)]
struct RateLane {
    rpm: Option<u64>,
    tpm: Option<u64>,
    lane: Lane<RateGrant>,
}

#[derive(Debug)]
struct BudgetLane {
    entries: Vec<BudgetEntry>,
    lane: Lane<BudgetGrant>,
}

/// The lanes of this process.
pub(crate) struct Allowances {
    lanes: Mutex<Lanes>,
    /// Shutting down: no more grants asked for.
    closing: std::sync::atomic::AtomicBool,
    /// A budget grant's life: [`LIFE`], or less with a shorter reservation TTL.
    budget_life: Duration,
}

#[derive(Default)]
struct Lanes {
    rate: HashMap<Arc<str>, RateLane>,
    budget: HashMap<u64, BudgetLane>,
}

/// What the sweep gives back: per rate key (`key_id`) or budget entries.
#[derive(Debug, PartialEq)]
pub(crate) enum Returned {
    Rate { key_id: Arc<str>, from: i64, req: i64, tok: i64 },
    Budget { entries: Vec<BudgetEntry>, bucket: i64, amount: i64 },
}

fn budget_lane_id(entries: &[BudgetEntry]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for e in entries {
        (e.scope, &e.scope_id, &e.period_key, e.limit_usd.to_bits()).hash(&mut h);
    }
    h.finish()
}

impl RateGrant {
    fn live(&self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.at);
        elapsed < LIFE && self.now_ms + elapsed.as_millis() as i64 + WINDOW_MARGIN_MS < self.state.start_ms + WINDOW_MS
    }

    /// The tokens a request asking `ask` takes from this grant, if it fits.
    fn tokens_for(&self, tpm: Option<u64>, ask: TokenAsk) -> Option<i64> {
        if tpm.is_none() {
            return Some(0);
        }
        let (min, max) = (ask.min.min(i64::MAX as u64) as i64, ask.max.min(i64::MAX as u64) as i64);
        (self.tok_left >= min).then(|| max.min(self.tok_left).max(min))
    }
}

impl Allowances {
    pub(crate) fn new(reservation_ttl_ms: i64) -> Self {
        let ttl = Duration::from_millis(reservation_ttl_ms.max(1) as u64);
        Allowances {
            lanes: Mutex::new(Lanes::default()),
            closing: std::sync::atomic::AtomicBool::new(false),
            budget_life: LIFE.min(ttl / 2),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lanes> {
        self.lanes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every ask drawn on its lane's grant, or (when one cannot be) the plan of each for one
    /// admission call: the asks that could not be drawn give their grant back and ask for more.
    pub(crate) fn draw(&self, asks: &[Ask], now: Instant) -> Result<Vec<Answer>, Vec<Plan>> {
        let mut lanes = self.lock();
        let drawable = asks.iter().map(|a| lanes.can_draw(a, now, self.budget_life)).collect::<Vec<_>>();
        if drawable.iter().all(|d| *d) {
            return Ok(asks.iter().map(|a| lanes.take(a, now)).collect());
        }
        let life = self.budget_life;
        let closing = self.closing.load(std::sync::atomic::Ordering::Relaxed);
        let plan = |lanes: &mut Lanes, a| {
            let p = lanes.plan(a, now, life);
            if closing {
                Plan { want: 0, ..p }
            } else {
                p
            }
        };
        Err(asks.iter().zip(drawable).map(|(a, d)| if d { Plan::default() } else { plan(&mut lanes, a) }).collect())
    }

    /// What Redis answered a call planned by [`Allowances::draw`]: grants installed, refills
    /// ended. A rate grant made under limits the key no longer has (patched during the call)
    /// is not drawn on: it is returned, to be given back.
    pub(crate) fn install(
        &self,
        asks: &[Ask],
        plans: &[Plan],
        answers: &[Answer],
        grants: &[Option<Grant>],
    ) -> Vec<Returned> {
        let mut lanes = self.lock();
        let now = Instant::now();
        let mut stale = Vec::new();
        for (i, (ask, plan)) in asks.iter().zip(plans).enumerate() {
            if plan.want == 0 {
                continue;
            }
            let grant = grants.get(i).copied().flatten();
            match (ask, answers.get(i)) {
                (Ask::Rate { key_id, rpm, tpm, .. }, answer) => {
                    let Some(l) = lanes.rate.get_mut(key_id) else { continue };
                    let g = match (grant, answer) {
                        (Some(Grant::Rate { req, tok }), Some(Answer::Rate(c))) if req > 0 && c.admitted => {
                            let mut state = c.before;
                            state.req.cur += 1.0;
                            state.tok.cur += c.tokens as f64;
                            let tok = if tpm.is_some() { tok } else { 0 };
                            Some((RateGrant { at: now, now_ms: c.now_ms, state, req_left: req, tok_left: tok }, req))
                        }
                        _ => None,
                    };
                    match g {
                        Some((g, _)) if (l.rpm, l.tpm) != (*rpm, *tpm) => {
                            l.lane.install(None);
                            let (from, req, tok) = (g.state.start_ms, g.req_left, g.tok_left);
                            stale.push(Returned::Rate { key_id: key_id.clone(), from, req, tok });
                        }
                        g => l.lane.install(g),
                    }
                }
                (Ask::Budget { entries, amount_usd }, answer) => {
                    let Some(l) = lanes.budget.get_mut(&budget_lane_id(entries)) else { continue };
                    let g = match (grant, answer) {
                        (Some(Grant::Budget { amount }), Some(Answer::Budget(Ok(bucket)))) if amount >= 0 => {
                            let each = crate::checks::budget::shared::nanos(*amount_usd).max(1);
                            Some((BudgetGrant { at: now, bucket: *bucket, left: amount }, (amount / each).max(2)))
                        }
                        _ => None,
                    };
                    l.lane.install(g);
                }
                (Ask::Cache { .. }, _) => {}
            }
        }
        stale
    }

    /// Grants over in time, given back; idle lanes forgotten.
    pub(crate) fn sweep(&self, now: Instant) -> Vec<Returned> {
        let mut lanes = self.lock();
        let budget_life = self.budget_life;
        let mut out = Vec::new();
        lanes.rate.retain(|key_id, l| {
            if l.lane.grant.as_ref().is_some_and(|g| !g.live(now)) {
                l.lane.next_want = l.lane.used;
                if let Some(g) = l.lane.grant.take() {
                    if g.req_left > 0 || g.tok_left > 0 {
                        let (from, req, tok) = (g.state.start_ms, g.req_left, g.tok_left);
                        out.push(Returned::Rate { key_id: key_id.clone(), from, req, tok });
                    }
                }
            }
            l.lane.grant.is_some() || l.lane.last_call.is_some_and(|t| now.duration_since(t) < IDLE)
        });
        lanes.budget.retain(|_, l| {
            if l.lane.grant.as_ref().is_some_and(|g| now.saturating_duration_since(g.at) >= budget_life) {
                l.lane.next_want = l.lane.used;
                if let Some(g) = l.lane.grant.take() {
                    if g.left > 0 {
                        out.push(Returned::Budget { entries: l.entries.clone(), bucket: g.bucket, amount: g.left });
                    }
                }
            }
            l.lane.grant.is_some() || l.lane.last_call.is_some_and(|t| now.duration_since(t) < IDLE)
        });
        out
    }

    /// Shutting down: every grant ends now (what is left to give back) and no more are asked
    /// for.
    pub(crate) fn close(&self) -> Vec<Returned> {
        self.closing.store(true, std::sync::atomic::Ordering::Relaxed);
        let far = Instant::now() + LIFE + Duration::from_secs(WINDOW_MS as u64 / 1000);
        self.sweep(far)
    }

    /// Forgets every grant (Redis went away: what it counted may be gone with it).
    pub(crate) fn clear(&self) {
        let mut lanes = self.lock();
        lanes.rate.clear();
        lanes.budget.clear();
    }

    /// Live grants (tests).
    #[cfg(test)]
    pub(crate) fn live(&self) -> usize {
        let lanes = self.lock();
        lanes.rate.values().filter(|l| l.lane.grant.is_some()).count()
            + lanes.budget.values().filter(|l| l.lane.grant.is_some()).count()
    }
}

impl Lanes {
    fn can_draw(&self, ask: &Ask, now: Instant, budget_life: Duration) -> bool {
        match ask {
            Ask::Rate { key_id, rpm, tpm, ask } => self.rate.get(key_id).is_some_and(|l| {
                l.rpm == *rpm
                    && l.tpm == *tpm
                    && l.lane
                        .grant
                        .as_ref()
                        .is_some_and(|g| g.live(now) && g.req_left >= 1 && g.tokens_for(*tpm, *ask).is_some())
            }),
            Ask::Budget { entries, amount_usd } => self.budget.get(&budget_lane_id(entries)).is_some_and(|l| {
                l.entries == *entries
                    && l.lane.grant.as_ref().is_some_and(|g| {
                        now.saturating_duration_since(g.at) < budget_life
                            && crate::checks::budget::shared::nanos(*amount_usd).max(0) <= g.left
                    })
            }),
            Ask::Cache { .. } => false,
        }
    }

    /// Draws `ask` on its grant ([`Lanes::can_draw`] said it can).
    fn take(&mut self, ask: &Ask, now: Instant) -> Answer {
        match ask {
            Ask::Rate { key_id, tpm, ask, .. } => {
                let l = self.rate.get_mut(key_id).expect("drawable");
                let g = l.lane.grant.as_mut().expect("drawable");
                let tokens = g.tokens_for(*tpm, *ask).expect("drawable");
                let before = g.state;
                g.state.req.cur += 1.0;
                g.state.tok.cur += tokens as f64;
                g.req_left -= 1;
                g.tok_left -= tokens;
                l.lane.used += 1;
                let now_ms = g.now_ms + now.saturating_duration_since(g.at).as_millis() as i64;
                Answer::Rate(RateCounts { admitted: true, now_ms, before, tokens: tokens as u64 })
            }
            Ask::Budget { entries, amount_usd } => {
                let l = self.budget.get_mut(&budget_lane_id(entries)).expect("drawable");
                let g = l.lane.grant.as_mut().expect("drawable");
                g.left -= crate::checks::budget::shared::nanos(*amount_usd).max(0);
                l.lane.used += 1;
                Answer::Budget(Ok(g.bucket))
            }
            Ask::Cache { .. } => unreachable!("a cache lookup is not drawn"),
        }
    }

    /// The plan of an ask its lane cannot draw: its grant given back, a refill asked for.
    fn plan(&mut self, ask: &Ask, now: Instant, budget_life: Duration) -> Plan {
        match ask {
            Ask::Rate { key_id, rpm, tpm, .. } => {
                let l = self.rate.entry(key_id.clone()).or_insert_with(|| RateLane {
                    rpm: *rpm,
                    tpm: *tpm,
                    lane: Lane::default(),
                });
                let changed = l.rpm != *rpm || l.tpm != *tpm;
                let spent = l.lane.grant.as_ref().is_some_and(|g| g.live(now));
                let (old, want) = l.lane.plan(now, spent && !changed);
                if changed {
                    (l.rpm, l.tpm) = (*rpm, *tpm);
                }
                let retire = match old {
                    Some(g) if g.req_left > 0 || g.tok_left > 0 => {
                        Retire::Rate { from: g.state.start_ms, req: g.req_left, tok: g.tok_left }
                    }
                    _ => Retire::None,
                };
                Plan { want, retire }
            }
            Ask::Budget { entries, .. } => {
                let id = budget_lane_id(entries);
                if self.budget.get(&id).is_some_and(|l| l.entries != *entries) {
                    // A hash shared by two sets of entries (never seen): the newer takes the
                    // lane; the older's grant is left to expire in Redis.
                    self.budget.remove(&id);
                }
                let l = self
                    .budget
                    .entry(id)
                    .or_insert_with(|| BudgetLane { entries: entries.clone(), lane: Lane::default() });
                let spent = l.lane.grant.as_ref().is_some_and(|g| now.saturating_duration_since(g.at) < budget_life);
                let (old, want) = l.lane.plan(now, spent);
                let retire = match old {
                    Some(g) if g.left > 0 => Retire::Budget { bucket: g.bucket, amount: g.left },
                    _ => Retire::None,
                };
                Plan { want, retire }
            }
            Ask::Cache { .. } => Plan::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::rate_limit::Pair;

    const MS: Duration = Duration::from_millis(1);

    fn rate(rpm: u64) -> Ask {
        Ask::Rate { key_id: "k".into(), rpm: Some(rpm), tpm: Some(1_000_000), ask: TokenAsk::new(10, None, 100) }
    }

    /// Redis's answer to an admitted request in the window starting at `start`, `rc` before it.
    fn admitted(start: i64, rc: f64, tokens: u64) -> Answer {
        let before = State { start_ms: start, req: Pair { prev: 4.0, cur: rc }, tok: Pair { prev: 0.0, cur: 0.0 } };
        Answer::Rate(RateCounts { admitted: true, now_ms: start + 1_000, before, tokens })
    }

    /// A lane made busy (two requests) whose refill Redis answered: admitted with nothing
    /// before it in the window starting at `start`, `req` more requests and `tok` tokens granted.
    fn with_grant(a: &Allowances, ask: &[Ask; 1], start: i64, req: i64, tok: i64) {
        let t0 = Instant::now();
        let _ = a.draw(ask, t0);
        let plans = a.draw(ask, t0 + MS).unwrap_err();
        a.install(ask, &plans, &[admitted(start, 0.0, 110)], &[Some(Grant::Rate { req, tok })]);
    }

    #[test]
    fn a_quiet_lane_asks_for_nothing_and_a_busy_one_for_twice_as_much_each_time_it_runs_out() {
        let a = Allowances::new(900_000);
        let t0 = Instant::now();
        let start = 1_700_000_040_000;
        let ask = [rate(100_000)];
        assert_eq!(a.draw(&ask, t0).unwrap_err(), [Plan::default()], "a lane's first request asks for nothing");
        let plans = a.draw(&ask, t0 + 10 * MS).unwrap_err();
        assert_eq!(plans, [Plan { want: FIRST_WANT, retire: Retire::None }], "busy: it asks for more");
        assert_eq!(a.draw(&ask, t0 + 11 * MS).unwrap_err(), [Plan::default()], "one refill at a time");

        // Redis admitted it (7 before it) and granted 8 more, 1 000 tokens.
        a.install(&ask, &plans, &[admitted(start, 7.0, 110)], &[Some(Grant::Rate { req: 8, tok: 1000 })]);
        for i in 0..8 {
            let got = a.draw(&ask, t0 + 12 * MS).expect("drawn on the grant");
            let [Answer::Rate(c)] = got.as_slice() else { panic!("{got:?}") };
            assert!(c.admitted);
            assert_eq!(c.before.start_ms, start);
            assert_eq!(c.before.req, Pair { prev: 4.0, cur: 8.0 + i as f64 }, "counted as admissions one by one");
            assert_eq!(c.before.tok.cur, 110.0 + 110.0 * i as f64);
            assert_eq!(c.tokens, 110, "as much of the ask as fits");
            assert!(c.now_ms >= start + 1_000 + 11, "Redis's clock moves on with this one's");
        }
        // Used up: the next gives back the 120 tokens left and asks for twice as much.
        let plans = a.draw(&ask, t0 + 13 * MS).unwrap_err();
        assert_eq!(plans, [Plan { want: 16, retire: Retire::Rate { from: start, req: 0, tok: 120 } }]);
        // Refused by Redis: nothing installed, and the next may refill again.
        let refused = match admitted(start, 0.0, 0) {
            Answer::Rate(c) => Answer::Rate(RateCounts { admitted: false, ..c }),
            _ => unreachable!(),
        };
        a.install(&ask, &plans, &[refused], &[None]);
        assert_eq!(a.live(), 0);
        assert_eq!(a.draw(&ask, t0 + 14 * MS).unwrap_err(), [Plan { want: FIRST_WANT, retire: Retire::None }]);
    }

    #[test]
    fn a_grant_ends_with_its_life_its_window_or_its_key_limits_and_what_is_left_goes_back() {
        let a = Allowances::new(900_000);
        let start = 1_700_000_040_000;
        let ask = [rate(100_000)];
        with_grant(&a, &ask, start, 8, 1000);
        let t1 = Instant::now();
        for _ in 0..3 {
            a.draw(&ask, t1).unwrap();
        }
        // Over in time: the sweep gives back what is left.
        let back = a.sweep(t1 + LIFE);
        assert_eq!(back, [Returned::Rate { key_id: "k".into(), from: start, req: 5, tok: 1000 - 330 }]);
        assert!(a.sweep(t1 + LIFE).is_empty(), "given back once");

        // The rate window ending (Redis's clock 1 s into it, here, at 59.9 s): not drawn on.
        let plans = a.draw(&ask, t1 + LIFE + MS).unwrap_err();
        assert_eq!(plans[0].want, 3, "asks for what the last grant served");
        let late = match admitted(start, 0.0, 110) {
            Answer::Rate(c) => Answer::Rate(RateCounts { now_ms: start + WINDOW_MS - WINDOW_MARGIN_MS - 5, ..c }),
            _ => unreachable!(),
        };
        a.install(&ask, &plans, &[late], &[Some(Grant::Rate { req: 3, tok: 330 })]);
        let t2 = Instant::now();
        assert!(a.draw(&ask, t2).is_ok());
        let plans = a.draw(&ask, t2 + 10 * MS).unwrap_err();
        assert_eq!(plans[0].retire, Retire::Rate { from: start, req: 2, tok: 220 }, "past the window's margin");

        // New limits on the key: the grant made under the old ones goes back at once.
        let plans = [Plan { want: 4, retire: Retire::None }];
        a.install(&ask, &plans, &[admitted(start, 0.0, 110)], &[Some(Grant::Rate { req: 4, tok: 440 })]);
        let plans = a.draw(&[rate(5_000)], Instant::now()).unwrap_err();
        assert_eq!(plans[0].retire, Retire::Rate { from: start, req: 4, tok: 440 });
    }

    #[test]
    fn budget_grants_are_drawn_reservation_by_reservation() {
        let a = Allowances::new(900_000);
        let t0 = Instant::now();
        let entries =
            vec![BudgetEntry { scope: "tenant", scope_id: "t".into(), period_key: "total".into(), limit_usd: 10.0 }];
        let ask = |usd: f64| [Ask::Budget { entries: entries.clone(), amount_usd: usd }];
        let _ = a.draw(&ask(0.01), t0);
        let plans = a.draw(&ask(0.01), t0 + MS).unwrap_err();
        assert_eq!(plans[0].want, FIRST_WANT);
        a.install(&ask(0.01), &plans, &[Answer::Budget(Ok(7))], &[Some(Grant::Budget { amount: 50_000_000 })]);
        for _ in 0..4 {
            assert!(matches!(a.draw(&ask(0.01), t0 + 2 * MS).unwrap().as_slice(), [Answer::Budget(Ok(7))]));
        }
        // $0.02 does not fit in the $0.01 left: back to Redis, giving the $0.01 back.
        let plans = a.draw(&ask(0.02), t0 + 3 * MS).unwrap_err();
        assert_eq!(plans, [Plan { want: 2 * 5, retire: Retire::Budget { bucket: 7, amount: 10_000_000 } }]);
        // A different budget (its limit changed) is a lane of its own.
        let mut other = entries.clone();
        other[0].limit_usd = 20.0;
        let plans = a.draw(&[Ask::Budget { entries: other, amount_usd: 0.01 }], t0 + 4 * MS).unwrap_err();
        assert_eq!(plans, [Plan::default()]);
    }

    /// A request with a rate and a budget ask draws on both only when both can: otherwise both
    /// go to Redis, the one whose lane can draw as a plain ask (its grant kept).
    #[test]
    fn a_request_is_drawn_whole_or_decided_in_redis_whole() {
        let a = Allowances::new(900_000);
        let t0 = Instant::now();
        let start = 1_700_000_040_000;
        let entries =
            vec![BudgetEntry { scope: "tenant", scope_id: "t".into(), period_key: "total".into(), limit_usd: 10.0 }];
        let asks = [rate(100_000), Ask::Budget { entries, amount_usd: 0.01 }];
        let _ = a.draw(&asks, t0);
        let plans = a.draw(&asks, t0 + MS).unwrap_err();
        let answers = [admitted(start, 0.0, 110), Answer::Budget(Ok(3))];
        // The rate lane got 2 more, the budget lane 4.
        a.install(
            &asks,
            &plans,
            &answers,
            &[Some(Grant::Rate { req: 2, tok: 220 }), Some(Grant::Budget { amount: 40_000_000 })],
        );
        let t1 = Instant::now();
        assert!(a.draw(&asks, t1).is_ok());
        assert!(a.draw(&asks, t1).is_ok());
        let plans = a.draw(&asks, t1).unwrap_err();
        assert_eq!(plans[0], Plan { want: 4, retire: Retire::None });
        assert_eq!(plans[1], Plan::default(), "the budget lane keeps its grant");
        assert_eq!(a.live(), 1);
    }

    #[test]
    fn closing_gives_every_grant_back_and_asks_for_no_more() {
        let a = Allowances::new(900_000);
        let start = 1_700_000_040_000;
        let ask = [rate(100_000)];
        with_grant(&a, &ask, start, 8, 880);
        a.draw(&ask, Instant::now()).unwrap();
        assert_eq!(a.close(), [Returned::Rate { key_id: "k".into(), from: start, req: 7, tok: 770 }]);
        assert_eq!(a.live(), 0);
        let now = Instant::now();
        let _ = a.draw(&ask, now);
        assert_eq!(a.draw(&ask, now + MS).unwrap_err(), [Plan::default()], "busy, but closing: no grant");
    }

    #[test]
    fn a_grant_made_under_limits_patched_during_its_call_goes_back_undrawn() {
        let a = Allowances::new(900_000);
        let t0 = Instant::now();
        let start = 1_700_000_040_000;
        let old = [rate(100_000)];
        let _ = a.draw(&old, t0);
        let plans = a.draw(&old, t0 + MS).unwrap_err();
        // Meanwhile the key's limit is patched, and a request under the new one plans.
        assert_eq!(a.draw(&[rate(50)], t0 + 2 * MS).unwrap_err(), [Plan::default()]);
        let stale = a.install(&old, &plans, &[admitted(start, 0.0, 110)], &[Some(Grant::Rate { req: 8, tok: 880 })]);
        assert_eq!(stale, [Returned::Rate { key_id: "k".into(), from: start, req: 8, tok: 880 }]);
        assert_eq!(a.live(), 0, "nothing drawn under the new limit");
    }
}
