//! Retention and legal hold (docs/log.md §7): which receipts a sweep prunes, and the sweep over
//! every tenant that set a retention. A sweep deletes a receipt's contents, never its leaf: the
//! tree, its tiles, checkpoints and proofs stay as they were (`store::retention` keeps `seq`,
//! `receipt_id` and `this_hash`). The server sweeps daily; `tollgate log sweep` sweeps at once.

use chrono::{DateTime, Duration, Utc};

use crate::receipts::receipt_ts;
use crate::store::{self, Store, StoreError};

/// Seqs per sweep transaction: short enough that the receipt writer and a hold placed meanwhile
/// wait little for it.
pub const WINDOW: u64 = 1000;

/// How often the server sweeps.
pub const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// What one tenant's sweep did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Swept {
    pub tenant: String,
    /// The retention applied: the tenant's, raised to the floor.
    pub days: u64,
    /// Receipts older than this (receipt ts form) and under no hold were pruned.
    pub cutoff: String,
    pub pruned: u64,
}

/// The retention a sweep applies: the tenant's days, never below the operator's floor (a floor
/// raised after a tenant chose fewer days protects its receipts from then on).
pub fn effective_days(tenant_days: u64, floor_days: u32) -> u64 {
    tenant_days.max(u64::from(floor_days))
}

/// The instant before which receipts are old at `as_of`, in the receipts' own ts form (which
/// sorts as text); an instant before the calendar's start keeps everything.
pub fn cutoff(as_of: DateTime<Utc>, days: u64) -> String {
    let days = i64::try_from(days).unwrap_or(i64::MAX).min(Duration::MAX.num_days());
    let at = as_of.checked_sub_signed(Duration::days(days)).unwrap_or(DateTime::<Utc>::MIN_UTC);
    receipt_ts(at)
}

/// Sweeps every tenant that set a retention, as if it were `as_of`: prunes each receipt older
/// than the tenant's retention (at least `floor_days`) that no hold covers. Idempotent: a
/// receipt pruned already is not touched again, so a second sweep changes nothing.
pub async fn sweep(store: &Store, floor_days: u32, as_of: DateTime<Utc>) -> Result<Vec<Swept>, StoreError> {
    let mut out = Vec::new();
    for (tenant, days) in store::retention::tenants(store).await? {
        let days = effective_days(days, floor_days);
        let cutoff = cutoff(as_of, days);
        let pruned = sweep_tenant(store, &tenant, &cutoff).await?;
        out.push(Swept { tenant, days, cutoff, pruned });
    }
    Ok(out)
}

/// Prunes the tenant's old receipts window by window, in seq order, over the range of its kept
/// receipts older than `cutoff`.
async fn sweep_tenant(store: &Store, tenant: &str, cutoff: &str) -> Result<u64, StoreError> {
    let Some((lo, hi)) = store::retention::old_bounds(store, tenant, cutoff).await? else { return Ok(0) };
    let now = store::now_ts();
    let mut pruned = 0;
    let mut from = lo;
    while from <= hi {
        let to = from.saturating_add(WINDOW - 1).min(hi);
        pruned += store::retention::prune_window(store, tenant, (from, to), cutoff, now.clone()).await?;
        from = to + 1;
    }
    if pruned > 0 {
        log::info!("log retention: tenant {tenant}: pruned {pruned} receipts older than {cutoff} UTC");
    }
    Ok(pruned)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::receipts::rows::append_batch;
    use crate::receipts::signer::Signer;
    use crate::receipts::stored;
    use crate::store::receipts::tests::draft;
    use crate::tenant_log::tree;
    use std::sync::Arc;
    use tlog_tiles::tlog::{self, Hash};

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).unwrap().with_timezone(&Utc)
    }

    /// `n` receipts of `tenant`, one a minute from 2026-01-01 00:00 UTC (the `i`-th at minute `i`).
    async fn receipts(store: &Store, tenant: &str, first: usize, n: usize, signer: &Arc<Signer>) {
        let drafts: Vec<_> = (first..first + n)
            .map(|i| {
                let mut d = draft(tenant, i);
                d.ts = receipt_ts(at("2026-01-01T00:00:00Z") + Duration::minutes(i as i64));
                d
            })
            .collect();
        append_batch(store, drafts, signer.clone()).await.unwrap();
    }

    async fn events(store: &Store) -> i64 {
        count(store, "SELECT COUNT(*) FROM guardrail_events").await
    }

    async fn count(store: &Store, sql: &'static str) -> i64 {
        store
            .run(|pool, _| async move {
                let row = sqlx::query(sql).fetch_one(&pool).await?;
                Ok(sqlx::Row::get::<i64, _>(&row, 0))
            })
            .await
            .unwrap()
    }

    /// The sweep prunes exactly the old, unheld receipts, keeps every leaf (the tree before it
    /// proves consistent with the tree after), drops their guardrail events, and does nothing
    /// the second time.
    #[test]
    fn a_sweep_prunes_old_unheld_contents_and_keeps_the_tree() {
        let (store, dir) = crate::store::temp_sqlite("retention");
        store::db_runtime().block_on(async {
            let signer = Arc::new(Signer::from_seed(&[5; 32]));
            receipts(&store, "t", 0, 300, &signer).await;
            receipts(&store, "other", 0, 10, &signer).await;
            let before = Hash(tree::root(&store, "t", 300).await.unwrap());
            let leaves = store::tiles::leaves(&store, "t", 0, 300).await.unwrap();
            let (events_before, held_events) = (events(&store).await, (49..60).filter(|i| i % 3 == 0).count());
            let attempts = || count(&store, "SELECT COUNT(*) FROM receipt_attempts WHERE tenant_id = 't'");
            let attempts_before = attempts().await;
            assert_eq!(attempts_before, 100, "a routed receipt's attempts are written with it");
            store::retention::set_days(&store, "t", Some(30), store::now_ts()).await.unwrap();
            let hold = store::retention::HoldRow {
                id: "h".into(),
                from_seq: 50,
                to_seq: 60,
                reason: "matter 7".into(),
                created_at: store::now_ts(),
                created_by: "k".into(),
            };
            store::retention::create_hold(&store, "t", hold).await.unwrap();

            // 30 days and 2 hours later: the first 120 receipts (seq 1-120) are old; 11 are held.
            let as_of = at("2026-01-31T02:00:00Z");
            let swept = sweep(&store, 0, as_of).await.unwrap();
            assert_eq!(swept.len(), 1, "only the tenant with a retention: {swept:?}");
            assert_eq!((swept[0].pruned, swept[0].cutoff.as_str()), (109, "2026-01-01 02:00:00.000"));
            let rows = stored::seq_range(&store, "t", 1, 300, 300).await.unwrap();
            let pruned: Vec<u64> = rows.iter().filter(|r| r.pruned).map(|r| r.receipt.seq).collect();
            assert_eq!(pruned, (1..=120).filter(|s| !(50..=60).contains(s)).collect::<Vec<_>>());
            let p = &rows[0];
            assert!(p.signature.is_empty() && p.receipt.actor.is_empty() && p.receipt.ts.is_empty());
            assert!(p.receipt.checks.is_empty() && p.receipt.prompt_tokens == 0 && p.kind.is_empty());
            let packed = store::receipts::seq_range_packed(&store, "t", 1, 300, 300).await.unwrap();
            assert_eq!(stored::unpack("t", &packed).unwrap(), rows, "a packed page reads as the rows do");
            assert_eq!(store::tiles::leaves(&store, "t", 0, 300).await.unwrap(), leaves, "every leaf kept");
            assert_eq!(Hash(tree::root(&store, "t", 300).await.unwrap()), before);
            let pruned_events = (0..120).filter(|i| i % 3 == 0).count() - held_events;
            assert_eq!(events(&store).await, events_before - pruned_events as i64);
            assert_eq!(attempts().await, attempts_before - pruned_events as i64, "attempts go with their receipt");
            assert_eq!(store::retention::get(&store, "t").await.unwrap().pruned_through, 120);

            // The chain walk links the kept receipts over the pruned ones.
            let report = crate::receipts::chain::verify(&store, "t", 1, 300).await.unwrap();
            assert!(report.ok && (report.count, report.pruned) == (191, 109), "{report:?}");
            let listed = stored::page(&store, "t", &Default::default(), None, None, 1000).await.unwrap();
            assert_eq!(listed.len(), 191, "lists skip pruned receipts");

            // Idempotent; the log grows on, consistent with the tree before the sweep.
            assert_eq!(sweep(&store, 0, as_of).await.unwrap()[0].pruned, 0);
            assert_eq!(stored::seq_range(&store, "t", 1, 300, 300).await.unwrap(), rows);
            receipts(&store, "t", 300, 20, &signer).await;
            let after = Hash(tree::root(&store, "t", 320).await.unwrap());
            let proof = tree::consistency(&store, "t", 300, 320).await.unwrap();
            let path: Vec<Hash> = proof.path.iter().map(|h| Hash(*h)).collect();
            tlog::check_tree(&path, 320, after, 300, before).expect("the old tree is a prefix of the new");

            // A floor above the tenant's days protects younger receipts; releasing the hold
            // lets the next sweep prune what it held.
            let floored = sweep(&store, 40, at("2026-02-10T03:00:00Z")).await.unwrap();
            assert_eq!((floored[0].days, floored[0].pruned), (40, 60), "seq 121-180, not the 30 days' all");
            assert!(store::retention::delete_hold(&store, "t", "h").await.unwrap());
            assert_eq!(sweep(&store, 0, as_of).await.unwrap()[0].pruned, 11);
        });
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn the_floor_raises_a_shorter_retention() {
        assert_eq!(effective_days(30, 183), 183);
        assert_eq!(effective_days(400, 183), 400);
        assert_eq!(effective_days(0, 0), 0);
    }

    #[test]
    fn the_cutoff_is_in_receipt_form_and_saturates() {
        let at = DateTime::parse_from_rfc3339("2026-07-03T12:00:00Z").unwrap().with_timezone(&Utc);
        assert_eq!(cutoff(at, 2), "2026-07-01 12:00:00.000");
        assert!(*cutoff(at, u64::MAX) < *"0001", "everything is newer than the start of time");
    }
}
