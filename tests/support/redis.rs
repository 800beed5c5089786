//! Redis for the shared-state tests: the machine's own (127.0.0.1:6379), each test under its
//! own key prefix, or a server a test starts on its own port so it can stop it.

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn required() -> bool {
    std::env::var("TOLLGATE_REQUIRE_REDIS").is_ok_and(|v| v == "1")
}

/// `redis://127.0.0.1:6379` when it answers; else None with a printed reason, or a panic when
/// `TOLLGATE_REQUIRE_REDIS=1` (CI) makes Redis mandatory.
pub fn machine_redis() -> Option<String> {
    match TcpStream::connect_timeout(&"127.0.0.1:6379".parse().unwrap(), Duration::from_secs(2)) {
        Ok(_) => Some("redis://127.0.0.1:6379".into()),
        Err(e) if required() => panic!("Redis is required (TOLLGATE_REQUIRE_REDIS=1) but unavailable: {e}"),
        Err(e) => {
            eprintln!("skipping Redis scenario: no server at 127.0.0.1:6379 ({e})");
            None
        }
    }
}

/// A key prefix no other test uses.
pub fn fresh_prefix() -> String {
    format!("tollgate-test-{}:", uuid::Uuid::new_v4().simple())
}

/// A `redis-server` of this test's own, on a free port, keeping nothing on disk.
pub struct OwnRedis {
    pub port: u16,
    child: Option<Child>,
}

impl OwnRedis {
    /// None (printed, or a panic when required) when `redis-server` is not installed.
    pub fn start() -> Option<OwnRedis> {
        let mut r = OwnRedis { port: super::free_port(), child: None };
        match r.spawn() {
            Ok(()) => Some(r),
            Err(e) if required() => panic!("Redis is required (TOLLGATE_REQUIRE_REDIS=1) but redis-server failed: {e}"),
            Err(e) => {
                eprintln!("skipping: cannot start redis-server ({e})");
                None
            }
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn spawn(&mut self) -> Result<(), String> {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| e.to_string())?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err("redis-server did not listen within 10 s".into())
    }

    /// Stops the server (its data is gone: it keeps nothing on disk).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port, empty.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn().expect("redis-server restarts");
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `HGET key field` through redis-cli on the Redis at `url` (empty when there is none).
pub fn hget(url: &str, key: &str, field: &str) -> String {
    let port = url.rsplit(':').next().unwrap();
    let out = std::process::Command::new("redis-cli").args(["-p", port, "HGET", key, field]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
