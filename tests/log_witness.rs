//! Witnesses (docs/log.md §5) end to end: the gateway sends each published checkpoint to a
//! C2SP tlog-witness (a stand-in implementing the protocol, tests/support/witness.rs), starts
//! an unknown log at `old 0` after a `409`, sends consistency proofs from the witness's size,
//! verifies the cosignature and serves it with the checkpoint; a witness that does not know the
//! origin (404) or is down (503) never blocks the log, is counted in
//! `tollgate_witness_failures_total` and shows on `/status`; one that comes back catches up.

mod support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::witness::Witness;
use support::{Backend, Gateway};
use tollgate::tenant_log::cosignature::CosignatureKey;

fn checkpoint(g: &Gateway) -> String {
    let r = g.mgmt("GET", "/v1/log/checkpoint", Some(&g.key), None);
    assert_eq!(r.status, 200, "{}", r.text());
    r.text()
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn witnesses_status(g: &Gateway) -> Value {
    let s = g.mgmt("GET", "/status", None, None).json();
    s["components"].as_array().unwrap().iter().find(|c| c["name"] == "witnesses").unwrap().clone()
}

#[test]
fn checkpoints_are_cosigned_by_witnesses_and_a_witness_down_blocks_nothing() {
    let w = Witness::start("witness.example", 3);
    let env = [
        ("TOLLGATE_LOG_WITNESS_STALE_SECONDS", "3"),
        ("TOLLGATE_LOG_WITNESSES", &format!("{}|{}|{}", w.name, w.url(), w.verifier_key())),
    ];
    let (g, _up) = support::with_standin(&Backend::Sqlite, &env);
    assert_eq!(g.say(&g.key, "gpt-4o-mini", "one").status, 200);
    let first = checkpoint(&g);
    let origin = first.lines().next().unwrap().to_string();

    // The witness does not know the log yet: 404, counted, the log goes on.
    wait_until("a 404", || g.metric("tollgate_witness_failures_total", &["reason=\"unknown_origin\""]) >= 1.0);
    assert_eq!(g.say(&g.key, "gpt-4o-mini", "two").status, 200);
    assert!(!checkpoint(&g).contains(&format!("— {} ", w.name)));

    // Trusted: the next checkpoint is cosigned (from `old 0`), verified, and served with it.
    let vkeys = g.get_json(&g.key, "/v1/log/verifier-keys");
    w.trust(&origin, vkeys["keys"][0]["verifierKey"].as_str().unwrap());
    assert_eq!(g.say(&g.key, "gpt-4o-mini", "three").status, 200);
    let size3 = checkpoint(&g);
    wait_until("a cosignature", || checkpoint(&g).contains(&format!("— {} ", w.name)));
    let served = checkpoint(&g);
    assert!(served.starts_with(&size3), "the log's own note, then the cosignature: {served}");
    let line = served.lines().last().unwrap();
    let body = served.split_once("\n\n").unwrap().0.to_string() + "\n";
    let key = CosignatureKey::parse(&w.verifier_key()).unwrap();
    assert!(key.verify(body.as_bytes(), line).is_some(), "{line}");
    wait_until("operational", || witnesses_status(&g)["status"] == "operational");

    // The next one goes with a consistency proof from the size the witness cosigned.
    for i in 0..5 {
        assert_eq!(g.say(&g.key, "gpt-4o-mini", &format!("more {i}")).status, 200);
    }
    let size = checkpoint(&g).lines().nth(1).unwrap().to_string();
    wait_until("the second cosignature", || checkpoint(&g).contains(&format!("— {} ", w.name)));
    let posts = w.received();
    let last = posts.last().unwrap().text();
    // The size cosigned above (the provider writes' admin receipts, log.md §8, then 3 calls).
    let cosigned = size3.lines().nth(1).unwrap();
    assert!(last.starts_with(&format!("old {cosigned}\n")) && last.contains(&format!("\n{size}\n")), "{last}");

    // Down: requests and checkpoints go on; failures counted; /status degraded; then back.
    w.set_down(true);
    assert_eq!(g.say(&g.key, "gpt-4o-mini", "while down").status, 200);
    assert!(!checkpoint(&g).contains(&format!("— {} ", w.name)), "not cosigned yet");
    wait_until("a 503", || g.metric("tollgate_witness_failures_total", &["reason=\"server_error\""]) >= 1.0);
    wait_until("degraded", || witnesses_status(&g)["status"] == "degraded");
    w.set_down(false);
    wait_until("the catch-up cosignature", || checkpoint(&g).contains(&format!("— {} ", w.name)));
    let list = g.get_json(&g.key, "/v1/log/checkpoints?limit=1");
    assert!(list["data"][0]["checkpoint"].as_str().unwrap().contains(&format!("— {} ", w.name)));

    // The auditor's tool requires the cosignature of each witness key it is given.
    let state = g.dir.join("audit");
    let url = format!("http://{}", g.mgmt);
    let audit = |vkey: &str| {
        let args = [
            "log",
            "audit",
            "--url",
            &url,
            "--key",
            &g.key,
            "--state",
            state.to_str().unwrap(),
            "--verifier-key",
            vkey,
        ];
        let out = g.cli(&args);
        (out.status.success(), String::from_utf8_lossy(&out.stdout).to_string())
    };
    let (ok, out) = audit(&w.verifier_key());
    assert!(ok, "{out}");
    let other = Witness::start("other.witness", 4);
    let (ok, out) = audit(&other.verifier_key());
    assert!(!ok && out.contains("no valid cosignature by witness `other.witness`"), "{out}");
}

#[test]
fn a_witness_key_that_is_not_a_cosignature_key_is_refused_at_start() {
    let g = Gateway::start(&Backend::Sqlite, &[]);
    let bad = "w.example+00000000+AQ==";
    let mut cmd_env = vec![("TOLLGATE_LOG_WITNESSES", format!("w.example|http://127.0.0.1:1|{bad}"))];
    cmd_env.push(("TOLLGATE_LOG_WITNESS_STALE_SECONDS", "5".into()));
    let out = std::process::Command::new(support::bin())
        .args(["serve"])
        .envs(cmd_env)
        .env("TOLLGATE_DATA_DIR", g.dir.join("other"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("log.witnesses[0].verifier_key"), "{err}");
}
