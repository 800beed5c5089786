//! A wall clock a test moves forward, for what resets with a period (rate windows, monthly
//! budgets): the server, and a `redis-server` of the test's own, run under libfaketime
//! (`LD_PRELOAD`), which reads the clock's offset from a file the test rewrites. Only the wall
//! clock moves (`FAKETIME_DONT_FAKE_MONOTONIC=1`): timers, timeouts and `Instant`s keep real
//! time. Nothing in the product knows about it: the process simply sees a later date.
//!
//! Needs Debian's `libfaketime` (scripts/lib/setup.sh `ensure_faketime`); without it a test
//! skips, or fails when `TOLLGATE_REQUIRE_FAKETIME=1` (CI).

use std::path::PathBuf;

/// Where Debian and others put the multi-threaded variant (the gateway is multi-threaded).
const LIBS: [&str; 3] = [
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/faketime/libfaketimeMT.so.1",
];

pub struct FakeClock {
    file: PathBuf,
    env: Vec<(&'static str, String)>,
}

impl FakeClock {
    /// A clock at the real time (offset 0); None (printed) when libfaketime is not installed,
    /// a panic when `TOLLGATE_REQUIRE_FAKETIME=1` makes it mandatory.
    pub fn start() -> Option<FakeClock> {
        let Some(lib) = LIBS.iter().find(|p| std::path::Path::new(p).exists()) else {
            let why = "libfaketime is not installed (Debian: apt-get install libfaketime)";
            if std::env::var("TOLLGATE_REQUIRE_FAKETIME").is_ok_and(|v| v == "1") {
                panic!("TOLLGATE_REQUIRE_FAKETIME=1 but {why}");
            }
            eprintln!("skipping a clock scenario: {why}");
            return None;
        };
        let file = std::env::temp_dir().join(format!("tollgate-clock-{}", uuid::Uuid::new_v4().simple()));
        let env = vec![
            ("LD_PRELOAD", lib.to_string()),
            ("FAKETIME_TIMESTAMP_FILE", file.display().to_string()),
            // Read on every call, so a move is seen by the very next request.
            ("FAKETIME_NO_CACHE", "1".to_string()),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_string()),
        ];
        let clock = FakeClock { file, env };
        clock.set_offset_seconds(0);
        Some(clock)
    }

    /// The variables a process runs under this clock with.
    pub fn env(&self) -> Vec<(&str, &str)> {
        self.env.iter().map(|(k, v)| (*k, v.as_str())).collect()
    }

    /// From now on every process of this clock is `seconds` ahead of the real time.
    pub fn set_offset_seconds(&self, seconds: i64) {
        // Written whole, then renamed: a reader never sees half a line.
        let tmp = self.file.with_extension("new");
        std::fs::write(&tmp, format!("{seconds:+}\n")).unwrap();
        std::fs::rename(&tmp, &self.file).unwrap();
    }
}

impl Drop for FakeClock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
    }
}
