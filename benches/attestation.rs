//! Attestation, inclusion proof and evidence bundle over a large period (issue 5's target:
//! attestation over 1 000 000 receipts in ≤ 5 s, memory bounded).
//!
//! `cargo bench --bench attestation` — `ATTEST_RECEIPTS` (default 1 000 000) receipts are
//! generated once into `target/bench-data/` (real signed, chained receipts through the writer's
//! own append) and reused by later runs. Prints wall times and the process's peak memory after
//! each step; each step runs in this one process, so the peak only grows. The attestation runs
//! twice: cold (the verified-span memo cleared first: every signature checked with Ed25519)
//! and warm (the memo rows the cold walk recorded vouch for whole blocks).

use std::sync::Arc;
use std::time::Instant;

// The same allocator as the `tollgate` binary: glibc malloc's arena locks and consolidation were
// a quarter of the walk's CPU here, which the server does not pay.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use tollgate::compliance::attestation;
use tollgate::compliance::bundle::BundleWriter;
use tollgate::compliance::inclusion;
use tollgate::compliance::memo::MemoKey;
use tollgate::compliance::period::{self, PeriodSpec};
use tollgate::receipts::canonical::Check;
use tollgate::receipts::signer::{self, Signer};
use tollgate::receipts::{CacheSide, Draft, Kind, UpstreamStatus};
use tollgate::secrets::at_rest::MasterKey;
use tollgate::store::{self, Store};

const TENANT: &str = "bench-tenant";

fn draft(i: u64) -> Draft {
    let check = |n: &'static str, r: &'static str| Check { name: n.into(), result: r.into() };
    let blocked = i.is_multiple_of(20);
    let checks = if blocked {
        vec![
            check("ALLOWLIST", "PASS"),
            check("policy", "allow"),
            check("RATELIMIT", "BLOCK"),
            check("UPSTREAM", "SKIPPED"),
        ]
    } else {
        vec![
            check("ALLOWLIST", "PASS"),
            check("policy", "allow"),
            check("RATELIMIT", "PASS"),
            check("BUDGET", "PASS"),
            check("GUARDRAIL", if i.is_multiple_of(7) { "REDACT" } else { "PASS" }),
            check("CACHE", "MISS"),
            check("UPSTREAM", "PASS"),
        ]
    };
    Draft {
        tenant_id: TENANT.into(),
        receipt_id: uuid::Uuid::now_v7().to_string(),
        request_id: format!("req-{i}"),
        actor: "01a204c8-7a19-7530-9164-000000000001".into(),
        provider: "openai".into(),
        model: "gpt-4o-mini".into(),
        prompt_tokens: 120 + i % 50,
        completion_tokens: 80,
        cost_usd: 0.000066,
        checks,
        upstream_status: if blocked { UpstreamStatus::Skipped } else { UpstreamStatus::Ok },
        ts: "2026-11-22 19:42:57.049".into(),
        kind: Kind::ModelCall,
        pack_version: "ps-bench".into(),
        cache: CacheSide::default(),
        events: Vec::new(),
        outbox: Vec::new(),
        attempts: Vec::new(),
        subject: None,
        latency_us: None,
        key_id: "01a204c8-7a19-7530-9164-000000000001".into(),
    }
}

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb: f64 = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    kb / 1024.0
}

async fn ensure_receipts(db: &Store, signer: &Arc<Signer>, n: u64) {
    let have = store::receipts::head_seq(db, TENANT).await.unwrap();
    if have >= n {
        return;
    }
    let started = Instant::now();
    let mut next = have;
    while next < n {
        let batch: Vec<Draft> = (next..(next + 4096).min(n)).map(draft).collect();
        next += batch.len() as u64;
        tollgate::receipts::rows::append_batch(db, batch, signer.clone()).await.unwrap();
    }
    println!("generated {} receipts in {:.1} s", n - have, started.elapsed().as_secs_f64());
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo bench -- --list` (criterion-style discovery)
    }
    let n: u64 = std::env::var("ATTEST_RECEIPTS").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000);
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-data");
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join(format!("attest-{n}.db")).display());
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let db = Store::connect(&url).await.unwrap();
        db.migrate().await.unwrap();
        let signer = Arc::new(Signer::from_seed(&[7u8; 32]));
        signer::register(&db, &signer).await.unwrap();
        ensure_receipts(&db, &signer, n).await;
        let registry = signer::registry(&db).await.unwrap();
        let spec = PeriodSpec::Seq { from: None, to: Some(n) };

        let memo_key = MemoKey::from_master(&MasterKey::from_bytes(&[5u8; 32]));
        let p = period::resolve(&db, TENANT, &spec).await.unwrap();
        // ATTEST_WARM_ONLY=1 keeps the memo rows of an earlier run, walks once and stops (profiling).
        let warm_only = std::env::var("ATTEST_WARM_ONLY").is_ok_and(|v| v == "1");
        let runs: &[&str] = if warm_only {
            &["warm (memo rows present)"]
        } else {
            store::spans::clear(&db, TENANT).await.unwrap();
            &["cold (no memo rows)", "warm (memo rows present)"]
        };
        for label in runs {
            let t = Instant::now();
            let p = period::resolve(&db, TENANT, &spec).await.unwrap();
            let (walked, writing) =
                attestation::walk_period(&db, TENANT, &p, &registry, Some(&memo_key)).await.unwrap();
            let doc = attestation::document(TENANT, &p, &walked, serde_json::json!([]), &signer, "now");
            let secs = t.elapsed().as_secs_f64();
            assert!(walked.chain_verified() && walked.signatures_verified(), "{:?}", doc["verification"]);
            println!(
                "attestation {label} over {} receipts: {secs:.2} s ({:.0} receipts/s), {} Ed25519 checks, {} memo \
                 blocks, root {}, peak RSS {:.0} MiB",
                walked.receipts,
                walked.receipts as f64 / secs,
                walked.ed25519_checked,
                walked.memo_blocks,
                doc["merkle"]["root"],
                peak_rss_mib()
            );
            if let Some(w) = writing {
                let t = Instant::now();
                w.await.unwrap();
                println!("  memo rows recorded (off the request path) in {:.2} s", t.elapsed().as_secs_f64());
            }
        }

        if warm_only {
            return;
        }
        let t = Instant::now();
        let proof = inclusion::prove(&db, TENANT, &p, n / 2 + 1).await.unwrap().unwrap();
        assert!(proof.verified);
        println!(
            "inclusion proof (leaf {} of {}): {:.2} s, peak RSS {:.0} MiB",
            proof.index,
            proof.tree_size,
            t.elapsed().as_secs_f64(),
            peak_rss_mib()
        );

        let t = Instant::now();
        let mut w = BundleWriter::start(
            &db,
            TENANT,
            p.clone(),
            registry.clone(),
            serde_json::json!([]),
            signer.clone(),
            Some(&memo_key),
        )
        .await
        .unwrap();
        let mut bytes = 0usize;
        while let Some(chunk) = w.next_chunk().await.unwrap() {
            bytes += chunk.len();
        }
        println!(
            "evidence bundle: {:.0} MiB in {:.2} s, peak RSS {:.0} MiB",
            bytes as f64 / 1048576.0,
            t.elapsed().as_secs_f64(),
            peak_rss_mib()
        );
    });
}
