//! Sealing a batch: each tenant's chain head and queued drafts in, chained and signed rows out.
//! Pure (no I/O): the store locks the heads, calls [`Batch::seal`] (through `receipts::rows`)
//! and writes what it returns.
//!
//! Per draft: `seq` = head + 1, `prevHash` = the previous `thisHash`, JCS into the batch's one
//! canonical buffer, `thisHash` = SHA-256 of those bytes, then Ed25519 over the same bytes.
//! Hashes chain, so they are computed in order; signatures do not, so a full batch is signed on
//! several threads ([`for_each_parallel`]).

use std::ops::Range;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::canonical::{self, GENESIS};
use super::signer::Signer;
use super::Draft;
/// A tenant's chain head: the newest receipt's `seq` and `thisHash` (the store's row).
pub use crate::store::receipts::Head;

/// The most drafts a batch holds: the receipt writer takes at most this many from its queue.
pub const MAX_BATCH: usize = 1024;

/// Bytes of canonical JSON to reserve per receipt (a receipt with a few checks is ~600).
const CANONICAL_PER_RECEIPT: usize = 640;

impl Head {
    /// The head before a tenant's first receipt: `seq` 0, the genesis hash.
    pub fn genesis() -> Head {
        Head { seq: 0, hash: Arc::from(GENESIS) }
    }
}

/// A batch's drafts in sealing order: tenants in id order (so concurrent writers lock chain
/// heads in the same order and cannot deadlock), each tenant's drafts in queue order.
pub struct Batch<'a> {
    order: Vec<&'a Draft>,
}

impl<'a> Batch<'a> {
    pub fn new(drafts: &'a [Draft]) -> Batch<'a> {
        let mut order: Vec<&Draft> = drafts.iter().collect();
        // Stable: a tenant's drafts keep their queue order.
        order.sort_by(|a, b| a.tenant_id.cmp(&b.tenant_id));
        Batch { order }
    }

    /// Each tenant's drafts, tenants in id order.
    pub fn tenants(&self) -> impl Iterator<Item = &[&'a Draft]> {
        self.order.chunk_by(|a, b| a.tenant_id == b.tenant_id)
    }

    /// Every draft, in sealing order.
    pub fn drafts(&self) -> &[&'a Draft] {
        &self.order
    }

    /// Chains and signs every tenant's drafts after that tenant's head. `heads` holds one head
    /// per tenant, in [`Batch::tenants`] order.
    pub fn seal(&self, heads: Vec<Head>, signer: &Signer) -> SealedBatch<'a> {
        let mut sealed = self.chain(heads);
        let SealedBatch { canonical, rows, .. } = &mut sealed;
        for_each_parallel(rows, |r| r.signature = signer.sign(&canonical[r.canonical.clone()]));
        sealed.signed = true;
        sealed
    }

    /// [`Batch::seal`] without the signatures: seq, prevHash, canonical bytes and thisHash fix
    /// each receipt; the receipt journal's applier signs the same bytes later (`receipts::rows::
    /// sign_records`), before the rows reach the database.
    pub fn chain(&self, heads: Vec<Head>) -> SealedBatch<'a> {
        let mut canonical = Vec::with_capacity(self.order.len() * CANONICAL_PER_RECEIPT);
        let mut rows = Vec::with_capacity(self.order.len());
        let mut chains = Vec::with_capacity(heads.len());
        let mut heads = heads.into_iter();
        for group in self.tenants() {
            let head = heads.next().expect("one chain head per tenant of the batch");
            let first = rows.len();
            let mut seq = head.seq;
            let mut prev = head.hash;
            for &draft in group {
                seq += 1;
                let start = canonical.len();
                canonical::write_receipt(&draft.view(seq, &prev), &mut canonical);
                let mut hex = [0u8; 64];
                hex::encode_to_slice(Sha256::digest(&canonical[start..]), &mut hex)
                    .expect("32 bytes are 64 hex digits");
                let this_hash: Arc<str> = Arc::from(std::str::from_utf8(&hex).expect("hex is ASCII"));
                // The row's prevHash and the previous row's thisHash are one shared value.
                let prev_hash = std::mem::replace(&mut prev, this_hash.clone());
                rows.push(Row {
                    draft,
                    seq,
                    canonical: start..canonical.len(),
                    prev_hash,
                    this_hash,
                    signature: [0; 64],
                });
            }
            chains.push(Chain {
                tenant_id: &group[0].tenant_id,
                rows: first..rows.len(),
                head: Head { seq, hash: prev },
            });
        }
        assert!(heads.next().is_none(), "more chain heads than tenants in the batch");
        SealedBatch { canonical, rows, chains, signed: false }
    }
}

/// One sealed receipt: its draft, place in the chain, hash and signature.
#[derive(Debug)]
pub struct Row<'a> {
    pub draft: &'a Draft,
    pub seq: u64,
    /// Its canonical bytes within [`SealedBatch::canonical`]'s buffer.
    pub canonical: Range<usize>,
    pub prev_hash: Arc<str>,
    pub this_hash: Arc<str>,
    /// Raw Ed25519 signature over the canonical bytes (zeros in a batch only chained).
    pub signature: [u8; 64],
}

/// One tenant's part of a sealed batch.
#[derive(Debug)]
pub struct Chain<'a> {
    pub tenant_id: &'a Arc<str>,
    /// Its rows within [`SealedBatch::rows`].
    pub rows: Range<usize>,
    /// The tenant's head after its last row.
    pub head: Head,
}

/// A sealed batch: rows in sealing order, the tenants' new heads, one canonical buffer.
#[derive(Debug)]
pub struct SealedBatch<'a> {
    canonical: Vec<u8>,
    rows: Vec<Row<'a>>,
    chains: Vec<Chain<'a>>,
    /// Whether the rows carry their signatures ([`Batch::seal`]) or not yet ([`Batch::chain`]).
    signed: bool,
}

impl<'a> SealedBatch<'a> {
    pub fn signed(&self) -> bool {
        self.signed
    }

    pub fn rows(&self) -> &[Row<'a>] {
        &self.rows
    }

    pub fn chains(&self) -> &[Chain<'a>] {
        &self.chains
    }

    /// The canonical (signed, hashed) bytes of `row`.
    pub fn canonical(&self, row: &Row<'_>) -> &[u8] {
        &self.canonical[row.canonical.clone()]
    }
}

/// Batches at least this large are signed on several threads: only full batches, i.e. a
/// backlog to catch up on. Under steady load (batches of a few hundred at 20 ms) the cores are
/// busy serving requests, and two thread starts per batch only added work.
const PARALLEL_FROM: usize = MAX_BATCH;

/// Runs `f` on every item, on several threads for batches of [`PARALLEL_FROM`] or more.
/// The writer signs batches with it: signatures do not depend on each other (only hashes
/// chain), so a backlog is split over the machine's cores.
pub fn for_each_parallel<T: Send>(items: &mut [T], f: impl Fn(&mut T) + Sync) {
    // Length first: `available_parallelism` reads the cgroup files (open, read, close of
    // several paths), ~3% of a single-client request's CPU when it ran for every batch.
    if items.len() < PARALLEL_FROM {
        items.iter_mut().for_each(f);
        return;
    }
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(8);
    if cores < 2 {
        items.iter_mut().for_each(f);
        return;
    }
    let per = items.len().div_ceil(cores);
    let f = &f;
    std::thread::scope(|scope| {
        for part in items.chunks_mut(per) {
            scope.spawn(move || part.iter_mut().for_each(f));
        }
    });
}

#[cfg(test)]
mod tests {
    use base64::engine::general_purpose::STANDARD as B64;
    use base64::Engine;

    use super::*;
    use crate::receipts::canonical::{sha256_hex, verify_signature, Receipt};
    use crate::receipts::{CacheSide, Kind};

    /// A draft of the golden receipt's members for `tenant`, with its own ids.
    fn draft(tenant: &str, request: usize) -> Draft {
        let golden = canonical::tests::golden_receipt();
        Draft {
            tenant_id: tenant.into(),
            receipt_id: format!("01a204c8-7a19-7530-9164-{request:012}"),
            request_id: format!("req-{request}"),
            actor: golden.actor.into(),
            provider: golden.provider.into(),
            model: golden.model,
            prompt_tokens: golden.prompt_tokens,
            completion_tokens: golden.completion_tokens,
            cost_usd: golden.cost_usd,
            checks: golden.checks,
            upstream_status: crate::receipts::UpstreamStatus::Ok,
            ts: golden.ts,
            kind: Kind::ModelCall,
            pack_version: String::new(),
            cache: CacheSide::default(),
            events: Vec::new(),
            outbox: Vec::new(),
            attempts: Vec::new(),
            subject: None,
            latency_us: None,
            key_id: "key-1".into(),
        }
    }

    fn signer() -> Signer {
        Signer::from_seed(&[7u8; 32])
    }

    /// Checks every row of `chain` against the receipt it stands for: seq continuity from
    /// `from`, links, hash of the canonical bytes, signature.
    fn assert_chain(sealed: &SealedBatch<'_>, chain: &Chain<'_>, from: &Head, signer: &Signer) {
        let public = signer.signing_key().verifying_key().to_bytes();
        let mut prev = from.clone();
        for row in &sealed.rows()[chain.rows.clone()] {
            assert_eq!(row.draft.tenant_id, *chain.tenant_id);
            assert_eq!(row.seq, prev.seq + 1, "seq continues from the head");
            assert_eq!(row.prev_hash, prev.hash, "prevHash links to the previous thisHash");
            let bytes = sealed.canonical(row);
            let receipt: Receipt = serde_json::from_slice(bytes).expect("canonical bytes are a receipt");
            assert_eq!((receipt.seq, receipt.prev_hash.as_str()), (row.seq, &*row.prev_hash));
            assert_eq!(receipt.request_id, row.draft.request_id);
            assert_eq!(canonical::receipt_bytes(&receipt), bytes, "the bytes are the receipt's JCS");
            assert_eq!(*row.this_hash, sha256_hex(bytes));
            assert!(verify_signature(bytes, &B64.encode(row.signature), &public));
            prev = Head { seq: row.seq, hash: row.this_hash.clone() };
        }
        assert_eq!(chain.head, prev, "the new head is the last row");
    }

    #[test]
    fn a_chain_continues_from_its_head_with_linked_hashes_and_valid_signatures() {
        let signer = signer();
        let drafts: Vec<Draft> = (0..5).map(|i| draft("t", i)).collect();
        let head = Head { seq: 41, hash: Arc::from("ab".repeat(32)) };
        let batch = Batch::new(&drafts);
        let sealed = batch.seal(vec![head.clone()], &signer);
        assert_eq!(sealed.chains().len(), 1);
        let seqs: Vec<u64> = sealed.rows().iter().map(|r| r.seq).collect();
        assert_eq!(seqs, [42, 43, 44, 45, 46]);
        let requests: Vec<&str> = sealed.rows().iter().map(|r| r.draft.request_id.as_str()).collect();
        assert_eq!(requests, ["req-0", "req-1", "req-2", "req-3", "req-4"], "queue order");
        assert_chain(&sealed, &sealed.chains()[0], &head, &signer);
        assert_eq!(sealed.chains()[0].head.seq, 46);
    }

    #[test]
    fn the_first_receipt_after_genesis_is_the_golden_one() {
        // Same members, key and expectations as `canonical`'s golden test: sealing a draft
        // gives the bytes, hash and signature the Python verifier checks.
        let signer = signer();
        let golden = canonical::tests::golden_receipt();
        let mut drafts = [draft(&golden.tenant_id, 0)];
        drafts[0].receipt_id = golden.receipt_id;
        drafts[0].request_id = golden.request_id;
        let sealed = Batch::new(&drafts).seal(vec![Head::genesis()], &signer);
        let row = &sealed.rows()[0];
        assert_eq!((row.seq, &*row.prev_hash), (1, GENESIS));
        assert_eq!(&*row.this_hash, "8b98b84d393561ee9dbffc51bc09188e41345a27834f197ff474cb73e0619a0d");
        assert_eq!(
            B64.encode(row.signature),
            "osxsnkfs+f2CvS6WsQCt9enaZF37mRBET9noelLzJatUYR8ggs8m8g7Mcp+lsWNxbsUm92DDZBum+nwm1oBNDQ=="
        );
    }

    #[test]
    fn tenants_of_one_batch_keep_separate_chains() {
        let signer = signer();
        // Interleaved in the queue; tenant "b" sorts before "c" whatever the queue order.
        let drafts: Vec<Draft> = (0..9usize).map(|i| draft(if i.is_multiple_of(3) { "c" } else { "b" }, i)).collect();
        let batch = Batch::new(&drafts);
        let tenants: Vec<&str> = batch.tenants().map(|g| &*g[0].tenant_id).collect();
        assert_eq!(tenants, ["b", "c"]);
        let heads = vec![Head { seq: 7, hash: Arc::from("07".repeat(32)) }, Head::genesis()];
        let sealed = batch.seal(heads.clone(), &signer);
        let [b, c] = sealed.chains() else { panic!("two chains: {:?}", sealed.chains()) };
        assert_eq!((&**b.tenant_id, &**c.tenant_id), ("b", "c"));
        assert_eq!((b.rows.len(), c.rows.len()), (6, 3));
        assert_chain(&sealed, b, &heads[0], &signer);
        assert_chain(&sealed, c, &heads[1], &signer);
        let c_requests: Vec<&str> = sealed.rows()[c.rows.clone()].iter().map(|r| r.draft.request_id.as_str()).collect();
        assert_eq!(c_requests, ["req-0", "req-3", "req-6"], "each tenant's drafts in queue order");
        assert_eq!((b.head.seq, c.head.seq), (13, 3));
    }

    #[test]
    fn a_full_batch_signed_on_several_threads_verifies_row_by_row() {
        let signer = signer();
        let n = MAX_BATCH;
        let drafts: Vec<Draft> = (0..n).map(|i| draft("t", i)).collect();
        let sealed = Batch::new(&drafts).seal(vec![Head::genesis()], &signer);
        assert_eq!(sealed.rows().len(), n);
        // Each row's signature is the one signing its bytes alone gives (Ed25519 is
        // deterministic); verifying 1 024 signatures with dalek takes long in a debug build.
        let mut prev = Head::genesis();
        for row in sealed.rows() {
            assert_eq!((row.seq, &row.prev_hash), (prev.seq + 1, &prev.hash));
            assert_eq!(*row.this_hash, sha256_hex(sealed.canonical(row)));
            assert_eq!(row.signature, signer.sign(sealed.canonical(row)), "seq {}", row.seq);
            prev = Head { seq: row.seq, hash: row.this_hash.clone() };
        }
        assert_eq!(sealed.chains()[0].head, prev);
    }

    #[test]
    fn an_empty_batch_seals_nothing() {
        let batch = Batch::new(&[]);
        assert_eq!(batch.tenants().count(), 0);
        let sealed = batch.seal(Vec::new(), &signer());
        assert!(sealed.rows().is_empty() && sealed.chains().is_empty());
    }
}
