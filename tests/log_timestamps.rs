//! The checkpoint publisher and RFC 3161 timestamps (docs/log.md §2, §6) against a real TSA:
//! OpenSSL's own (`openssl ts -reply`), with a root and a TSA certificate made here by
//! `openssl req` / `openssl x509`, behind a stand-in HTTP server — every answer is made by
//! OpenSSL, and every stored token is checked by `openssl ts -verify`. A TSA that is
//! unreachable, answers 503, hangs, stamps another imprint or another nonce never blocks a
//! request nor the publisher; it is counted, logged once, and the next interval works.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use der::{Decode, Encode};
use serde_json::Value;
use support::receiver::{Received, Receiver};
use support::{backends, Backend, Gateway};
use tollgate::tenant_log::timestamp::{self, Roots};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

fn openssl(dir: &Path, args: &[&str]) -> std::process::Output {
    let out = Command::new("openssl").args(args).current_dir(dir).output().expect("openssl runs");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A root CA and a TSA certificate it issued (extendedKeyUsage = critical, timeStamping), and
/// the OpenSSL TSA configuration: section `v1` (ESSCertID with SHA-1, genTime with
/// milliseconds) and `v2` (ESSCertIDv2 with SHA-256, whole seconds).
struct Pki {
    dir: PathBuf,
}

impl Pki {
    fn new(name: &str) -> Pki {
        let dir = std::env::temp_dir().join(format!("tollgate-tsa-{name}-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let subj = format!("/CN=Tollgate test TSA root {name}");
        openssl(
            &dir,
            &["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem"]
                .into_iter()
                .chain(["-days", "3", "-subj", &subj, "-addext", "basicConstraints=critical,CA:TRUE"])
                .chain(["-addext", "keyUsage=critical,keyCertSign,cRLSign"])
                .collect::<Vec<_>>(),
        );
        openssl(
            &dir,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "tsa.key",
                "-out",
                "tsa.csr",
                "-subj",
                "/CN=Tollgate test TSA",
            ],
        );
        std::fs::write(
            dir.join("tsa.ext"),
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=critical,timeStamping\n\
             subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n",
        )
        .unwrap();
        openssl(
            &dir,
            &["x509", "-req", "-in", "tsa.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial"]
                .into_iter()
                .chain(["-days", "3", "-out", "tsa.pem", "-extfile", "tsa.ext"])
                .collect::<Vec<_>>(),
        );
        std::fs::write(dir.join("tsaserial"), "01\n").unwrap();
        let section = |name: &str, ess: &str, digits: u8| {
            format!(
                "[ {name} ]\ndir = {d}\nserial = $dir/tsaserial\ncrypto_device = builtin\nsigner_cert = $dir/tsa.pem\n\
                 signer_key = $dir/tsa.key\ncerts = $dir/ca.pem\nsigner_digest = sha256\ndefault_policy = 1.2.3.4.1\n\
                 digests = sha256, sha384, sha512\naccuracy = secs:1\nclock_precision_digits = {digits}\n\
                 ordering = no\ntsa_name = yes\ness_cert_id_chain = no\ness_cert_id_alg = {ess}\n\n",
                d = dir.display()
            )
        };
        let cnf = format!("[ tsa ]\ndefault_tsa = v1\n\n{}{}", section("v1", "sha1", 3), section("v2", "sha256", 0));
        std::fs::write(dir.join("tsa.cnf"), cnf).unwrap();
        Pki { dir }
    }

    fn ca(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// OpenSSL's TimeStampResp to the DER query `tsq`, from TSA section `section`.
    fn reply(&self, tsq: &[u8], section: &str) -> Vec<u8> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let (q, r) = (format!("q-{id}.tsq"), format!("r-{id}.tsr"));
        std::fs::write(self.dir.join(&q), tsq).unwrap();
        openssl(&self.dir, &["ts", "-reply", "-config", "tsa.cnf", "-section", section, "-queryfile", &q, "-out", &r]);
        std::fs::read(self.dir.join(&r)).unwrap()
    }

    /// `openssl ts -verify -data <body> -in <tsr> -CAfile <ca>`: whether it says OK.
    fn openssl_verifies(&self, body: &[u8], tsr: &[u8], ca: &Path) -> bool {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let (b, r) = (self.dir.join(format!("body-{id}")), self.dir.join(format!("v-{id}.tsr")));
        std::fs::write(&b, body).unwrap();
        std::fs::write(&r, tsr).unwrap();
        let out = Command::new("openssl")
            .args(["ts", "-verify", "-data"])
            .arg(&b)
            .arg("-in")
            .arg(&r)
            .arg("-CAfile")
            .arg(ca)
            .output()
            .unwrap();
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("Verification: OK")
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// How the stand-in TSA answers.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Mode {
    Up,
    /// 503.
    Down,
    /// A token for another message.
    OtherImprint,
    /// A token for the same message, with OpenSSL's own nonce.
    OtherNonce,
    /// Holds the request until released.
    Hang,
}

struct Tsa {
    receiver: Receiver,
    mode: Arc<Mutex<Mode>>,
    /// Opened (true) to release the held requests.
    gate: Arc<(Mutex<bool>, Condvar)>,
}

impl Tsa {
    fn start(pki: Arc<Pki>) -> Tsa {
        let mode = Arc::new(Mutex::new(Mode::Up));
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        let (p, m, g) = (pki, mode.clone(), gate.clone());
        let receiver = Receiver::start_bytes(Box::new(move |_, r: &Received| {
            let mode = *m.lock().unwrap();
            match mode {
                Mode::Down => return (503, "text/plain".into(), b"down for maintenance".to_vec()),
                Mode::Hang => {
                    let (open, cv) = &*g;
                    let _open = cv.wait_while(open.lock().unwrap(), |o| !*o).unwrap();
                }
                _ => {}
            }
            let tsq = match mode {
                Mode::OtherImprint => other_query(&p, "not the checkpoint", None),
                Mode::OtherNonce => other_query(&p, "", Some(imprint_of(&r.body))),
                _ => r.body.clone(),
            };
            (200, "application/timestamp-reply".into(), p.reply(&tsq, "v1"))
        }));
        Tsa { receiver, mode, gate }
    }

    fn url(&self) -> String {
        self.receiver.url("/tsa")
    }

    fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    fn release(&self) {
        let (open, cv) = &*self.gate;
        *open.lock().unwrap() = true;
        cv.notify_all();
    }
}

/// The hashed message of a DER TimeStampReq.
fn imprint_of(tsq: &[u8]) -> Vec<u8> {
    let req = x509_tsp::TimeStampReq::from_der(tsq).expect("a TimeStampReq");
    req.message_imprint.hashed_message.as_bytes().to_vec()
}

/// `openssl ts -query` (with OpenSSL's random nonce and certReq) for `data`, or for a SHA-256
/// `digest` given.
fn other_query(pki: &Pki, data: &str, digest: Option<Vec<u8>>) -> Vec<u8> {
    let id = uuid::Uuid::new_v4().simple().to_string();
    let (d, q) = (format!("data-{id}"), format!("other-{id}.tsq"));
    std::fs::write(pki.dir.join(&d), data).unwrap();
    let hex = digest.map(hex::encode);
    let mut args = vec!["ts", "-query", "-sha256", "-cert", "-out", &q];
    match &hex {
        Some(h) => args.extend(["-digest", h.as_str()]),
        None => args.extend(["-data", d.as_str()]),
    }
    openssl(&pki.dir, &args);
    std::fs::read(pki.dir.join(&q)).unwrap()
}

/// The note body: the checkpoint's text up to and including the root's newline.
fn body(note: &str) -> Vec<u8> {
    let end = note.find("\n\n").expect("a blank line ends the body");
    note.as_bytes()[..=end].to_vec()
}

fn eventually<T>(what: &str, f: impl Fn() -> Option<T>) -> T {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < until, "gave up waiting: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn traffic(g: &Gateway, n: usize) {
    for i in 0..n {
        assert_eq!(g.say(&g.key, "gpt-4o-mini", &format!("stamp me {i}")).status, 200);
    }
}

/// Published checkpoints and timestamps, read without `GET /v1/log/checkpoint` (which would
/// publish on demand).
fn newest_published(g: &Gateway) -> u64 {
    g.get_json(&g.key, "/v1/log/checkpoints?limit=1")["data"][0]["size"].as_u64().unwrap_or(0)
}

fn stamps(g: &Gateway) -> Vec<Value> {
    g.get_json(&g.key, "/v1/log/timestamps?limit=100")["data"].as_array().unwrap().clone()
}

fn env<'a>(tsa_url: &'a str, ca: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("TOLLGATE_LOG_PUBLISH_INTERVAL_SECONDS", "1"),
        ("TOLLGATE_LOG_TIMESTAMPING_URL", tsa_url),
        ("TOLLGATE_LOG_TIMESTAMPING_INTERVAL_SECONDS", "1"),
        ("TOLLGATE_LOG_TIMESTAMPING_CA_FILE", ca),
    ]
}

/// The publisher publishes as the log grows; the TSA stamps the newest checkpoints; every
/// stored token passes `openssl ts -verify`; the bundle carries the stamp and `tollgate verify
/// --tsa-ca` checks it.
#[test]
fn checkpoints_are_published_and_stamped_by_openssl_s_tsa() {
    let pki = Arc::new(Pki::new("main"));
    let tsa = Tsa::start(pki.clone());
    let (url, ca) = (tsa.url(), pki.ca().display().to_string());
    for b in backends() {
        let (g, _up) = support::with_standin(&b, &env(&url, &ca));
        // The first leaves are the admin receipts of the stand-in's provider writes (log.md §8).
        let setup = g.newest_seq(&g.key);
        let (three, five) = (setup + 3, setup + 5);
        traffic(&g, 3);
        eventually("the publisher publishes 3 more", || (newest_published(&g) == three).then_some(()));
        let first = eventually("a timestamp of 3 more", || stamps(&g).into_iter().find(|s| s["size"] == three));
        traffic(&g, 2);
        eventually("a timestamp of 5 more", || stamps(&g).into_iter().find(|s| s["size"] == five));

        let got = tsa.receiver.received();
        let asked = got.last().unwrap();
        assert_eq!(
            (asked.method.as_str(), asked.header("content-type")),
            ("POST", Some("application/timestamp-query"))
        );
        let req = x509_tsp::TimeStampReq::from_der(&asked.body).expect("a DER TimeStampReq");
        assert!(req.cert_req && req.nonce.is_some(), "certReq and a nonce");
        assert_eq!(req.message_imprint.hash_algorithm.oid.to_string(), "2.16.840.1.101.3.4.2.1", "SHA-256");

        let all = stamps(&g);
        assert!(all.windows(2).all(|w| w[0]["size"].as_u64() > w[1]["size"].as_u64()), "newest first");
        for s in &all {
            let (note, tsr) = (s["checkpoint"].as_str().unwrap(), B64.decode(s["tsr"].as_str().unwrap()).unwrap());
            assert!(note.contains(&format!("\n{}\n", s["size"])), "{note}");
            assert!(pki.openssl_verifies(&body(note), &tsr, &pki.ca()), "openssl ts -verify: {s}");
            assert!(s["genTime"].as_str().unwrap().ends_with('Z'), "{s}");
            assert!(!pki.openssl_verifies(b"another body\n", &tsr, &pki.ca()));
        }
        let page = g.get_json(&g.key, "/v1/log/timestamps?limit=1");
        assert_eq!(page["data"][0]["size"], five);
        let older =
            g.get_json(&g.key, &format!("/v1/log/timestamps?limit=1&cursor={}", page["nextCursor"].as_str().unwrap()));
        assert_eq!(older["data"][0]["size"], three);
        assert_eq!(older["data"][0], first);
        assert!(g.metric("tollgate_log_timestamps_total", &[]) >= 2.0);
        assert!(g.metric("tollgate_log_checkpoints_published_total", &[]) >= 2.0);
        bundle_carries_the_stamp(&g, &pki);
    }
}

/// The bundle of seq 2..4 uses the newest stamped checkpoint that covers it; `tollgate verify`
/// checks the token with `--tsa-ca`, says it is unchecked without, and fails on another root
/// or an altered genTime.
fn bundle_carries_the_stamp(g: &Gateway, pki: &Pki) {
    // Read before the bundle: the bundle's own admin receipt (log.md §8) grows the log, and the
    // publisher may then publish and stamp a newer checkpoint.
    let newest = stamps(g).remove(0);
    assert_eq!(newest["size"], g.newest_seq(&g.key), "the whole log is stamped");
    let r = g.mgmt("GET", "/v1/compliance/evidence-bundle?fromSeq=2&toSeq=4", Some(&g.key), None);
    assert_eq!(r.status, 200, "{}", r.text());
    let bundle = r.json();
    let log = &bundle["log"];
    assert_eq!(log["timestamp"]["genTime"], newest["genTime"], "{log}");
    assert_eq!(log["timestamp"]["tsr"], newest["tsr"]);
    assert_eq!(log["checkpoint"], newest["checkpoint"]);
    assert_eq!(log["inclusion"]["size"], newest["size"]);

    let ca = pki.ca().display().to_string();
    let (ok, out) = g.verify_bundle(&r.body, &["--tsa-ca", &ca]);
    assert!(ok && out.contains("chains to --tsa-ca"), "{out}");
    let (ok, out) = g.verify_bundle(&r.body, &[]);
    assert!(ok && out.contains("signature NOT checked"), "{out}");
    let stranger = Pki::new("stranger");
    let (ok, out) = g.verify_bundle(&r.body, &["--tsa-ca", stranger.ca().to_str().unwrap()]);
    assert!(!ok && out.contains("does not chain"), "another root: {out}");
    let mut altered = bundle.clone();
    altered["log"]["timestamp"]["genTime"] = "2001-01-01T00:00:00Z".into();
    let (ok, out) = g.verify_bundle(&serde_json::to_vec(&altered).unwrap(), &["--tsa-ca", &ca]);
    assert!(!ok && out.contains("genTime"), "{out}");
}

/// Unreachable, 503, another imprint, another nonce, a hanging TSA: requests are answered,
/// checkpoints published, nothing is kept, each failure counted and the outage logged once;
/// once the TSA answers, the next interval stamps.
#[test]
fn a_tsa_that_is_down_or_wrong_blocks_nothing_and_is_retried() {
    let pki = Arc::new(Pki::new("down"));
    let tsa = Tsa::start(pki.clone());
    let (url, ca) = (tsa.url(), pki.ca().display().to_string());
    let closed = format!("http://127.0.0.1:{}/tsa", support::free_port());
    let (mut g, _up) = support::with_standin(&Backend::Sqlite, &env(&closed, &ca));
    let failures = |g: &Gateway, reason: &str| {
        g.metric("tollgate_log_timestamp_failures_total", &[&format!("reason=\"{reason}\"")])
    };
    // The first leaves are the admin receipts of the stand-in's provider writes (log.md §8).
    let setup = g.newest_seq(&g.key);
    traffic(&g, 2);
    eventually("two unreachable attempts", || (failures(&g, "unreachable") >= 2.0).then_some(()));
    eventually("published regardless", || (newest_published(&g) == setup + 2).then_some(()));
    let warned = g.logs().matches("log timestamps:").count();
    assert_eq!(warned, 1, "the outage is logged once:\n{}", g.logs());

    g.stop();
    g.set_env("TOLLGATE_LOG_TIMESTAMPING_URL", &url);
    tsa.set(Mode::Down);
    g.spawn();
    traffic(&g, 1);
    eventually("a 503 counted", || (failures(&g, "http_status") >= 1.0).then_some(()));
    for (mode, reason) in [(Mode::OtherImprint, "invalid"), (Mode::OtherNonce, "invalid")] {
        let before = failures(&g, reason);
        tsa.set(mode);
        eventually(&format!("{mode:?} refused"), || (failures(&g, reason) > before).then_some(()));
    }
    assert!(stamps(&g).is_empty(), "nothing kept: {:?}", stamps(&g));

    // A TSA that holds the request: requests and publications go on meanwhile.
    tsa.set(Mode::Hang);
    let held = tsa.receiver.received().len();
    eventually("a request held", || (tsa.receiver.received().len() > held).then_some(()));
    traffic(&g, 2);
    eventually("published while the TSA hangs", || (newest_published(&g) == setup + 5).then_some(()));
    assert!(stamps(&g).is_empty());
    tsa.set(Mode::Up);
    tsa.release();

    let s = eventually("stamped once the TSA answers", || stamps(&g).into_iter().next());
    let tsr = B64.decode(s["tsr"].as_str().unwrap()).unwrap();
    assert!(pki.openssl_verifies(&body(s["checkpoint"].as_str().unwrap()), &tsr, &pki.ca()));
    eventually("recovery logged", || g.logs().contains("answers again").then_some(()));
}

/// The library's checks on OpenSSL's answers, one fault at a time.
#[test]
fn tokens_from_openssl_pass_and_faults_are_named() {
    let pki = Pki::new("lib");
    let roots = Roots::read(&pki.ca()).unwrap();
    let body = b"tollgate-test/t1\n7\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n";
    let req = timestamp::request(body);
    // OpenSSL reads our request as we meant it.
    std::fs::write(pki.dir.join("ours.tsq"), &req.der).unwrap();
    let text = String::from_utf8(openssl(&pki.dir, &["ts", "-query", "-in", "ours.tsq", "-text"]).stdout).unwrap();
    assert!(text.contains("Hash Algorithm: sha256") && text.contains("Certificate required: yes"), "{text}");
    assert!(text.contains(&format!("Nonce: 0x{}", hex::encode_upper(&req.nonce))), "{text}");

    for section in ["v1", "v2"] {
        let tsr = pki.reply(&req.der, section);
        let s =
            timestamp::check(&tsr, body, Some(&req.nonce), Some(&roots)).unwrap_or_else(|e| panic!("{section}: {e}"));
        assert!(s.chain_checked);
        assert_eq!(
            s.gen_time.contains('.'),
            section == "v1",
            "milliseconds from clock_precision_digits: {}",
            s.gen_time
        );
        assert!(pki.openssl_verifies(body, &tsr, &pki.ca()));
    }
    let tsr = pki.reply(&req.der, "v2");
    let fault = |tsr: &[u8], body: &[u8], nonce: Option<&[u8]>, roots: Option<&Roots>| {
        timestamp::check(tsr, body, nonce, roots).expect_err("refused")
    };
    assert_eq!(fault(&tsr, b"another body\n", None, None).reason, "invalid");
    assert_eq!(fault(&tsr, body, Some(&[0x40, 1, 2, 3]), None).reason, "invalid");
    let stranger = Pki::new("lib-stranger");
    let other_roots = Roots::read(&stranger.ca()).unwrap();
    assert!(fault(&tsr, body, None, Some(&other_roots)).detail.contains("does not chain"));
    // A flipped bit in the signature (the last bytes of the DER): the chain holds, the
    // signature does not; without roots nothing notices — which is what --tsa-ca is for.
    let mut bent = tsr.clone();
    *bent.last_mut().unwrap() ^= 1;
    assert!(fault(&bent, body, None, Some(&roots)).detail.contains("signature does not verify"));
    assert!(timestamp::check(&bent, body, None, None).is_ok());
    // A TSA that refuses: OpenSSL answers a query for a digest it does not accept.
    let id = "sha1q.tsq";
    openssl(&pki.dir, &["ts", "-query", "-sha1", "-digest", &"ab".repeat(20), "-out", id]);
    let refused = pki.reply(&std::fs::read(pki.dir.join(id)).unwrap(), "v1");
    let e = fault(&refused, body, None, None);
    assert_eq!(e.reason, "refused", "{e}");
    let round = x509_tsp::TimeStampResp::from_der(&tsr).unwrap().to_der().unwrap();
    assert_eq!(round, tsr, "the answer is kept as received, and it is DER");
}

/// `log.timestamping` errors name the field.
#[test]
fn timestamping_config_errors_name_the_field() {
    let dir = std::env::temp_dir().join(format!("tollgate-tsa-cfg-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    for (yaml, field) in [
        ("log:\n  timestamping:\n    url: ftp://tsa.example\n", "log.timestamping.url"),
        (
            "log:\n  timestamping:\n    url: http://tsa.example\n    interval_seconds: 0\n",
            "log.timestamping.interval_seconds",
        ),
        (
            "log:\n  timestamping:\n    url: http://tsa.example\n    ca_file: /nonexistent/ca.pem\n",
            "log.timestamping.ca_file",
        ),
        ("log:\n  timestamping:\n    url: http://tsa.example\n    every: 3\n", "every"),
        ("log:\n  publish_interval_seconds: 0\n", "log.publish_interval_seconds"),
    ] {
        let file = dir.join("t.yaml");
        std::fs::write(&file, yaml).unwrap();
        let out = Command::new(support::bin()).args(["check-config", "--config"]).arg(&file).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && text.contains(field), "{yaml}: {text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
