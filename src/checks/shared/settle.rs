//! Settlements in batches: what requests hand back when they end (rate tokens corrected to the
//! real use, budget cost and holds, answers to keep in the shared cache) goes through a bounded
//! queue to one task, which gathers for [`LINGER`] after the first of a batch and sends
//! everything queued as one script call.
//!
//! Why: flat out with every check on, one script call per settlement made Redis the busiest
//! process on the 2-core machine (26 % of all CPU against 26 % for the gateway's workers, four
//! calls per request); a batch costs Redis one call's overhead for all of them. Sent as soon as
//! the previous call ended (no linger), batches held ~4.6 requests and settlement calls
//! outnumbered admissions (4 356 against 3 200 in two seconds, `MONITOR`, session 29); and every
//! settlement that found the task idle woke the database runtime's thread. Settling is off the
//! answer's path, and a few milliseconds late only keeps a hold (or a token estimate) that long:
//! admission stays on the safe side.

use redis::{Script, ScriptInvocation};
use tokio::sync::mpsc;

/// Settlements waiting beyond this are dropped (and counted): the queue never grows without
/// bound while Redis is slow. Their spend is in `key_spend` and returns with a rebuild.
pub(crate) const QUEUE: usize = 16_384;
/// The most operations gathered for one script call (before [`merge`], which leaves one per
/// key and window and one per budget entries and bucket).
pub(super) const BATCH: usize = 4096;
/// How long the task gathers settlements after the first of a batch (unless [`BATCH`] are
/// queued already). It sleeps meanwhile, so requests settling then wake no thread. A batch is
/// merged before it is sent, so its call is the same size at 5 or 20 ms; 20 ms (session 31)
/// halved Redis's CPU flat out with every check on (0.75 -> 0.38 s for the same two rounds).
pub(super) const LINGER: std::time::Duration = std::time::Duration::from_millis(20);

/// One settlement. Keys are full Redis keys.
#[derive(Debug, Clone)]
pub enum Op {
    /// `delta` tokens and `req` requests moved on the window starting at `from` (requests
    /// only when a grant is given back, `allowance`).
    Rate {
        key: String,
        from: i64,
        delta: i64,
        req: i64,
    },
    /// `holds`: the hashes `amount` nano-dollars are held in (time bucket `bucket`, buckets of
    /// `ttl_ms`); `spend`: (total, month) hash pairs `cost` nano-dollars are added to.
    /// `entries`: the hashes `amount` nano-dollars are held in (time bucket `bucket`, buckets
    /// of `ttl_ms`) and `cost` nano-dollars are spent against.
    Budget {
        entries: Vec<String>,
        bucket: i64,
        ttl_ms: i64,
        amount: i64,
        cost: i64,
    },
    CachePut {
        key: String,
        value: Vec<u8>,
        ttl_ms: u64,
    },
}

/// ARGV[1]: now (0 = server clock); then per op its code and arguments, its keys in KEYS in order.
const RUN: &str = r#"
local now = clock(ARGV[1])
local k, a = 1, 2
while a <= #ARGV do
  local op = ARGV[a]
  if op == 'r' then
    rate_settle(KEYS[k], now, tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]))
    k, a = k + 1, a + 4
  elseif op == 'b' then
    local n = tonumber(ARGV[a + 1])
    budget_settle(KEYS, k, n, now, tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]),
      tonumber(ARGV[a + 5]))
    k, a = k + n, a + 6
  elseif op == 'c' then
    redis.call('SET', KEYS[k], ARGV[a + 2], 'PX', ARGV[a + 1])
    k, a = k + 1, a + 3
  else
    return redis.error_reply('unknown settlement ' .. tostring(op))
  end
end
rate_flush()
budget_settle_flush()
return k - 1
"#;

pub(crate) fn script() -> Script {
    Script::new(&format!(
        "{}{}{}{RUN}",
        crate::checks::rate_limit::shared::ROLL_FN,
        crate::checks::rate_limit::shared::SETTLE_FN,
        crate::checks::budget::shared::SETTLE_FN
    ))
}

/// One call carrying `ops`, on the clock `now` (0 = Redis's).
pub(crate) fn invocation<'a>(script: &'a Script, now: i64, ops: &[Op]) -> ScriptInvocation<'a> {
    let mut inv = script.prepare_invoke();
    inv.arg(now);
    for op in ops {
        match op {
            Op::Rate { key, from, delta, req } => {
                inv.key(key).arg("r").arg(*from).arg(*delta).arg(*req);
            }
            Op::Budget { entries, bucket, ttl_ms, amount, cost } => {
                for h in entries {
                    inv.key(h);
                }
                inv.arg("b").arg(entries.len()).arg(*ttl_ms).arg(*bucket).arg(*amount).arg(*cost);
            }
            Op::CachePut { key, value, ttl_ms } => {
                inv.key(key).arg("c").arg(*ttl_ms).arg(value.as_slice());
            }
        }
    }
    inv
}

/// The operations of a batch summed per rate window and per budget entries and bucket (cache
/// puts as they are): the script then does per batch what it did per request. Sums are what
/// the operations one after another give (the script adds them), except where a window's
/// count would have gone below zero in between (it is clamped at zero, which only a Redis that
/// lost counts meets). Why: flat out, a batch of 5 ms held ~70 requests of one key, two
/// operations each.
pub(crate) fn merge(ops: Vec<Op>) -> Vec<Op> {
    use std::collections::hash_map::{Entry, HashMap};
    let mut out: Vec<Op> = Vec::with_capacity(ops.len().min(16));
    let mut rate: HashMap<(String, i64), usize> = HashMap::new();
    let mut budget: HashMap<(Vec<String>, i64, i64), usize> = HashMap::new();
    for op in ops {
        match op {
            Op::Rate { key, from, delta, req } => match rate.entry((key, from)) {
                Entry::Occupied(e) => {
                    if let Op::Rate { delta: d, req: r, .. } = &mut out[*e.get()] {
                        *d += delta;
                        *r += req;
                    }
                }
                Entry::Vacant(e) => {
                    let key = e.key().0.clone();
                    e.insert(out.len());
                    out.push(Op::Rate { key, from, delta, req });
                }
            },
            Op::Budget { entries, bucket, ttl_ms, amount, cost } => match budget.entry((entries, bucket, ttl_ms)) {
                Entry::Occupied(e) => {
                    if let Op::Budget { amount: a, cost: c, .. } = &mut out[*e.get()] {
                        *a += amount;
                        *c += cost;
                    }
                }
                Entry::Vacant(e) => {
                    let entries = e.key().0.clone();
                    e.insert(out.len());
                    out.push(Op::Budget { entries, bucket, ttl_ms, amount, cost });
                }
            },
            put @ Op::CachePut { .. } => out.push(put),
        }
    }
    out
}

/// Moves what is queued into `ops`, up to [`BATCH`], without waiting.
pub(super) fn take_queued(rx: &mut mpsc::Receiver<Op>, ops: &mut Vec<Op>) {
    while ops.len() < BATCH {
        match rx.try_recv() {
            Ok(op) => ops.push(op),
            Err(_) => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The equivalence test of merging: a batch merged and the same operations one by one
    /// leave the same hashes (no window driven below zero in between).
    #[tokio::test]
    async fn a_merged_batch_settles_as_its_operations_one_by_one() {
        use std::collections::HashMap;
        let Some(mut conn) = crate::checks::rate_limit::shared::tests::redis().await else { return };
        let run = uuid::Uuid::new_v4().simple().to_string();
        let now = 1_700_000_040_000i64 + 30_000;
        let (start, prev) = (now - now % 60_000, now - now % 60_000 - 60_000);
        let hashes = |side: &str| -> Vec<String> {
            ["rl:a", "rl:b", "b:x", "b:y"].iter().map(|k| format!("tollgate-test-{run}-{side}:{k}")).collect()
        };
        let ops = |side: &str| -> Vec<Op> {
            let h = hashes(side);
            let mut ops = Vec::new();
            for i in 0..40i64 {
                let key = h[(i % 2) as usize].clone();
                let from = if i % 3 == 0 { prev } else { start };
                ops.push(Op::Rate { key, from, delta: 50 - i, req: -(i % 2) });
                let entries = if i % 2 == 0 { vec![h[2].clone()] } else { vec![h[2].clone(), h[3].clone()] };
                let bucket = now / 900_000 - (i % 2);
                ops.push(Op::Budget { entries, bucket, ttl_ms: 900_000, amount: 1_000 + i, cost: 7 * i });
            }
            ops
        };
        for side in ["merged", "each"] {
            let h = hashes(side);
            for w in &h[..2] {
                let _: () = redis::cmd("HSET")
                    .arg(w)
                    .arg("s")
                    .arg(start)
                    .arg("rp")
                    .arg(100)
                    .arg("rc")
                    .arg(100)
                    .arg("tp")
                    .arg(10_000)
                    .arg("tc")
                    .arg(10_000)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
            }
            for b in &h[2..] {
                let bucket = now / 900_000;
                let _: () = redis::cmd("HSET")
                    .arg(b)
                    .arg(format!("r:{bucket}"))
                    .arg(1_000_000)
                    .arg(format!("r:{}", bucket - 1))
                    .arg(1_000_000)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
            }
        }
        let script = script();
        let merged = merge(ops("merged"));
        assert_eq!(merged.len(), 4 + 2, "one per key and window, one per entries and bucket");
        let _: i64 = invocation(&script, now, &merged).invoke_async(&mut conn).await.unwrap();
        for op in ops("each") {
            let _: i64 = invocation(&script, now, &[op]).invoke_async(&mut conn).await.unwrap();
        }
        for (a, b) in hashes("merged").iter().zip(hashes("each")) {
            let x: HashMap<String, String> = redis::cmd("HGETALL").arg(a).query_async(&mut conn).await.unwrap();
            let y: HashMap<String, String> = redis::cmd("HGETALL").arg(&b).query_async(&mut conn).await.unwrap();
            assert!(!x.is_empty(), "{a} was written");
            assert_eq!(x, y, "{a} vs {b}");
            let _: () = redis::cmd("DEL").arg(a).arg(&b).query_async(&mut conn).await.unwrap();
        }
    }
}
