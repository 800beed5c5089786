//! Budget spend and reservations in Redis: reserve against key, team pool and tenant budgets
//! in one atomic script, settle in a second one off the answer's path.
//!
//! Per scope entry and period one hash, `{prefix}b:{scope}:{id}:{period}`: `spent` (settled
//! USD), `reserved` (held by requests in flight) and one field `r:{reservation}` per hold;
//! beside it a sorted set `{prefix}bz:…` of each hold's deadline. A process that dies with
//! holds leaves them until their deadline (`cluster.reservation_ttl_seconds`), when the next
//! reservation on that entry reaps them.
//!
//! `spent` is rebuilt from PostgreSQL's `key_spend` (the durable record, moved with receipts)
//! whenever the marker `{prefix}seeded` is missing: after a Redis restart or flush. Until the
//! rebuild is done, reservations answer "not loaded" and the fault behaviour applies.

use redis::Script;

use crate::pipeline::shared::BudgetEntry;

/// Reserves `amount` against every entry, all or nothing. `keys[k]` is the marker, then
/// (hash, zset) per entry; `limits` one per entry. Returns {1} reserved, {0, i, used} entry i
/// (1-based) is over, {-1} spend not loaded. Holds past their deadline are reaped first.
pub(super) const RESERVE_FN: &str = r#"
local function budget_reserve(keys, k, n, now, amount, rid, ttl, limits)
  if redis.call('EXISTS', keys[k]) == 0 then return {-1} end
  for i = 1, n do
    local h, z = keys[k + 2 * i - 1], keys[k + 2 * i]
    local dead = redis.call('ZRANGEBYSCORE', z, '-inf', now)
    for _, id in ipairs(dead) do
      local a = redis.call('HGET', h, 'r:' .. id)
      if a then
        redis.call('HINCRBYFLOAT', h, 'reserved', -tonumber(a))
        redis.call('HDEL', h, 'r:' .. id)
      end
      redis.call('ZREM', z, id)
    end
  end
  for i = 1, n do
    local h = keys[k + 2 * i - 1]
    local limit = limits[i]
    local spent = tonumber(redis.call('HGET', h, 'spent') or '0')
    local reserved = math.max(tonumber(redis.call('HGET', h, 'reserved') or '0'), 0)
    if not (spent < limit and spent + reserved + amount <= limit + 1e-9) then
      return {0, i, tostring(spent + reserved)}
    end
  end
  if amount > 0 then
    for i = 1, n do
      local h, z = keys[k + 2 * i - 1], keys[k + 2 * i]
      redis.call('HINCRBYFLOAT', h, 'reserved', amount)
      redis.call('HSET', h, 'r:' .. rid, amount)
      redis.call('ZADD', z, now + ttl, rid)
    end
  end
  return {1}
end
"#;

/// Adds a request's real cost to its spend hashes and releases its holds (the settlement
/// batch, `cluster::settle`, calls it once per request).
pub(super) const SETTLE_FN: &str = r#"
local function budget_settle(keys, k, n, m, rid, cost, month_ttl)
  if cost > 0 then
    for i = k + 2 * n, k + 2 * n + m - 1 do
      redis.call('HINCRBYFLOAT', keys[i], 'spent', cost)
      if (i - k - 2 * n) % 2 == 1 then redis.call('EXPIRE', keys[i], month_ttl) end
    end
  end
  for i = 0, n - 1 do
    local h, z = keys[k + 2 * i], keys[k + 2 * i + 1]
    local a = redis.call('HGET', h, 'r:' .. rid)
    if a then
      local left = tonumber(redis.call('HINCRBYFLOAT', h, 'reserved', -tonumber(a)))
      if left < 1e-9 then redis.call('HSET', h, 'reserved', 0) end
      redis.call('HDEL', h, 'r:' .. rid)
    end
    redis.call('ZREM', z, rid)
  end
end
"#;

/// KEYS: the hashes; ARGV: their spend from the database. Each `spent` becomes the larger of
/// the two (Redis may already hold spend settled after the database was read).
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

/// The sorted set of its holds' deadlines.
pub(super) fn zset_key(prefix: &str, scope: &str, scope_id: &str, period_key: &str) -> String {
    format!("{prefix}bz:{scope}:{scope_id}:{period_key}")
}

/// What a request holds in Redis until it settles.
#[derive(Debug, Clone)]
pub struct Held {
    pub reservation: String,
    pub entries: Vec<BudgetEntry>,
}
