//! [`Cluster`]: the connection to the shared store, its health, and the tasks that send
//! admissions and settlements.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::ConnectionManager;

use super::metrics::METRICS;
use super::{admit, allowance, settle};
use crate::checks::budget::shared as budget;
use crate::checks::pipeline::shared::{Answer, Ask, BudgetEntry, SharedStore};
use crate::checks::pipeline::Cached;
#[cfg(test)]
use crate::checks::rate_limit::shared as rate;
use crate::config::{ClusterSection, OnRedisDown};
use crate::snapshot::SnapshotHandle;
use crate::store::Store;

pub struct Cluster {
    conn: ConnectionManager,
    /// What makes a connection for another runtime ([`Cluster::conn_here`]).
    client: redis::Client,
    conf: redis::aio::ConnectionManagerConfig,
    /// Prefix of every key, so deployments (and tests) can share one Redis.
    prefix: String,
    pub on_down: OnRedisDown,
    timeout: Duration,
    reservation_ttl_ms: i64,
    /// Cached answers in Redis too (`cluster.shared_cache`).
    pub shared_cache: bool,
    max_entry_bytes: usize,
    up: AtomicBool,
    /// Why it is down (no secrets: error kinds and addresses only).
    reason: Mutex<String>,
    /// Wakes the watcher at once (a call failed, spend is not loaded).
    wake: tokio::sync::Notify,
    /// The settlement queue (`settle`): one task sends it in batches.
    settler: tokio::sync::mpsc::Sender<settle::Op>,
    /// Where Redis is, without credentials.
    pub address: String,
    /// The admission script (`admit`), its queue, and the spend rebuild.
    admit: redis::Script,
    admissions: admit::Queue,
    /// Grants of busy lanes drawn on in this process (`allowance`).
    allowances: allowance::Allowances,
    /// This store, for the task that sends admission calls.
    me: std::sync::Weak<Cluster>,
    seed: redis::Script,
    missing: redis::Script,
    seed_end_users: redis::Script,
}

impl Cluster {
    /// The shared store of `cfg`, or `None` without `redis_url`. Does not wait for Redis:
    /// a store unreachable at start is down, with the fault behaviour, until it answers.
    pub fn connect(cfg: &ClusterSection, max_entry_bytes: usize) -> Result<Option<Arc<Cluster>>, String> {
        if cfg.redis_url.trim().is_empty() {
            return Ok(None);
        }
        let address = crate::secrets::url_shown(cfg.redis_url.trim());
        let client = redis::Client::open(cfg.redis_url.trim())
            .map_err(|e| format!("cluster.redis_url ({address}): {}", e.category()))?;
        let timeout = Duration::from_millis(cfg.redis_timeout_ms.max(1));
        let conf = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(200));
        let rt = crate::store::db_runtime();
        let conn = {
            let _in = rt.enter();
            ConnectionManager::new_lazy_with_config(client.clone(), conf.clone())
                .map_err(|e| format!("cluster.redis_url ({address}): {}", e.category()))?
        };
        METRICS.up.set(0);
        let (settler, queue) = tokio::sync::mpsc::channel(settle::QUEUE);
        let cluster = Arc::new_cyclic(|me| Cluster {
            me: me.clone(),
            conn,
            client,
            conf,
            prefix: cfg.redis_prefix.clone(),
            on_down: cfg.on_redis_down,
            timeout,
            reservation_ttl_ms: (cfg.reservation_ttl_seconds.max(1) * 1000) as i64,
            shared_cache: cfg.shared_cache,
            max_entry_bytes,
            up: AtomicBool::new(false),
            reason: Mutex::new("not reached yet".into()),
            wake: tokio::sync::Notify::new(),
            settler,
            address,
            admit: admit::script(),
            admissions: admit::Queue::default(),
            allowances: allowance::Allowances::new((cfg.reservation_ttl_seconds.max(1) * 1000) as i64),
            seed: budget::seed_script(),
            missing: budget::missing_script(),
            seed_end_users: budget::seed_end_users_script(),
        });
        rt.spawn(cluster.clone().run_settlements(queue));
        Ok(Some(cluster))
    }

    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    pub fn fail_open(&self) -> bool {
        self.on_down == OnRedisDown::Open
    }

    /// Why the store is down, for messages and `/status`.
    pub fn reason(&self) -> String {
        self.reason.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Counts a check decided without the store.
    pub fn fell_back(&self, check: &str) {
        METRICS.fallbacks.with_label_values(&[check, self.on_down.as_str()]).inc();
    }

    fn set_down(&self, why: String) {
        if self.up.swap(false, Ordering::Relaxed) {
            log::warn!("shared state ({}) unreachable: {why}; checks apply cluster.on_redis_down", self.address);
        }
        *self.reason.lock().unwrap_or_else(|e| e.into_inner()) = why;
        // What Redis granted may be gone with it (a restart): nothing is drawn on it again.
        self.allowances.clear();
        METRICS.up.set(0);
        self.wake.notify_one();
    }

    fn set_up(&self) {
        if !self.up.swap(true, Ordering::Relaxed) {
            log::info!("shared state ({}) reachable", self.address);
        }
        METRICS.up.set(1);
    }

    /// A call's error: down for I/O and timeouts; other errors (a script bug) are only logged.
    fn failed(&self, op: &'static str, e: &redis::RedisError) -> String {
        METRICS.errors.with_label_values(&[op]).inc();
        let why = format!("{op}: {}", e.category());
        if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal() {
            self.set_down(why.clone());
        } else {
            log::error!("shared state {op} failed: {e}");
        }
        why
    }

    fn timed_out(&self, op: &'static str) -> String {
        METRICS.errors.with_label_values(&[op]).inc();
        let why = format!("{op}: no answer within {} ms", self.timeout.as_millis());
        self.set_down(why.clone());
        why
    }

    fn key(&self, parts: std::fmt::Arguments<'_>) -> String {
        format!("{}{}", self.prefix, parts)
    }

    async fn answer(&self, asks: Vec<Ask>) -> Vec<Answer> {
        let n = asks.len();
        if !self.is_up() {
            return vec![Answer::Unavailable(self.reason()); n];
        }
        if let [Ask::Cache { key }] = asks.as_slice() {
            return match tokio::time::timeout(self.timeout, self.cache_get(key)).await {
                Ok(Ok(got)) => vec![Answer::Cache(got)],
                Ok(Err(e)) => vec![Answer::Unavailable(self.failed("cache", &e))],
                Err(_) => vec![Answer::Unavailable(self.timed_out("cache"))],
            };
        }
        match self.allowances.draw(&asks, Instant::now()) {
            Ok(drawn) => {
                METRICS.drawn.inc();
                drawn
            }
            Err(plans) => self.admit(asks, plans).await,
        }
    }

    /// Gives back what grants over in time did not use (`allowance`), through the settlement
    /// batch.
    fn sweep(&self) {
        self.sweep_at(Instant::now())
    }

    fn sweep_at(&self, now: Instant) {
        self.give_back_later(self.allowances.sweep(now));
    }

    /// Gives `returned` back through the settlement batch.
    fn give_back_later(&self, returned: Vec<allowance::Returned>) {
        for op in self.returned_ops(returned) {
            self.settle(op);
        }
    }

    /// Shutting down: what the grants did not use goes back to Redis at once (one call,
    /// bounded by the timeout; lost with the process otherwise, which only keeps it counted:
    /// the rate window's minute, the budget hold's TTL).
    async fn give_back(&self) {
        let ops = self.returned_ops(self.allowances.close());
        if ops.is_empty() || !self.is_up() {
            return;
        }
        self.send_settlements(&settle::script(), &ops).await;
    }

    fn returned_ops(&self, returned: Vec<allowance::Returned>) -> Vec<settle::Op> {
        let mut ops = Vec::with_capacity(returned.len());
        for r in returned {
            match r {
                allowance::Returned::Rate { key_id, from, req, tok } => {
                    ops.push(self.rate_op(&key_id, from, -tok, -req))
                }
                allowance::Returned::Budget { entries, bucket, amount } => {
                    ops.push(self.budget_op(&entries, bucket, amount, 0))
                }
            }
        }
        ops
    }

    /// A connection whose driver runs on the calling runtime (one per gateway worker thread):
    /// a round trip then wakes no thread of another runtime. Why: with the driver on the
    /// database runtime each admission crossed runtimes twice (futex wake-ups).
    fn conn_here(&self) -> ConnectionManager {
        thread_local! {
            static HERE: std::cell::RefCell<Option<(tokio::runtime::Id, ConnectionManager)>> =
                const { std::cell::RefCell::new(None) };
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return self.conn.clone() };
        HERE.with(|here| {
            let mut here = here.borrow_mut();
            if let Some((id, c)) = here.as_ref() {
                if *id == rt.id() {
                    return c.clone();
                }
            }
            match ConnectionManager::new_lazy_with_config(self.client.clone(), self.conf.clone()) {
                Ok(c) => {
                    *here = Some((rt.id(), c.clone()));
                    c
                }
                Err(_) => self.conn.clone(),
            }
        })
    }

    async fn cache_get(&self, key: &[u8; 32]) -> redis::RedisResult<Option<Cached>> {
        let mut conn = self.conn_here();
        let k = self.key(format_args!("c:{}", hex::encode(key)));
        let got: Option<Vec<u8>> = redis::cmd("GET").arg(k).query_async(&mut conn).await?;
        Ok(got.and_then(|b| decode_cached(&b)))
    }

    /// One admission call for `requests` (rate and budget asks), bounded by the timeout: per
    /// request its answers, or `Unavailable` for every ask when the call failed.
    async fn decide(&self, requests: &[admit::Request<'_>]) -> Vec<admit::Decided> {
        let unavailable = |why: String| {
            requests
                .iter()
                .map(|(r, _)| (vec![Answer::Unavailable(why.clone()); r.len()], vec![None; r.len()]))
                .collect()
        };
        if !self.is_up() {
            return unavailable(self.reason());
        }
        let mut conn = self.conn_here();
        let inv = admit::invocation(&self.admit, &self.prefix, self.reservation_ttl_ms, 0, requests);
        match tokio::time::timeout(self.timeout, inv.invoke_async::<Vec<redis::Value>>(&mut conn)).await {
            Ok(Ok(reply)) => {
                let mut reply = reply.into_iter();
                requests
                    .iter()
                    .map(|(asks, _)| admit::answers(&self.wake, asks, reply.next().unwrap_or(redis::Value::Nil)))
                    .collect()
            }
            Ok(Err(e)) => unavailable(self.failed("admit", &e)),
            Err(_) => unavailable(self.timed_out("admit")),
        }
    }

    /// Queues a settlement for the batch task; never waits (a full queue drops it, counted).
    fn settle(&self, op: settle::Op) {
        if !self.is_up() || self.settler.try_send(op).is_err() {
            METRICS.dropped.inc();
        }
    }

    /// Moves a shared rate reservation from its estimate to the tokens really used.
    pub fn settle_rate(&self, key_id: &str, start_ms: i64, delta: i64) {
        if delta != 0 {
            self.settle(self.rate_op(key_id, start_ms, delta, 0));
        }
    }

    /// Adds the request's real cost to the budgets it was held against and gives its holds
    /// back, in one step of a settlement batch. Spend of scopes without a budget stays in the
    /// database only (loaded when a budget appears).
    pub fn settle_budget(&self, held: Option<budget::Held>, cost_usd: f64) {
        let Some(h) = held else { return };
        let cost = budget::nanos(cost_usd).max(0);
        if cost == 0 && h.amount == 0 {
            return;
        }
        self.settle(self.budget_op(&h.entries, h.bucket, h.amount, cost));
    }

    /// `delta` tokens and `req` requests moved on the key's window starting at `from`.
    fn rate_op(&self, key_id: &str, from: i64, delta: i64, req: i64) -> settle::Op {
        settle::Op::Rate { key: self.key(format_args!("rl:{key_id}")), from, delta, req }
    }

    /// `amount` nano-dollars held in `bucket` given back to `entries`, `cost` added to their spend.
    fn budget_op(&self, entries: &[BudgetEntry], bucket: i64, amount: i64, cost: i64) -> settle::Op {
        let entries =
            entries.iter().map(|e| budget::hash_key(&self.prefix, e.scope, &e.scope_id, &e.period_key)).collect();
        settle::Op::Budget { entries, bucket, ttl_ms: self.reservation_ttl_ms, amount, cost }
    }

    /// Keeps an answer in the shared cache for `ttl` (if it is small enough).
    pub fn cache_put(&self, key: [u8; 32], answer: &Cached, ttl: Duration) {
        if !self.shared_cache || answer.body.len() > self.max_entry_bytes || ttl.is_zero() {
            return;
        }
        let ttl_ms = ttl.as_millis().min(u64::MAX as u128) as u64;
        self.settle(settle::Op::CachePut {
            key: self.key(format_args!("c:{}", hex::encode(key))),
            value: encode_cached(answer),
            ttl_ms,
        });
    }

    /// The watcher's first round, before the gateway listens: a Redis that answers is in use
    /// from the first request (not from the watcher's first tick).
    pub async fn first_check(&self, store: &Store, snapshot: &SnapshotHandle) {
        match tokio::time::timeout(self.timeout.max(Duration::from_secs(2)), self.check(store, snapshot)).await {
            Ok(Ok(())) => self.set_up(),
            Ok(Err(why)) => self.set_down(why),
            Err(_) => self.set_down("no answer at start".into()),
        }
    }

    /// Pings, catches up with Redis coming and going, and rebuilds budget spend from the
    /// database when Redis has lost it; until `shutdown` says stop.
    pub async fn watch(
        self: Arc<Self>,
        store: Store,
        snapshot: Arc<SnapshotHandle>,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut last = Instant::now();
        loop {
            let wait = if self.is_up() { Duration::from_secs(1) } else { Duration::from_millis(200) };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.wake.notified() => {}
                _ = shutdown.changed() => {
                    self.give_back().await;
                    return;
                }
            }
            if !self.is_up() {
                METRICS.down_seconds.inc_by(last.elapsed().as_secs_f64());
            }
            last = Instant::now();
            match tokio::time::timeout(self.timeout.max(Duration::from_millis(500)), self.check(&store, &snapshot))
                .await
            {
                Ok(Ok(())) => {
                    self.set_up();
                    self.sweep();
                }
                Ok(Err(why)) => self.set_down(why),
                Err(_) => self.set_down(format!(
                    "no answer within {} ms",
                    self.timeout.max(Duration::from_millis(500)).as_millis()
                )),
            }
        }
    }

    /// One round of the watcher: the budget entries the snapshot names that Redis has not
    /// loaded (one script; a ping when there are none), then their spend from the database.
    async fn check(&self, store: &Store, snapshot: &SnapshotHandle) -> Result<(), String> {
        let mut conn = self.conn.clone();
        let now = chrono::Utc::now();
        let snap = snapshot.load();
        self.seed_end_users(store, &mut conn, &snap.budgets, now).await?;
        let mut entries: Vec<(String, &'static str, String, crate::checks::budget::Period)> = snap
            .budgets
            .all()
            .map(|l| {
                (
                    budget::hash_key(&self.prefix, l.scope, &l.scope_id, &l.period.key(now)),
                    l.scope,
                    l.scope_id.clone(),
                    l.period,
                )
            })
            .collect();
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        entries.dedup_by(|a, b| a.0 == b.0);
        if entries.is_empty() {
            return redis::cmd("PING")
                .query_async::<()>(&mut conn)
                .await
                .map_err(|e| format!("ping: {}", e.category()));
        }
        let mut inv = self.missing.prepare_invoke();
        for e in &entries {
            inv.key(&e.0);
        }
        let missing: Vec<usize> = inv.invoke_async(&mut conn).await.map_err(|e| format!("ping: {}", e.category()))?;
        if missing.is_empty() {
            return Ok(());
        }
        let wanted: Vec<_> = missing.iter().filter_map(|i| entries.get(i.wrapping_sub(1))).collect();
        self.seed(store, &mut conn, &wanted, now).await?;
        log::info!(
            "shared state ({}): spend of {} budget entries loaded from the database",
            self.address,
            wanted.len()
        );
        Ok(())
    }

    /// Writes the spend `key_spend` holds for `entries` (hash, scope, id, period) into Redis,
    /// each figure the larger of the database's and what Redis already counts, and marks them
    /// loaded.
    async fn seed(
        &self,
        store: &Store,
        conn: &mut ConnectionManager,
        entries: &[&(String, &'static str, String, crate::checks::budget::Period)],
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<(), String> {
        let periods = [crate::checks::budget::TOTAL.to_string(), crate::checks::budget::month_key(now)];
        let rows = crate::store::spend::current(store, &periods).await.map_err(|e| format!("seed: database: {e}"))?;
        let mut sums: std::collections::HashMap<String, i64> = Default::default();
        for r in rows {
            let mut add = |scope: &str, id: &str| {
                *sums.entry(budget::hash_key(&self.prefix, scope, id, &r.period)).or_default() +=
                    budget::nanos(r.cost_usd);
            };
            add("key", &r.key_id);
            if let Some(team) = &r.team_id {
                add("team", team);
            }
            add("tenant", &r.tenant_id);
        }
        for chunk in entries.chunks(500) {
            let mut inv = self.seed.prepare_invoke();
            for (hash, _, _, period) in chunk.iter().map(|e| &**e) {
                let ttl = if *period == crate::checks::budget::Period::Monthly { budget::MONTH_TTL_SECONDS } else { 0 };
                inv.key(hash).arg(sums.get(hash).copied().unwrap_or(0)).arg(ttl);
            }
            let _: i64 = inv.invoke_async(conn).await.map_err(|e| format!("seed: {}", e.category()))?;
        }
        Ok(())
    }
}

/// End-user budgets: each end user's entry starts at zero in Redis (there are too many to load
/// ahead); the ones the database has spend for are raised to it once per set of end-user
/// budgets and month, and again whenever Redis lost the marker (restart, flush).
impl Cluster {
    async fn seed_end_users(
        &self,
        store: &Store,
        conn: &mut ConnectionManager,
        book: &crate::checks::budget::BudgetBook,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<(), String> {
        use std::hash::{Hash, Hasher};
        let mut rules: Vec<_> = book.end_user_rules().collect();
        if rules.is_empty() {
            return Ok(());
        }
        rules.sort_by(|a, b| (a.0, &a.1.budget_id).cmp(&(b.0, &b.1.budget_id)));
        let month = crate::checks::budget::month_key(now);
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for (owner, r) in &rules {
            (owner, &r.end_user, r.period.as_str()).hash(&mut h);
        }
        month.hash(&mut h);
        let marker = self.key(format_args!("eu-seeded:{:016x}", h.finish()));
        let seen: bool =
            redis::cmd("EXISTS").arg(&marker).query_async(conn).await.map_err(|e| format!("ping: {}", e.category()))?;
        if seen {
            return Ok(());
        }
        let periods = [crate::checks::budget::TOTAL.to_string(), month.clone()];
        let rows = crate::store::spend::end_users_current(store, &periods)
            .await
            .map_err(|e| format!("seed: database: {e}"))?;
        let sums = self.end_user_sums(&rules, &rows, now);
        let mut inv = self.seed_end_users.prepare_invoke();
        inv.key(&marker);
        for (hash, (nanos, ttl)) in &sums {
            inv.key(hash).arg(*nanos).arg(*ttl);
        }
        let n: i64 = inv.invoke_async(conn).await.map_err(|e| format!("seed: {}", e.category()))?;
        let _: () = redis::cmd("SET")
            .arg(&marker)
            .arg(1)
            .arg("EX")
            .arg(budget::MONTH_TTL_SECONDS)
            .query_async(conn)
            .await
            .map_err(|e| format!("seed: {}", e.category()))?;
        log::info!("shared state ({}): spend of {n} end-user budget entries loaded from the database", self.address);
        Ok(())
    }

    /// Per end-user entry hash the database's spend (nanos) and its expiry (seconds, 0 none).
    fn end_user_sums(
        &self,
        rules: &[(&str, &crate::checks::budget::EndUserRule)],
        rows: &[crate::store::spend::EndUserRow],
        now: chrono::DateTime<chrono::Utc>,
    ) -> std::collections::BTreeMap<String, (i64, i64)> {
        use crate::checks::budget::{end_user_scope_id, Period};
        let mut sums = std::collections::BTreeMap::new();
        for r in rows {
            let owners = [
                Some(format!("key:{}", r.key_id)),
                r.team_id.as_ref().map(|t| format!("team:{t}")),
                Some(format!("tenant:{}", r.tenant_id)),
            ];
            for owner in owners.iter().flatten() {
                let applies = rules.iter().filter(|(o, rule)| {
                    o == owner
                        && rule.period.key(now) == r.period
                        && rule.end_user.as_ref().is_none_or(|u| *u == r.end_user)
                });
                // Two rules on one entry (every end user, and this one) count a row once; rows
                // of several keys add up under their team and tenant.
                let mut hashes: Vec<(String, i64)> = applies
                    .map(|(_, rule)| {
                        let ttl = if rule.period == Period::Monthly { budget::MONTH_TTL_SECONDS } else { 0 };
                        let id = end_user_scope_id(owner, &r.end_user);
                        (budget::hash_key(&self.prefix, "end_user", &id, &r.period), ttl)
                    })
                    .collect();
                hashes.dedup_by(|a, b| a.0 == b.0);
                for (hash, ttl) in hashes {
                    sums.entry(hash).or_insert((0, ttl)).0 += budget::nanos(r.cost_usd);
                }
            }
        }
        sums
    }
}

/// The admission queue's task and the settlement batches' (`admit`, `settle`).
impl Cluster {
    /// Decides one request's asks in the next call (started here when none is in flight), with
    /// their plans (`allowance`).
    async fn admit(&self, asks: Vec<Ask>, plans: Vec<allowance::Plan>) -> Vec<Answer> {
        let n = asks.len();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let start = {
            let mut q = self.admissions.lock();
            q.waiting.push(admit::Waiting { asks, plans, tx });
            !std::mem::replace(&mut q.busy, true)
        };
        if start {
            match self.me.upgrade() {
                // A task of its own, so that a request that goes away does not take the call of
                // the others with it.
                Some(me) => drop(tokio::spawn(me.run_admissions())),
                None => {
                    let mut q = self.admissions.lock();
                    q.busy = false;
                    q.waiting.clear();
                }
            }
        }
        rx.await.unwrap_or_else(|_| vec![Answer::Unavailable("the admission call was cancelled".into()); n])
    }

    /// Sends one call for what waits, until nothing does.
    async fn run_admissions(self: Arc<Self>) {
        // Whatever ends this task (its runtime stopping too), the queue is left free: what still
        // waits is dropped, and its requests answer `Unavailable`.
        struct Free<'a>(&'a admit::Queue);
        impl Drop for Free<'_> {
            fn drop(&mut self) {
                let mut q = self.0.lock();
                q.busy = false;
                q.waiting.clear();
            }
        }
        let free = Free(&self.admissions);
        loop {
            let batch: Vec<admit::Waiting> = {
                let mut q = self.admissions.lock();
                if q.waiting.is_empty() {
                    // Under the lock: a request queued after this starts the next task.
                    q.busy = false;
                    drop(q);
                    std::mem::forget(free);
                    return;
                }
                let n = q.waiting.len().min(admit::BATCH);
                q.waiting.drain(..n).collect()
            };
            self.admissions.calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let requests: Vec<admit::Request<'_>> =
                batch.iter().map(|w| (w.asks.as_slice(), w.plans.as_slice())).collect();
            let mut replies = self.decide(&requests).await.into_iter();
            for w in batch {
                let n = w.asks.len();
                let (answers, grants) = replies.next().unwrap_or_else(|| {
                    (vec![Answer::Unavailable("no reply for this request".into()); n], vec![None; n])
                });
                // Here, not in the request: a request that went away still ends its lane's refill.
                if w.plans.iter().any(|p| p.want > 0) {
                    let stale = self.allowances.install(&w.asks, &w.plans, &answers, &grants);
                    self.give_back_later(stale);
                }
                let _ = w.tx.send(answers);
            }
        }
    }

    /// Sends what is queued, one call per batch, until every sender is gone.
    async fn run_settlements(self: Arc<Self>, mut rx: tokio::sync::mpsc::Receiver<settle::Op>) {
        let script = settle::script();
        let mut ops = Vec::with_capacity(settle::BATCH);
        while let Some(first) = rx.recv().await {
            ops.push(first);
            settle::take_queued(&mut rx, &mut ops);
            if ops.len() < settle::BATCH {
                tokio::time::sleep(settle::LINGER).await;
                settle::take_queued(&mut rx, &mut ops);
            }
            if self.is_up() {
                self.send_settlements(&script, &settle::merge(std::mem::take(&mut ops))).await;
            } else {
                METRICS.dropped.inc_by(ops.len() as u64);
            }
            ops.clear();
        }
    }

    /// One call carrying `ops`, bounded by the timeout (a failure marks the store down).
    async fn send_settlements(&self, script: &redis::Script, ops: &[settle::Op]) {
        let mut conn = self.conn.clone();
        match tokio::time::timeout(self.timeout, settle::invocation(script, 0, ops).invoke_async::<i64>(&mut conn))
            .await
        {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                self.failed("settle", &e);
            }
            Err(_) => {
                self.timed_out("settle");
            }
        }
    }
}

impl SharedStore for Cluster {
    fn ask(&self, asks: Vec<Ask>) -> Pin<Box<dyn Future<Output = Vec<Answer>> + Send + '_>> {
        Box::pin(self.answer(asks))
    }
}

/// The entries a request reserves against: one per scope, id and period, at the smallest
/// limit on it (a key's `budgetUsd` and a key budget row count the request once).
pub fn budget_entries(limits: &[crate::checks::budget::Limit], now: chrono::DateTime<chrono::Utc>) -> Vec<BudgetEntry> {
    let mut out: Vec<BudgetEntry> = Vec::with_capacity(limits.len());
    for l in limits {
        let period_key = l.period.key(now);
        match out.iter_mut().find(|e| e.scope == l.scope && e.scope_id == l.scope_id && e.period_key == period_key) {
            Some(e) => e.limit_usd = e.limit_usd.min(l.amount_usd),
            None => out.push(BudgetEntry {
                scope: l.scope,
                scope_id: l.scope_id.clone(),
                period_key,
                limit_usd: l.amount_usd,
            }),
        }
    }
    out
}

/// A cached answer as Redis keeps it: one JSON line of metadata, then the body's bytes.
fn encode_cached(a: &Cached) -> Vec<u8> {
    let u = &a.usage;
    let meta = serde_json::json!({
        "status": a.status,
        "contentType": a.content_type,
        "usage": [u.prompt_tokens, u.completion_tokens, u.cache_read_tokens, u.cache_write_tokens,
                  u.cache_write_1h_tokens, u.reasoning_tokens],
        "costUsd": a.cost_usd,
    });
    let mut out = serde_json::to_vec(&meta).unwrap_or_default();
    out.push(b'\n');
    out.extend_from_slice(&a.body);
    out
}

fn decode_cached(b: &[u8]) -> Option<Cached> {
    let nl = b.iter().position(|&c| c == b'\n')?;
    let meta: serde_json::Value = serde_json::from_slice(&b[..nl]).ok()?;
    let u: Vec<u64> = meta["usage"].as_array()?.iter().map(|v| v.as_u64().unwrap_or(0)).collect();
    let [prompt, completion, cache_read, cache_write, cache_write_1h, reasoning] = <[u64; 6]>::try_from(u).ok()?;
    Some(Cached {
        status: u16::try_from(meta["status"].as_u64()?).ok()?,
        content_type: meta["contentType"].as_str()?.to_string(),
        body: bytes::Bytes::copy_from_slice(&b[nl + 1..]),
        usage: crate::providers::Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            cache_read_tokens: cache_read,
            cache_write_tokens: cache_write,
            cache_write_1h_tokens: cache_write_1h,
            reasoning_tokens: reasoning,
        },
        cost_usd: meta["costUsd"].as_f64()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_answers_round_trip() {
        let a = Cached {
            status: 200,
            content_type: "text/event-stream".into(),
            body: bytes::Bytes::from_static(b"data: {\"x\":1}\n\ndata: [DONE]\n\n"),
            usage: crate::providers::Usage {
                prompt_tokens: 7,
                completion_tokens: 3,
                cache_read_tokens: 2,
                ..Default::default()
            },
            cost_usd: 0.000125,
        };
        let b = decode_cached(&encode_cached(&a)).unwrap();
        assert_eq!((b.status, b.content_type.as_str(), &b.body[..]), (200, "text/event-stream", &a.body[..]));
        assert_eq!(b.usage, a.usage);
        assert_eq!(b.cost_usd, a.cost_usd);
        assert!(decode_cached(b"not a cached answer").is_none());
    }

    #[test]
    fn one_entry_per_scope_and_period_at_the_smallest_limit() {
        use crate::checks::budget::{Limit, Period};
        let now = chrono::Utc::now();
        let l = |scope, id: &str, amount, period| Limit {
            budget_id: None,
            scope,
            scope_id: id.into(),
            amount_usd: amount,
            period,
        };
        let e = budget_entries(
            &[
                l("key", "k", 5.0, Period::Total),
                l("key", "k", 2.0, Period::Total),
                l("tenant", "t", 9.0, Period::Monthly),
            ],
            now,
        );
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].limit_usd, 2.0);
        assert_eq!(e[1].period_key, crate::checks::budget::month_key(now));
    }

    /// A store on the machine's Redis under `prefix`, taken as up.
    fn up_on(prefix: &str) -> Arc<Cluster> {
        let cfg = ClusterSection {
            redis_url: "redis://127.0.0.1:6379".into(),
            redis_prefix: prefix.into(),
            redis_timeout_ms: 5_000,
            ..Default::default()
        };
        let c = Cluster::connect(&cfg, 1 << 20).unwrap().unwrap();
        c.set_up();
        c
    }

    /// Group admission: requests queued while a call is in flight go together in the next call,
    /// and each is decided as if alone: exactly `rpm` of them pass, a request its rate limit
    /// refuses holds no budget (its budget ask is not decided), the admitted ones hold theirs.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn queued_admissions_share_one_call_and_each_is_decided_alone() {
        use crate::checks::pipeline::shared::SharedStore;
        use crate::checks::rate_limit::TokenAsk;
        let Some(mut conn) = rate::tests::redis().await else { return };
        let prefix = format!("tollgate-test-{}:", uuid::Uuid::new_v4().simple());
        let c = up_on(&prefix);
        // A budget too small for a grant (`allowance`): what is held is the admitted requests'.
        let entry = BudgetEntry { scope: "key", scope_id: "k1".into(), period_key: "total".into(), limit_usd: 5.0 };
        let hash = budget::hash_key(&prefix, "key", "k1", "total");
        let _: () = redis::cmd("HSET").arg(&hash).arg("ok").arg(1).query_async(&mut conn).await.unwrap();

        // As if a call were in flight: the 40 requests queue behind it.
        c.admissions.lock().busy = true;
        let tasks: Vec<_> = (0..40)
            .map(|_| {
                let c = c.clone();
                let asks = vec![
                    Ask::Rate { key_id: "k1".into(), rpm: Some(7), tpm: None, ask: TokenAsk::new(10, Some(10), 1024) },
                    Ask::Budget { entries: vec![entry.clone()], amount_usd: 0.5 },
                ];
                tokio::spawn(async move { c.ask(asks).await })
            })
            .collect();
        while c.admissions.lock().waiting.len() < 40 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let calls = c.admissions.calls.load(Ordering::Relaxed);
        // The call in flight ends: the next one carries everything queued.
        tokio::spawn(c.clone().run_admissions());
        let mut admitted = 0;
        for t in tasks {
            let answers = t.await.unwrap();
            match answers.as_slice() {
                [Answer::Rate(r), Answer::Budget(Ok(_))] if r.admitted => admitted += 1,
                [Answer::Rate(r)] if !r.admitted => {}
                other => panic!("unexpected answers {other:?}"),
            }
        }
        assert_eq!(admitted, 7, "a key limited to 7 rpm gets 7 of 40");
        assert_eq!(c.admissions.calls.load(Ordering::Relaxed) - calls, 1, "the 40 went in one call");
        assert!(!c.admissions.lock().busy, "the queue is free again");
        let fields: std::collections::HashMap<String, i64> =
            redis::cmd("HGETALL").arg(&hash).query_async(&mut conn).await.unwrap();
        let held: i64 = fields.iter().filter(|(k, _)| k.starts_with("r:")).map(|(_, v)| *v).sum();
        assert_eq!(held, 7 * budget::nanos(0.5), "only the admitted requests hold budget: {fields:?}");

        // A lone request afterwards goes at once, in a call of its own.
        let one = c
            .ask(vec![Ask::Rate { key_id: "k2".into(), rpm: Some(1), tpm: None, ask: TokenAsk::new(1, Some(1), 1024) }])
            .await;
        assert!(matches!(one.as_slice(), [Answer::Rate(r)] if r.admitted), "{one:?}");
        let _: () = redis::cmd("DEL")
            .arg(&hash)
            .arg(format!("{prefix}rl:k1"))
            .arg(format!("{prefix}rl:k2"))
            .query_async(&mut conn)
            .await
            .unwrap();
    }

    /// The equivalence test of group admission and batched settlement: the same requests
    /// (three keys, shared budget entries, refusals by either check) decided in one call and in
    /// one call each, on the same clock, get the same answers and leave the same hashes; so do
    /// their settlements.
    #[tokio::test]
    async fn one_call_for_many_requests_decides_as_one_call_each() {
        use crate::checks::rate_limit::TokenAsk;
        use std::collections::HashMap;
        let Some(mut conn) = rate::tests::redis().await else { return };
        let run = uuid::Uuid::new_v4().simple().to_string();
        let cluster = |name: &str| {
            let cfg = ClusterSection {
                redis_url: "redis://127.0.0.1:6379".into(),
                redis_prefix: format!("tollgate-test-{run}-{name}:"),
                ..Default::default()
            };
            Cluster::connect(&cfg, 1 << 20).unwrap().unwrap()
        };
        let (together, alone) = (cluster("together"), cluster("alone"));
        let now = 1_700_000_040_000i64 + 30_000;
        let entry = |scope, id: &str, limit_usd| BudgetEntry {
            scope,
            scope_id: id.into(),
            period_key: "total".into(),
            limit_usd,
        };
        let (tenant, team) = (entry("tenant", "t", 1.6), entry("team", "m", 0.8));
        let hashes = |c: &Cluster| {
            let mut h: Vec<String> = ["rl:a", "rl:b", "rl:c"].iter().map(|k| c.key(format_args!("{k}"))).collect();
            h.extend([&tenant, &team].map(|e| budget::hash_key(&c.prefix, e.scope, &e.scope_id, &e.period_key)));
            h
        };
        for c in [&together, &alone] {
            for h in &hashes(c)[3..] {
                let _: () = redis::cmd("HSET")
                    .arg(h)
                    .arg("ok")
                    .arg(1)
                    .arg("spent")
                    .arg(budget::nanos(0.4))
                    .query_async(&mut conn)
                    .await
                    .unwrap();
            }
        }
        let requests: Vec<Vec<Ask>> = (0..60u64)
            .map(|i| {
                let key = ["a", "b", "c"][(i % 3) as usize];
                let own = if i % 4 == 0 { Some(1500 + i * 10) } else { None };
                let rate = Ask::Rate {
                    key_id: key.into(),
                    rpm: Some(12),
                    tpm: Some(9000),
                    ask: TokenAsk::new(100 + i * 37 % 300, own, 1024),
                };
                let entries = if i % 2 == 0 { vec![tenant.clone(), team.clone()] } else { vec![tenant.clone()] };
                vec![rate, Ask::Budget { entries, amount_usd: 0.05 + (i % 5) as f64 * 0.01 }]
            })
            .collect();
        let refs: Vec<admit::Request<'_>> = requests.iter().map(|r| (r.as_slice(), &[][..])).collect();
        let one: Vec<redis::Value> =
            admit::invocation(&together.admit, &together.prefix, together.reservation_ttl_ms, now, &refs)
                .invoke_async(&mut conn)
                .await
                .unwrap();
        let mut each = Vec::new();
        for r in &refs {
            let mut v: Vec<redis::Value> =
                admit::invocation(&alone.admit, &alone.prefix, alone.reservation_ttl_ms, now, &[*r])
                    .invoke_async(&mut conn)
                    .await
                    .unwrap();
            each.push(v.remove(0));
        }
        assert!(one == each, "the answers differ:\n{one:?}\n{each:?}");

        // Both checks refused some and admitted others.
        let answers: Vec<Vec<Answer>> =
            refs.iter().zip(one).map(|((asks, _), v)| admit::answers(&together.wake, asks, v).0).collect();
        let count = |f: &dyn Fn(&[Answer]) -> bool| answers.iter().filter(|a| f(a)).count();
        let rate_refused = count(&|a| matches!(a, [Answer::Rate(r)] if !r.admitted));
        let budget_refused = count(&|a| matches!(a, [Answer::Rate(_), Answer::Budget(Err(_))]));
        let admitted = count(&|a| matches!(a, [Answer::Rate(_), Answer::Budget(Ok(_))]));
        assert!(rate_refused > 0 && budget_refused > 0 && admitted > 0, "{rate_refused} {budget_refused} {admitted}");
        assert_eq!(rate_refused + budget_refused + admitted, 60);

        // Their settlements: the tokens really used and the cost, with the holds given back.
        let ops = |c: &Cluster| -> Vec<settle::Op> {
            let mut ops = Vec::new();
            for (i, (asks, a)) in requests.iter().zip(&answers).enumerate() {
                let [Answer::Rate(r), Answer::Budget(Ok(bucket))] = a.as_slice() else { continue };
                let Ask::Budget { entries, amount_usd } = &asks[1] else { unreachable!() };
                let key = ["a", "b", "c"][i % 3];
                let delta = (i as i64 * 53 % 700) - r.tokens as i64;
                ops.push(settle::Op::Rate {
                    key: c.key(format_args!("rl:{key}")),
                    from: r.before.start_ms,
                    delta,
                    req: 0,
                });
                ops.push(settle::Op::Budget {
                    entries: entries
                        .iter()
                        .map(|e| budget::hash_key(&c.prefix, e.scope, &e.scope_id, &e.period_key))
                        .collect(),
                    bucket: *bucket,
                    ttl_ms: c.reservation_ttl_ms,
                    amount: budget::nanos(*amount_usd),
                    cost: budget::nanos(amount_usd * (i % 3) as f64 / 2.0),
                });
            }
            ops
        };
        let script = settle::script();
        let later = now + 700;
        let _: i64 = settle::invocation(&script, later, &ops(&together)).invoke_async(&mut conn).await.unwrap();
        for op in ops(&alone) {
            let _: i64 = settle::invocation(&script, later, &[op]).invoke_async(&mut conn).await.unwrap();
        }
        for (a, b) in hashes(&together).iter().zip(hashes(&alone)) {
            let x: HashMap<String, String> = redis::cmd("HGETALL").arg(a).query_async(&mut conn).await.unwrap();
            let y: HashMap<String, String> = redis::cmd("HGETALL").arg(&b).query_async(&mut conn).await.unwrap();
            assert!(!x.is_empty(), "{a} was written");
            assert_eq!(x, y, "{a} vs {b}");
            let _: () = redis::cmd("DEL").arg(a).arg(&b).query_async(&mut conn).await.unwrap();
        }
    }

    /// Allowances (`allowance`): a busy key's requests drawn on grants take few calls, and once
    /// the grants are given back Redis counts exactly the requests admitted and the spend
    /// settled; a key near its limit gets no grant (every request decided in Redis); two
    /// instances taking turns on one key admit exactly its limit between them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn grants_take_few_calls_and_redis_still_counts_exactly() {
        use crate::checks::pipeline::shared::SharedStore;
        use crate::checks::rate_limit::TokenAsk;
        use std::collections::HashMap;
        let Some(mut conn) = rate::tests::redis().await else { return };
        let prefix = format!("tollgate-test-{}:", uuid::Uuid::new_v4().simple());
        let a = up_on(&prefix);
        let entry =
            BudgetEntry { scope: "tenant", scope_id: "t".into(), period_key: "total".into(), limit_usd: 1000.0 };
        let hash = budget::hash_key(&prefix, "tenant", "t", "total");
        let _: () = redis::cmd("HSET").arg(&hash).arg("ok").arg(1).query_async(&mut conn).await.unwrap();
        let asks = |key: &str, rpm: u64| {
            vec![
                Ask::Rate {
                    key_id: key.into(),
                    rpm: Some(rpm),
                    tpm: Some(100_000_000),
                    ask: TokenAsk::new(10, None, 100),
                },
                Ask::Budget { entries: vec![entry.clone()], amount_usd: 0.001 },
            ]
        };
        let calls = |c: &Cluster| c.admissions.calls.load(Ordering::Relaxed);

        let mut held = Vec::new();
        for _ in 0..400 {
            let got = a.ask(asks("busy", 1_000_000)).await;
            let [Answer::Rate(r), Answer::Budget(Ok(bucket))] = got.as_slice() else { panic!("{got:?}") };
            assert!(r.admitted);
            held.push((r.before.start_ms, r.tokens, *bucket));
        }
        let made = calls(&a);
        println!("{made} admission calls for 400 requests");
        assert!(made < 40, "{made} calls for 400 requests of a busy key");
        for (start, tokens, bucket) in &held {
            a.settle_rate("busy", *start, 10 - *tokens as i64);
            let h = budget::Held { entries: vec![entry.clone()], amount: budget::nanos(0.001), bucket: *bucket };
            a.settle_budget(Some(h), 0.0005);
        }
        a.sweep_at(Instant::now() + 2 * allowance::LIFE);
        let window = format!("{prefix}rl:busy");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let w: HashMap<String, i64> = redis::cmd("HGETALL").arg(&window).query_async(&mut conn).await.unwrap();
            let b: HashMap<String, i64> = redis::cmd("HGETALL").arg(&hash).query_async(&mut conn).await.unwrap();
            let f = |m: &HashMap<String, i64>, k: &str| m.get(k).copied().unwrap_or(0);
            let requests = f(&w, "rp") + f(&w, "rc");
            let tokens = f(&w, "tp") + f(&w, "tc");
            let holds: i64 = b.iter().filter(|(k, _)| k.starts_with("r:")).map(|(_, v)| *v).sum();
            if (requests, tokens, f(&b, "spent"), holds) == (400, 4000, 400 * budget::nanos(0.0005), 0) {
                break;
            }
            assert!(Instant::now() < deadline, "window {w:?}, budget {b:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        // Near its limit: no grant, every request decided in Redis, exactly the limit admitted.
        let before = calls(&a);
        let mut admitted = 0;
        for _ in 0..60 {
            if matches!(a.ask(asks("near", 50)).await.as_slice(), [Answer::Rate(r), _] if r.admitted) {
                admitted += 1;
            }
        }
        assert_eq!((admitted, calls(&a) - before), (50, 60));

        // Two instances taking turns: exactly the limit between them, grants or not.
        let b = up_on(&prefix);
        let mut admitted = [0, 0];
        for i in 0..600 {
            let c = if i % 2 == 0 { &a } else { &b };
            if matches!(c.ask(asks("shared", 400)).await.as_slice(), [Answer::Rate(r), _] if r.admitted) {
                admitted[i % 2] += 1;
            }
        }
        assert_eq!(admitted[0] + admitted[1], 400, "{admitted:?}");
        let mut del = redis::cmd("DEL");
        del.arg(&hash);
        for k in ["busy", "near", "shared"] {
            del.arg(format!("{prefix}rl:{k}"));
        }
        let _: () = del.query_async(&mut conn).await.unwrap();
    }

    /// The equivalence test of allowances: one instance drawing on grants and one deciding
    /// every request in Redis, fed the same requests, admit the same ones with the same counts
    /// before each and the same tokens, and once the grants are given back leave the same
    /// windows.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_instance_with_grants_decides_as_without_them() {
        use crate::checks::pipeline::shared::SharedStore;
        use crate::checks::rate_limit::TokenAsk;
        use std::collections::HashMap;
        let Some(mut conn) = rate::tests::redis().await else { return };
        // Both runs in one rate window (the test takes well under a second).
        let in_minute = chrono::Utc::now().timestamp_millis() % 60_000;
        if in_minute > 57_000 {
            tokio::time::sleep(Duration::from_millis((60_100 - in_minute) as u64)).await;
        }
        let run = uuid::Uuid::new_v4().simple().to_string();
        let (grants, each) =
            (up_on(&format!("tollgate-test-{run}-grants:")), up_on(&format!("tollgate-test-{run}-each:")));
        assert!(each.allowances.close().is_empty(), "it never asks for a grant");
        let asks = || {
            let ask = TokenAsk::new(10, None, 100);
            vec![Ask::Rate { key_id: "k".into(), rpm: Some(300), tpm: Some(10_000_000), ask }]
        };
        for i in 0..400 {
            let (a, b) = (grants.ask(asks()).await, each.ask(asks()).await);
            let ([Answer::Rate(a)], [Answer::Rate(b)]) = (a.as_slice(), b.as_slice()) else { panic!("{a:?} {b:?}") };
            assert_eq!(a.admitted, b.admitted, "request {i}");
            assert_eq!((a.before.req, a.before.tok, a.tokens), (b.before.req, b.before.tok, b.tokens), "request {i}");
        }
        let (fewer, all) =
            (grants.admissions.calls.load(Ordering::Relaxed), each.admissions.calls.load(Ordering::Relaxed));
        // Within 64 requests of the limit, and refused, every request is decided in Redis.
        assert!(fewer * 5 < all * 3, "grants took {fewer} calls, one by one {all}");
        grants.sweep_at(Instant::now() + 2 * allowance::LIFE);
        let windows = |name: &str| format!("tollgate-test-{run}-{name}:rl:k");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mut got = Vec::new();
            for name in ["grants", "each"] {
                let w: HashMap<String, i64> =
                    redis::cmd("HGETALL").arg(windows(name)).query_async(&mut conn).await.unwrap();
                got.push((w.get("rc").copied(), w.get("tc").copied()));
            }
            if got[0] == got[1] {
                assert_eq!(got[0], (Some(300), Some(300 * 110)));
                break;
            }
            assert!(Instant::now() < deadline, "windows differ: {got:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _: () = redis::cmd("DEL").arg(windows("grants")).arg(windows("each")).query_async(&mut conn).await.unwrap();
    }
}
