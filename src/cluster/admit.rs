//! Admission: the asks of one request's checks (rate limit, then budget) decided in one script
//! call, in order, stopping at the first refusal, as the checks would in one process.

use redis::{Script, ScriptInvocation, Value};

use super::{budget, rate, Cluster};
use crate::pipeline::shared::{Answer, Ask};

/// ARGV[1]: now (0 = server clock); then per ask its code and arguments, its keys in KEYS in
/// order. Returns one reply per ask decided.
const RUN: &str = r#"
local now = clock(ARGV[1])
local out = {}
local k, a = 1, 2
while a <= #ARGV do
  local op = ARGV[a]
  local res
  if op == 'r' then
    res = rate_admit(KEYS[k], now, tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]))
    out[#out + 1] = res
    k, a = k + 1, a + 5
    if res[1] ~= 1 then break end
  elseif op == 'b' then
    local n = tonumber(ARGV[a + 1])
    local limits = {}
    for i = 1, n do limits[i] = tonumber(ARGV[a + 3 + i]) end
    res = budget_reserve(KEYS, k, n, now, tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), limits)
    out[#out + 1] = res
    k, a = k + n, a + 4 + n
    if res[1] ~= 1 then break end
  else
    return redis.error_reply('unknown ask ' .. tostring(op))
  end
end
return out
"#;

pub(super) fn script() -> Script {
    Script::new(&format!("{}{}{}{RUN}", rate::ROLL_FN, rate::ADMIT_FN, budget::RESERVE_FN))
}

/// One call deciding `asks` (rate and budget asks only) on the clock `now` (0 = Redis's).
pub(super) fn invocation<'a>(c: &Cluster, script: &'a Script, now: i64, asks: &[Ask]) -> ScriptInvocation<'a> {
    let mut inv = script.prepare_invoke();
    inv.arg(now);
    for ask in asks {
        match ask {
            Ask::Rate { key_id, rpm, tpm, ask } => {
                let [r, t, min, max] = rate::admit_args(*rpm, *tpm, *ask);
                inv.key(c.key(format_args!("rl:{key_id}"))).arg("r").arg(r).arg(t).arg(min).arg(max);
            }
            Ask::Budget { entries, amount_usd } => {
                for e in entries {
                    inv.key(budget::hash_key(&c.prefix, e.scope, &e.scope_id, &e.period_key));
                }
                inv.arg("b").arg(entries.len()).arg(budget::nanos(*amount_usd).max(0)).arg(c.reservation_ttl_ms);
                for e in entries {
                    inv.arg(budget::nanos(e.limit_usd));
                }
            }
            Ask::Cache { .. } => unreachable!("a cache lookup is a GET of its own"),
        }
    }
    inv
}

/// The script's replies as the checks' answers, in order.
pub(super) fn answers(c: &Cluster, asks: &[Ask], reply: Vec<Value>) -> Vec<Answer> {
    asks.iter().zip(reply).map(|(ask, r)| answer(c, ask, r)).collect()
}

fn answer(c: &Cluster, ask: &Ask, reply: Value) -> Answer {
    use redis::FromRedisValue;
    match ask {
        Ask::Rate { .. } => match Vec::<i64>::from_redis_value(reply).ok().and_then(|v| rate::counts(&v)) {
            Some(counts) => Answer::Rate(counts),
            None => Answer::Unavailable("unexpected reply from the rate script".into()),
        },
        Ask::Budget { .. } => {
            let parts = Vec::<Value>::from_redis_value(reply).unwrap_or_default();
            super::budget_answer(&parts, c)
        }
        Ask::Cache { .. } => Answer::Unavailable("a cache lookup is not an admission".into()),
    }
}
