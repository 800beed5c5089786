//! Per-key rate windows in Redis: the in-process limiter's arithmetic (`ratelimit::admit` and
//! `ratelimit::settle_on`), run by Lua so that a request's admission over all its limits is
//! one atomic round trip whichever instance it reaches.
//!
//! One hash per key: `s` (the current window's start), `rp`/`rc` (requests in the previous and
//! current window), `tp`/`tc` (tokens). Counts are integers, so Lua's doubles and Rust's f64
//! compute the same estimate from them; `tests/cluster_redis.rs` pins the two to each other.
//! The clock is Redis's own (`TIME`), one clock for every instance; a test may pass its own.

use crate::checks::pipeline::shared::RateCounts;
use crate::checks::rate_limit::{Pair, State, TokenAsk};

/// The windows of the key hash `key`, rolled to `now` (the steps of `ratelimit::State::roll`):
/// `s, rp, rc, tp, tc`. Shared by the admission script and the settlement batch.
///
/// A call reads each key's hash once (`rate_state`) and writes it once at the end
/// (`rate_flush`), however many requests of the call touch it: the requests of a call are
/// decided one after another on the state in Lua, which is what the same `redis.call`s one
/// request at a time would give (the script is atomic), for two commands per key instead of two
/// per request. Why: a `redis.call` costs ~2 µs of conversion around its command (measured: five
/// `HMGET`s in a script 16 µs, the empty script 5.6 µs), more than the command itself.
pub(crate) const ROLL_FN: &str = r#"
local function roll(key, now)
  local v = redis.call('HMGET', key, 's', 'rp', 'rc', 'tp', 'tc')
  local s = tonumber(v[1]) or 0
  local rp, rc = tonumber(v[2]) or 0, tonumber(v[3]) or 0
  local tp, tc = tonumber(v[4]) or 0, tonumber(v[5]) or 0
  local start = now - (now % 60000)
  local rolled = start ~= s
  if rolled then
    if start - s == 60000 then rp, tp = rc, tc else rp, tp = 0, 0 end
    rc, tc = 0, 0
    s = start
  end
  return s, rp, rc, tp, tc, rolled
end
local function clock(given)
  local now = tonumber(given)
  if now == 0 then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now
end
local rate_states = {}
local function rate_state(key, now)
  local st = rate_states[key]
  if not st then
    local s, rp, rc, tp, tc, rolled = roll(key, now)
    st = {s = s, rp = rp, rc = rc, tp = tp, tc = tc, rolled = rolled, dirty = false}
    rate_states[key] = st
  end
  return st
end
local function rate_flush()
  for key, st in pairs(rate_states) do
    if st.dirty then
      redis.call('HSET', key, 's', st.s, 'rp', st.rp, 'rc', st.rc, 'tp', st.tp, 'tc', st.tc)
      -- The windows matter until two minutes after the current one started: set once per window.
      if st.rolled then redis.call('PEXPIRE', key, 180000) end
    end
  end
end
"#;

/// Moves `delta` tokens and `rdelta` requests on the window they were counted in
/// (`ratelimit::settle_on`; requests move only when a grant is given back, `allowance`).
pub(crate) const SETTLE_FN: &str = r#"
local function rate_settle(key, now, from, delta, rdelta)
  local st = rate_state(key, now)
  if st.s == from then
    st.tc = math.max(st.tc + delta, 0)
    st.rc = math.max(st.rc + rdelta, 0)
  elseif st.s - from == 60000 then
    st.tp = math.max(st.tp + delta, 0)
    st.rp = math.max(st.rp + rdelta, 0)
  else
    return
  end
  st.dirty = true
end
"#;

/// Counts one request and what fits of the ask against every limit of the key at once (the
/// steps of `ratelimit::admit`). rpm/tpm -1 = none. Admitted, and `want` > 0, it also grants
/// up to `want` more requests (each with up to `amax` tokens) for this instance to draw on
/// (`allowance`), counted at once: at most 1/SHARE of what is left under each limit, at least
/// two requests (and one `amax` of tokens), or none. Returns
/// {admitted, now, s, rp, rc, tp, tc (before this request), tokens, requests granted, tokens
/// granted}.
pub(crate) const ADMIT_FN: &str = r#"
local function rate_admit(key, now, rpm, tpm, amin, amax, want)
  local st = rate_state(key, now)
  local s, rp, rc, tp, tc = st.s, st.rp, st.rc, st.tp, st.tc
  local frac = (now - s) / 60000
  local used_r = rp * (1.0 - frac) + rc
  local used_t = tp * (1.0 - frac) + tc
  local ok = 1
  if rpm >= 0 and used_r + 1.0 > rpm then ok = 0 end
  local tokens = 0
  if tpm >= 0 then
    if amin > tpm or used_t + amin > tpm then
      ok = 0
    else
      local room = math.floor(tpm - used_t)
      if room < 0 then room = 0 end
      tokens = math.max(math.min(amax, room), amin)
    end
  end
  local g, gt = 0, 0
  if ok == 1 then
    if want > 0 then
      g = want
      if rpm >= 0 then g = math.min(g, math.floor((rpm - used_r - 1.0) / SHARE)) end
      if tpm >= 0 then
        gt = math.min(g * amax, math.floor((tpm - used_t - tokens) / SHARE))
        if gt < amax then g = 0 end
      end
      if g < 2 then g, gt = 0, 0 end
    end
    st.rc = rc + 1 + g
    st.tc = tc + tokens + gt
    st.dirty = true
  end
  return {ok, now, s, rp, rc, tp, tc, tokens, g, gt}
end
"#;

/// `-1` for "no limit" (Lua has no `nil` in ARGV).
pub(crate) fn limit_arg(l: Option<u64>) -> i64 {
    l.map(|v| v.min(i64::MAX as u64) as i64).unwrap_or(-1)
}

pub(crate) fn admit_args(rpm: Option<u64>, tpm: Option<u64>, ask: TokenAsk) -> [i64; 4] {
    [limit_arg(rpm), limit_arg(tpm), ask.min.min(i64::MAX as u64) as i64, ask.max.min(i64::MAX as u64) as i64]
}

/// The script's reply as the pipeline's answer, with what it granted (requests, tokens).
pub(crate) fn counts(reply: &[i64]) -> Option<(RateCounts, [i64; 2])> {
    let [ok, now, s, rp, rc, tp, tc, tokens, g, gt] = <[i64; 10]>::try_from(reply).ok()?;
    let counts = RateCounts {
        admitted: ok == 1,
        now_ms: now,
        before: State {
            start_ms: s,
            req: Pair { prev: rp as f64, cur: rc as f64 },
            tok: Pair { prev: tp as f64, cur: tc as f64 },
        },
        tokens: tokens.max(0) as u64,
    };
    Some((counts, [g, gt]))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::checks::rate_limit::{admit, settle_on, Headers, WINDOW_MS};

    /// The machine's Redis, or None (printed) unless `TOLLGATE_REQUIRE_REDIS=1` makes it mandatory.
    pub(crate) async fn redis() -> Option<redis::aio::MultiplexedConnection> {
        let got = async {
            let client = redis::Client::open("redis://127.0.0.1:6379").map_err(|e| e.to_string())?;
            tokio::time::timeout(std::time::Duration::from_secs(2), client.get_multiplexed_async_connection())
                .await
                .map_err(|_| "timed out".to_string())?
                .map_err(|e| e.to_string())
        }
        .await;
        match got {
            Ok(c) => Some(c),
            Err(e) if std::env::var("TOLLGATE_REQUIRE_REDIS").is_ok_and(|v| v == "1") => {
                panic!("Redis is required (TOLLGATE_REQUIRE_REDIS=1) but unavailable: {e}")
            }
            Err(e) => {
                eprintln!("skipping: no Redis at 127.0.0.1:6379 ({e})");
                None
            }
        }
    }

    /// A small deterministic generator (no dependency for one test).
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self, n: u64) -> u64 {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (self.0 >> 33) % n
        }
    }

    /// The equivalence test of the shared limiter: the Lua script and the in-process limiter,
    /// fed the same requests at the same instants, admit the same ones, hold the same tokens
    /// and end with the same windows; settlements move the same counts.
    #[tokio::test]
    async fn the_script_decides_as_the_in_process_limiter() {
        let Some(mut conn) = redis().await else { return };
        let admission = crate::checks::shared::admit::script();
        let settle = crate::checks::shared::settle::script();
        let key = format!("tollgate-test:rl:{}", uuid::Uuid::new_v4().simple());
        let mut local = State::default();
        let mut rng = Lcg(42);
        let (rpm, tpm) = (Some(40), Some(20_000));
        let mut now = 1_700_000_040_000i64 + 12_345;
        let mut admitted = 0;
        for i in 0..600 {
            now += rng.next(700) as i64;
            if i % 150 == 149 {
                now += WINDOW_MS + rng.next(30_000) as i64; // skip a window now and then
            }
            let ask = match rng.next(3) {
                0 => TokenAsk::new(rng.next(400), None, 1024),
                1 => TokenAsk::new(rng.next(400), Some(rng.next(3000)), 1024),
                _ => TokenAsk::new(rng.next(25_000), Some(rng.next(100)), 1024),
            };
            let [r, t, min, max] = admit_args(rpm, tpm, ask);
            let mut inv = admission.prepare_invoke();
            inv.arg(now).arg("q").key(&key).arg("r").arg(r).arg(t).arg(min).arg(max).arg(0).arg(0).arg(0).arg(0);
            let replies: Vec<Vec<Vec<i64>>> = inv.invoke_async(&mut conn).await.unwrap();
            let reply = &replies[0][0];
            let (c, granted) = counts(reply).unwrap();
            assert_eq!(granted, [0, 0], "nothing asked, nothing granted");
            let mut h: Headers = Vec::new();
            let mut before = local;
            before.roll_for_test(now);
            assert_eq!(c.before, before, "request {i}: windows before");
            let ours = admit(&mut local, rpm, tpm, ask, now, &mut h);
            assert_eq!(c.admitted, ours.is_ok(), "request {i}: decision");
            if let Ok(tokens) = ours {
                admitted += 1;
                assert_eq!(c.tokens, tokens, "request {i}: tokens held");
                // Settle some of them at once, to a different real use.
                if rng.next(2) == 0 {
                    let delta = rng.next(2000) as i64 - tokens as i64;
                    let later = now + rng.next(500) as i64;
                    let op = crate::checks::shared::settle::Op::Rate {
                        key: key.clone(),
                        from: c.before.start_ms,
                        delta,
                        req: 0,
                    };
                    let _: i64 = crate::checks::shared::settle::invocation(&settle, later, &[op])
                        .invoke_async(&mut conn)
                        .await
                        .unwrap();
                    settle_on(&mut local, c.before.start_ms, delta, later);
                    now = later;
                }
            }
        }
        assert!(admitted > 50 && admitted < 600, "the sequence exercises both outcomes ({admitted} admitted)");
        let _: () = redis::cmd("DEL").arg(&key).query_async(&mut conn).await.unwrap();
    }
}
