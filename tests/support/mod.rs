//! Test support: the built `tollgate` binary on free ports, a stand-in upstream, a raw HTTP
//! client, and the list of database backends every scenario runs on.
#![allow(dead_code)]

pub mod clock;
pub mod cluster;
pub mod google;
pub mod http;
pub mod otlp;
pub mod receiver;
pub mod redis;
pub mod standin;
pub mod standin_cloud;
pub mod standin_mcp;
pub mod standin_responses;
pub mod standin_routes;
pub mod strace;
pub mod witness;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub use self::http::Resp;
#[allow(unused_imports)]
pub use standin::Standin;

/// Whether process `pid` holds a listening TCP socket on 127.0.0.1/0.0.0.0 `port` (Linux
/// `/proc`); true where `/proc` cannot tell, so other systems keep the plain readiness check.
fn listens_on(pid: u32, port: u16) -> bool {
    let Ok(table) = std::fs::read_to_string("/proc/net/tcp") else { return true };
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return true };
    let inodes: Vec<String> = table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let local_port = f.get(1)?.rsplit(':').next()?;
            (u16::from_str_radix(local_port, 16).ok()? == port && *f.get(3)? == "0A")
                .then(|| f.get(9).map(|s| s.to_string()))?
        })
        .collect();
    let ours: Vec<String> = fds
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|t| {
            t.to_str().and_then(|t| t.strip_prefix("socket:[")).map(|t| t.trim_end_matches(']').to_string())
        })
        .collect();
    inodes.iter().any(|i| ours.contains(i))
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// N distinct free ports: the listeners stay open until all are picked, so the kernel cannot
/// hand the same port out twice (seen once in CI: gateway and management on one port).
pub fn free_ports<const N: usize>() -> [u16; N] {
    let held: Vec<TcpListener> = (0..N).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    std::array::from_fn(|i| held[i].local_addr().unwrap().port())
}

/// Where a scenario keeps its data.
#[derive(Debug, Clone)]
pub enum Backend {
    Sqlite,
    /// A fresh PostgreSQL database made for this run.
    Postgres(String),
}

const PG_ADMIN: &str = "postgres://postgres@127.0.0.1:5432/postgres";

fn pg_required() -> bool {
    std::env::var("TOLLGATE_REQUIRE_POSTGRES").is_ok_and(|v| v == "1")
}

/// Makes a new, empty PostgreSQL database, or None (with a printed reason) when there is no
/// server and the CI variable does not make it mandatory.
pub fn fresh_postgres() -> Option<String> {
    let name = format!("tollgate_test_{}", uuid::Uuid::new_v4().simple());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let made: Result<(), String> = rt.block_on(async {
        use sqlx::Executor;
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(3))
            .connect(PG_ADMIN)
            .await
            .map_err(|e| e.to_string())?;
        pool.execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}"))).await.map_err(|e| e.to_string())?;
        pool.close().await;
        Ok(())
    });
    match made {
        Ok(()) => Some(format!("postgres://postgres@127.0.0.1:5432/{name}")),
        Err(e) if pg_required() => panic!("PostgreSQL is required (TOLLGATE_REQUIRE_POSTGRES=1) but unavailable: {e}"),
        Err(e) => {
            eprintln!("skipping PostgreSQL scenario: no server at 127.0.0.1:5432 ({e})");
            None
        }
    }
}

/// SQLite always; PostgreSQL when a server is there (mandatory in CI).
pub fn backends() -> Vec<Backend> {
    let mut v = vec![Backend::Sqlite];
    if let Some(url) = fresh_postgres() {
        v.push(Backend::Postgres(url));
    }
    v
}

pub struct Gateway {
    child: Option<Child>,
    pub dir: PathBuf,
    pub gw: SocketAddr,
    pub mgmt: SocketAddr,
    pub metrics: SocketAddr,
    env: Vec<(String, String)>,
    /// Manager key of the tenant made before start.
    pub key: String,
    pub tenant_id: String,
    launcher: Launcher,
}

/// Makes the command that runs a server; [`Gateway::spawn`] adds the listen addresses
/// (TOLLGATE_*_LISTEN) and the log file.
pub type Launcher = Box<dyn Fn() -> Command + Send + Sync>;

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_tollgate")
}

/// `tollgate serve` of the binary under test.
fn serve_built_binary() -> Command {
    let mut c = Command::new(bin());
    c.arg("serve");
    c
}

impl Gateway {
    /// Creates a tenant with the CLI, then starts `tollgate serve` on free ports.
    pub fn start(backend: &Backend, extra_env: &[(&str, &str)]) -> Gateway {
        Self::start_with(backend, extra_env, true)
    }

    /// `with_tenant = false` starts on an empty database (the first-start bootstrap path).
    pub fn start_with(backend: &Backend, extra_env: &[(&str, &str)], with_tenant: bool) -> Gateway {
        let mut g = Gateway::unstarted(Box::new(serve_built_binary));
        g.env = vec![("TOLLGATE_DATA_DIR".into(), g.dir.display().to_string()), ("TOLLGATE_LOG".into(), "info".into())];
        if let Backend::Postgres(url) = backend {
            g.env.push(("TOLLGATE_DATABASE_URL".into(), url.clone()));
        }
        for (k, v) in extra_env {
            g.env.push((k.to_string(), v.to_string()));
        }
        if with_tenant {
            let (tenant, key) = g.create_tenant("acme");
            g.tenant_id = tenant;
            g.key = key;
        }
        g.spawn();
        g
    }

    /// A server that `launcher` starts, on data this harness does not manage (the installed
    /// Debian package, tests/deb_package.rs): the same readiness check, clients, logs and stop;
    /// no tenant is made, and `key` is empty until the caller sets it.
    pub fn launch(launcher: Launcher) -> Gateway {
        let mut g = Gateway::unstarted(launcher);
        g.spawn();
        g
    }

    /// A fresh log (and, for the built binary, data) directory; nothing runs yet.
    fn unstarted(launcher: Launcher) -> Gateway {
        let dir = std::env::temp_dir().join(format!("tollgate-test-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        Gateway {
            child: None,
            dir,
            gw: "127.0.0.1:1".parse().unwrap(),
            mgmt: "127.0.0.1:1".parse().unwrap(),
            metrics: "127.0.0.1:1".parse().unwrap(),
            env: Vec::new(),
            key: String::new(),
            tenant_id: String::new(),
            launcher,
        }
    }

    /// Starts the server (again) on fresh ports, retrying if a port was taken meanwhile.
    pub fn spawn(&mut self) {
        for attempt in 0..3 {
            let [gw, mgmt, metrics] = free_ports();
            self.gw = SocketAddr::from(([127, 0, 0, 1], gw));
            self.mgmt = SocketAddr::from(([127, 0, 0, 1], mgmt));
            self.metrics = SocketAddr::from(([127, 0, 0, 1], metrics));
            let log = std::fs::File::create(self.dir.join(format!("serve-{attempt}.log"))).unwrap();
            let child = (self.launcher)()
                .envs(self.env.iter().cloned())
                .env("TOLLGATE_GATEWAY_LISTEN", self.gw.to_string())
                .env("TOLLGATE_MANAGEMENT_LISTEN", self.mgmt.to_string())
                .env("TOLLGATE_METRICS_LISTEN", self.metrics.to_string())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .unwrap();
            self.child = Some(child);
            if self.wait_ready() {
                return;
            }
        }
        panic!("tollgate did not start; logs in {}", self.dir.display());
    }

    fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some(Ok(Some(_))) = self.child.as_mut().map(|c| c.try_wait()) {
                return false;
            }
            if TcpStream::connect(self.mgmt).is_ok() && TcpStream::connect(self.gw).is_ok() {
                // Over TLS (`TOLLGATE_TLS_CERT_FILE`) this plain client cannot ask `/status`: the
                // child listening on all three ports is the sign then (a port taken by another
                // server runs the wait out, and the next attempt takes fresh ports).
                if self.env.iter().any(|(k, v)| k == "TOLLGATE_TLS_CERT_FILE" && !v.is_empty()) {
                    let pid = self.child.as_ref().map(|c| c.id()).unwrap_or(0);
                    if [self.gw, self.mgmt, self.metrics].iter().all(|a| listens_on(pid, a.port())) {
                        return true;
                    }
                } else if http::request(self.mgmt, "GET", "/status", &[], b"").status == 200 {
                    // A port picked by free_port() can be taken by a server of a parallel test
                    // before ours binds it; then the answers come from that server. Only ports
                    // this child listens on count.
                    let pid = self.child.as_ref().map(|c| c.id()).unwrap_or(0);
                    if [self.gw, self.mgmt, self.metrics].iter().all(|a| listens_on(pid, a.port())) {
                        return true;
                    }
                    if let Some(mut c) = self.child.take() {
                        let _ = c.kill();
                        let _ = c.wait();
                    }
                    return false;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// The server's process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Sets (or replaces) an environment variable for the next [`Gateway::spawn`] and CLI runs.
    pub fn set_env(&mut self, key: &str, value: &str) {
        self.env.retain(|(k, _)| k != key);
        self.env.push((key.to_string(), value.to_string()));
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            unsafe { libc_kill(c.id() as i32, 15) };
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn logs(&self) -> String {
        let mut out = String::new();
        for e in std::fs::read_dir(&self.dir).unwrap().flatten() {
            if e.file_name().to_string_lossy().starts_with("serve-") {
                out.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
            }
        }
        out
    }

    /// Runs the CLI against the same data (same env).
    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(bin()).args(args).envs(self.env.iter().cloned()).stdin(Stdio::null()).output().unwrap()
    }

    /// `tollgate verify` on `bundle` (written to a file in the gateway's directory) with `extra`
    /// arguments: whether it passed, and what it printed.
    pub fn verify_bundle(&self, bundle: &[u8], extra: &[&str]) -> (bool, String) {
        let path = self.dir.join(format!("bundle-{}.json", uuid::Uuid::new_v4().simple()));
        std::fs::write(&path, bundle).unwrap();
        let mut args = vec!["verify", path.to_str().unwrap()];
        args.extend_from_slice(extra);
        let out = self.cli(&args);
        (out.status.success(), String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr))
    }

    /// A new tenant and its manager key, through `tollgate tenant create --json`.
    pub fn create_tenant(&self, name: &str) -> (String, String) {
        let out = self.cli(&["tenant", "create", "--name", name, "--json"]);
        assert!(out.status.success(), "tenant create failed: {}", String::from_utf8_lossy(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
        (v["tenantId"].as_str().unwrap().to_string(), v["key"].as_str().unwrap().to_string())
    }

    /// A new tenant whose key the running server already accepts (keys made by the CLI arrive
    /// through the snapshot refresh).
    pub fn create_tenant_live(&self, name: &str) -> (String, String) {
        let (t, key) = self.create_tenant(name);
        let deadline = Instant::now() + Duration::from_secs(15);
        while self.mgmt("GET", "/v1/keys", Some(&key), None).status != 200 {
            assert!(Instant::now() < deadline, "the server never accepted the new tenant's key");
            std::thread::sleep(Duration::from_millis(50));
        }
        (t, key)
    }

    /// A new key of the tenant, made with the manager key: `(id, key)`.
    pub fn create_key(&self, label: &str) -> (String, String) {
        self.new_key(&self.key, &serde_json::json!({ "label": label }))
    }

    /// A new key made by the key `by` from a `POST /v1/keys` body: `(id, key)`.
    pub fn new_key(&self, by: &str, body: &Value) -> (String, String) {
        let r = self.mgmt("POST", "/v1/keys", Some(by), Some(body));
        assert_eq!(r.status, 201, "{}", r.text());
        let v = r.json();
        (v["id"].as_str().unwrap().to_string(), v["key"].as_str().unwrap().to_string())
    }

    /// A new key of the tenant with its limits set (`PATCH /v1/keys/{id}/limits`): `(id, key)`.
    pub fn key_with_limits(&self, label: &str, limits: &Value) -> (String, String) {
        let (id, key) = self.create_key(label);
        let r = self.mgmt("PATCH", &format!("/v1/keys/{id}/limits"), Some(&self.key), Some(limits));
        assert_eq!(r.status, 200, "{}", r.text());
        (id, key)
    }

    /// `POST /v1/chat/completions` with `key` and a JSON body.
    pub fn chat(&self, key: &str, body: &Value) -> Resp {
        self.post_gw("/v1/chat/completions", key, &serde_json::to_vec(body).unwrap())
    }

    /// `POST /v1/chat/completions` with a body sent exactly as written (invalid ones too).
    pub fn chat_raw(&self, key: &str, body: &str) -> Resp {
        self.post_gw("/v1/chat/completions", key, body.as_bytes())
    }

    /// A chat of one user message to `model`.
    pub fn say(&self, key: &str, model: &str, text: &str) -> Resp {
        self.chat(key, &serde_json::json!({"model": model, "messages": [{"role": "user", "content": text}]}))
    }

    /// `GET` on the management port, asserting 200: the JSON body.
    pub fn get_json(&self, key: &str, path: &str) -> Value {
        let r = self.mgmt("GET", path, Some(key), None);
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        r.json()
    }

    pub fn mgmt(&self, method: &str, path: &str, key: Option<&str>, body: Option<&Value>) -> Resp {
        let auth = key.map(|k| format!("Bearer {k}"));
        let mut h: Vec<(&str, &str)> = vec![("Content-Type", "application/json")];
        if let Some(a) = &auth {
            h.push(("Authorization", a));
        }
        let b = body.map(|b| serde_json::to_vec(b).unwrap()).unwrap_or_default();
        http::request(self.mgmt, method, path, &h, &b)
    }

    pub fn mgmt_raw(&self, method: &str, path: &str, key: &str, body: &[u8]) -> Resp {
        let auth = format!("Bearer {key}");
        http::request(self.mgmt, method, path, &[("Content-Type", "application/json"), ("Authorization", &auth)], body)
    }

    pub fn post_gw(&self, path: &str, key: &str, body: &[u8]) -> Resp {
        let auth = format!("Bearer {key}");
        http::request(self.gw, "POST", path, &[("Content-Type", "application/json"), ("Authorization", &auth)], body)
    }

    pub fn set_provider(&self, key: &str, provider: &str, base_url: &str, api_key: &str) {
        let r = self.mgmt(
            "PUT",
            &format!("/v1/providers/{provider}"),
            Some(key),
            Some(&serde_json::json!({"api_key": api_key, "base_url": base_url})),
        );
        assert_eq!(r.status, 200, "{}", r.text());
    }

    /// Sum of a Prometheus sample family filtered by label fragments, e.g.
    /// `metric("tollgate_tokens_total", &["model=\"gpt-4o-mini\"", "direction=\"prompt\""])`.
    pub fn metric(&self, name: &str, labels: &[&str]) -> f64 {
        let r = http::request(self.metrics, "GET", "/metrics", &[], b"");
        r.text()
            .lines()
            .filter(|l| l.starts_with(name) && (l[name.len()..].starts_with('{') || l[name.len()..].starts_with(' ')))
            .filter(|l| labels.iter().all(|f| l.contains(f)))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .fold(0.0, |a, b| a + b)
    }
}

/// A gateway whose tenant sends `openai` and `anthropic` traffic to a fresh stand-in.
pub fn with_standin(b: &Backend, env: &[(&str, &str)]) -> (Gateway, Standin) {
    let up = Standin::start();
    let g = Gateway::start(b, env);
    g.set_provider(&g.key, "openai", &up.url(), "sk-provider-secret");
    g.set_provider(&g.key, "anthropic", &up.url(), "sk-ant-provider-secret");
    (g, up)
}

/// Drops a database made by [`fresh_postgres`].
pub fn drop_postgres(url: &str) {
    let Some(name) = url.rsplit('/').next().filter(|n| n.starts_with("tollgate_test_")) else { return };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        use sqlx::Executor;
        if let Ok(pool) = sqlx::postgres::PgPoolOptions::new().max_connections(1).connect(PG_ADMIN).await {
            let _ = pool.execute(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))).await;
        }
    });
}

impl Gateway {
    pub fn db_url(&self) -> String {
        match self.env.iter().find(|(k, _)| k == "TOLLGATE_DATABASE_URL") {
            Some((_, url)) => url.clone(),
            None => format!("sqlite://{}", self.dir.join("tollgate.db").display()),
        }
    }

    /// Runs one SQL statement directly against the gateway's database (tamper tests).
    pub fn sql(&self, statement: &str) -> u64 {
        let url = self.db_url();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            sqlx::any::install_default_drivers();
            let pool = sqlx::any::AnyPoolOptions::new().max_connections(1).connect(&url).await.unwrap();
            let done = sqlx::query(sqlx::AssertSqlSafe(statement.to_string())).execute(&pool).await.unwrap();
            pool.close().await;
            done.rows_affected()
        })
    }

    /// Sends a signal to the server process and waits for it to exit.
    pub fn signal_and_wait(&mut self, sig: i32) {
        if let Some(mut c) = self.child.take() {
            unsafe { libc_kill(c.id() as i32, sig) };
            let _ = c.wait();
        }
    }

    /// The newest receipt's `seq` of the key's tenant (0 when none).
    pub fn newest_seq(&self, key: &str) -> u64 {
        let r = self.mgmt("GET", "/v1/receipts?limit=1", Some(key), None);
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["receipts"][0]["seq"].as_u64().unwrap_or(0)
    }

    /// The tenant's receipts of model and tool calls, newest first, every page: the `admin`
    /// receipts every management write adds (docs/log.md §8) left out.
    pub fn call_receipts(&self, key: &str) -> Vec<Value> {
        let mut out = Vec::new();
        let mut cursor = String::new();
        loop {
            let page = self.get_json(key, &format!("/v1/receipts?limit=200{cursor}"));
            let rows = page["receipts"].as_array().expect("a receipt page");
            out.extend(rows.iter().filter(|r| r["kind"] != "admin").cloned());
            match page["nextCursor"].as_u64() {
                Some(next) => cursor = format!("&cursor={next}"),
                None => return out,
            }
        }
    }

    /// How many receipts of model and tool calls the tenant has ([`Gateway::call_receipts`]).
    pub fn call_count(&self, key: &str) -> usize {
        self.call_receipts(key).len()
    }

    /// The receipt named by an answer's `x-tollgate-receipt-id`, read at once: no wait, no
    /// retry (a receipt is committed before its answer's last byte).
    pub fn receipt_of(&self, r: &Resp) -> Value {
        let id = r.header("x-tollgate-receipt-id").expect("a receipt id on every answer to a valid key");
        self.receipt(id)
    }

    /// `GET /v1/receipts/{id}` with the tenant's manager key; it must answer 200.
    pub fn receipt(&self, id: &str) -> Value {
        let got = self.mgmt("GET", &format!("/v1/receipts/{id}"), Some(&self.key), None);
        assert_eq!(got.status, 200, "receipt {id}: {}", got.text());
        got.json()
    }

    /// Holds the database's write lock (SQLite: `BEGIN IMMEDIATE`; PostgreSQL: an exclusive lock
    /// on the chain heads) until the guard drops: receipts cannot be committed meanwhile.
    pub fn hold_write_lock(&self) -> WriteLock {
        let url = self.db_url();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let conn = rt.block_on(async {
            use sqlx::Connection;
            sqlx::any::install_default_drivers();
            let mut conn = sqlx::AnyConnection::connect(&url).await.unwrap();
            let begin = if url.starts_with("sqlite") {
                vec!["BEGIN IMMEDIATE"]
            } else {
                vec!["BEGIN", "LOCK TABLE chain_heads IN ACCESS EXCLUSIVE MODE"]
            };
            for statement in begin {
                sqlx::query(statement).execute(&mut conn).await.unwrap();
            }
            conn
        });
        WriteLock { rt, conn: Some(conn) }
    }

    /// Receipts are written a few ms after the answer: wait (bounded) until the tenant has `n`.
    pub fn wait_receipts(&self, key: &str, n: u64) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let seq = self.newest_seq(key);
            if seq >= n || Instant::now() > deadline {
                return seq;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Metrics are recorded in Pingora's `logging` phase, just after the client has its answer:
    /// wait (bounded) until the value shows up, then return what is there.
    pub fn metric_eventually(&self, name: &str, labels: &[&str], expected: f64) -> f64 {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let v = self.metric(name, labels);
            if (v - expected).abs() < 1e-12 || Instant::now() > deadline {
                return v;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.stop();
        if let Some((_, url)) = self.env.iter().find(|(k, _)| k == "TOLLGATE_DATABASE_URL") {
            drop_postgres(url);
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("--- tollgate logs ({}) ---\n{}", self.dir.display(), self.logs());
        }
    }
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// See [`Gateway::hold_write_lock`].
pub struct WriteLock {
    rt: tokio::runtime::Runtime,
    conn: Option<sqlx::AnyConnection>,
}

impl Drop for WriteLock {
    fn drop(&mut self) {
        if let Some(mut conn) = self.conn.take() {
            self.rt.block_on(async {
                use sqlx::Connection;
                let _ = sqlx::query("ROLLBACK").execute(&mut conn).await;
                let _ = conn.close().await;
            });
        }
    }
}
