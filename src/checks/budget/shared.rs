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
//! Only scopes with a budget have a hash. Each is loaded from PostgreSQL's `key_spend` (the
//! durable record, moved with receipts) before its first use, which marks it (`ok`): when a
//! budget appears, a month begins, or Redis restarted or was flushed. A reservation on an entry
//! not loaded answers "not loaded" (the fault behaviour applies for the moment it takes).

use redis::Script;

use crate::checks::pipeline::shared::BudgetEntry;

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

/// Reserves `amount` (nanos) against every entry, all or nothing: one hash per entry from
/// `keys[k]`, `limits` (nanos) one per entry. Returns {1, bucket, granted} reserved, {0, i,
/// used} entry i (1-based) has `used` (spent + held) and it does not fit, {-1, i} entry i not
/// loaded. Reserved, and `want` > 0, it also holds up to `want` more reservations of `amount`
/// for this instance to draw on (`allowance`): at most 1/SHARE of what is left in each entry,
/// at least two reservations; `granted` is the nano-dollars held for it, -1 none.
///
/// As the rate windows (`rate::ROLL_FN`): a call reads each entry once and adds what its
/// requests hold to it once at the end (`budget_flush`); the requests are decided one after
/// another on the figures in Lua. `budget_return` gives back what a grant did not use.
pub(crate) const RESERVE_FN: &str = r#"
local budget_states = {}
local function budget_state(key, b)
  local id = key .. '\0' .. b
  local st = budget_states[id]
  if not st then
    local cur = 'r:' .. b
    local v = redis.call('HMGET', key, 'spent', cur, 'r:' .. (b - 1), 'ok')
    st = {key = key, b = b, field = cur, ok = v[4], spent = tonumber(v[1]) or 0,
          cur = tonumber(v[2]) or 0, prev = tonumber(v[3]) or 0, add = 0, padd = 0}
    budget_states[id] = st
  end
  return st
end
local function budget_reserve(keys, k, n, now, amount, ttl, limits, want)
  local b = math.floor(now / ttl)
  local sts = {}
  for i = 1, n do
    local st = budget_state(keys[k + i - 1], b)
    -- An end user's entry starts at zero (end users are too many to load ahead); the watcher
    -- raises the ones the database knows to their spend (`Cluster::seed_end_users`).
    if not st.ok and not string.find(st.key, 'b:end_user:', 1, true) then return {-1, i} end
    local held = math.max(st.cur + st.prev, 0)
    if not (st.spent < limits[i] and st.spent + held + amount <= limits[i]) then
      return {0, i, st.spent + held}
    end
    sts[i] = st
  end
  local granted = -1
  if want > 0 then
    local d = want * amount
    local least = nil
    for i = 1, n do
      local room = limits[i] - sts[i].spent - math.max(sts[i].cur + sts[i].prev, 0) - amount
      d = math.min(d, math.floor(room / SHARE))
      if least == nil or room < least then least = room end
    end
    if d >= 2 * amount and least >= SHARE then granted = d end
  end
  local add = amount + math.max(granted, 0)
  if add > 0 then
    for i = 1, n do
      sts[i].cur = sts[i].cur + add
      sts[i].add = sts[i].add + add
    end
  end
  return {1, b, granted}
end
local function budget_return(keys, k, n, now, ttl, bucket, amount)
  local b = math.floor(now / ttl)
  if amount <= 0 or bucket < b - 1 or bucket > b then return end
  for i = 1, n do
    local st = budget_state(keys[k + i - 1], b)
    if bucket == b then
      st.cur = st.cur - amount
      st.add = st.add - amount
    else
      st.prev = st.prev - amount
      st.padd = st.padd - amount
    end
  end
end
local function budget_flush()
  for _, st in pairs(budget_states) do
    if st.add ~= 0 then
      -- The first hold in a bucket clears the buckets that no longer count.
      if redis.call('HINCRBY', st.key, st.field, st.add) == st.add and st.add > 0 then
        redis.call('HDEL', st.key, 'r:' .. (st.b - 2), 'r:' .. (st.b - 3))
      end
    end
    if st.padd ~= 0 then redis.call('HINCRBY', st.key, 'r:' .. (st.b - 1), st.padd) end
  end
end
"#;

/// Adds a request's real cost (nanos) to the spend of the `n` entries it was held against
/// (`keys[k]`…) and gives back its `amount` held in `bucket`. Sums per hash and field, sent
/// once per call by `budget_settle_flush`.
pub(crate) const SETTLE_FN: &str = r#"
local budget_adds = {}
local function budget_add(key, field, v)
  local t = budget_adds[key]
  if not t then
    t = {}
    budget_adds[key] = t
  end
  t[field] = (t[field] or 0) + v
end
local function budget_settle(keys, k, n, now, ttl, bucket, amount, cost)
  local live = amount > 0 and bucket >= math.floor(now / ttl) - 1
  for i = k, k + n - 1 do
    if cost > 0 then budget_add(keys[i], 'spent', cost) end
    if live then budget_add(keys[i], 'r:' .. bucket, -amount) end
  end
end
local function budget_settle_flush()
  for key, t in pairs(budget_adds) do
    for field, v in pairs(t) do
      if v ~= 0 then redis.call('HINCRBY', key, field, v) end
    end
  end
end
"#;

/// KEYS: entry hashes. Returns the 1-based indices of those not loaded yet.
const MISSING: &str = r#"
local out = {}
for i = 1, #KEYS do
  if redis.call('HEXISTS', KEYS[i], 'ok') == 0 then out[#out + 1] = i end
end
return out
"#;

/// KEYS: entry hashes; ARGV: per hash its spend from the database (nanos) and its expiry in
/// seconds (0 = none). Each `spent` becomes the larger of the two (Redis may hold spend settled
/// after the database was read) and the entry is marked loaded.
const SEED: &str = r#"
for i = 1, #KEYS do
  local cur = tonumber(redis.call('HGET', KEYS[i], 'spent') or '0')
  local db = tonumber(ARGV[2 * i - 1])
  if db > cur then redis.call('HSET', KEYS[i], 'spent', db) end
  redis.call('HSET', KEYS[i], 'ok', 1)
  local ttl = tonumber(ARGV[2 * i])
  if ttl > 0 then redis.call('EXPIRE', KEYS[i], ttl) end
end
return #KEYS
"#;

pub(crate) fn missing_script() -> Script {
    Script::new(MISSING)
}

pub(crate) fn seed_script() -> Script {
    Script::new(SEED)
}

/// Seeds the spend of end users under end-user budgets, as [`SEED`] does, once per set of
/// budgets and month: KEYS[1] the marker of that set (skipped when it exists), then the entries.
const SEED_END_USERS: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
for i = 2, #KEYS do
  local cur = tonumber(redis.call('HGET', KEYS[i], 'spent') or '0')
  local db = tonumber(ARGV[2 * i - 3])
  if db > cur then redis.call('HSET', KEYS[i], 'spent', db) end
  redis.call('HSET', KEYS[i], 'ok', 1)
  local ttl = tonumber(ARGV[2 * i - 2])
  if ttl > 0 then redis.call('EXPIRE', KEYS[i], ttl) end
end
return #KEYS - 1
"#;

pub(crate) fn seed_end_users_script() -> Script {
    Script::new(SEED_END_USERS)
}

/// Monthly spend hashes outlive their month by a little (a month is at most 31 days).
pub(crate) const MONTH_TTL_SECONDS: i64 = 40 * 24 * 3600;

/// The hash of one scope entry's spend in one period.
pub(crate) fn hash_key(prefix: &str, scope: &str, scope_id: &str, period_key: &str) -> String {
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
