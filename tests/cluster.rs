//! Several gateway processes on one PostgreSQL database: a change made through one instance's
//! management API is in force on the others through change notices (LISTEN/NOTIFY), not through
//! the periodic refresh (set to 10 minutes here, so only a notice can explain the result); and
//! `tollgate balance` spreads requests over the instances. PostgreSQL only (skipped with a
//! printed reason without a server, unless TOLLGATE_REQUIRE_POSTGRES=1).

mod support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use support::cluster::Cluster;
use support::{http, Gateway, Resp, Standin};

/// No refresh within a test: a change arrives by notice or not at all.
const NO_REFRESH: (&str, &str) = ("TOLLGATE_SNAPSHOT_REFRESH_MS", "600000");
const CHAT: &[u8] = br#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}"#;

/// Polls every instance but the first until `holds` is true on each; returns the ms from `since`
/// (just after the change's API call returned) to the first answer that showed it, per instance.
/// A generous deadline, no timed assertion: the figures are printed.
fn propagation(c: &Cluster, what: &str, since: Instant, mut holds: impl FnMut(&Gateway) -> bool) -> Vec<u128> {
    let deadline = since + Duration::from_secs(30);
    let mut took: Vec<Option<u128>> = vec![None; c.nodes.len() - 1];
    while took.iter().any(Option::is_none) {
        for (i, g) in c.nodes.iter().enumerate().skip(1) {
            if took[i - 1].is_none() && holds(g) {
                took[i - 1] = Some(since.elapsed().as_millis());
            }
        }
        assert!(Instant::now() < deadline, "{what}: not in force on every instance after 30 s: {took:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
    let took: Vec<u128> = took.into_iter().flatten().collect();
    println!("{what}: in force on instances 2..{} after {took:?} ms", c.nodes.len());
    took
}

#[test]
fn a_change_on_one_instance_is_in_force_on_the_others_at_once() {
    let Some(c) = Cluster::start(3, &[NO_REFRESH]) else { return };
    let (a, b) = (Standin::start(), Standin::start());

    // A provider credential set on instance 1 (sealed there, opened on the others: one master key).
    c.node(0).set_provider(&c.key, "openai", &a.url(), "sk-a");
    let since = Instant::now();
    let (key_id, key) = c.node(0).new_key(&c.key, &json!({ "label": "traveller" }));
    propagation(&c, "new key and provider", since, |g| g.say(&key, "gpt-4o-mini", "hi").status == 200);

    // The provider changed on instance 1: the others send to the new base URL.
    c.node(0).set_provider(&c.key, "openai", &b.url(), "sk-b");
    let since = Instant::now();
    propagation(&c, "provider change", since, |g| {
        let before = b.count();
        g.say(&key, "gpt-4o-mini", "hi").status == 200 && b.count() > before
    });

    // Limits patched on instance 1: the others refuse over the new rpm.
    let r = c.node(0).mgmt("PATCH", &format!("/v1/keys/{key_id}/limits"), Some(&c.key), Some(&json!({"rpmLimit": 1})));
    assert_eq!(r.status, 200, "{}", r.text());
    let since = Instant::now();
    propagation(&c, "rpmLimit patch", since, |g| {
        let r = g.say(&key, "gpt-4o-mini", "hi");
        r.status == 429 && r.header("retry-after").is_some()
    });

    // The listener's connection killed on every instance: each reconnects by itself, and a
    // change made after that still arrives by notice.
    let killed = c.node(0).sql(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND query LIKE 'LISTEN%'",
    );
    println!("listener connections terminated: {killed}");
    let (_, second) = c.node(0).new_key(&c.key, &json!({ "label": "after reconnect" }));
    let since = Instant::now();
    propagation(&c, "new key after the listeners reconnected", since, |g| {
        g.say(&second, "gpt-4o-mini", "hi").status == 200
    });

    // Deleted on instance 1: 401 everywhere.
    let r = c.node(0).mgmt("DELETE", &format!("/v1/keys/{key_id}"), Some(&c.key), None);
    assert!(r.status == 200 || r.status == 204, "{} {}", r.status, r.text());
    let since = Instant::now();
    propagation(&c, "key deletion", since, |g| g.say(&key, "gpt-4o-mini", "hi").status == 401);

    for (i, g) in c.nodes.iter().enumerate() {
        let sent = g.metric("tollgate_change_notices_total", &["direction=\"sent\""]);
        let received = g.metric("tollgate_change_notices_total", &["direction=\"received\""]);
        println!("instance {}: change notices sent {sent}, received {received}", i + 1);
        if i == 0 {
            assert!(sent >= 5.0, "instance 1 sent a notice per change: {sent}");
        } else {
            assert!(received >= 5.0, "instance {} received the notices: {received}", i + 1);
        }
    }
}

/// The size and root (hex) of the log's checkpoint served by `g`.
fn checkpoint(g: &Gateway, key: &str) -> (u64, String) {
    use base64::Engine;
    let r = g.mgmt("GET", "/v1/log/checkpoint", Some(key), None);
    assert_eq!(r.status, 200, "{}", r.text());
    let note = r.text();
    let lines: Vec<&str> = note.split('\n').collect();
    let root = base64::engine::general_purpose::STANDARD.decode(lines[2]).unwrap();
    (lines[1].parse().unwrap(), hex::encode(root))
}

/// Each instance keeps the right edge of the log's tree for its checkpoints and extends it by the
/// leaves committed since, whichever instance committed them: a checkpoint from any instance
/// covers every receipt answered through any of them, its root is the one the stored tiles
/// give (`/v1/log/consistency`, computed from the tiles), and each proves consistent with the
/// one before it, wherever that one was made.
#[test]
fn every_instance_s_checkpoint_covers_what_any_instance_committed() {
    let Some(c) = Cluster::start(2, &[]) else { return };
    let up = Standin::start();
    c.node(0).set_provider(&c.key, "openai", &up.url(), "sk-provider");
    let key = c.key.clone();
    propagation(&c, "provider", Instant::now(), |g| g.say(&key, "gpt-4o-mini", "hi").status == 200);
    let (mut last, mut last_root) = (0, String::new());
    for round in 0..6 {
        let (writer, reader) = (c.node(round % 2), c.node(round / 2 % 2));
        for _ in 0..=round {
            assert_eq!(writer.say(&key, "gpt-4o-mini", "hi").status, 200);
        }
        let (size, root) = checkpoint(reader, &key);
        assert_eq!(size, writer.newest_seq(&key), "round {round}: the checkpoint covers every answered request");
        let p = reader.get_json(&key, &format!("/v1/log/consistency?from={last}&to={size}"));
        assert_eq!(p["toRoot"].as_str(), Some(root.as_str()), "round {round}: the tiles' root");
        if last > 0 {
            assert_eq!(p["fromRoot"].as_str(), Some(last_root.as_str()), "round {round}");
            let hash = |s: &str| tlog_tiles::tlog::Hash(hex::decode(s).unwrap().try_into().unwrap());
            let proof: Vec<_> = p["proof"].as_array().unwrap().iter().map(|h| hash(h.as_str().unwrap())).collect();
            tlog_tiles::tlog::check_tree(&proof, size, hash(&root), last, hash(&last_root)).unwrap();
        }
        (last, last_root) = (size, root);
    }
}

/// `tollgate balance` in front of the instances.
struct Front {
    child: Child,
    addr: std::net::SocketAddr,
}

impl Front {
    fn start(upstreams: &[std::net::SocketAddr]) -> Front {
        let [port] = support::free_ports();
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let list: Vec<String> = upstreams.iter().map(|a| a.to_string()).collect();
        let child = Command::new(support::bin())
            .args(["balance", "--listen", &addr.to_string(), "--upstream", &list.join(",")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(addr).is_err() {
            assert!(Instant::now() < deadline, "tollgate balance did not listen on {addr}");
            std::thread::sleep(Duration::from_millis(20));
        }
        Front { child, addr }
    }

    fn chat(&self, key: &str) -> Resp {
        let auth = format!("Bearer {key}");
        let h = [("Content-Type", "application/json"), ("Authorization", auth.as_str())];
        http::request(self.addr, "POST", "/v1/chat/completions", &h, CHAT)
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_front_spreads_requests_over_the_instances_and_skips_a_stopped_one() {
    let Some(mut c) = Cluster::start(3, &[]) else { return };
    let up = Standin::start();
    c.node(0).set_provider(&c.key, "openai", &up.url(), "sk-provider");
    let key = c.key.clone();
    // The provider reaches the others by notice; wait until each instance has it.
    propagation(&c, "provider", Instant::now(), |g| g.say(&key, "gpt-4o-mini", "hi").status == 200);

    let front = Front::start(&c.gateways());
    let mut served: Vec<String> = Vec::new();
    for _ in 0..9 {
        let r = front.chat(&key);
        assert_eq!(r.status, 200, "{}", r.text());
        served.push(r.header("x-tollgate-upstream").expect("the front names the instance").to_string());
    }
    for g in c.gateways() {
        let n = served.iter().filter(|s| **s == g.to_string()).count();
        println!("instance {g}: {n} of 9 requests");
        assert!(n >= 1, "round robin reached every instance: {served:?}");
    }

    // One instance stopped: every request still answers (a refused connection is retried on the
    // next instance; the health check takes it out of the rotation within a second).
    let stopped = c.node(1).gw.to_string();
    c.node_mut(1).stop();
    for _ in 0..9 {
        let r = front.chat(&key);
        assert_eq!(r.status, 200, "{}", r.text());
        assert_ne!(r.header("x-tollgate-upstream"), Some(stopped.as_str()));
    }
}

/// `scripts/cluster` end to end with the binary under test: it prints the front and a manager
/// key, the front reaches both instances with that key, and Ctrl-C stops every process and drops
/// the database it made.
#[test]
fn scripts_cluster_starts_a_cluster_and_ctrl_c_stops_it() {
    use std::io::{BufRead, BufReader};
    let Some(probe) = support::fresh_postgres() else { return };
    support::drop_postgres(&probe);
    if Command::new("psql").arg("--version").output().is_err() {
        eprintln!("skipping scripts/cluster: no psql on this machine");
        return;
    }
    // Instances on BASE+10.., BASE+20.. (+1 management, +2 metrics) and the front on BASE+5:
    // below Linux's ephemeral range (32768-60999), where the other tests' ports come from (a
    // base up to 40000 collided with them in CI), and checked free first.
    let free = |p: u32| std::net::TcpListener::bind(("127.0.0.1", p as u16)).is_ok();
    let base = (0..40)
        .map(|i| 10_000 + ((std::process::id() + i * 7) % 400) * 50)
        .find(|b| [5, 10, 11, 12, 20, 21, 22].iter().all(|o| free(b + o)))
        .expect("a free port range below 30000");
    let front_port = base + 5;
    let mut command = Command::new("bash");
    command
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/cluster"))
        .arg("2")
        .env("TOLLGATE_BIN", support::bin())
        .env("TOLLGATE_CLUSTER_PORT", front_port.to_string())
        .env("TOLLGATE_CLUSTER_BASE_PORT", base.to_string())
        .env_remove("TOLLGATE_DATABASE_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    // The script stops on Ctrl-C by trapping SIGINT, and bash cannot trap a signal that was
    // ignored when it started: a test run started in the background without job control
    // (`cmd &` in a script) inherits SIGINT ignored, and the script then never stopped. Start it
    // with SIGINT's default disposition, as a terminal gives it.
    // SAFETY: the closure runs in the child between fork and exec and only calls `signal`,
    // which is async-signal-safe.
    unsafe {
        use std::os::unix::process::CommandExt;
        command.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        });
    }
    let mut script = command.spawn().unwrap();
    let out = script.stdout.take().unwrap();
    let mut script = Interrupt(script);
    let mut printed = String::new();
    for line in BufReader::new(out).lines() {
        let line = line.unwrap();
        printed.push_str(&line);
        printed.push('\n');
        if line.starts_with("Ctrl-C") {
            break;
        }
    }
    println!("{printed}");
    let field =
        |name: &str| printed.lines().find_map(|l| l.strip_prefix(name)).map(|v| v.trim().to_string()).expect(name);
    let (key, db) = (field("manager key:"), field("database:"));
    let front: std::net::SocketAddr = field("front (round robin):").trim_start_matches("http://").parse().unwrap();
    let mut served = std::collections::BTreeSet::new();
    for _ in 0..4 {
        let auth = format!("Bearer {key}");
        let r = http::request(front, "GET", "/v1/models", &[("Authorization", auth.as_str())], b"");
        assert_eq!(r.status, 200, "{}", r.text());
        served.insert(r.header("x-tollgate-upstream").unwrap().to_string());
    }
    assert_eq!(served.len(), 2, "both instances answered: {served:?}");

    let status = script.stop();
    println!("scripts/cluster ended with {status}");
    let instances: Vec<std::net::SocketAddr> =
        field("instances (gateway):").split_whitespace().map(|a| a.parse().unwrap()).collect();
    for a in instances.iter().chain([&front]) {
        assert!(std::net::TcpStream::connect(a).is_err(), "{a} still listens after Ctrl-C");
    }
    let name = db.rsplit('/').next().unwrap().to_string();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let left = rt.block_on(async {
        use sqlx::Connection;
        let mut c = sqlx::PgConnection::connect("postgres://postgres@127.0.0.1:5432/postgres").await.unwrap();
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM pg_database WHERE datname = $1")
            .bind(name)
            .fetch_one(&mut c)
            .await
            .unwrap()
    });
    assert_eq!(left, 0, "the database the script made is dropped");
}

/// The script under test; interrupted like Ctrl-C when the test ends early.
struct Interrupt(Child);

impl Interrupt {
    fn stop(&mut self) -> std::process::ExitStatus {
        Command::new("kill").args(["-INT", &self.0.id().to_string()]).status().unwrap();
        self.0.wait().unwrap()
    }
}

impl Drop for Interrupt {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            self.stop();
        }
    }
}
