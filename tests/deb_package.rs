//! The Debian package on this machine: `dpkg -i` installs the binary, the conffile, the unit and
//! the `tollgate` system user; `systemd-analyze verify` accepts the unit; the packaged binary
//! runs the way the unit runs it and answers a management call and a gateway call to a
//! stand-in upstream; `dpkg --purge` removes all of it again.
//!
//! systemd is not PID 1 in the CI container, so the unit cannot be started for real. The test
//! reads the installed unit and reproduces what decides whether the binary can run there:
//! `User=`/`Group=`, `Environment=`, `WorkingDirectory=`, `UMask=`, `ExecStartPre=` then
//! `ExecStart=`, and in a private mount namespace `ProtectSystem=strict` (everything read-only
//! but the `StateDirectory=`), `PrivateTmp=`, `ProtectHome=`, `NoNewPrivileges=` and the empty
//! capability sets. Not reproduced: the seccomp filter, `MemoryDenyWriteExecute=` (the test
//! only sees that no mapping is writable and executable), `RestrictAddressFamilies=`, `PrivateDevices=` and the kernel/proc protections. The listen
//! addresses are free ports (TOLLGATE_*_LISTEN) instead of the packaged 8080/8081/9090.
//!
//! It changes the machine (a package, a user), so it runs only when TOLLGATE_DEB_TEST names
//! the .deb to test (packaging/test-deb.sh builds one and sets it), and then needs root, dpkg,
//! setpriv, unshare and systemd-analyze.

mod support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::json;
use support::{Gateway, Standin};

const UNIT: &str = "/usr/lib/systemd/system/tollgate.service";
const CONFIG: &str = "/etc/tollgate/tollgate.yaml";

/// What dpkg installs; all of it is gone after the purge.
const INSTALLED: &[&str] =
    &["/usr/bin/tollgate", CONFIG, "/etc/tollgate/policies/README.md", UNIT, "/usr/share/doc/tollgate"];

/// Runs as root in the new mount namespace (`unshare --mount`) and then becomes the unit's
/// command. Arguments: state directory, working directory, umask, user, group, the command.
const SANDBOX: &str = r#"
set -eu
state=$1 workdir=$2 mask=$3 user=$4 group=$5; shift 5
# StateDirectory=: a mount of its own stays writable under the remounts below.
mount --bind "$state" "$state"
# ProtectSystem=strict: every other mount read-only, the API file systems apart.
awk '{print $5}' /proc/self/mountinfo | while read -r m; do
  case "$m" in /proc|/proc/*|/sys|/sys/*|/dev|/dev/*|"$state") continue ;; esac
  mount -o remount,bind,ro "$m" || echo "sandbox: $m stays writable" >&2
done
if touch /.tollgate-sandbox-probe 2>/dev/null; then
  rm -f /.tollgate-sandbox-probe; echo "sandbox: / is still writable" >&2; exit 97
fi
# PrivateTmp=yes
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs -o mode=1777 tmpfs /var/tmp
# ProtectHome=yes: empty and read-only.
for d in /home /root /run/user; do
  if [ -d "$d" ]; then mount -t tmpfs -o ro,mode=755 tmpfs "$d"; fi
done
cd "$workdir"
umask "$mask"
# User=, Group=, NoNewPrivileges=yes, CapabilityBoundingSet= and AmbientCapabilities= (empty).
exec setpriv --reuid="$user" --regid="$group" --init-groups --no-new-privs --bounding-set=-all --inh-caps=-all -- "$@"
"#;

/// The [Service] settings of the installed unit this test acts on. The parser knows only the
/// syntax the unit uses (no quoting, escapes, specifiers or command prefixes) and fails on more.
struct Unit {
    settings: Vec<(String, String)>,
}

impl Unit {
    fn read(path: &str) -> Unit {
        let text = std::fs::read_to_string(path).unwrap();
        let mut section = "";
        let mut settings = Vec::new();
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with(['#', ';'])) {
            if line.starts_with('[') {
                section = line;
            } else if section == "[Service]" {
                let (k, v) = line.split_once('=').unwrap_or_else(|| panic!("unit line `{line}`"));
                settings.push((k.to_string(), v.to_string()));
            }
        }
        Unit { settings }
    }

    fn all(&self, key: &str) -> Vec<&str> {
        self.settings.iter().filter(|(k, _)| k == key).map(|(_, v)| v.as_str()).collect()
    }

    fn one(&self, key: &str) -> &str {
        match self.all(key)[..] {
            [v] => v,
            ref vs => panic!("the unit sets {key}= {} times", vs.len()),
        }
    }

    fn words(&self, value: &str) -> Vec<String> {
        assert!(!value.contains(['"', '\'', '\\', '%']), "the test does not parse `{value}`; extend Unit");
        let words: Vec<String> = value.split_whitespace().map(String::from).collect();
        assert!(!words.first().is_some_and(|w| w.starts_with(['-', '+', '!', '@', ':'])), "prefix in `{value}`");
        words
    }

    fn command(&self, key: &str) -> Vec<String> {
        self.words(self.one(key))
    }

    /// The environment systemd gives the service: its own variables for a `User=` service, then
    /// `EnvironmentFile=` (an optional `-` file may be missing), then `Environment=`.
    fn environment(&self) -> Vec<(String, String)> {
        let user = self.one("User");
        let home = passwd(user).expect("the unit's user exists")[5].clone();
        let state = self.state_dir();
        let mut env: Vec<(String, String)> = [
            ("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
            ("USER", user),
            ("LOGNAME", user),
            ("HOME", home.as_str()),
            ("SHELL", "/usr/sbin/nologin"),
            ("STATE_DIRECTORY", state.as_str()),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        for file in self.all("EnvironmentFile") {
            let (optional, path) = file.strip_prefix('-').map_or((false, file), |p| (true, p));
            match std::fs::read_to_string(path) {
                Ok(text) => env.extend(text.lines().filter(|l| l.contains('=') && !l.starts_with('#')).map(assignment)),
                Err(e) => assert!(optional, "EnvironmentFile {path}: {e}"),
            }
        }
        for line in self.all("Environment") {
            env.extend(self.words(line).iter().map(|w| assignment(w)));
        }
        env
    }

    fn state_dir(&self) -> String {
        format!("/var/lib/{}", self.one("StateDirectory"))
    }

    /// `argv` under the unit's settings (see the module comment), in a fresh mount namespace.
    fn sandboxed(&self, argv: &[String]) -> Command {
        let mut c = Command::new("unshare");
        c.args(["--mount", "--propagation", "private", "--", "sh", "-c", SANDBOX, "sandbox"])
            .args([&self.state_dir(), self.one("WorkingDirectory"), self.one("UMask")])
            .args([self.one("User"), self.one("Group")])
            .args(argv)
            .env_clear()
            .envs(self.environment());
        c
    }
}

fn assignment(s: &str) -> (String, String) {
    let (k, v) = s.split_once('=').unwrap();
    (k.trim().to_string(), v.trim().to_string())
}

/// The passwd entry of `user`, split at `:`.
fn passwd(user: &str) -> Option<Vec<String>> {
    let out = Command::new("getent").args(["passwd", user]).output().unwrap();
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().split(':').map(String::from).collect())
}

fn group_exists(group: &str) -> bool {
    Command::new("getent").args(["group", group]).output().unwrap().status.success()
}

fn run(program: &str, args: &[&str]) -> Output {
    Command::new(program).args(args).output().unwrap_or_else(|e| panic!("{program}: {e}"))
}

/// Runs and requires success; returns stdout.
fn ok(program: &str, args: &[&str]) -> String {
    let out = run(program, args);
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    assert!(out.status.success(), "{program} {args:?}: {}\n{}{}", out.status, text(&out.stdout), text(&out.stderr));
    text(&out.stdout)
}

fn installed() -> bool {
    run("dpkg-query", &["-W", "-f=${Status}", "tollgate"]).stdout == b"install ok installed"
}

/// Purges the package when the test fails halfway, so the machine is left as it was.
struct PurgeOnDrop;

impl Drop for PurgeOnDrop {
    fn drop(&mut self) {
        if installed() {
            let _ = run("dpkg", &["--purge", "tollgate"]);
        }
    }
}

fn deb_under_test() -> Option<PathBuf> {
    let Some(deb) = std::env::var_os("TOLLGATE_DEB_TEST") else {
        eprintln!("skipping: TOLLGATE_DEB_TEST is unset (packaging/test-deb.sh builds a .deb and runs this)");
        return None;
    };
    assert_eq!(unsafe { libc::geteuid() }, 0, "the .deb test installs a package: run it as root");
    assert!(!installed(), "a tollgate package is installed on this machine; the test would purge it");
    Some(PathBuf::from(deb))
}

#[test]
fn deb_installs_runs_as_its_unit_and_purges() {
    let Some(deb) = deb_under_test() else { return };
    let _cleanup = PurgeOnDrop;
    ok("dpkg", &["-i", deb.to_str().unwrap()]);
    check_installed();
    check_unit_file();
    let unit = Unit::read(UNIT);

    let migrate = unit.sandboxed(&unit.command("ExecStartPre")).output().unwrap();
    let log = String::from_utf8_lossy(&migrate.stderr);
    assert!(migrate.status.success() && log.contains("migrations applied"), "ExecStartPre: {log}");

    let start = unit.command("ExecStart");
    let mut g = Gateway::launch(Box::new(move || unit.sandboxed(&start)));
    check_sandbox(g.pid().unwrap());
    serve_calls(&mut g);
    g.stop();
    check_state_dir();
    drop(g);

    ok("dpkg", &["--purge", "tollgate"]);
    check_purged();
}

fn check_installed() {
    assert!(installed());
    for path in INSTALLED {
        assert!(Path::new(path).exists(), "{path} missing after dpkg -i");
    }
    let version = ok("/usr/bin/tollgate", &["--version"]);
    assert_eq!(version.trim(), format!("tollgate {}", env!("CARGO_PKG_VERSION")));
    let conffiles = ok("dpkg-query", &["-W", "-f=${Conffiles}", "tollgate"]);
    assert!(conffiles.lines().any(|l| l.split_whitespace().next() == Some(CONFIG)), "conffiles: {conffiles}");
    ok("/usr/bin/tollgate", &["check-config", "--config", CONFIG]);

    let user = passwd("tollgate").expect("dpkg -i made the tollgate user");
    let uid: u32 = user[2].parse().unwrap();
    assert!(uid < 1000, "a system user (uid {uid})");
    assert_eq!((user[5].as_str(), user[6].as_str()), ("/var/lib/tollgate", "/usr/sbin/nologin"));
    assert!(group_exists("tollgate"));
    let state = std::fs::metadata("/var/lib/tollgate").unwrap();
    assert_eq!((state.uid(), state.permissions().mode() & 0o777), (uid, 0o700));
}

/// systemd accepts the unit, and it carries the hardening the issue names.
fn check_unit_file() {
    let verify = run("systemd-analyze", &["verify", UNIT]);
    let stderr = String::from_utf8_lossy(&verify.stderr);
    assert!(verify.status.success() && stderr.trim().is_empty(), "systemd-analyze verify: {stderr}");
    // Overall exposure at most 2.0 of 10 (the threshold is in tenths).
    ok("systemd-analyze", &["security", "--offline=yes", "--threshold=20", "--no-pager", UNIT]);
    let unit = Unit::read(UNIT);
    for (key, value) in [
        ("User", "tollgate"),
        ("StateDirectory", "tollgate"),
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("PrivateTmp", "yes"),
        ("ProtectHome", "yes"),
    ] {
        assert_eq!(unit.one(key), value, "{key}=");
    }
    assert_eq!(unit.command("ExecStartPre")[..2], ["/usr/bin/tollgate", "migrate"]);
    assert_eq!(unit.command("ExecStart")[..2], ["/usr/bin/tollgate", "serve"]);
}

/// The server process is what the unit asks for: the service user, no_new_privs, no
/// capabilities, and a read-only root file system. It also maps no memory both writable and
/// executable: what `MemoryDenyWriteExecute=` would refuse (a hint, not that setting's proof).
fn check_sandbox(pid: u32) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).map(str::trim).unwrap_or_default();
    let uid = passwd("tollgate").unwrap()[2].clone();
    assert!(field("Uid:").split_whitespace().all(|u| u == uid), "{status}");
    assert_eq!(field("NoNewPrivs:"), "1");
    for caps in ["CapEff:", "CapPrm:", "CapBnd:", "CapAmb:"] {
        assert_eq!(field(caps).trim_start_matches('0'), "", "{caps} {}", field(caps));
    }
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    let root = mounts.lines().map(|l| l.split(' ').collect::<Vec<_>>()).find(|f| f[4] == "/").unwrap();
    assert!(root[5].split(',').any(|o| o == "ro"), "the root file system is writable: {root:?}");
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let wx: Vec<&str> =
        maps.lines().filter(|l| l.split(' ').nth(1).is_some_and(|p| p.contains('w') && p.contains('x'))).collect();
    assert!(wx.is_empty(), "writable and executable mappings: {wx:?}");
}

/// `/status`, the manager key of the first start, a provider set through the management API,
/// a chat completion through the gateway to the stand-in and its receipt; then the documented
/// administration command, run as the service user beside the running service.
fn serve_calls(g: &mut Gateway) {
    assert_eq!(g.mgmt("GET", "/status", None, None).status, 200);
    let logs = g.logs();
    let marker = "manager key (shown once, store it now): ";
    let key = logs.lines().find_map(|l| l.split_once(marker)).map(|(_, k)| k.trim().to_string());
    g.key = key.unwrap_or_else(|| panic!("no bootstrap manager key in the log:\n{logs}"));

    let upstream = Standin::start();
    g.set_provider(&g.key, "openai", &upstream.url(), "sk-provider-secret");
    let body = json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hello"}]});
    let answer = g.post_gw("/v1/chat/completions", &g.key, body.to_string().as_bytes());
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(upstream.count(), 1);
    let receipt = g.receipt_of(&answer);
    assert_eq!((receipt["model"].as_str(), receipt["upstreamStatus"].as_str()), (Some("gpt-4o-mini"), Some("ok")));

    let made = Command::new("runuser")
        .args(["-u", "tollgate", "--", "/usr/bin/tollgate", "tenant", "create", "--name", "ops", "--json"])
        .args(["--config", CONFIG])
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .current_dir("/")
        .output()
        .unwrap();
    assert!(made.status.success(), "tenant create: {}", String::from_utf8_lossy(&made.stderr));
    let ops_key =
        serde_json::from_slice::<serde_json::Value>(&made.stdout).unwrap()["key"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(15);
    while g.mgmt("GET", "/v1/keys", Some(&ops_key), None).status != 200 {
        assert!(Instant::now() < deadline, "the running service never accepted the CLI's tenant");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Everything the service wrote is the service user's and private to it (UMask=0077).
fn check_state_dir() {
    let uid = passwd("tollgate").unwrap()[2].parse::<u32>().unwrap();
    let entries: Vec<_> = std::fs::read_dir("/var/lib/tollgate").unwrap().flatten().collect();
    assert!(entries.iter().any(|e| e.file_name() == "tollgate.db"), "no database in the state directory");
    for e in entries {
        let m = e.metadata().unwrap();
        assert_eq!(m.uid(), uid, "{:?} is not the service user's", e.path());
        assert_eq!(m.permissions().mode() & 0o077, 0, "{:?} is readable by others", e.path());
    }
}

fn check_purged() {
    assert!(!installed());
    for path in INSTALLED.iter().chain(&["/etc/tollgate", "/var/lib/tollgate"]) {
        assert!(!Path::new(path).exists(), "{path} is left after dpkg --purge");
    }
    assert!(passwd("tollgate").is_none(), "the tollgate user is left after dpkg --purge");
    assert!(!group_exists("tollgate"), "the tollgate group is left after dpkg --purge");
}
