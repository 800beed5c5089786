//! `strace` attached to a running server: the order of its writes, flushes and sends.
//!
//! The trace's line order is the order strace saw the calls stop. For two calls where the second
//! can only start because the first returned (a thread told after its `fdatasync` returned, and
//! only then sending), the first one's exit line comes before the second one's entry line: the
//! first thread stays stopped at its exit until strace has written that line.
//!
//! Needs `strace` (scripts/lib/setup.sh `ensure_strace`) and the right to trace the server;
//! without them the tests that use it skip with a reason, unless `TOLLGATE_REQUIRE_STRACE=1`
//! (CI).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The system calls traced: every way bytes leave the process, and the flushes.
pub const CALLS: &str = "trace=write,writev,pwrite64,pwritev,fdatasync,fsync,sendto,sendmsg";

/// One traced system call: its name, first argument (the fd), the text of its arguments (with
/// the bytes written), and the trace lines of its entry and exit.
#[derive(Debug, Clone)]
pub struct Call {
    pub name: String,
    pub fd: i64,
    pub args: String,
    pub enter: usize,
    pub exit: usize,
}

impl Call {
    pub fn is_write(&self) -> bool {
        matches!(self.name.as_str(), "write" | "writev" | "pwrite64" | "pwritev" | "sendto" | "sendmsg")
    }

    pub fn is_sync(&self) -> bool {
        matches!(self.name.as_str(), "fdatasync" | "fsync")
    }

    /// An HTTP message starts in these bytes (a response's head, or a request to an upstream).
    pub fn is_http_head(&self) -> bool {
        self.args.contains("HTTP/1.")
    }
}

/// A running `strace -f -p PID`, writing to a file.
pub struct Tracer {
    child: Child,
    out: PathBuf,
}

/// Whether this machine can trace: `strace` on PATH. None (with the reason printed) when it
/// cannot and `TOLLGATE_REQUIRE_STRACE` is not set; panics when it is.
pub fn available() -> Option<()> {
    let ok = Command::new("strace").arg("-V").stdout(Stdio::null()).stderr(Stdio::null()).status();
    if ok.is_ok_and(|s| s.success()) {
        return Some(());
    }
    let why = "strace is not installed (Debian: apt-get install strace; scripts/test installs it as root)";
    assert!(std::env::var_os("TOLLGATE_REQUIRE_STRACE").is_none(), "TOLLGATE_REQUIRE_STRACE is set, but {why}");
    eprintln!("skipped: {why}");
    None
}

impl Tracer {
    /// Attaches to every thread of `pid` (and those it starts) and returns once all of them are
    /// traced, so nothing the caller does next is missed. None (with the reason printed) when
    /// strace may not trace here (no ptrace in this container) and `TOLLGATE_REQUIRE_STRACE` is
    /// not set.
    pub fn attach(pid: u32, out: &Path) -> Option<Tracer> {
        let mut child = Command::new("strace")
            .args(["-f", "-qq", "-e", CALLS, "-e", "signal=none", "-s", "1048576", "-o"])
            .arg(out)
            .args(["-p", &pid.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start strace");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !all_traced(pid) {
            if let Ok(Some(_)) = child.try_wait() {
                let mut why = String::new();
                let _ = std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut why);
                assert!(std::env::var_os("TOLLGATE_REQUIRE_STRACE").is_none(), "strace cannot trace here: {why}");
                eprintln!("skipped: strace cannot trace here: {why}");
                return None;
            }
            assert!(Instant::now() < deadline, "strace did not attach to every thread of {pid}");
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(Tracer { child, out: out.to_path_buf() })
    }

    /// Detaches (SIGINT: strace writes out what it has and lets the server go on) and parses
    /// the trace.
    pub fn finish(mut self) -> Vec<Call> {
        let _ = Command::new("kill").args(["-INT", &self.child.id().to_string()]).status();
        let _ = self.child.wait();
        parse(&std::fs::read_to_string(&self.out).expect("read the trace"))
    }
}

/// Every thread of `pid` has a tracer.
fn all_traced(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
    tasks.flatten().all(|t| {
        let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
        status.lines().any(|l| l.starts_with("TracerPid:") && l.split_whitespace().nth(1).is_some_and(|p| p != "0"))
    })
}

/// Parses `strace -f` output: `PID name(args) = ret`, or a call split in two lines by another
/// thread's (`PID name(args <unfinished ...>` … `PID <... name resumed>rest) = ret`).
pub fn parse(trace: &str) -> Vec<Call> {
    let mut calls = Vec::new();
    let mut pending: HashMap<String, Call> = HashMap::new();
    for (i, line) in trace.lines().enumerate() {
        let (pid, rest) = match line.split_once(' ') {
            Some((p, r)) if p.chars().all(|c| c.is_ascii_digit()) => (p.to_string(), r.trim_start()),
            _ => (String::new(), line),
        };
        if let Some(resumed) = rest.strip_prefix("<... ") {
            if let Some(mut call) = pending.remove(&pid) {
                call.args.push_str(resumed.split_once(" resumed>").map_or("", |(_, r)| r));
                call.exit = i;
                calls.push(call);
            }
            continue;
        }
        let Some((name, args)) = rest.split_once('(') else { continue };
        if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let fd = args.split([',', ')', ' ']).next().and_then(|f| f.parse().ok()).unwrap_or(-1);
        let call = Call { name: name.to_string(), fd, args: args.to_string(), enter: i, exit: i };
        if rest.ends_with("<unfinished ...>") {
            pending.insert(pid, call);
        } else {
            calls.push(call);
        }
    }
    calls.sort_by_key(|c| c.enter);
    calls
}
