//! The tenant log at 1 000 000 receipts (issue 41): server time of the checkpoint, inclusion and
//! consistency proofs and full tiles, tile storage a receipt, and the process's memory at two log
//! sizes.
//!
//! `cargo bench --bench log` — `LOG_RECEIPTS` (default 1 000 000) receipts of one tenant are
//! generated once through the real append (`receipts::rows::append_batch`: signed, chained, the
//! tiles written in the same transaction) into `<temp dir>/tollgate-bench-log/log-<n>.db` and
//! reused by later runs (`LOG_SAMPLES`, default 1 000, samples per measurement). Each timed
//! sample is the library calls the route handler of `src/management/log.rs` makes, on the
//! store as the server opens it (no HTTP, no JSON): the "server time" of the route.
//!
//! The fresh-checkpoint measurements append one receipt (untimed) before each sample, so the
//! cached log grows by 1.25 × `LOG_SAMPLES` receipts a run. benches/log_audit.sh times
//! `tollgate log audit` against a server on a copy of the same database.

use std::sync::Arc;
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use tollgate::receipts::canonical::Check;
use tollgate::receipts::signer::{self, Signer};
use tollgate::receipts::{CacheSide, Draft, Kind, UpstreamStatus};
use tollgate::store::{self, Store};
use tollgate::tenant_log::{checkpoint, tree};

const TENANT_NAME: &str = "bench-log";

fn draft(tenant: &str, i: u64) -> Draft {
    let check = |n: &'static str, r: &'static str| Check { name: n.into(), result: r.into() };
    Draft {
        tenant_id: tenant.into(),
        receipt_id: uuid::Uuid::now_v7().to_string(),
        request_id: format!("req-{i}"),
        actor: "01a204c8-7a19-7530-9164-000000000001".into(),
        provider: "openai".into(),
        model: "gpt-4o-mini".into(),
        prompt_tokens: 120 + i % 50,
        completion_tokens: 80,
        cost_usd: 0.000066,
        checks: vec![check("policy", "allow"), check("RATELIMIT", "PASS"), check("UPSTREAM", "PASS")],
        upstream_status: UpstreamStatus::Ok,
        ts: "2026-11-29 07:00:00.000".into(),
        kind: Kind::ModelCall,
        pack_version: "ps-bench".into(),
        cache: CacheSide::default(),
        events: Vec::new(),
        outbox: Vec::new(),
        subject: None,
        latency_us: None,
        attempts: Vec::new(),
        key_id: "01a204c8-7a19-7530-9164-000000000001".into(),
    }
}

/// `(VmRSS, VmHWM)` in MiB.
fn rss_mib() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| -> f64 {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
            / 1024.0
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// xorshift64*: enough for picking sizes and indexes, and no extra dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `[lo, hi]` (inclusive; `lo <= hi`).
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

fn report(label: &str, mut t: Vec<Duration>) {
    t.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let q = |p: f64| t[((t.len() as f64 * p).ceil() as usize).saturating_sub(1).min(t.len() - 1)];
    println!(
        "{label:<58} n={:<5} p50 {:>7.3} ms  p99 {:>7.3} ms  max {:>7.3} ms",
        t.len(),
        ms(q(0.50)),
        ms(q(0.99)),
        ms(*t.last().unwrap())
    );
}

async fn tenant_id(db: &Store) -> String {
    match store::tenants::by_name(db, TENANT_NAME).await.unwrap() {
        Some(t) => t.id,
        None => store::tenants::create(db, TENANT_NAME).await.unwrap().id,
    }
}

async fn ensure_receipts(db: &Store, tenant: &str, signer: &Arc<Signer>, n: u64) {
    let have = store::receipts::head_seq(db, tenant).await.unwrap();
    if have >= n {
        return;
    }
    let started = Instant::now();
    let mut next = have;
    while next < n {
        let batch: Vec<Draft> = (next..(next + 4096).min(n)).map(|i| draft(tenant, i)).collect();
        next += batch.len() as u64;
        tollgate::receipts::rows::append_batch(db, batch, signer.clone()).await.unwrap();
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "generated {} receipts in {secs:.1} s ({:.0} receipts/s, tiles written)",
        n - have,
        (n - have) as f64 / secs
    );
}

/// Tile storage: the `log_tiles` rows' payload and, if the SQLite build has `dbstat`, the pages
/// the table and its primary-key index occupy.
fn storage(file: &std::path::Path, size: u64) {
    let c = rusqlite::Connection::open(file).unwrap();
    let (rows, payload): (i64, i64) = c
        .query_row("SELECT COUNT(*), COALESCE(SUM(length(hashes) + length(root)), 0) FROM log_tiles", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    let per_level: Vec<(i64, i64)> = c
        .prepare("SELECT level, COUNT(*) FROM log_tiles GROUP BY level ORDER BY level")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    println!("log size {size}: {rows} full tiles stored (level, count): {per_level:?}");
    println!(
        "tile storage, payload SUM(length(hashes) + length(root)): {payload} bytes = {:.2} bytes/receipt",
        payload as f64 / size as f64
    );
    let pages = c.query_row(
        "SELECT SUM(pgsize), SUM(payload), SUM(unused) FROM dbstat \
         WHERE name IN ('log_tiles', 'sqlite_autoindex_log_tiles_1')",
        [],
        |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?)),
    );
    match pages {
        Ok((pg, pl, unused)) => println!(
            "tile storage, SQLite pages (dbstat, log_tiles + its primary-key index): {pg} bytes = {:.2} \
             bytes/receipt (cell payload {pl}, unused {unused})",
            pg as f64 / size as f64
        ),
        Err(e) => println!("tile storage, SQLite pages: dbstat unavailable ({e})"),
    }
    let db_bytes = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
    println!(
        "whole database file: {db_bytes} bytes = {:.0} bytes/receipt (receipts, indexes and tiles)",
        db_bytes as f64 / size as f64
    );
}

/// Inclusion, consistency and full-tile samples with every size at most `cap` (the route's
/// calls: `head_seq` then the `tree` function).
async fn proofs(db: &Store, tenant: &str, cap: u64, samples: usize, rng: &mut Rng, label: &str) {
    let mut incl = Vec::with_capacity(samples);
    for _ in 0..samples {
        let size = rng.range(1, cap);
        let seq = rng.range(1, size);
        let t = Instant::now();
        let current = store::receipts::head_seq(db, tenant).await.unwrap();
        assert!(size <= current);
        let p = tree::inclusion(db, tenant, size, seq - 1).await.unwrap();
        let _hex: Vec<String> = p.path.iter().map(hex::encode).collect();
        incl.push(t.elapsed());
    }
    report(&format!("inclusion proof, random seq and size <= {cap} [{label}]"), incl);

    let mut incl_head = Vec::with_capacity(samples);
    for _ in 0..samples {
        let t = Instant::now();
        let current = store::receipts::head_seq(db, tenant).await.unwrap();
        let size = current.min(cap);
        let seq = rng.range(1, size);
        let p = tree::inclusion(db, tenant, size, seq - 1).await.unwrap();
        let _hex: Vec<String> = p.path.iter().map(hex::encode).collect();
        incl_head.push(t.elapsed());
    }
    report(&format!("inclusion proof, random seq, size {} [{label}]", cap), incl_head);

    let mut cons = Vec::with_capacity(samples);
    for _ in 0..samples {
        let to = rng.range(1, cap);
        let from = rng.range(1, to);
        let t = Instant::now();
        let _current = store::receipts::head_seq(db, tenant).await.unwrap();
        let p = tree::consistency(db, tenant, from, to).await.unwrap();
        let _hex: Vec<String> = p.path.iter().map(hex::encode).collect();
        cons.push(t.elapsed());
    }
    report(&format!("consistency proof, random 1 <= from <= to <= {cap} [{label}]"), cons);

    // Full tiles: a random level that has full tiles within `cap`, a random full index there.
    let levels: Vec<(u8, u64)> =
        (0u8..8).map(|l| (l, cap >> (8 * u32::from(l)) >> 8)).take_while(|&(_, full)| full > 0).collect();
    let mut full = Vec::with_capacity(samples);
    for _ in 0..samples {
        let (level, count) = levels[rng.range(0, levels.len() as u64 - 1) as usize];
        let index = rng.range(0, count - 1);
        let t = Instant::now();
        let size = store::receipts::head_seq(db, tenant).await.unwrap();
        let body = tree::tile_hashes(db, tenant, size, level, index, 256).await.unwrap();
        full.push(t.elapsed());
        assert_eq!(body.map(|b| b.len()), Some(256 * 32), "full tile {level}/{index}");
    }
    let names: Vec<String> = levels.iter().map(|(l, c)| format!("L{l}: {c}")).collect();
    report(&format!("full tile, random level and index ({}) [{label}]", names.join(", ")), full);

    // Partial tiles at the right edge (read from the leaves or the roots one level down).
    for &(level, _) in &levels {
        let mut part = Vec::with_capacity(samples / 4);
        for _ in 0..samples / 4 {
            let t = Instant::now();
            let size = store::receipts::head_seq(db, tenant).await.unwrap().min(cap);
            let shift = 8 * u32::from(level);
            let index = (size >> shift) / 256;
            let width = (size >> shift) % 256;
            if width == 0 {
                break;
            }
            let body = tree::tile_hashes(db, tenant, size, level, index, width).await.unwrap();
            part.push(t.elapsed());
            assert!(body.is_some());
        }
        if !part.is_empty() {
            report(&format!("partial tile at the right edge, level {level} [{label}]"), part);
        }
    }
}

/// The checkpoint as `GET /v1/log/checkpoint` computes it (`checkpoint::current_served`): of a
/// log unchanged since the last one, of a log one receipt longer (appended untimed before each
/// sample), and of one receipt longer with the kept edge forgotten before each sample, as at the
/// first call after a start (the edge read from the tiles; a quarter of the samples).
async fn checkpoints(db: &Store, tenant: &str, signer: &Arc<Signer>, samples: usize) {
    // The origin the server uses (tollgate-<installId>), so its routes can serve these notes.
    let prefix_name = checkpoint::origin_prefix(db, "").await.unwrap();
    let key = Signer::from_seed(&[7u8; 32]);
    let mut cached = Vec::with_capacity(samples);
    checkpoint::current(db, &key, &prefix_name, tenant).await.unwrap();
    for _ in 0..samples {
        let t = Instant::now();
        let note = checkpoint::current_served(db, &key, &prefix_name, tenant).await.unwrap();
        cached.push(t.elapsed());
        assert!(!note.is_empty());
    }
    report("checkpoint, log unchanged since the last one (stored note)", cached);
    let mut seq = store::receipts::head_seq(db, tenant).await.unwrap();
    for (label, n, forget) in [
        ("checkpoint, one receipt appended since the last (root + sign + store)", samples, false),
        ("checkpoint, one receipt appended, edge from the tiles (first call)", samples / 4, true),
    ] {
        let mut fresh = Vec::with_capacity(n);
        for _ in 0..n {
            tollgate::receipts::rows::append_batch(db, vec![draft(tenant, seq)], signer.clone()).await.unwrap();
            seq += 1;
            if forget {
                db.log_heads().forget(tenant);
            }
            let t = Instant::now();
            let note = checkpoint::current_served(db, &key, &prefix_name, tenant).await.unwrap();
            fresh.push(t.elapsed());
            assert!(note.contains(&format!("\n{seq}\n")), "{note}");
        }
        report(label, fresh);
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let env_u64 = |k: &str, d: u64| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    let n = env_u64("LOG_RECEIPTS", 1_000_000);
    let samples = env_u64("LOG_SAMPLES", 1_000) as usize;
    let prefix = env_u64("LOG_PREFIX", 100_000).min(n);
    let dir = std::env::temp_dir().join("tollgate-bench-log");
    std::fs::create_dir_all(&dir).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    // benches/log_audit.sh: LOG_DB=<file> LOG_APPEND=<k> appends k receipts to the bench tenant
    // of that database (a copy a server is running on) and exits.
    if let (Ok(file), Some(k)) =
        (std::env::var("LOG_DB"), std::env::var("LOG_APPEND").ok().and_then(|v| v.parse::<u64>().ok()))
    {
        rt.block_on(async {
            let db = Store::connect(&format!("sqlite://{file}")).await.unwrap();
            let signer = Arc::new(Signer::from_seed(&[7u8; 32]));
            let tenant = tenant_id(&db).await;
            let have = store::receipts::head_seq(&db, &tenant).await.unwrap();
            ensure_receipts(&db, &tenant, &signer, have + k).await;
        });
        return;
    }
    let file = dir.join(format!("log-{n}.db"));
    let url = format!("sqlite://{}", file.display());
    println!("database {}", file.display());
    rt.block_on(async {
        let db = Store::connect(&url).await.unwrap();
        db.migrate().await.unwrap();
        let signer = Arc::new(Signer::from_seed(&[7u8; 32]));
        signer::register(&db, &signer).await.unwrap();
        let tenant = tenant_id(&db).await;
        ensure_receipts(&db, &tenant, &signer, n).await;
        let size = store::receipts::head_seq(&db, &tenant).await.unwrap();
        println!("tenant {tenant} ({TENANT_NAME}), log size {size}");
        storage(&file, size);
        let (rss, hwm) = rss_mib();
        println!("memory after opening (and generating, if it did): VmRSS {rss:.1} MiB, VmHWM {hwm:.1} MiB");

        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        // Warm-up, untimed: the same reads once, so the first samples do not pay for cold pages.
        for _ in 0..50 {
            let s = rng.range(1, size);
            tree::inclusion(&db, &tenant, s, rng.range(0, s - 1)).await.unwrap();
        }

        // Memory: proofs on the 100 000-receipt prefix first, then on the whole log.
        proofs(&db, &tenant, prefix, samples, &mut rng, "prefix").await;
        let (rss_a, hwm_a) = rss_mib();
        println!("memory after proofs on the {prefix}-receipt prefix: VmRSS {rss_a:.1} MiB, VmHWM {hwm_a:.1} MiB");
        proofs(&db, &tenant, size, samples, &mut rng, "whole log").await;
        let (rss_b, hwm_b) = rss_mib();
        println!("memory after proofs on the {size}-receipt log: VmRSS {rss_b:.1} MiB, VmHWM {hwm_b:.1} MiB");

        checkpoints(&db, &tenant, &signer, samples).await;
        let (rss_c, hwm_c) = rss_mib();
        println!("memory at the end: VmRSS {rss_c:.1} MiB, VmHWM {hwm_c:.1} MiB");
    });
}
