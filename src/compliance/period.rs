//! Attestation periods: `days=N`, `from`/`to` (RFC 3339) or `fromSeq`/`toSeq`, resolved to the
//! contiguous seq range of a tenant's chain that the Merkle tree and the walk cover.
//!
//! A time period covers `[first seq with ts >= from, last seq with ts <= to]`. Receipts get their
//! `ts` when the answer ends and their `seq` when the writer appends, so around the edges the two
//! orders can differ by a few milliseconds; the seq range is what is proven, and both its ends
//! and their timestamps are stated in the answer.

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;

use crate::store::{self, Store, StoreError};

/// What the caller asked for.
#[derive(Debug, Clone, PartialEq)]
pub enum PeriodSpec {
    Days(u32),
    Time { from: Option<DateTime<Utc>>, to: Option<DateTime<Utc>> },
    Seq { from: Option<u64>, to: Option<u64> },
}

pub const DEFAULT_DAYS: u32 = 30;
pub const MAX_DAYS: u32 = 3650;

/// A resolved period (the seed's `period` object). Empty when `to_seq < from_seq`
/// (then `from_seq - 1 == to_seq` is the last receipt before it).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Period {
    pub label: String,
    pub days: u64,
    pub from_seq: u64,
    pub to_seq: u64,
    pub from_ts: String,
    pub to_ts: String,
}

impl Period {
    pub fn leaf_count(&self) -> u64 {
        (self.to_seq + 1).saturating_sub(self.from_seq)
    }

    pub fn contains(&self, seq: u64) -> bool {
        (self.from_seq..=self.to_seq).contains(&seq)
    }
}

/// Receipt `ts` (`YYYY-MM-DD HH:MM:SS.mmm`, UTC) → RFC 3339 with milliseconds.
pub fn rfc3339_of_receipt_ts(ts: &str) -> String {
    format!("{}Z", ts.replacen(' ', "T", 1))
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn days_between(from: DateTime<Utc>, to: DateTime<Utc>) -> u64 {
    let secs = (to - from).num_seconds().max(0) as u64;
    secs.div_ceil(86_400)
}

fn parse_receipt_ts(ts: &str) -> Option<DateTime<Utc>> {
    chrono::NaiveDateTime::parse_from_str(ts, "%Y-%m-%d %H:%M:%S%.3f").ok().map(|n| n.and_utc())
}

pub async fn resolve(store: &Store, tenant_id: &str, spec: &PeriodSpec) -> Result<Period, StoreError> {
    let now = Utc::now();
    match spec {
        PeriodSpec::Days(n) => {
            let from = now - Duration::days(i64::from(*n));
            let mut p = by_time(store, tenant_id, from, now).await?;
            p.label = format!("last {n} days");
            p.days = u64::from(*n);
            Ok(p)
        }
        PeriodSpec::Time { from, to } => {
            let from = from.unwrap_or(DateTime::<Utc>::UNIX_EPOCH);
            let to = to.unwrap_or(now);
            let mut p = by_time(store, tenant_id, from, to).await?;
            p.label = format!("{} to {}", rfc3339(from), rfc3339(to));
            Ok(p)
        }
        PeriodSpec::Seq { from, to } => {
            let head = store::receipts::head_seq(store, tenant_id).await?;
            // Past the head a period is empty, and sits right after the head.
            let from_seq = from.unwrap_or(1).clamp(1, head + 1);
            let to_seq = to.unwrap_or(head).min(head).max(from_seq - 1);
            let first = store::period::ts_at(store, tenant_id, from_seq).await?;
            let last = store::period::ts_at(store, tenant_id, to_seq).await?;
            let (from_t, to_t) =
                (first.as_deref().and_then(parse_receipt_ts), last.as_deref().and_then(parse_receipt_ts));
            Ok(Period {
                label: format!("seq {from_seq} to {to_seq}"),
                days: from_t.zip(to_t).map(|(a, b)| days_between(a, b)).unwrap_or(0),
                from_seq,
                to_seq,
                from_ts: first.as_deref().map(rfc3339_of_receipt_ts).unwrap_or_default(),
                to_ts: last.as_deref().map(rfc3339_of_receipt_ts).unwrap_or_default(),
            })
        }
    }
}

async fn by_time(store: &Store, tenant_id: &str, from: DateTime<Utc>, to: DateTime<Utc>) -> Result<Period, StoreError> {
    let (f, t) = (crate::receipts::receipt_ts(from), crate::receipts::receipt_ts(to));
    let (from_seq, to_seq) = match store::period::seq_bounds_by_ts(store, tenant_id, &f, &t).await? {
        Some(bounds) => bounds,
        None => {
            let before = store::period::last_seq_before(store, tenant_id, &f).await?;
            (before + 1, before)
        }
    };
    Ok(Period {
        label: String::new(),
        days: days_between(from, to),
        from_seq,
        to_seq,
        from_ts: rfc3339(from),
        to_ts: rfc3339(to),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receipt_ts_to_rfc3339() {
        assert_eq!(rfc3339_of_receipt_ts("2026-11-23 10:04:05.123"), "2026-11-23T10:04:05.123Z");
        let t = parse_receipt_ts("2026-11-23 10:04:05.123").unwrap();
        assert_eq!(rfc3339(t), "2026-11-23T10:04:05.123Z");
    }

    #[test]
    fn day_counts_round_up() {
        let a = parse_receipt_ts("2026-11-01 00:00:00.000").unwrap();
        assert_eq!(days_between(a, a), 0);
        assert_eq!(days_between(a, a + Duration::hours(1)), 1);
        assert_eq!(days_between(a, a + Duration::days(30)), 30);
    }

    #[test]
    fn leaf_count_of_an_empty_period_is_zero() {
        let p = Period {
            label: String::new(),
            days: 0,
            from_seq: 8,
            to_seq: 7,
            from_ts: String::new(),
            to_ts: String::new(),
        };
        assert_eq!(p.leaf_count(), 0);
        assert!(!p.contains(7) && !p.contains(8));
    }
}
