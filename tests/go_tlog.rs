//! The tenant log (docs/log.md) checked by Go's reference packages, `golang.org/x/mod/sumdb/note`
//! and `sumdb/tlog`, which the transparency-log ecosystem's tools are built on: the program in
//! tests/go/tlogcheck opens the checkpoint with `note.Open`, rebuilds the root from the C2SP tiles
//! through `tlog.TileHashReader`, and checks inclusion and consistency proofs with
//! `tlog.CheckRecord` / `tlog.CheckTree` (and the latter against `tlog.ProveTree`'s own).
//!
//! Needs `go` and Debian's golang-golang-x-mod-dev (scripts/test installs them when it can);
//! skipped with a reason otherwise, unless `TOLLGATE_REQUIRE_GO=1` (CI).

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::{Backend, Gateway};

const GOPATH: &str = "/usr/share/gocode";

/// Builds tests/go/tlogcheck into `dir`, or None (with the reason printed) when Go is missing.
fn tlogcheck(dir: &Path) -> Option<PathBuf> {
    let have = Command::new("go").arg("version").output().is_ok_and(|o| o.status.success())
        && Path::new(GOPATH).join("src/golang.org/x/mod/sumdb/tlog").is_dir();
    if !have {
        let why = "go and golang.org/x/mod (Debian: golang-go golang-golang-x-mod-dev) are not installed";
        assert!(std::env::var_os("TOLLGATE_REQUIRE_GO").is_none(), "TOLLGATE_REQUIRE_GO is set, but {why}");
        eprintln!("skipped: {why}");
        return None;
    }
    let out = dir.join("tlogcheck");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/go/tlogcheck/main.go");
    let built = Command::new("go")
        .args(["build", "-o"])
        .arg(&out)
        .arg(&src)
        .env("GO111MODULE", "off")
        .env("GOPATH", GOPATH)
        .env("GOCACHE", dir.join("gocache"))
        .env("GOFLAGS", "")
        .output()
        .unwrap();
    assert!(built.status.success(), "go build: {}", String::from_utf8_lossy(&built.stderr));
    Some(out)
}

fn run(bin: &Path, g: &Gateway, old: Option<&(String, String)>) -> (String, String) {
    let mut cmd = Command::new(bin);
    cmd.arg(format!("http://{}", g.mgmt)).arg(&g.key);
    if let Some((size, root)) = old {
        cmd.arg(size).arg(root);
    }
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "tlogcheck failed:\n{text}{}", String::from_utf8_lossy(&out.stderr));
    let last = text.lines().last().unwrap_or_default().to_string();
    let mut words = last.split(' ');
    assert_eq!(words.next(), Some("size"), "{text}");
    let size = words.next().unwrap().to_string();
    assert_eq!(words.next(), Some("root"), "{text}");
    (size, words.next().unwrap().to_string())
}

#[test]
fn go_s_sumdb_packages_accept_the_log() {
    let (g, _up) = support::with_standin(&Backend::Sqlite, &[]);
    let Some(bin) = tlogcheck(&g.dir) else { return };
    // The stand-in's provider settings are management writes: admin receipts, leaves too.
    let base = g.newest_seq(&g.key);
    for i in 0..5 {
        assert_eq!(g.say(&g.key, "gpt-4o-mini", &format!("hi {i}")).status, 200);
    }
    let early = run(&bin, &g, None);
    assert_eq!(early.0, (base + 5).to_string());
    for i in 0..300 {
        assert_eq!(g.say(&g.key, "gpt-4o-mini", &format!("more {i}")).status, 200);
    }
    let late = run(&bin, &g, Some(&early));
    assert_eq!(late.0, (base + 305).to_string());
    // A root the log never had is refused by tlog.CheckTree.
    let forged = (early.0.clone(), base64_of_zeros());
    let mut cmd = Command::new(&bin);
    let out = cmd.arg(format!("http://{}", g.mgmt)).arg(&g.key).arg(&forged.0).arg(&forged.1).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success() && text.contains("FAIL tlog.CheckTree"), "{text}");
}

fn base64_of_zeros() -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode([0u8; 32])
}
