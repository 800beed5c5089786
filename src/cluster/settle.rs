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

use std::sync::Arc;

use redis::{Script, ScriptInvocation};
use tokio::sync::mpsc;

use super::Cluster;

/// Settlements waiting beyond this are dropped (and counted): the queue never grows without
/// bound while Redis is slow. Their spend is in `key_spend` and returns with a rebuild.
pub(super) const QUEUE: usize = 16_384;
/// The most operations in one script call.
const BATCH: usize = 256;
/// How long the task gathers settlements after the first of a batch (unless [`BATCH`] are
/// queued already). It sleeps meanwhile, so requests settling then wake no thread.
const LINGER: std::time::Duration = std::time::Duration::from_millis(5);

/// One settlement. Keys are full Redis keys.
#[derive(Debug, Clone)]
pub enum Op {
    Rate {
        key: String,
        from: i64,
        delta: i64,
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
    rate_settle(KEYS[k], now, tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]))
    k, a = k + 1, a + 3
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

pub(super) fn script() -> Script {
    Script::new(&format!("{}{}{}{RUN}", super::rate::ROLL_FN, super::rate::SETTLE_FN, super::budget::SETTLE_FN))
}

/// One call carrying `ops`, on the clock `now` (0 = Redis's).
pub(super) fn invocation<'a>(script: &'a Script, now: i64, ops: &[Op]) -> ScriptInvocation<'a> {
    let mut inv = script.prepare_invoke();
    inv.arg(now);
    for op in ops {
        match op {
            Op::Rate { key, from, delta } => {
                inv.key(key).arg("r").arg(*from).arg(*delta);
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

/// Sends what is queued, one call per batch, until every sender is gone.
pub(super) async fn run(cluster: Arc<Cluster>, mut rx: mpsc::Receiver<Op>) {
    let script = script();
    let mut ops = Vec::with_capacity(BATCH);
    while let Some(first) = rx.recv().await {
        ops.push(first);
        take_queued(&mut rx, &mut ops);
        if ops.len() < BATCH {
            tokio::time::sleep(LINGER).await;
            take_queued(&mut rx, &mut ops);
        }
        if cluster.is_up() {
            let mut conn = cluster.conn.clone();
            let inv = invocation(&script, 0, &ops);
            match tokio::time::timeout(cluster.timeout, inv.invoke_async::<i64>(&mut conn)).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    cluster.failed("settle", &e);
                }
                Err(_) => {
                    cluster.timed_out("settle");
                }
            }
        } else {
            super::METRICS.dropped.inc_by(ops.len() as u64);
        }
        ops.clear();
    }
}

/// Moves what is queued into `ops`, up to [`BATCH`], without waiting.
fn take_queued(rx: &mut mpsc::Receiver<Op>, ops: &mut Vec<Op>) {
    while ops.len() < BATCH {
        match rx.try_recv() {
            Ok(op) => ops.push(op),
            Err(_) => break,
        }
    }
}
