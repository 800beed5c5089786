//! One pass over a period's receipts, in seq order, that re-derives everything an attestation
//! states: each `thisHash` from the stored signed members, each `prevHash` link from the anchor,
//! each Ed25519 signature against the registry key its `keyId` names, the RFC 6962 root, and the
//! totals and per-check coverage. Memory is O(log n) plus one page (plus one small memo row per
//! newly verified block): the attestation, the evidence bundle and the benchmark all feed it
//! page by page. With a verified-span memo (`memo.rs`) a vouched-for block skips Ed25519 only;
//! hashes and links are always recomputed.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};

use sha2::{Digest, Sha256};

pub use super::key_ring::KeyRing;
use super::memo::{Span, SpanMemo};
use crate::checks::ORDER;
use crate::receipts::merkle::{self, Hash, RootBuilder};
use crate::receipts::signer::RegisteredKey;
use crate::receipts::StoredReceipt;
use crate::receipts::{canonical, CheckName, CheckResult, Severity, Term, UpstreamStatus};

/// The check names in pipeline order (`checks::ORDER`), then the upstream call.
pub const CHECK_ORDER: [CheckName; ORDER.len() + 1] = {
    let mut all = [CheckName::Upstream; ORDER.len() + 1];
    let mut i = 0;
    while i < ORDER.len() {
        all[i] = ORDER[i];
        i += 1;
    }
    all
};

/// Results that stopped a request: each receipt holding one is an enforcement action.
pub fn is_enforcement(result: &Term<CheckResult>) -> bool {
    result.severity() == Severity::Stopped
}

/// What one receipt's own checks found (computed in parallel; links are checked in order).
#[derive(Debug, Clone, Copy)]
struct RowCheck {
    hash_ok: bool,
    sig_ok: bool,
    leaf: Hash,
}

/// Signatures checked together: Ed25519 batch verification costs well under half of one
/// check per signature. A batch that fails is re-checked one by one to find the culprit(s).
const BATCH: usize = 64;

/// Loose rows (outside complete memo blocks) are checked in runs of at most this many.
const LOOSE_RUN: usize = 16 * BATCH;

/// A run of a page's rows checked as one unit of work: a complete, aligned memo block, or
/// loose rows.
struct Segment {
    start: usize,
    end: usize,
    block: bool,
}

/// What checking one segment found.
struct SegmentOut {
    checks: Vec<RowCheck>,
    /// A memo row for a block whose receipts were all just really verified (recorded only if
    /// their links hold too, which the in-order step decides).
    span: Option<Span>,
    ed25519: u64,
    memo_hit: bool,
}

/// Splits a page into memo blocks (when a memo is in use) and runs of loose rows.
fn segments(rows: &[StoredReceipt], memo: Option<&SpanMemo>) -> Vec<Segment> {
    let mut out = Vec::new();
    let flush = |out: &mut Vec<Segment>, from: usize, to: usize| {
        let mut at = from;
        while at < to {
            let end = (at + LOOSE_RUN).min(to);
            out.push(Segment { start: at, end, block: false });
            at = end;
        }
    };
    let (mut i, mut loose) = (0, 0);
    while i < rows.len() {
        if let Some(m) = memo {
            let (seq, n) = (rows[i].receipt.seq, m.block() as usize);
            // Seqs ascend strictly (primary key, ORDER BY), so equal ends mean no gap inside.
            if m.starts_block(seq) && i + n <= rows.len() && rows[i + n - 1].receipt.seq == seq + n as u64 - 1 {
                flush(&mut out, loose, i);
                out.push(Segment { start: i, end: i + n, block: true });
                i += n;
                loose = i;
                continue;
            }
        }
        i += 1;
    }
    flush(&mut out, loose, rows.len());
    out
}

fn check_segment(rows: &[StoredReceipt], block: bool, keys: &KeyRing, memo: Option<&SpanMemo>) -> SegmentOut {
    let bytes: Vec<Vec<u8>> = rows.iter().map(|r| canonical::receipt_bytes(&r.receipt)).collect();
    let hashes: Vec<Hash> = bytes.iter().map(|b| Sha256::digest(b).into()).collect();
    let mut checks: Vec<RowCheck> = rows
        .iter()
        .zip(&hashes)
        .map(|(r, recomputed)| {
            let stored = merkle::from_hex(&r.this_hash);
            // The leaf is the stored hash (what the bundle shows and an auditor hashes); a stored
            // value that is not even hex is a broken receipt already: its leaf is the recomputed one.
            let leaf = merkle::leaf_hash(&stored.unwrap_or(*recomputed));
            RowCheck { hash_ok: stored == Some(*recomputed), sig_ok: false, leaf }
        })
        .collect();
    let memo = memo.filter(|_| block);
    if let Some(m) = memo {
        if m.vouches(rows[0].receipt.seq, rows, &hashes, keys) {
            checks.iter_mut().for_each(|c| c.sig_ok = true);
            return SegmentOut { checks, span: None, ed25519: 0, memo_hit: true };
        }
    }
    // A pruned receipt has no signature left to check (docs/log.md §7): it stays unverified,
    // and the block holding it is never recorded in the memo.
    for ((group, group_bytes), group_checks) in
        rows.chunks(BATCH).zip(bytes.chunks(BATCH)).zip(checks.chunks_mut(BATCH))
    {
        let batch_ok = keys.verify_batch(
            group
                .iter()
                .zip(group_bytes)
                .filter(|(r, _)| !r.pruned)
                .map(|(r, b)| (r.key_id.as_str(), b.as_slice(), r.signature.as_str())),
        );
        for ((r, b), c) in group.iter().zip(group_bytes).zip(group_checks) {
            c.sig_ok = !r.pruned && (batch_ok || keys.verify(&r.key_id, b, &r.signature));
        }
    }
    let all_ok = checks.iter().all(|c| c.hash_ok && c.sig_ok);
    let span = memo.filter(|_| all_ok).and_then(|m| m.record(rows[0].receipt.seq, rows, &hashes, keys));
    let ed25519 = rows.iter().filter(|r| !r.pruned).count() as u64;
    SegmentOut { checks, span, ed25519, memo_hit: false }
}

/// What checking a page found: per row, plus the memo rows it may record `(start, end, span)`.
struct PageChecks {
    rows: Vec<RowCheck>,
    spans: Vec<(usize, usize, Span)>,
    ed25519: u64,
    memo_blocks: u64,
}

/// Checks a page's segments on up to `available_parallelism` threads (at most 8), each taking
/// the next unclaimed segment.
fn check_rows(rows: &[StoredReceipt], keys: &KeyRing, memo: Option<&SpanMemo>) -> PageChecks {
    let segs = segments(rows, memo);
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(8);
    let workers = cores.min(segs.len());
    let run = |i: usize| {
        let g = &segs[i];
        (i, check_segment(&rows[g.start..g.end], g.block, keys, memo))
    };
    let mut outs: Vec<(usize, SegmentOut)> = if workers < 2 {
        (0..segs.len()).map(run).collect()
    } else {
        let next = AtomicUsize::new(0);
        let claim = || {
            let mut mine = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= segs.len() {
                    return mine;
                }
                mine.push(run(i));
            }
        };
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..workers).map(|_| scope.spawn(claim)).collect();
            handles.into_iter().flat_map(|h| h.join().expect("row checks do not panic")).collect()
        })
    };
    outs.sort_unstable_by_key(|(i, _)| *i);
    let mut page = PageChecks { rows: Vec::with_capacity(rows.len()), spans: Vec::new(), ed25519: 0, memo_blocks: 0 };
    for (i, out) in outs {
        page.rows.extend(out.checks);
        page.ed25519 += out.ed25519;
        page.memo_blocks += u64::from(out.memo_hit);
        if let Some(span) = out.span {
            page.spans.push((segs[i].start, segs[i].end, span));
        }
    }
    page
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Coverage {
    pub receipts: u64,
    pub applicable: u64,
}

/// The totals and findings of a finished walk.
#[derive(Debug, Clone, PartialEq)]
pub struct WalkResult {
    /// Receipts of model and tool calls (kept ones): what every count below but the chain's,
    /// the signatures' and `admin_events` is over.
    pub receipts: u64,
    pub model_receipts: u64,
    pub tool_receipts: u64,
    /// `admin` receipts (docs/log.md §8): in the chain, the tree and the signature counts, in
    /// no other count and no coverage.
    pub admin_events: u64,
    pub chain_verified_count: u64,
    pub signatures_verified_count: u64,
    pub policy_evaluated: u64,
    pub enforcement_actions: u64,
    pub upstream_failures: u64,
    /// Per name of [`CHECK_ORDER`], in that order.
    pub coverage: Vec<(CheckName, Coverage)>,
    pub pack_versions: Vec<String>,
    pub key_ids: Vec<String>,
    pub root: Hash,
    pub leaf_count: u64,
    /// First seq whose hash or link is wrong; first missing seq; first bad signature.
    pub broken_at_seq: Option<u64>,
    pub gap_at_seq: Option<u64>,
    pub bad_signature_at_seq: Option<u64>,
    /// Receipts expected in the period (`toSeq - fromSeq + 1`).
    pub expected: u64,
    /// Receipts of the period whose contents a retention sweep deleted (docs/log.md §7): their
    /// kept `thisHash` is a leaf of the root and the link to the next receipt; nothing else of
    /// them is counted or checked.
    pub pruned: u64,
    /// Signatures checked with Ed25519, and memo blocks whose signatures the memo vouched for.
    pub ed25519_checked: u64,
    pub memo_blocks: u64,
    /// Memo rows to record: blocks this walk really verified (hashes, links, signatures).
    pub new_spans: Vec<Span>,
}

impl WalkResult {
    /// Every receipt of the period is there, and every kept one re-hashes and links.
    pub fn chain_verified(&self) -> bool {
        self.broken_at_seq.is_none()
            && self.gap_at_seq.is_none()
            && self.chain_verified_count + self.pruned == self.expected
    }

    /// Every kept receipt's signature verifies.
    pub fn signatures_verified(&self) -> bool {
        self.bad_signature_at_seq.is_none() && self.signatures_verified_count + self.pruned == self.expected
    }
}

pub struct Walk {
    keys: KeyRing,
    memo: Option<SpanMemo>,
    to_seq: u64,
    /// The next seq expected.
    next: u64,
    /// `thisHash` of the previous receipt; `None` right after a gap (the link cannot be checked).
    prev: Option<String>,
    merkle: RootBuilder,
    r: WalkResult,
    pack_versions: BTreeSet<String>,
    key_ids: BTreeSet<String>,
}

impl Walk {
    /// A walk over `[from_seq, to_seq]` whose first link must equal `anchor_hash` (the stored
    /// `thisHash` of `from_seq - 1`, genesis for seq 1; `None` when that receipt is missing).
    pub fn new(registry: &[RegisteredKey], from_seq: u64, to_seq: u64, anchor_hash: Option<String>) -> Walk {
        Walk {
            keys: KeyRing::new(registry),
            memo: None,
            to_seq,
            next: from_seq,
            prev: anchor_hash,
            merkle: RootBuilder::new(),
            r: WalkResult {
                receipts: 0,
                model_receipts: 0,
                tool_receipts: 0,
                admin_events: 0,
                chain_verified_count: 0,
                signatures_verified_count: 0,
                policy_evaluated: 0,
                enforcement_actions: 0,
                upstream_failures: 0,
                coverage: CHECK_ORDER.iter().map(|n| (*n, Coverage::default())).collect(),
                pack_versions: Vec::new(),
                key_ids: Vec::new(),
                root: merkle::empty_root(),
                leaf_count: 0,
                broken_at_seq: None,
                gap_at_seq: None,
                bad_signature_at_seq: None,
                expected: (to_seq + 1).saturating_sub(from_seq),
                pruned: 0,
                ed25519_checked: 0,
                memo_blocks: 0,
                new_spans: Vec::new(),
            },
            pack_versions: BTreeSet::new(),
            key_ids: BTreeSet::new(),
        }
    }

    /// Uses (and extends) the verified-span memo: complete blocks within one page that the memo
    /// vouches for skip Ed25519; blocks verified for real become `new_spans`.
    pub fn with_memo(mut self, memo: SpanMemo) -> Walk {
        self.memo = Some(memo);
        self
    }

    /// The next page, ascending by seq, continuing where the last one ended. CPU-bound: call it
    /// off the async runtime's threads for big pages. Memo blocks are only used when a page
    /// holds them whole: pages aligned to the block length avoid loose rows.
    pub fn feed(&mut self, rows: &[StoredReceipt]) {
        let page = check_rows(rows, &self.keys, self.memo.as_ref());
        let chained: Vec<bool> = rows.iter().zip(page.rows).map(|(row, c)| self.step(row, c)).collect();
        self.r.ed25519_checked += page.ed25519;
        self.r.memo_blocks += page.memo_blocks;
        for (start, end, span) in page.spans {
            if chained[start..end].iter().all(|ok| *ok) {
                self.r.new_spans.push(span);
            }
        }
    }

    /// Takes one receipt in order; true when its hash and its link both verified.
    fn step(&mut self, row: &StoredReceipt, c: RowCheck) -> bool {
        let r = &mut self.r;
        let seq = row.receipt.seq;
        if seq != self.next {
            r.gap_at_seq.get_or_insert(self.next);
            self.prev = None;
        }
        if row.pruned {
            return self.step_pruned(row, c.leaf);
        }
        let linked = self.prev.as_deref().is_some_and(|p| p == row.receipt.prev_hash);
        let chained = c.hash_ok && linked;
        if chained {
            r.chain_verified_count += 1;
        } else if self.prev.is_some() || !c.hash_ok {
            r.broken_at_seq.get_or_insert(seq);
        }
        if c.sig_ok {
            r.signatures_verified_count += 1;
        } else {
            r.bad_signature_at_seq.get_or_insert(seq);
        }
        self.prev = Some(row.this_hash.clone());
        self.next = seq + 1;
        self.merkle.push(c.leaf);
        if !self.key_ids.contains(&row.key_id) {
            self.key_ids.insert(row.key_id.clone());
        }
        if row.kind == "admin" {
            r.admin_events += 1;
            return chained;
        }
        r.receipts += 1;
        match row.kind.as_str() {
            "tool_call" => r.tool_receipts += 1,
            _ => r.model_receipts += 1,
        }
        let checks = &row.receipt.checks;
        if checks.iter().any(|k| k.name == CheckName::Policy) {
            r.policy_evaluated += 1;
        }
        if checks.iter().any(|k| is_enforcement(&k.result)) {
            r.enforcement_actions += 1;
        }
        if matches!(row.receipt.upstream_status.known(), Some(UpstreamStatus::Error | UpstreamStatus::Timeout)) {
            r.upstream_failures += 1;
        }
        count_coverage(&mut r.coverage, checks);
        if !row.pack_version.is_empty() && !self.pack_versions.contains(&row.pack_version) {
            self.pack_versions.insert(row.pack_version.clone());
        }
        chained
    }

    /// A pruned receipt: its kept `thisHash` is its leaf and what the next receipt links to.
    fn step_pruned(&mut self, row: &StoredReceipt, leaf: Hash) -> bool {
        self.r.pruned += 1;
        self.prev = Some(row.this_hash.clone());
        self.next = row.receipt.seq + 1;
        self.merkle.push(leaf);
        false
    }

    pub fn finish(mut self) -> WalkResult {
        // Receipts missing at the end of the period are a gap too.
        if self.r.gap_at_seq.is_none() && self.next <= self.to_seq {
            self.r.gap_at_seq = Some(self.next);
        }
        self.r.leaf_count = self.merkle.len();
        self.r.root = self.merkle.finish();
        self.r.pack_versions = self.pack_versions.into_iter().collect();
        self.r.key_ids = self.key_ids.into_iter().collect();
        self.r
    }
}

/// A check counts for a receipt when it ran (UPSTREAM: was not skipped). It was applicable when
/// it ran, or when the request reached its place in the pipeline, i.e. no earlier check on the
/// request side blocked it. A check that is applicable but absent shows a coverage gap (e.g. no
/// policy in force for that traffic).
fn count_coverage(coverage: &mut [(CheckName, Coverage)], checks: &[canonical::Check]) {
    let stage = |name: &Term<CheckName>| CHECK_ORDER.iter().position(|n| name == n);
    let blocked_at = checks
        .iter()
        .take_while(|k| k.name != CheckName::Upstream)
        .filter(|k| is_enforcement(&k.result))
        .find_map(|k| stage(&k.name))
        .unwrap_or(usize::MAX);
    for (i, (name, cov)) in coverage.iter_mut().enumerate() {
        let ran = checks.iter().any(|k| k.name == *name && k.result != CheckResult::Skipped);
        if ran {
            cov.receipts += 1;
        }
        if ran || i <= blocked_at {
            cov.applicable += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compliance::memo::MemoKey;
    use crate::receipts::canonical::{Check, Receipt, GENESIS};
    use crate::receipts::signer::seal;
    use crate::receipts::signer::Signer;
    use std::collections::HashMap;

    fn registry(s: &Signer) -> Vec<RegisteredKey> {
        vec![RegisteredKey {
            key_id: s.key_id.clone(),
            algorithm: "ed25519".into(),
            public_key: s.public_b64.clone(),
            created_at: "2026-11-23 00:00:00.000".into(),
            retired_at: None,
        }]
    }

    fn checks(list: &[(&str, &str)]) -> Vec<Check> {
        list.iter().map(|(n, r)| Check { name: n.to_string().into(), result: r.to_string().into() }).collect()
    }

    /// A signed chain of `n` receipts; every third one blocked by the rate limit.
    fn chain(s: &Signer, n: u64) -> Vec<StoredReceipt> {
        let mut prev = GENESIS.to_string();
        (1..=n)
            .map(|seq| {
                let blocked = seq % 3 == 0;
                let list = if blocked {
                    checks(&[("ALLOWLIST", "PASS"), ("RATELIMIT", "BLOCK"), ("UPSTREAM", "SKIPPED")])
                } else {
                    checks(&[("ALLOWLIST", "PASS"), ("policy", "allow"), ("RATELIMIT", "PASS"), ("UPSTREAM", "PASS")])
                };
                let receipt = Receipt {
                    v: 1,
                    tenant_id: "t".into(),
                    seq,
                    receipt_id: format!("r{seq}"),
                    request_id: format!("q{seq}"),
                    actor: "k".into(),
                    provider: "openai".into(),
                    model: "gpt-4o-mini".into(),
                    prompt_tokens: 3,
                    completion_tokens: 4,
                    cost_usd: 0.25,
                    checks: list,
                    upstream_status: if blocked { "skipped" } else { "ok" }.into(),
                    ts: "2026-11-23 00:00:00.000".into(),
                    prev_hash: prev.clone(),
                    subject: None,
                };
                let sealed = seal(receipt, s);
                prev = sealed.this_hash.clone();
                StoredReceipt {
                    receipt: sealed.receipt,
                    this_hash: sealed.this_hash,
                    signature: sealed.signature,
                    key_id: s.key_id.clone(),
                    kind: "model_call".into(),
                    pack_version: if seq > 5 { "ps-b".into() } else { "ps-a".into() },
                    latency_us: None,
                    pruned: false,
                }
            })
            .collect()
    }

    fn walk(s: &Signer, rows: &[StoredReceipt], from: u64, to: u64, anchor: Option<String>) -> WalkResult {
        let mut w = Walk::new(&registry(s), from, to, anchor);
        for page in rows.chunks(7) {
            w.feed(page);
        }
        w.finish()
    }

    #[test]
    fn the_check_order_places_every_check_name_once() {
        let mut names = CHECK_ORDER.to_vec();
        names.sort_by_key(|n| n.as_str());
        names.dedup();
        // `authz` is the management API's, on admin receipts only, which coverage ignores.
        let gateway: Vec<&CheckName> = CheckName::ALL.iter().filter(|n| **n != CheckName::Authz).collect();
        assert_eq!(names.len(), gateway.len());
        assert!(gateway.iter().all(|n| CHECK_ORDER.contains(n)));
        assert_eq!(CHECK_ORDER[..ORDER.len()], ORDER);
        assert_eq!(CHECK_ORDER.last(), Some(&CheckName::Upstream));
    }

    #[test]
    fn a_good_chain_verifies_and_counts() {
        let s = Signer::from_seed(&[3; 32]);
        let rows = chain(&s, 100);
        let r = walk(&s, &rows, 1, 100, Some(GENESIS.into()));
        assert!(r.chain_verified() && r.signatures_verified(), "{r:?}");
        assert_eq!((r.receipts, r.enforcement_actions, r.policy_evaluated), (100, 33, 67));
        let leaves: Vec<Hash> =
            rows.iter().map(|x| merkle::leaf_hash(&merkle::from_hex(&x.this_hash).unwrap())).collect();
        assert_eq!(r.root, merkle::root(&leaves));
        assert_eq!(r.pack_versions, vec!["ps-a", "ps-b"]);
        assert_eq!(r.key_ids, vec![s.key_id.clone()]);
        let cov: HashMap<_, _> = r.coverage.iter().cloned().collect();
        assert_eq!(cov[&CheckName::RateLimit], Coverage { receipts: 100, applicable: 100 });
        // Blocked at RATELIMIT: BUDGET and what follows were not applicable to those 33.
        assert_eq!(cov[&CheckName::Budget], Coverage { receipts: 0, applicable: 67 });
        assert_eq!(cov[&CheckName::Upstream], Coverage { receipts: 67, applicable: 67 });
        assert_eq!(cov[&CheckName::Policy], Coverage { receipts: 67, applicable: 100 });
    }

    /// What a retention sweep leaves of a receipt (`store::retention`): seq, id and thisHash.
    fn prune(r: &mut StoredReceipt) {
        let c = &mut r.receipt;
        (c.v, c.prompt_tokens, c.completion_tokens, c.cost_usd, c.checks) = (0, 0, 0, 0.0, Vec::new());
        (c.request_id, c.actor, c.provider, c.model, c.ts, c.prev_hash) = Default::default();
        c.upstream_status = "".into();
        (r.signature, r.key_id, r.kind, r.pack_version) = Default::default();
        r.pruned = true;
    }

    /// Pruned receipts keep their leaves and links: the root is the log's, the kept receipts
    /// verify, and only they are counted.
    #[test]
    fn pruned_receipts_keep_their_leaves_and_links() {
        let s = Signer::from_seed(&[3; 32]);
        let rows = chain(&s, 30);
        let whole = walk(&s, &rows, 1, 30, Some(GENESIS.into()));
        let mut pruned = rows.clone();
        for i in (0..10).chain([14]) {
            prune(&mut pruned[i]);
        }
        let r = walk(&s, &pruned, 1, 30, Some(GENESIS.into()));
        assert!(r.chain_verified() && r.signatures_verified(), "{r:?}");
        assert_eq!((r.pruned, r.receipts, r.chain_verified_count, r.leaf_count), (11, 19, 19, 30));
        assert_eq!(r.root, whole.root, "the same tree");
        assert_eq!(r.ed25519_checked, 19, "no signature is looked for in a pruned receipt");
        // From the first kept receipt, anchored on the pruned one's kept hash.
        let tail = walk(&s, &pruned[10..], 11, 30, Some(pruned[9].this_hash.clone()));
        assert!(tail.chain_verified() && tail.pruned == 1, "{tail:?}");
        // A kept receipt altered after a pruned one is still found.
        pruned[15].receipt.model = "other".into();
        let r = walk(&s, &pruned, 1, 30, Some(GENESIS.into()));
        assert_eq!((r.broken_at_seq, r.chain_verified()), (Some(16), false));
    }

    #[test]
    fn a_sub_period_links_from_its_anchor() {
        let s = Signer::from_seed(&[3; 32]);
        let rows = chain(&s, 20);
        let r = walk(&s, &rows[9..], 10, 20, Some(rows[8].this_hash.clone()));
        assert!(r.chain_verified(), "{r:?}");
        let wrong = walk(&s, &rows[9..], 10, 20, Some(GENESIS.into()));
        assert_eq!(wrong.broken_at_seq, Some(10));
        assert!(!wrong.chain_verified());
    }

    #[test]
    fn tampering_is_found_where_it_happened() {
        let s = Signer::from_seed(&[3; 32]);
        let mut rows = chain(&s, 30);
        rows[11].receipt.cost_usd = 0.0; // seq 12
        let r = walk(&s, &rows, 1, 30, Some(GENESIS.into()));
        assert_eq!(r.broken_at_seq, Some(12));
        assert_eq!(r.bad_signature_at_seq, Some(12));
        assert!(!r.chain_verified() && !r.signatures_verified());

        let mut rows = chain(&s, 30);
        rows.remove(19); // seq 20
        let r = walk(&s, &rows, 1, 30, Some(GENESIS.into()));
        assert_eq!(r.gap_at_seq, Some(20));
        assert!(!r.chain_verified());
        assert!(r.signatures_verified_count == 29 && !r.signatures_verified());

        let mut rows = chain(&s, 30);
        rows.truncate(25);
        assert_eq!(walk(&s, &rows, 1, 30, Some(GENESIS.into())).gap_at_seq, Some(26));

        let mut rows = chain(&s, 30);
        rows[4].signature = rows[5].signature.clone(); // seq 5: valid base64, wrong signature
        let r = walk(&s, &rows, 1, 30, Some(GENESIS.into()));
        assert!(r.chain_verified());
        assert_eq!(r.bad_signature_at_seq, Some(5));
    }

    fn memo_walk(s: &Signer, rows: &[StoredReceipt], spans: &[Span], key: [u8; 32], tenant: &str) -> WalkResult {
        let memo = SpanMemo::new(MemoKey::from_bytes(key), tenant, 4, spans.to_vec());
        let mut w = Walk::new(&registry(s), 1, 30, Some(GENESIS.into())).with_memo(memo);
        for page in rows.chunks(8) {
            w.feed(page);
        }
        w.finish()
    }

    #[test]
    fn the_memo_vouches_for_really_verified_blocks_only() {
        let s = Signer::from_seed(&[3; 32]);
        let rows = chain(&s, 30); // blocks of 4: 1..=28 complete, 29 and 30 loose
        let cold = memo_walk(&s, &rows, &[], [9; 32], "t");
        assert!(cold.chain_verified() && cold.signatures_verified(), "{cold:?}");
        assert_eq!((cold.ed25519_checked, cold.memo_blocks, cold.new_spans.len()), (30, 0, 7));
        let spans = cold.new_spans.clone();
        assert_eq!(spans[1].block_start, 5);

        let warm = memo_walk(&s, &rows, &spans, [9; 32], "t");
        assert!(warm.chain_verified() && warm.signatures_verified(), "{warm:?}");
        assert_eq!((warm.ed25519_checked, warm.memo_blocks, warm.new_spans.len()), (2, 7, 0));
        assert_eq!((warm.root, warm.signatures_verified_count), (cold.root, 30));

        // A signature swapped inside a vouched-for block: that block falls back to Ed25519.
        let mut bad = rows.clone();
        bad[5].signature = rows[6].signature.clone(); // seq 6
        let r = memo_walk(&s, &bad, &spans, [9; 32], "t");
        assert!(r.chain_verified() && !r.signatures_verified());
        assert_eq!((r.bad_signature_at_seq, r.memo_blocks, r.ed25519_checked), (Some(6), 6, 6));
        assert!(r.new_spans.is_empty(), "a block with a bad signature is not recorded");

        let mut bad = rows.clone();
        bad[9].key_id = "0000000000000000".into(); // seq 10
        let r = memo_walk(&s, &bad, &spans, [9; 32], "t");
        assert_eq!((r.bad_signature_at_seq, r.memo_blocks), (Some(10), 6));

        let mut bad = rows.clone();
        bad[13].receipt.cost_usd = 9.0; // seq 14
        let r = memo_walk(&s, &bad, &spans, [9; 32], "t");
        assert_eq!((r.broken_at_seq, r.bad_signature_at_seq), (Some(14), Some(14)));

        // Rows written under another key (forged without the master key) or for another tenant
        // vouch for nothing; they are rewritten.
        let r = memo_walk(&s, &rows, &spans, [1; 32], "t");
        assert_eq!((r.ed25519_checked, r.memo_blocks, r.new_spans.len()), (30, 0, 7));
        let r = memo_walk(&s, &rows, &spans, [9; 32], "other");
        assert_eq!((r.ed25519_checked, r.memo_blocks), (30, 0));

        // A block with a gap is not a block; a broken link is not recorded.
        let mut gap = rows.clone();
        gap.remove(6); // seq 7
        let r = memo_walk(&s, &gap, &[], [9; 32], "t");
        assert!(r.new_spans.iter().all(|sp| sp.block_start != 5), "{:?}", r.new_spans);
        let mut relinked = rows.clone();
        relinked[4].this_hash = "ab".repeat(32); // seq 5's stored hash: 5 broken, 6's link broken
        let r = memo_walk(&s, &relinked, &[], [9; 32], "t");
        assert_eq!(r.broken_at_seq, Some(5));
        assert!(r.new_spans.iter().all(|sp| sp.block_start != 5), "{:?}", r.new_spans);
    }

    #[test]
    fn an_unknown_key_fails_signatures() {
        let s = Signer::from_seed(&[3; 32]);
        let other = Signer::from_seed(&[4; 32]);
        let rows = chain(&s, 3);
        let mut w = Walk::new(&registry(&other), 1, 3, Some(GENESIS.into()));
        w.feed(&rows);
        let r = w.finish();
        assert!(r.chain_verified() && !r.signatures_verified());
        assert_eq!(r.bad_signature_at_seq, Some(1));
    }

    #[test]
    fn an_empty_period() {
        let s = Signer::from_seed(&[3; 32]);
        let r = Walk::new(&registry(&s), 8, 7, None).finish();
        assert!(r.chain_verified() && r.signatures_verified());
        assert_eq!((r.receipts, r.leaf_count), (0, 0));
        assert_eq!(r.root, merkle::empty_root());
    }
}
