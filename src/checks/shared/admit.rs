//! Admission: the asks of requests' checks (rate limit, then budget) decided in one script
//! call. Each request's asks run in order and stop at its first refusal, as the checks would in
//! one process; the requests of a call run one after another, each atomically.
//!
//! Group admission: a request that finds a call in flight queues its asks, and the next call
//! carries everything queued (at most [`BATCH`] requests), as soon as the previous one ends: no
//! linger, so a lone request goes at once. Why: a call has a fixed cost in Redis (on a quiet
//! Redis of a slow VM one request's admission took 55-60 µs, four requests of one key in one
//! call 98 µs) and the gateway a round trip's syscalls and wake-ups; with the hashes read and
//! written once per call (`rate::ROLL_FN`), Redis's CPU per request fell from 93 to 65 µs flat
//! out with every check on (`EVALSHA` calls from 1.25 to 0.45 a request).

use std::sync::Mutex;

use redis::{Script, ScriptInvocation, Value};
use tokio::sync::{oneshot, Notify};

use super::allowance::{self, Grant, Plan, Retire};
use crate::checks::budget::shared as budget;
use crate::checks::pipeline::shared::{Answer, Ask};
use crate::checks::rate_limit::shared as rate;

/// The most requests in one call.
pub(crate) const BATCH: usize = 64;

/// ARGV[1]: now (0 = server clock); then per request `q` and per ask its code and arguments,
/// its keys in KEYS in order. Returns per request one reply per ask decided. An ask that gives
/// a grant back (`allowance`) does so whether or not it is decided.
const RUN: &str = r#"
local now = clock(ARGV[1])
local out = {}
local cur = {}
local stopped = false
local k, a = 1, 2
while a <= #ARGV do
  local op = ARGV[a]
  local res
  if op == 'q' then
    cur = {}
    out[#out + 1] = cur
    stopped = false
    a = a + 1
  elseif op == 'r' then
    local rreq, rtok = tonumber(ARGV[a + 7]), tonumber(ARGV[a + 8])
    if rreq ~= 0 or rtok ~= 0 then rate_settle(KEYS[k], now, tonumber(ARGV[a + 6]), -rtok, -rreq) end
    if not stopped then
      res = rate_admit(KEYS[k], now, tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]),
        tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]))
      cur[#cur + 1] = res
      stopped = res[1] ~= 1
    end
    k, a = k + 1, a + 9
  elseif op == 'b' then
    local n = tonumber(ARGV[a + 1])
    local ttl = tonumber(ARGV[a + 3])
    local ramount = tonumber(ARGV[a + 6])
    if ramount > 0 then budget_return(KEYS, k, n, now, ttl, tonumber(ARGV[a + 5]), ramount) end
    if not stopped then
      local limits = {}
      for i = 1, n do limits[i] = tonumber(ARGV[a + 6 + i]) end
      res = budget_reserve(KEYS, k, n, now, tonumber(ARGV[a + 2]), ttl, limits, tonumber(ARGV[a + 4]))
      cur[#cur + 1] = res
      stopped = res[1] ~= 1
    end
    k, a = k + n, a + 7 + n
  else
    return redis.error_reply('unknown ask ' .. tostring(op))
  end
end
rate_flush()
budget_flush()
return out
"#;

pub(crate) fn script() -> Script {
    Script::new(&format!(
        "local SHARE = {}\n{}{}{}{}{RUN}",
        allowance::SHARE,
        rate::ROLL_FN,
        rate::SETTLE_FN,
        rate::ADMIT_FN,
        budget::RESERVE_FN
    ))
}

/// One request's asks, each with its plan (`allowance`).
pub(crate) type Request<'a> = (&'a [Ask], &'a [Plan]);

/// One call deciding the asks of `requests` (rate and budget asks only) on the clock `now`
/// (0 = Redis's).
pub(crate) fn invocation<'a>(
    script: &'a Script,
    prefix: &str,
    reservation_ttl_ms: i64,
    now: i64,
    requests: &[Request<'_>],
) -> ScriptInvocation<'a> {
    let mut inv = script.prepare_invoke();
    inv.arg(now);
    for (asks, plans) in requests {
        inv.arg("q");
        for (i, ask) in asks.iter().enumerate() {
            let plan = plans.get(i).copied().unwrap_or_default();
            match ask {
                Ask::Rate { key_id, rpm, tpm, ask } => {
                    let [r, t, min, max] = rate::admit_args(*rpm, *tpm, *ask);
                    let (from, req, tok) = match plan.retire {
                        Retire::Rate { from, req, tok } => (from, req, tok),
                        _ => (0, 0, 0),
                    };
                    inv.key(format!("{prefix}rl:{key_id}")).arg("r").arg(r).arg(t).arg(min).arg(max);
                    inv.arg(plan.want).arg(from).arg(req).arg(tok);
                }
                Ask::Budget { entries, amount_usd } => {
                    for e in entries {
                        inv.key(budget::hash_key(prefix, e.scope, &e.scope_id, &e.period_key));
                    }
                    let (bucket, amount) = match plan.retire {
                        Retire::Budget { bucket, amount } => (bucket, amount),
                        _ => (0, 0),
                    };
                    inv.arg("b").arg(entries.len()).arg(budget::nanos(*amount_usd).max(0)).arg(reservation_ttl_ms);
                    inv.arg(plan.want).arg(bucket).arg(amount);
                    for e in entries {
                        inv.arg(budget::nanos(e.limit_usd));
                    }
                }
                Ask::Cache { .. } => unreachable!("a cache lookup is a GET of its own"),
            }
        }
    }
    inv
}

/// The script's replies for one request as its checks' answers, in order, with what each
/// ask was granted.
pub(crate) fn answers(wake: &Notify, asks: &[Ask], reply: Value) -> Decided {
    use redis::FromRedisValue;
    let reply = Vec::<Value>::from_redis_value(reply).unwrap_or_default();
    if reply.is_empty() {
        // Every request has its first ask decided: nothing means a reply we do not understand,
        // which must not read as "not asked" (that lets the request through).
        let why = Answer::Unavailable("unexpected reply from the admission script".into());
        return (vec![why; asks.len()], vec![None; asks.len()]);
    }
    asks.iter().zip(reply).map(|(ask, r)| answer(wake, ask, r)).unzip()
}

/// Per ask of a request: its answer, and what it was granted.
pub(crate) type Decided = (Vec<Answer>, Vec<Option<Grant>>);

fn answer(wake: &Notify, ask: &Ask, reply: Value) -> (Answer, Option<Grant>) {
    use redis::FromRedisValue;
    match ask {
        Ask::Rate { .. } => match Vec::<i64>::from_redis_value(reply).ok().and_then(|v| rate::counts(&v)) {
            Some((counts, [req, tok])) => (Answer::Rate(counts), (req > 0).then_some(Grant::Rate { req, tok })),
            None => (Answer::Unavailable("unexpected reply from the rate script".into()), None),
        },
        Ask::Budget { .. } => {
            let parts = Vec::<Value>::from_redis_value(reply).unwrap_or_default();
            let granted = parts.get(2).and_then(|v| i64::from_redis_value_ref(v).ok()).unwrap_or(-1);
            let answer = budget_answer(&parts, wake);
            let grant =
                (matches!(answer, Answer::Budget(Ok(_))) && granted >= 0).then_some(Grant::Budget { amount: granted });
            (answer, grant)
        }
        Ask::Cache { .. } => (Answer::Unavailable("a cache lookup is not an admission".into()), None),
    }
}

/// Requests waiting for the next call, and whether a task is sending calls.
#[derive(Default)]
pub(crate) struct Queue {
    state: Mutex<QueueState>,
    /// Calls sent (the tests count them).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) calls: std::sync::atomic::AtomicU64,
}

#[derive(Default)]
pub(crate) struct QueueState {
    /// A task is sending calls (it takes what waits when its call ends).
    pub(crate) busy: bool,
    pub(crate) waiting: Vec<Waiting>,
}

pub(crate) struct Waiting {
    pub(crate) asks: Vec<Ask>,
    pub(crate) plans: Vec<Plan>,
    pub(crate) tx: oneshot::Sender<Vec<Answer>>,
}

impl Queue {
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The budget script's reply as the check's answer; `-1` (spend not loaded yet) wakes the
/// watcher, which loads it.
fn budget_answer(reply: &[redis::Value], wake: &Notify) -> Answer {
    use redis::FromRedisValue;
    let int = |i: usize| reply.get(i).and_then(|v| i64::from_redis_value_ref(v).ok());
    match int(0) {
        Some(1) => Answer::Budget(Ok(int(1).unwrap_or(0))),
        Some(0) => {
            let i = int(1).unwrap_or(1).max(1) as usize - 1;
            Answer::Budget(Err((i, budget::usd(int(2).unwrap_or(0)))))
        }
        Some(-1) => {
            wake.notify_one();
            Answer::Unavailable("budget spend is being loaded into Redis from the database".into())
        }
        _ => Answer::Unavailable("unexpected reply from the budget script".into()),
    }
}
