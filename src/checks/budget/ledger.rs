//! Spend in memory: per key, per team and per tenant, per period key (`total`, `YYYY-MM`).
//!
//! Each scope entry has its own mutex; the maps of entries are behind read-mostly `RwLock`s that
//! are only written when an id is seen for the first time. No lock is held across a request:
//! a reservation is a list of amounts to give back, released on settle or on drop.

use foldhash::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use chrono::{DateTime, Utc};

use super::book::scope_name;
use super::book::{end_user_scope_id, Limit};
use super::period::{month_key, Period, TOTAL};
use crate::store::{spend, Store, StoreError};

/// Float sums of cents drift by ulps (0.1 + 0.2 > 0.3); a limit is not exceeded by drift.
const EPSILON: f64 = 1e-9;

#[derive(Debug, Default)]
struct Entry {
    state: Mutex<EntryState>,
}

#[derive(Debug, Default)]
struct EntryState {
    /// Settled spend by period key.
    spent: HashMap<String, f64>,
    /// Reserved, not yet settled, by period key.
    reserved: HashMap<String, f64>,
    /// Cost that has passed [`Ledger::crossings`], by period key: it runs ahead of `spent`
    /// (counted when a receipt is handed over, before its settle), so each budget threshold is
    /// crossed by exactly one request of this process.
    noticed: HashMap<String, f64>,
}

impl Entry {
    fn lock(&self) -> MutexGuard<'_, EntryState> {
        // A panic elsewhere cannot leave the numbers half-written (each update is one store).
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

type Entries = RwLock<HashMap<String, Arc<Entry>>>;

#[derive(Debug, Default)]
pub struct Ledger {
    keys: Entries,
    teams: Entries,
    tenants: Entries,
    /// Per end user under each owner (`key:<id>/<endUser>`, `team:…`, `tenant:…`).
    end_users: Entries,
}

/// What a request holds against its limits until it settles. Dropping it gives the amounts back.
#[derive(Debug)]
#[must_use = "dropping a reservation releases it at once"]
pub struct Reservation {
    holds: Vec<Hold>,
}

#[derive(Debug)]
struct Hold {
    entry: Arc<Entry>,
    period_key: String,
    amount: f64,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        for h in self.holds.drain(..) {
            let mut st = h.entry.lock();
            if let Some(r) = st.reserved.get_mut(&h.period_key) {
                *r -= h.amount;
                if *r <= EPSILON {
                    st.reserved.remove(&h.period_key);
                }
            }
        }
    }
}

/// A budget threshold one request's cost crossed.
#[derive(Debug, Clone, PartialEq)]
pub struct Crossing {
    pub limit: Limit,
    /// `threshold` (the configured share of the amount) or `exceeded` (the whole amount).
    pub level: &'static str,
    /// Spend in the period including this request's cost.
    pub spent_usd: f64,
}

/// The first limit a request would break.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{} budget of {scope} {scope_id} exhausted: ${spent_usd:.4} of ${amount_usd:.4} spent", period.as_str())]
pub struct Exceeded {
    pub scope: &'static str,
    pub scope_id: String,
    pub budget_id: Option<String>,
    pub amount_usd: f64,
    /// Settled plus reserved spend at the time of the check.
    pub spent_usd: f64,
    pub period: Period,
}

impl Ledger {
    pub fn new() -> Ledger {
        Ledger::default()
    }

    /// The spend recorded in `key_spend` (this month and all time), with each key's team.
    pub async fn load(store: &Store) -> Result<Ledger, StoreError> {
        let ledger = Ledger::new();
        ledger.refresh(store).await?;
        Ok(ledger)
    }

    /// Catches up with spend other processes wrote to the shared database: each figure becomes
    /// the larger of what this process counted and what the database holds, so neither this
    /// process's not-yet-written spend nor the others' written spend is lost.
    pub async fn refresh(&self, store: &Store) -> Result<(), StoreError> {
        let now = Utc::now();
        let rows = spend::current(store, &[TOTAL.to_string(), month_key(now)]).await?;
        let mut sums: [HashMap<(String, String), f64>; 3] = Default::default();
        for r in rows {
            *sums[0].entry((r.key_id, r.period.clone())).or_default() += r.cost_usd;
            if let Some(team) = r.team_id {
                *sums[1].entry((team, r.period.clone())).or_default() += r.cost_usd;
            }
            *sums[2].entry((r.tenant_id, r.period)).or_default() += r.cost_usd;
        }
        let month = month_key(now);
        let users = spend::end_users_current(store, &[TOTAL.to_string(), month_key(now)]).await?;
        let mut user_sums: HashMap<(String, String), f64> = HashMap::default();
        for r in users {
            for owner in owners(&r.tenant_id, &r.key_id, r.team_id.as_deref()).into_iter().flatten() {
                *user_sums.entry((end_user_scope_id(&owner, &r.end_user), r.period.clone())).or_default() += r.cost_usd;
            }
        }
        let all = [&self.keys, &self.teams, &self.tenants, &self.end_users];
        for (entries, sums) in all.into_iter().zip(sums.into_iter().chain([user_sums])) {
            for ((id, period), db) in sums {
                let entry = Self::entry(entries, &id);
                let mut st = entry.lock();
                let local = st.spent.entry(period).or_default();
                *local = local.max(db);
                prune_months(&mut st, &month);
            }
        }
        Ok(())
    }

    fn map(&self, scope: &str) -> Option<&Entries> {
        match scope {
            "key" => Some(&self.keys),
            "team" => Some(&self.teams),
            "tenant" => Some(&self.tenants),
            "end_user" => Some(&self.end_users),
            _ => None,
        }
    }

    fn entry(entries: &Entries, id: &str) -> Arc<Entry> {
        if let Some(e) = entries.read().unwrap_or_else(|e| e.into_inner()).get(id) {
            return Arc::clone(e);
        }
        Arc::clone(entries.write().unwrap_or_else(|e| e.into_inner()).entry(id.to_string()).or_default())
    }

    /// Reserves `amount_usd` against every limit. Succeeds only if for each one
    /// `spent + reserved + amount <= limit` and `spent < limit`; each check and its reservation
    /// happen under that scope entry's lock. On failure nothing stays reserved.
    pub fn reserve(
        &self,
        tenant_id: &str,
        key_id: &str,
        team_id: Option<&str>,
        limits: &[Limit],
        amount_usd: f64,
        now: DateTime<Utc>,
    ) -> Result<Reservation, Exceeded> {
        debug_assert!(limits.iter().all(|l| match l.scope {
            "key" => l.scope_id == key_id,
            "team" => Some(l.scope_id.as_str()) == team_id,
            "end_user" => true,
            _ => l.scope_id == tenant_id,
        }));
        let amount = if amount_usd.is_finite() && amount_usd > 0.0 { amount_usd } else { 0.0 };
        let mut held = Reservation { holds: Vec::with_capacity(limits.len()) };
        // Limits on the same scope and period share one reservation (a key's budgetUsd and a
        // key budget row must not count the same request twice).
        let mut done: Vec<(&str, &str, Period)> = Vec::with_capacity(limits.len());
        for l in limits {
            if done.contains(&(l.scope, l.scope_id.as_str(), l.period)) {
                continue;
            }
            done.push((l.scope, l.scope_id.as_str(), l.period));
            let Some(entries) = self.map(l.scope) else {
                // Fail closed: a limit we cannot account for is a limit we cannot promise.
                return Err(exceeded(l, l.amount_usd));
            };
            let entry = Self::entry(entries, &l.scope_id);
            let period_key = l.period.key(now);
            let mut st = entry.lock();
            let spent = st.spent.get(&period_key).copied().unwrap_or(0.0);
            let reserved = st.reserved.get(&period_key).copied().unwrap_or(0.0);
            let same = limits.iter().filter(|m| m.scope == l.scope && m.scope_id == l.scope_id && m.period == l.period);
            for m in same {
                if !(spent < m.amount_usd && spent + reserved + amount <= m.amount_usd + EPSILON) {
                    drop(st);
                    return Err(exceeded(m, spent + reserved));
                }
            }
            add(&mut st.reserved, &period_key, amount);
            drop(st);
            held.holds.push(Hold { entry, period_key, amount });
        }
        Ok(held)
    }

    /// Records the actual cost on the key, its team and its tenant (this month and all time),
    /// then releases the reservation. Spend is recorded before the release so a concurrent
    /// check never sees the cost in neither place.
    pub fn settle(
        &self,
        r: Option<Reservation>,
        tenant_id: &str,
        key_id: &str,
        team_id: Option<&str>,
        actual_usd: f64,
        now: DateTime<Utc>,
    ) {
        self.settle_as(r, (tenant_id, key_id, team_id, None), actual_usd, now)
    }

    /// [`Ledger::settle`] for the request of an end user (`who`: tenant, key, team, end user):
    /// the cost also counts for the end user under its key, its team and its tenant.
    pub fn settle_as(
        &self,
        r: Option<Reservation>,
        who: (&str, &str, Option<&str>, Option<&str>),
        actual_usd: f64,
        now: DateTime<Utc>,
    ) {
        let (tenant_id, key_id, team_id, end_user) = who;
        if actual_usd.is_finite() && actual_usd > 0.0 {
            let month = month_key(now);
            let targets = [(&self.keys, Some(key_id)), (&self.teams, team_id), (&self.tenants, Some(tenant_id))];
            for (entries, id) in targets {
                let Some(id) = id else { continue };
                self.book(entries, id, &month, actual_usd);
            }
            if let Some(user) = end_user {
                for owner in owners(tenant_id, key_id, team_id).into_iter().flatten() {
                    self.book(&self.end_users, &end_user_scope_id(&owner, user), &month, actual_usd);
                }
            }
        }
        drop(r);
    }

    fn book(&self, entries: &Entries, id: &str, month: &str, usd: f64) {
        let entry = Self::entry(entries, id);
        let mut st = entry.lock();
        add(&mut st.spent, TOTAL, usd);
        add(&mut st.spent, month, usd);
        prune_months(&mut st, month);
    }

    /// The most one end user under `owner` has spent in the period containing `now` (what an
    /// end-user budget over every end user of the owner shows as its spend).
    pub fn most_spent_by_an_end_user(&self, owner: &str, period: Period, now: DateTime<Utc>) -> f64 {
        let prefix = format!("{owner}/");
        let key = period.key(now);
        let map = self.end_users.read().unwrap_or_else(|e| e.into_inner());
        map.iter()
            .filter(|(id, _)| id.starts_with(&prefix))
            .filter_map(|(_, e)| e.lock().spent.get(&key).copied())
            .fold(0.0, f64::max)
    }

    /// Counts `cost_usd` against each of `limits` and says which thresholds it crossed: the
    /// share `threshold` (e.g. 0.8) of the amount, and the whole amount. Atomic per scope entry,
    /// so concurrent requests cross each threshold once between them; spend learnt from other
    /// processes (refresh) raises the base, so a crossing there is not reported again here.
    pub fn crossings(&self, limits: &[Limit], cost_usd: f64, threshold: f64, now: DateTime<Utc>) -> Vec<Crossing> {
        let mut out = Vec::new();
        if !(cost_usd.is_finite() && cost_usd > 0.0) {
            return out;
        }
        let mut done: Vec<(&str, &str, Period)> = Vec::with_capacity(limits.len());
        for l in limits {
            if done.contains(&(l.scope, l.scope_id.as_str(), l.period)) {
                continue;
            }
            done.push((l.scope, l.scope_id.as_str(), l.period));
            let Some(entries) = self.map(l.scope) else { continue };
            let entry = Self::entry(entries, &l.scope_id);
            let period_key = l.period.key(now);
            let mut st = entry.lock();
            let spent = st.spent.get(&period_key).copied().unwrap_or(0.0);
            let before = st.noticed.get(&period_key).copied().unwrap_or(0.0).max(spent);
            let after = before + cost_usd;
            st.noticed.insert(period_key, after);
            if st.noticed.len() > 2 {
                let month = month_key(now);
                st.noticed.retain(|k, _| k == TOTAL || *k == month);
            }
            drop(st);
            let same = limits.iter().filter(|m| m.scope == l.scope && m.scope_id == l.scope_id && m.period == l.period);
            for m in same {
                for (level, mark) in [("threshold", m.amount_usd * threshold), ("exceeded", m.amount_usd)] {
                    if before < mark - EPSILON && after >= mark - EPSILON {
                        out.push(Crossing { limit: m.clone(), level, spent_usd: after });
                    }
                }
            }
        }
        out
    }

    /// Settled spend of one scope entry in the period containing `now`.
    pub fn spent(&self, scope: &str, scope_id: &str, period: Period, now: DateTime<Utc>) -> f64 {
        let Some(entries) = self.map(scope) else { return 0.0 };
        let entry = entries.read().unwrap_or_else(|e| e.into_inner()).get(scope_id).cloned();
        entry.and_then(|e| e.lock().spent.get(&period.key(now)).copied()).unwrap_or(0.0)
    }

    /// Reserved, not yet settled, amount of one scope entry in the period containing `now`.
    pub fn reserved(&self, scope: &str, scope_id: &str, period: Period, now: DateTime<Utc>) -> f64 {
        let Some(entries) = self.map(scope) else { return 0.0 };
        let entry = entries.read().unwrap_or_else(|e| e.into_inner()).get(scope_id).cloned();
        entry.and_then(|e| e.lock().reserved.get(&period.key(now)).copied()).unwrap_or(0.0)
    }
}

/// The owners whose end users a request of this key counts for: the key, its team, its tenant.
fn owners(tenant_id: &str, key_id: &str, team_id: Option<&str>) -> [Option<String>; 3] {
    [Some(format!("key:{key_id}")), team_id.map(|t| format!("team:{t}")), Some(format!("tenant:{tenant_id}"))]
}

/// `map[period] += usd`, allocating the key only the first time a period is seen.
fn add(map: &mut HashMap<String, f64>, period: &str, usd: f64) {
    match map.get_mut(period) {
        Some(v) => *v += usd,
        None => {
            map.insert(period.to_string(), usd);
        }
    }
}

fn exceeded(l: &Limit, spent_usd: f64) -> Exceeded {
    Exceeded {
        scope: scope_name(l.scope).unwrap_or("tenant"),
        scope_id: l.scope_id.clone(),
        budget_id: l.budget_id.clone(),
        amount_usd: l.amount_usd,
        spent_usd,
        period: l.period,
    }
}

/// Keeps `total` and the current month only: past months can no longer be charged against.
fn prune_months(st: &mut EntryState, current: &str) {
    if st.spent.len() > 2 {
        st.spent.retain(|k, _| k == TOTAL || k == current);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn limit(scope: &'static str, id: &str, amount: f64, period: Period) -> Limit {
        Limit { budget_id: Some(format!("b-{scope}")), scope, scope_id: id.into(), amount_usd: amount, period }
    }

    fn at(y: i32, m: u32, d: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, m, d, 12, 0, 0).unwrap()
    }

    #[test]
    fn each_threshold_is_crossed_once_by_concurrent_requests() {
        let ledger = Arc::new(Ledger::new());
        let limits = Arc::new(vec![limit("key", "k1", 10.0, Period::Monthly)]);
        let now = Utc::now();
        let handles: Vec<_> = (0..40)
            .map(|_| {
                let (ledger, limits) = (ledger.clone(), limits.clone());
                std::thread::spawn(move || ledger.crossings(&limits, 0.5, 0.8, now))
            })
            .collect();
        let all: Vec<Crossing> = handles.into_iter().flat_map(|h| h.join().unwrap()).collect();
        let levels: Vec<&str> = all.iter().map(|c| c.level).collect();
        assert_eq!(levels.iter().filter(|l| **l == "threshold").count(), 1, "{all:?}");
        assert_eq!(levels.iter().filter(|l| **l == "exceeded").count(), 1, "{all:?}");
        // A single large cost crosses both at once; nothing is reported below the threshold.
        let l = ledger.crossings(&[limit("team", "t9", 1.0, Period::Total)], 2.0, 0.8, now);
        assert_eq!(l.iter().map(|c| c.level).collect::<Vec<_>>(), ["threshold", "exceeded"]);
        assert!(ledger.crossings(&[limit("tenant", "x", 100.0, Period::Total)], 1.0, 0.8, now).is_empty());
    }

    #[test]
    fn fifty_threads_against_room_for_ten() {
        let ledger = Arc::new(Ledger::new());
        let limits = Arc::new(vec![limit("key", "k1", 10.0, Period::Monthly)]);
        let barrier = Arc::new(std::sync::Barrier::new(50));
        let now = Utc::now();
        let handles: Vec<_> = (0..50)
            .map(|_| {
                let (ledger, limits, barrier) = (ledger.clone(), limits.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    ledger.reserve("t1", "k1", None, &limits, 1.0, now).ok()
                })
            })
            .collect();
        let held: Vec<Reservation> = handles.into_iter().filter_map(|h| h.join().unwrap()).collect();
        assert_eq!(held.len(), 10);
        assert_eq!(ledger.reserved("key", "k1", Period::Monthly, now), 10.0);
        drop(held);
        assert_eq!(ledger.reserved("key", "k1", Period::Monthly, now), 0.0);
    }

    #[test]
    fn concurrent_reserve_and_settle_never_overspend() {
        let ledger = Arc::new(Ledger::new());
        let limits = Arc::new(vec![limit("team", "team1", 10.0, Period::Total)]);
        let now = Utc::now();
        let handles: Vec<_> = (0..50)
            .map(|_| {
                let (ledger, limits) = (ledger.clone(), limits.clone());
                std::thread::spawn(move || match ledger.reserve("t1", "k1", Some("team1"), &limits, 1.0, now) {
                    Ok(r) => {
                        ledger.settle(Some(r), "t1", "k1", Some("team1"), 1.0, now);
                        true
                    }
                    Err(_) => false,
                })
            })
            .collect();
        let ok = handles.into_iter().map(|h| h.join().unwrap()).filter(|fitted| *fitted).count();
        // Whatever the interleaving, exactly ten fitted.
        assert_eq!(ok, 10);
        assert_eq!(ledger.spent("team", "team1", Period::Total, now), 10.0);
        assert_eq!(ledger.reserved("team", "team1", Period::Total, now), 0.0);
        assert!(ledger.reserve("t1", "k1", Some("team1"), &limits, 0.0, now).is_err(), "spent == limit blocks");
    }

    #[test]
    fn failure_leaves_nothing_reserved_and_names_the_limit() {
        let ledger = Ledger::new();
        let now = Utc::now();
        let limits = vec![
            limit("key", "k1", 100.0, Period::Total),
            limit("team", "team1", 100.0, Period::Total),
            limit("tenant", "t1", 3.0, Period::Monthly),
        ];
        let r = ledger.reserve("t1", "k1", Some("team1"), &limits, 2.0, now).expect("fits");
        let err = ledger.reserve("t1", "k1", Some("team1"), &limits, 2.0, now).unwrap_err();
        assert_eq!(
            err,
            Exceeded {
                scope: "tenant",
                scope_id: "t1".into(),
                budget_id: Some("b-tenant".into()),
                amount_usd: 3.0,
                spent_usd: 2.0,
                period: Period::Monthly,
            }
        );
        // The failed attempt's key and team holds were rolled back: only the first remains.
        assert_eq!(ledger.reserved("key", "k1", Period::Total, now), 2.0);
        assert_eq!(ledger.reserved("team", "team1", Period::Total, now), 2.0);
        ledger.settle(Some(r), "t1", "k1", Some("team1"), 1.5, now);
        assert_eq!(ledger.reserved("key", "k1", Period::Total, now), 0.0);
        assert_eq!(ledger.reserved("tenant", "t1", Period::Monthly, now), 0.0);
        // Room is now 3.0 - 1.5.
        assert!(ledger.reserve("t1", "k1", Some("team1"), &limits, 1.5, now).is_ok());
        assert!(ledger.reserve("t1", "k1", Some("team1"), &limits, 1.6, now).is_err());
    }

    #[test]
    fn settle_books_key_team_and_tenant_even_without_a_reservation() {
        let ledger = Ledger::new();
        let now = at(2025, 6, 15);
        ledger.settle(None, "t1", "k1", Some("team1"), 0.25, now);
        ledger.settle(None, "t1", "k2", None, 0.5, now);
        ledger.settle(None, "t1", "k2", None, f64::NAN, now);
        ledger.settle(None, "t1", "k2", None, -3.0, now);
        assert_eq!(ledger.spent("key", "k1", Period::Total, now), 0.25);
        assert_eq!(ledger.spent("key", "k2", Period::Monthly, now), 0.5);
        assert_eq!(ledger.spent("team", "team1", Period::Monthly, now), 0.25);
        assert_eq!(ledger.spent("tenant", "t1", Period::Total, now), 0.75);
        assert_eq!(ledger.spent("tenant", "t1", Period::Monthly, now), 0.75);
        assert_eq!(ledger.spent("tenant", "t2", Period::Total, now), 0.0);
        assert_eq!(ledger.spent("galaxy", "t1", Period::Total, now), 0.0);
    }

    #[test]
    fn monthly_spend_rolls_over_and_total_does_not() {
        let ledger = Ledger::new();
        let monthly = vec![limit("key", "k1", 1.0, Period::Monthly)];
        let total = vec![limit("key", "k1", 1.5, Period::Total)];
        let june = at(2025, 6, 30);
        ledger.settle(None, "t1", "k1", None, 1.0, june);
        assert!(ledger.reserve("t1", "k1", None, &monthly, 0.01, june).is_err());
        let july = at(2025, 7, 1);
        assert_eq!(ledger.spent("key", "k1", Period::Monthly, july), 0.0);
        assert!(ledger.reserve("t1", "k1", None, &monthly, 1.0, july).is_ok());
        assert_eq!(ledger.spent("key", "k1", Period::Total, july), 1.0);
        assert!(ledger.reserve("t1", "k1", None, &total, 0.6, july).is_err());
        ledger.settle(None, "t1", "k1", None, 0.2, july);
        // June is gone from memory once July is booked; July and the total remain.
        assert_eq!(ledger.spent("key", "k1", Period::Monthly, july), 0.2);
        assert_eq!(ledger.spent("key", "k1", Period::Monthly, june), 0.0);
        assert_eq!(ledger.spent("key", "k1", Period::Total, july), 1.2);
    }

    #[test]
    fn a_reservation_made_in_one_month_is_released_in_that_month() {
        let ledger = Ledger::new();
        let limits = vec![limit("key", "k1", 1.0, Period::Monthly)];
        let r = ledger.reserve("t1", "k1", None, &limits, 0.8, at(2025, 6, 30)).unwrap();
        ledger.settle(Some(r), "t1", "k1", None, 0.8, at(2025, 7, 1));
        assert_eq!(ledger.reserved("key", "k1", Period::Monthly, at(2025, 6, 30)), 0.0);
        assert_eq!(ledger.spent("key", "k1", Period::Monthly, at(2025, 7, 1)), 0.8);
    }

    #[test]
    fn limits_on_one_scope_share_a_reservation() {
        let ledger = Ledger::new();
        let now = Utc::now();
        let mut budget_usd = limit("key", "k1", 2.0, Period::Total);
        budget_usd.budget_id = None;
        let limits = vec![limit("key", "k1", 5.0, Period::Total), budget_usd];
        let r = ledger.reserve("t1", "k1", None, &limits, 1.5, now).unwrap();
        assert_eq!(ledger.reserved("key", "k1", Period::Total, now), 1.5);
        // The tighter of the two decides, and names itself.
        let err = ledger.reserve("t1", "k1", None, &limits, 1.0, now).unwrap_err();
        assert_eq!((err.budget_id, err.amount_usd), (None, 2.0));
        drop(r);
        // Floating drift is not a breach: ten dimes fit in a dollar.
        let dollar = vec![limit("tenant", "t1", 1.0, Period::Total)];
        let held: Vec<_> = (0..10).map(|_| ledger.reserve("t1", "k1", None, &dollar, 0.1, now)).collect();
        assert!(held.iter().all(Result::is_ok));
        assert!(ledger.reserve("t1", "k1", None, &dollar, 0.1, now).is_err());
    }

    /// An end user's monthly budget starts over with the month; its total one never does; the
    /// spend of one end user is not another's, and counts under its key, team and tenant.
    #[test]
    fn end_user_spend_resets_with_its_period() {
        let ledger = Ledger::new();
        let who = |u| ("t1", "k1", Some("team1"), Some(u));
        let monthly = [limit("end_user", "key:k1/alice", 1.0, Period::Monthly)];
        let total = [limit("end_user", "tenant:t1/alice", 1.0, Period::Total)];
        let dec = at(2025, 12, 31);
        let r = ledger.reserve("t1", "k1", Some("team1"), &monthly, 0.6, dec).unwrap();
        ledger.settle_as(Some(r), who("alice"), 0.6, dec);
        assert!(ledger.reserve("t1", "k1", Some("team1"), &monthly, 0.6, dec).is_err(), "0.6 + 0.6 > 1");
        assert!(ledger.reserve("t1", "k1", Some("team1"), &total, 0.6, dec).is_err(), "the tenant-wide entry too");
        let bob = [limit("end_user", "key:k1/bob", 1.0, Period::Monthly)];
        assert!(ledger.reserve("t1", "k1", Some("team1"), &bob, 0.6, dec).is_ok(), "bob has his own");
        let jan = at(2026, 1, 1);
        assert!(ledger.reserve("t1", "k1", Some("team1"), &monthly, 0.6, jan).is_ok(), "a new month");
        assert!(ledger.reserve("t1", "k1", Some("team1"), &total, 0.6, jan).is_err(), "total never resets");
        assert_eq!(ledger.spent("end_user", "team:team1/alice", Period::Total, jan), 0.6);
        assert_eq!(ledger.most_spent_by_an_end_user("key:k1", Period::Monthly, dec), 0.6);
        assert_eq!(ledger.most_spent_by_an_end_user("key:k1", Period::Monthly, jan), 0.0);
    }
}
