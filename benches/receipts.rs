//! Receipt cost: canonicalize + hash + sign one receipt; sealing a batch alone, without a
//! database (seq, prevHash, JCS, SHA-256, Ed25519: `receipts::seal`); and the writer's whole
//! batch append (the same sealing plus head locks, multi-row INSERTs, spend, head update) on
//! SQLite. The difference between the last two is the store's share.
//!
//! `cargo bench --bench receipts`. The batch groups report throughput in receipts/s.

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use tollgate::receipts::canonical::{Check, GENESIS};
use tollgate::receipts::rows::{self, Sealing, RULES};
use tollgate::receipts::seal::{Batch, Head};
use tollgate::receipts::signer::{seal, Signer};
use tollgate::receipts::{CacheSide, Draft, Kind, UpstreamStatus};
use tollgate::store::{self, Store};

fn draft(tenant: &str, i: usize) -> Draft {
    Draft {
        tenant_id: tenant.into(),
        receipt_id: uuid::Uuid::now_v7().to_string(),
        request_id: format!("req-{i}"),
        actor: "01a204c8-7a19-7530-9164-000000000001".into(),
        provider: "openai".into(),
        model: "gpt-4o-mini".into(),
        prompt_tokens: 120,
        completion_tokens: 80,
        cost_usd: 0.000066,
        checks: vec![
            Check { name: "policy".into(), result: "allow".into() },
            Check { name: "UPSTREAM".into(), result: "PASS".into() },
        ],
        upstream_status: UpstreamStatus::Ok,
        ts: "2026-11-22 19:42:57.049".into(),
        kind: Kind::ModelCall,
        pack_version: String::new(),
        cache: CacheSide::default(),
        events: Vec::new(),
        outbox: Vec::new(),
        attempts: Vec::new(),
        subject: None,
        latency_us: None,
        key_id: "01a204c8-7a19-7530-9164-000000000001".into(),
    }
}

fn bench_seal(c: &mut Criterion) {
    let signer = Signer::from_seed(&[7u8; 32]);
    // The signed members of a queued draft, read back as a stored receipt.
    let mut canonical = Vec::new();
    tollgate::receipts::canonical::write_receipt(&draft("t", 0).view(42, GENESIS), &mut canonical);
    let receipt: tollgate::receipts::Receipt = serde_json::from_slice(&canonical).expect("canonical JSON of a receipt");
    c.bench_function("seal one receipt (JCS + SHA-256 + Ed25519)", |b| {
        b.iter_batched(|| receipt.clone(), |r| seal(r, &signer), BatchSize::SmallInput)
    });
    c.bench_function("JCS of one receipt", |b| b.iter(|| tollgate::receipts::canonical::canonical_bytes(&receipt)));
    let bytes = tollgate::receipts::canonical::canonical_bytes(&receipt);
    c.bench_function("Ed25519 sign of one receipt", |b| b.iter(|| signer.sign(&bytes)));
    let sealed = seal(receipt.clone(), &signer);
    let public = signer.signing_key().verifying_key().to_bytes();
    c.bench_function("Ed25519 verify of one receipt", |b| {
        b.iter(|| tollgate::receipts::canonical::verify_signature(&bytes, &sealed.signature, &public))
    });
}

/// A batch of `size` drafts over two tenants, as the writer sees them.
fn batch(size: usize) -> Vec<Draft> {
    (0..size).map(|i| draft(if i.is_multiple_of(2) { "tenant-a" } else { "tenant-b" }, i)).collect()
}

fn bench_seal_batch(c: &mut Criterion) {
    let signer = Signer::from_seed(&[7u8; 32]);
    let mut group = c.benchmark_group("seal batch (no database)");
    for size in [64usize, 1024] {
        let drafts = batch(size);
        group.throughput(Throughput::Elements(size as u64));
        group.bench_function(format!("{size} receipts, 2 tenants"), |b| {
            b.iter(|| {
                let batch = Batch::new(&drafts);
                let heads = vec![Head { seq: 41, hash: GENESIS.into() }; 2];
                batch.seal(heads, &signer).rows().len()
            })
        });
    }
    group.finish();
}

fn bench_append(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("tollgate-bench-{}", uuid::Uuid::new_v4().simple()));
    let url = format!("sqlite://{}", dir.join("bench.db").display());
    let rt = store::db_runtime();
    let db = rt.block_on(Store::connect(&url)).unwrap();
    rt.block_on(db.migrate()).unwrap();
    let signer = Arc::new(Signer::from_seed(&[7u8; 32]));
    let mut group = c.benchmark_group("append batch on SQLite");
    group.sample_size(20);
    for size in [64usize, 1024] {
        group.throughput(Throughput::Elements(size as u64));
        group.bench_function(format!("{size} receipts, 2 tenants"), |b| {
            b.iter_batched(
                || batch(size),
                |drafts| rt.block_on(rows::append_batch(&db, drafts, signer.clone())).unwrap(),
                BatchSize::LargeInput,
            )
        });
    }
    group.finish();
    let _ = std::fs::remove_dir_all(dir);
}

/// The receipt writer's own path on SQLite (`SqliteAppender`, one tenant, as under load): a
/// batch's fixed cost (locks, chain head, spend, head update, commit, WAL frames) shows as the
/// difference between the per-receipt figures of small and large batches.
fn bench_appender(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("tollgate-bench-{}", uuid::Uuid::new_v4().simple()));
    let file = dir.join("bench.db");
    let url = format!("sqlite://{}", file.display());
    let rt = store::db_runtime();
    let db = rt.block_on(Store::connect(&url)).unwrap();
    rt.block_on(db.migrate()).unwrap();
    let signer = Signer::from_seed(&[7u8; 32]);
    let mut appender = store::receipts::SqliteAppender::open(&file, std::time::Duration::from_secs(5), RULES).unwrap();
    let checkpointer = rusqlite::Connection::open(&file).unwrap();
    let mut group = c.benchmark_group("writer append on SQLite");
    for size in [1usize, 8, 32] {
        group.throughput(Throughput::Elements(size as u64));
        group.bench_function(format!("{size} receipts, 1 tenant"), |b| {
            b.iter_batched(
                || {
                    // Untimed, as the background checkpointer keeps it: the WAL starts over.
                    store::receipts::checkpoint_passive(&checkpointer).unwrap();
                    (0..size).map(|i| draft("tenant-a", i)).collect::<Vec<_>>()
                },
                |drafts| appender.append(&mut Sealing::new(&drafts, &signer)).unwrap(),
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
    let _ = std::fs::remove_dir_all(dir);
}

criterion_group!(benches, bench_seal, bench_seal_batch, bench_append, bench_appender);
criterion_main!(benches);
