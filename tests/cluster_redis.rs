//! Several gateway processes, one truth (issue 22): rate limits, budgets and the cache shared in
//! Redis across three processes on one PostgreSQL database; Redis stopped mid-run, both fault
//! behaviours, and recovery.

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::cluster::{early_in_a_minute, known_everywhere, three};
use support::redis::{fresh_prefix, machine_redis, OwnRedis};
use support::{fresh_postgres, http, Backend, Gateway, Standin};

const MASTER_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// A key labelled `label` with `settings`: `budgetUsd` at creation, `rpmLimit`/`tpmLimit`
/// through `PATCH /v1/keys/{id}/limits`. Its id and secret.
/// A key whose `budgetUsd` is set at creation and whose other settings are its limits.
fn limited_key(g: &Gateway, label: &str, settings: Value) -> (String, String) {
    let mut create = json!({"label": label});
    let mut limits = json!({});
    for (k, v) in settings.as_object().unwrap() {
        let to = if k == "budgetUsd" { &mut create } else { &mut limits };
        to[k] = v.clone();
    }
    let (id, key) = g.new_key(&g.key, &create);
    let r = g.mgmt("PATCH", &format!("/v1/keys/{id}/limits"), Some(&g.key), Some(&limits));
    assert_eq!(r.status, 200, "{}", r.text());
    (id, key)
}

fn hello() -> Value {
    json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]})
}

#[test]
fn rate_limits_are_exact_across_three_instances() {
    let Some(redis) = machine_redis() else { return };
    let prefix = fresh_prefix();
    // A 2 s Redis timeout: on a loaded machine the default 100 ms can time out, and an instance
    // that thinks Redis is down falls back to its own limits, which is not what these test.
    let env = [
        ("TOLLGATE_REDIS_URL", redis.as_str()),
        ("TOLLGATE_REDIS_PREFIX", &prefix),
        ("TOLLGATE_REDIS_TIMEOUT_MS", "2000"),
    ];
    let Some((cluster, _up, (_, key))) = three(&env, |g| limited_key(g, "rpm-30", json!({"rpmLimit": 30}))) else {
        return;
    };
    let all = &cluster.nodes;
    known_everywhere(all, &key);
    early_in_a_minute();

    let mut ok = 0;
    let mut limited = 0;
    for i in 0..90 {
        let r = all[i % 3].chat(&key, &hello());
        match r.status {
            200 => ok += 1,
            429 => {
                limited += 1;
                for h in [
                    "retry-after",
                    "x-ratelimit-limit-requests",
                    "x-ratelimit-remaining-requests",
                    "x-ratelimit-reset-requests",
                ] {
                    assert!(r.header(h).is_some(), "429 without {h}: {:?}", r.headers);
                }
                assert_eq!(r.header("x-ratelimit-limit-requests"), Some("30"));
                assert_eq!(r.header("x-ratelimit-remaining-requests"), Some("0"));
                assert_eq!(r.json()["error"]["code"], 429);
            }
            s => panic!("unexpected {s}: {}", r.text()),
        }
    }
    assert_eq!((ok, limited), (30, 60), "a key limited to 30 rpm gets 30 answers over three instances");

    // Every instance counted into the same windows: the rate script's hash is in Redis.
    let metric = all[1].metric("tollgate_shared_state_up", &[]);
    assert_eq!(metric, 1.0);
}

/// A busy key far from its limit: its instances draw on quota Redis granted them (no round
/// trip a request), yet over three instances and six concurrent clients exactly its limit is
/// answered, every refusal with its headers, and Redis's window counts exactly the answers once
/// the grants are given back.
#[test]
fn a_busy_key_drawing_on_grants_is_still_exact_across_three_instances() {
    let Some(redis) = machine_redis() else { return };
    let prefix = fresh_prefix();
    // A 2 s Redis timeout: on a loaded machine the default 100 ms can time out, and an instance
    // that thinks Redis is down falls back to its own limits, which is not what these test.
    let env = [
        ("TOLLGATE_REDIS_URL", redis.as_str()),
        ("TOLLGATE_REDIS_PREFIX", &prefix),
        ("TOLLGATE_REDIS_TIMEOUT_MS", "2000"),
    ];
    let Some((mut cluster, _up, (key_id, key))) = three(&env, |g| limited_key(g, "rpm-300", json!({"rpmLimit": 300})))
    else {
        return;
    };
    let all = std::sync::Arc::new(std::mem::take(&mut cluster.nodes));
    known_everywhere(&all, &key);
    early_in_a_minute();
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let (all, key) = (all.clone(), key.clone());
            std::thread::spawn(move || {
                let (mut ok, mut limited) = (0, 0);
                for i in 0..80 {
                    let r = all[(t + i) % 3].chat(&key, &hello());
                    match r.status {
                        200 => ok += 1,
                        429 => {
                            limited += 1;
                            assert_eq!(r.header("x-ratelimit-limit-requests"), Some("300"));
                            assert!(r.header("retry-after").is_some(), "{:?}", r.headers);
                        }
                        s => panic!("unexpected {s}: {}", r.text()),
                    }
                }
                (ok, limited)
            })
        })
        .collect();
    let (ok, limited) = threads.into_iter().map(|t| t.join().unwrap()).fold((0, 0), |(a, b), (c, d)| (a + c, b + d));
    assert_eq!((ok, limited), (300, 180), "a key limited to 300 rpm gets 300 answers of 480");
    let drawn: f64 = all.iter().map(|g| g.metric("tollgate_shared_state_granted_admissions_total", &[])).sum();
    println!("{drawn} of the 300 answers were drawn on grants");
    assert!(drawn > 0.0, "the busy key never drew on a grant");
    // What was granted and not drawn goes back (the watcher's sweep, within about two seconds).
    let window = format!("{prefix}rl:{key_id}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let w = redis_hgetall(&redis, &window);
        let n = |k: &str| w.get(k).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0);
        if n("rp") + n("rc") == 300 {
            break;
        }
        assert!(Instant::now() < deadline, "Redis counts {w:?} for 300 answers");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_budget_is_exact_across_three_instances_under_concurrency() {
    let Some(redis) = machine_redis() else { return };
    let prefix = fresh_prefix();
    // gpt-4o answers cost $10 per million tokens: each answer of 10 000 tokens costs $0.10 and
    // reserves about as much (max_tokens).
    // A 2 s Redis timeout: on a loaded machine the default 100 ms can time out, and an instance
    // that thinks Redis is down falls back to its own limits, which is not what these test.
    let env = [
        ("TOLLGATE_REDIS_URL", redis.as_str()),
        ("TOLLGATE_REDIS_PREFIX", &prefix),
        ("TOLLGATE_REDIS_TIMEOUT_MS", "2000"),
    ];
    let Some((mut cluster, _up, (key_id, key))) =
        three(&env, |g| limited_key(g, "one-dollar", json!({"budgetUsd": 1.0})))
    else {
        return;
    };
    let all = std::mem::take(&mut cluster.nodes);
    known_everywhere(&all, &key);
    let body =
        json!({"model": "gpt-4o", "max_tokens": 10000, "messages": [{"role": "user", "content": "USAGE:10000"}]});

    let all = std::sync::Arc::new(all);
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let (all, key, body) = (all.clone(), key.clone(), body.clone());
            std::thread::spawn(move || {
                let mut costs = Vec::new();
                for i in 0..8 {
                    let g = &all[(t + i) % 3];
                    let r = g.chat(&key, &body);
                    match r.status {
                        200 => costs.push(g.receipt_of(&r)["costUsd"].as_f64().unwrap()),
                        402 => assert_eq!(r.json()["error"]["type"], "budget_exceeded", "{}", r.text()),
                        s => panic!("unexpected {s}: {}", r.text()),
                    }
                }
                costs
            })
        })
        .collect();
    let costs: Vec<f64> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
    let total: f64 = costs.iter().sum();
    let one = costs.iter().cloned().fold(0.0, f64::max);
    println!("{} answered, total ${total:.4} against a $1 budget (one request ${one:.4})", costs.len());
    assert!(costs.len() >= 9, "the budget admits about ten answers: {}", costs.len());
    assert!(total <= 1.0 + one + 1e-9, "overspent by more than one reservation: ${total:.4}");
    // Per-process budgets would have let each instance spend its own dollar.
    assert!(costs.len() < 20);
    // Settled in Redis: the spend is the receipts' total and no hold is left (settlements are
    // sent in batches after the answers: poll).
    let hash = format!("{prefix}b:key:{key_id}:total");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // Money is integer nano-dollars there; holds are `r:{bucket}` fields.
        let fields = redis_hgetall(&redis, &hash);
        let spent = fields.get("spent").and_then(|v| v.parse::<i64>().ok()).unwrap_or(0) as f64 / 1e9;
        let held: i64 =
            fields.iter().filter(|(k, _)| k.starts_with("r:")).map(|(_, v)| v.parse::<i64>().unwrap()).sum();
        if (spent - total).abs() < 1e-6 && held == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "Redis holds spent {spent} held {held}; receipts say {total}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_shared_cache_answers_on_another_instance() {
    let Some(redis) = machine_redis() else { return };
    let prefix = fresh_prefix();
    let env = [
        ("TOLLGATE_REDIS_URL", redis.as_str()),
        ("TOLLGATE_REDIS_PREFIX", &prefix),
        ("TOLLGATE_REDIS_SHARED_CACHE", "1"),
    ];
    let policy = |g: &Gateway| {
        let yaml = "cache: {mode: exact, ttlSeconds: 600}\n";
        let r = g.mgmt(
            "POST",
            "/v1/policies",
            Some(&g.key),
            Some(&json!({"name": "cache", "enabled": true, "yaml": yaml})),
        );
        assert_eq!(r.status, 201, "{}", r.text());
    };
    let Some((cluster, up, ())) = three(&env, policy) else { return };
    let all = &cluster.nodes;
    let key = all[0].key.clone();
    let ask = json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "shared question"}]});
    let first = all[0].chat(&key, &ask);
    assert_eq!(first.status, 200);
    assert_eq!(first.header("x-tollgate-cache"), None, "the first answer is a miss");
    let calls = up.count();
    // Instance 3 never saw this question: it hits what instance 1 kept in Redis.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let r = all[2].chat(&key, &ask);
        assert_eq!(r.status, 200);
        if r.header("x-tollgate-cache") == Some("HIT") {
            assert_eq!(r.text(), first.text(), "the same answer, from Redis");
            let receipt = all[2].receipt_of(&r);
            assert!(receipt["checks"].as_array().unwrap().iter().any(|c| c["name"] == "CACHE" && c["result"] == "HIT"));
            break;
        }
        assert!(Instant::now() < deadline, "instance 3 never answered from the shared cache");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(up.count() <= calls + 30);
}

/// One process on PostgreSQL with a redis-server of the test's own and `on_redis_down`.
fn with_own_redis(on_down: &str) -> Option<(OwnRedis, Gateway, Standin)> {
    let redis = OwnRedis::start()?;
    let url = fresh_postgres()?;
    let redis_url = redis.url();
    let env = [
        ("TOLLGATE_MASTER_KEY", MASTER_KEY),
        ("TOLLGATE_REDIS_URL", redis_url.as_str()),
        ("TOLLGATE_REDIS_ON_DOWN", on_down),
    ];
    let (g, up) = support::with_standin(&Backend::Postgres(url), &env);
    Some((redis, g, up))
}

/// Redis stopped mid-run: `closed` refuses requests that have a rate limit with 503 at once
/// (no request hangs), `/status` and the metrics say so, and it all comes back by itself.
#[test]
fn redis_down_fails_closed_then_recovers() {
    let Some((mut redis, g, _up)) = with_own_redis("closed") else { return };
    let (_, key) = limited_key(&g, "limited", json!({"rpmLimit": 1000}));
    assert_eq!(g.chat(&key, &hello()).status, 200);
    assert_eq!(shared_state(&g)["status"], "operational");

    redis.stop();
    let started = Instant::now();
    let r = g.chat(&key, &hello());
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.json()["error"]["type"], "unavailable");
    assert!(r.json()["error"]["message"].as_str().unwrap().contains("shared state"), "{}", r.text());
    println!("first answer with Redis down after {} ms", started.elapsed().as_millis());
    // A key without limits or budgets needs nothing shared: it is served.
    assert_eq!(g.chat(&g.key, &hello()).status, 200);
    let s = shared_state(&g);
    assert_ne!(s["status"], "operational", "{s}");
    // Later requests do not wait on Redis at all (it is known to be down): still 503.
    for _ in 0..5 {
        assert_eq!(g.chat(&key, &hello()).status, 503);
    }
    assert_eq!(g.metric("tollgate_shared_state_up", &[]), 0.0);
    assert!(g.metric("tollgate_shared_state_fallbacks_total", &["check=\"RATELIMIT\"", "mode=\"closed\""]) >= 1.0);

    redis.restart();
    let back = Instant::now();
    let deadline = back + Duration::from_secs(20);
    while g.chat(&key, &hello()).status != 200 {
        assert!(Instant::now() < deadline, "no recovery after Redis came back");
        std::thread::sleep(Duration::from_millis(50));
    }
    println!("recovered {} ms after Redis came back", back.elapsed().as_millis());
    assert_eq!(shared_state(&g)["status"], "operational");
    assert!(g.metric("tollgate_shared_state_unavailable_seconds_total", &[]) > 0.0);
}

/// `open`: Redis down falls back to this process's own limits; budgets reloaded from the
/// database into the new, empty Redis.
#[test]
fn redis_down_fails_open_to_per_process_limits_and_reloads_spend() {
    let Some((mut redis, g, _up)) = with_own_redis("open") else { return };
    let (key_id, key) = limited_key(&g, "limited", json!({"rpmLimit": 3, "budgetUsd": 0.25}));
    let costly =
        json!({"model": "gpt-4o", "max_tokens": 10000, "messages": [{"role": "user", "content": "USAGE:10000"}]});
    assert_eq!(g.chat(&key, &costly).status, 200);

    early_in_a_minute();
    redis.stop();
    // Per-process windows: three more fit in this process's own minute (it counted none yet).
    let statuses: Vec<u16> = (0..4).map(|_| g.chat(&key, &hello()).status).collect();
    assert_eq!(statuses, [200, 200, 200, 429], "fell back to per-process limits");
    assert_ne!(shared_state(&g)["status"], "operational");

    // Redis returns empty: the $0.10 already spent is loaded back from PostgreSQL.
    redis.restart();
    let deadline = Instant::now() + Duration::from_secs(20);
    while shared_state(&g)["status"] != "operational" {
        assert!(Instant::now() < deadline, "no recovery after Redis came back");
        std::thread::sleep(Duration::from_millis(50));
    }
    let raw = redis_hget(&redis.url(), &format!("tollgate:b:key:{key_id}:total"), "spent");
    let spent = raw.parse::<i64>().unwrap_or(0) as f64 / 1e9;
    assert!(spent >= 0.1 - 1e-6, "spend reloaded from the database: {raw:?} nano-dollars");
}

/// `HGETALL key` through redis-cli.
fn redis_hgetall(url: &str, key: &str) -> std::collections::HashMap<String, String> {
    let port = url.rsplit(':').next().unwrap();
    let out = std::process::Command::new("redis-cli").args(["-p", port, "HGETALL", key]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let lines: Vec<&str> = text.lines().collect();
    lines.chunks(2).filter(|p| p.len() == 2).map(|p| (p[0].to_string(), p[1].to_string())).collect()
}

/// `HGET key field` through redis-cli.
fn redis_hget(url: &str, key: &str, field: &str) -> String {
    let port = url.rsplit(':').next().unwrap();
    let out = std::process::Command::new("redis-cli").args(["-p", port, "HGET", key, field]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn shared_state(g: &Gateway) -> Value {
    let r = http::request(g.mgmt, "GET", "/status", &[], b"");
    r.json()["components"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "shared-state")
        .cloned()
        .expect("a shared-state component")
}

/// One instance killed (SIGKILL) mid-burst: the others keep serving, every answer a client got
/// has its receipt, and the tenant's chain (written by all three) is gap-free and verifies.
#[test]
fn one_instance_killed_mid_burst_the_others_keep_serving_and_the_chain_holds() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let Some(redis) = machine_redis() else { return };
    let prefix = fresh_prefix();
    // A 2 s Redis timeout: on a loaded machine the default 100 ms can time out, and an instance
    // that thinks Redis is down falls back to its own limits, which is not what these test.
    let env = [
        ("TOLLGATE_REDIS_URL", redis.as_str()),
        ("TOLLGATE_REDIS_PREFIX", &prefix),
        ("TOLLGATE_REDIS_TIMEOUT_MS", "2000"),
    ];
    let Some((mut cluster, _up, (_, key))) = three(&env, |g| limited_key(g, "burst", json!({"rpmLimit": 100000})))
    else {
        return;
    };
    let addrs = cluster.gateways();
    let sent_to_victim = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..3)
        .map(|i| {
            let (key, addr, sent) = (key.clone(), addrs[i], sent_to_victim.clone());
            std::thread::spawn(move || {
                let mut receipts = Vec::new();
                let mut failed = 0;
                for _ in 0..25 {
                    let auth = format!("Bearer {key}");
                    let body = serde_json::to_vec(&hello()).unwrap();
                    let r = http::try_request(addr, "POST", "/v1/chat/completions", &[("authorization", &auth)], &body);
                    match r {
                        Some(r) if r.status == 200 => {
                            receipts.push(r.header("x-tollgate-receipt-id").expect("a receipt id").to_string())
                        }
                        _ => failed += 1,
                    }
                    if i == 1 {
                        sent.fetch_add(1, Ordering::SeqCst);
                    }
                }
                (receipts, failed)
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while sent_to_victim.load(Ordering::SeqCst) < 8 {
        assert!(Instant::now() < deadline, "the burst never reached instance 2");
        std::thread::sleep(Duration::from_millis(1));
    }
    cluster.node_mut(1).signal_and_wait(9);
    let results: Vec<(Vec<String>, usize)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(results[0].1, 0, "instance 1 kept serving");
    assert_eq!(results[2].1, 0, "instance 3 kept serving");
    assert!(results[1].1 > 0, "the killed instance stopped answering");
    let answered: Vec<&String> = results.iter().flat_map(|(r, _)| r).collect();
    println!("{} answers received; {} requests to the killed instance got none", answered.len(), results[1].1);
    let g = cluster.node(0);
    for id in &answered {
        let r = g.mgmt("GET", &format!("/v1/receipts/{id}"), Some(&g.key), None);
        assert_eq!(r.status, 200, "an answered request lost its receipt: {id}");
    }
    let newest = g.mgmt("GET", "/v1/receipts?limit=1", Some(&g.key), None).json()["receipts"][0]["receiptId"]
        .as_str()
        .unwrap()
        .to_string();
    let report = g.mgmt("GET", &format!("/v1/receipts/{newest}/verify-chain"), Some(&g.key), None).json();
    assert_eq!(report["ok"], true, "{report}");
    assert_eq!(report["gapAtSeq"], Value::Null, "{report}");
    assert_eq!(report["brokenAtSeq"], Value::Null, "{report}");
}

/// A budget set after the key has spent: Redis loads that spend from the database before the
/// budget's first reservation, so the budget counts what was spent before it existed.
#[test]
fn a_budget_made_later_counts_the_spend_before_it() {
    let Some(redis) = machine_redis() else { return };
    let Some(url) = fresh_postgres() else { return };
    let prefix = fresh_prefix();
    let env = [("TOLLGATE_REDIS_URL", redis.as_str()), ("TOLLGATE_REDIS_PREFIX", prefix.as_str())];
    let (g, _up) = support::with_standin(&Backend::Postgres(url), &env);
    let (key_id, key) = limited_key(&g, "spender", json!({}));
    let costly =
        json!({"model": "gpt-4o", "max_tokens": 10000, "messages": [{"role": "user", "content": "USAGE:10000"}]});
    for _ in 0..2 {
        assert_eq!(g.chat(&key, &costly).status, 200);
    }
    // $0.20 spent; a $0.25 budget leaves no room for another $0.10 request.
    let r = g.mgmt(
        "POST",
        "/v1/budgets",
        Some(&g.key),
        Some(&json!({"scope": "key", "scopeId": key_id, "amountUsd": 0.25, "period": "total"})),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    // The watcher loads the new entry (the first reservation would also wake it).
    let hash = format!("{prefix}b:key:{key_id}:total");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !redis_hgetall(&redis, &hash).contains_key("ok") {
        assert!(Instant::now() < deadline, "the new budget's spend was never loaded into Redis");
        std::thread::sleep(Duration::from_millis(20));
    }
    let spent: i64 = redis_hgetall(&redis, &hash)["spent"].parse().unwrap();
    assert!((200_000_000..201_000_000).contains(&spent), "about $0.20 (in nano-dollars): {spent}");
    let r = g.chat(&key, &costly);
    assert_eq!(r.status, 402, "{}", r.text());
    assert!(r.json()["error"]["message"].as_str().unwrap().contains("$0.2"), "{}", r.text());
    // Decided by Redis, not by this process's own ledger.
    assert_eq!(g.metric("tollgate_shared_state_fallbacks_total", &["check=\"BUDGET\""]), 0.0);
}

/// Redis unreachable at start: the gateway starts anyway, `/status` says so, the configured
/// fault behaviour applies from the first request, and Redis is in use once it answers.
#[test]
fn redis_unreachable_at_start_then_in_use_once_it_answers() {
    let Some(mut redis) = OwnRedis::start() else { return };
    redis.stop();
    let Some(url) = fresh_postgres() else { return };
    let redis_url = redis.url();
    let env = [("TOLLGATE_REDIS_URL", redis_url.as_str()), ("TOLLGATE_REDIS_ON_DOWN", "closed")];
    let (g, _up) = support::with_standin(&Backend::Postgres(url), &env);
    assert_eq!(shared_state(&g)["status"], "outage");
    let (_, key) = limited_key(&g, "limited", json!({"rpmLimit": 100}));
    assert_eq!(g.chat(&key, &hello()).status, 503);

    redis.restart();
    let deadline = Instant::now() + Duration::from_secs(20);
    while g.chat(&key, &hello()).status != 200 {
        assert!(Instant::now() < deadline, "Redis never taken into use");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(shared_state(&g)["status"], "operational");
    // Counted in Redis: the key's window is there.
    let port = redis_url.rsplit(':').next().unwrap();
    let out = std::process::Command::new("redis-cli")
        .args(["-p", port, "--scan", "--pattern", "tollgate:rl:*"])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&out.stdout).trim().is_empty(), "no rate window in Redis");
}
