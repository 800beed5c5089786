//! Budget spend and reservations in Redis: reserve against key, team pool and tenant budgets
//! in one atomic script (with the rate limit's admission, `admit`), settle in a batch off the
//! answer's path (`settle`).
//!
//! Per scope entry and period one hash, `{prefix}b:{scope}:{id}:{period}`: `spent` and the
//! amounts held by requests in flight, by time bucket: `r:{b}` with `b = now / ttl`
//! (`cluster.reservation_ttl_seconds`). What is held is the current and the previous bucket; a
//! settlement takes its amount back from the bucket it was held in. So a process that dies with
//! holds leaves them for one to two TTLs, and nothing has to find and reap them (the sliding
//! window trick of the rate limiter, O(1) per request).
//!
//! Money is integer nano-dollars (`HINCRBY`): exact sums, and Redis formats no floats (float
//! formatting and parsing were a tenth of Redis's CPU flat out with `HINCRBYFLOAT`).
//!
//! `spent` is rebuilt from PostgreSQL's `key_spend` (the durable record, moved with receipts)
//! whenever the marker `{prefix}seeded` is missing: after a Redis restart or flush. Until the
//! rebuild is done, reservations answer "not loaded" and the fault behaviour applies.

use redis::Script;

use crate::pipeline::shared::BudgetEntry;

/// USD as integer nano-dollars (a request's rounding is at most half a nano-dollar).
pub fn nanos(usd: f64) -> i64 {
    if usd.is_finite() {
        (usd * 1e9).round().clamp(i64::MIN as f64, i64::MAX as f64) as i64
    } else {
        0
    }
}

pub fn usd(nanos: i64) -> f64 {
    nanos as f64 / 1e9
}

/// Reserves `amount` (nanos) against every entry, all or nothing. `keys[k]` is the marker,
/// then one hash per entry; `limits` (nanos) one per entry. Returns {1, bucket} reserved,
/// {0, i, used} entry i (1-based) has `used` (spent + held) and it does not fit, {-1} spend
/// not loaded.
pub(super) const RESERVE_FN: &str = r#"
local function budget_reserve(keys, k, n, now, amount, ttl, limits)
  if redis.call('EXISTS', keys[k]) == 0 then return {-1} end
  local b = math.floor(now / ttl)
  local cur, prev = 'r:' .. b, 'r:' .. (b - 1)
  for i = 1, n do
    local v = redis.call('HMGET', keys[k + i], 'spent', cur, prev)
    local spent = tonumber(v[1]) or 0
    local held = math.max((tonumber(v[2]) or 0) + (tonumber(v[3]) or 0), 0)
    if not (spent < limits[i] and spent + held + amount <= limits[i]) then
      return {0, i, spent + held}
    end
  end
  if amount > 0 then
    for i = 1, n do
      if redis.call('HINCRBY', keys[k + i], cur, amount) == amount then
        redis.call('HDEL', keys[k + i], 'r:' .. (b - 2), 'r:' .. (b - 3))
      end
    end
  end
  return {1, b}
end
"#;

/// Adds a request's real cost (nanos) to its spend hashes (`m` of them from `keys[k + n]`:
/// total, month per scope; months expire) and gives its holds back (`n` hashes from
/// `keys[k]`, `amount` held in `bucket`).
pub(super) const SETTLE_FN: &str = r#"
local function budget_settle(keys, k, n, m, now, ttl, bucket, amount, cost, month_ttl)
  if cost > 0 then
    for i = k + n, k + n + m - 1 do
      local total = redis.call('HINCRBY', keys[i], 'spent', cost)
      if (i - k - n) % 2 == 1 and total == cost then redis.call('EXPIRE', keys[i], month_ttl) end
    end
  end
  if amount > 0 and bucket >= math.floor(now / ttl) - 1 then
    for i = k, k + n - 1 do
      redis.call('HINCRBY', keys[i], 'r:' .. bucket, -amount)
    end
  end
end
"#;

/// KEYS: the hashes; ARGV: their spend from the database (nanos). Each `spent` becomes the
/// larger of the two (Redis may already hold spend settled after the database was read).
const SEED: &str = r#"
for i = 1, #KEYS do
  local cur = tonumber(redis.call('HGET', KEYS[i], 'spent') or '0')
  local db = tonumber(ARGV[i])
  if db > cur then redis.call('HSET', KEYS[i], 'spent', ARGV[i]) end
end
return #KEYS
"#;

pub(super) fn seed_script() -> Script {
    Script::new(SEED)
}

/// Monthly spend hashes outlive their month by a little (a month is at most 31 days).
pub(super) const MONTH_TTL_SECONDS: i64 = 40 * 24 * 3600;

/// The hash of one scope entry's spend in one period.
pub(super) fn hash_key(prefix: &str, scope: &str, scope_id: &str, period_key: &str) -> String {
    format!("{prefix}b:{scope}:{scope_id}:{period_key}")
}

/// What a request holds in Redis until it settles.
#[derive(Debug, Clone)]
pub struct Held {
    pub entries: Vec<BudgetEntry>,
    /// Nano-dollars held in each entry.
    pub amount: i64,
    /// The time bucket they are held in (set when Redis reserved them).
    pub bucket: i64,
}
