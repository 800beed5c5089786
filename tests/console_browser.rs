//! Runs tests/console in a real browser: Playwright (Python) driving Debian's `chromium`
//! headless against the built binary with a provider stand-in (issue 43: sign-in, a key's secret
//! once, a receipt verified in the browser and then not after tampering, a budget request
//! approved, the auditor's refused writes, sign-out and the back button, escaping, cross-site
//! posts, session expiry, field errors, axe-core accessibility on every page at desktop and phone
//! widths, page weight, what a developer key sees; the policy editor's check as the user types
//! and a webhook endpoint's deliveries; single sign-on through a real OpenID provider, with a
//! playground run on the session's own key).
//!
//! Python comes from TOLLGATE_CONSOLE_PYTHON, else the repository's .venv-console (made by
//! scripts/test from tests/console/requirements.txt); the browser from TOLLGATE_CHROMIUM, else
//! /usr/bin/chromium (scripts/lib/setup.sh `ensure_chromium`). Without them the test is skipped,
//! unless TOLLGATE_REQUIRE_BROWSER_TESTS=1 (CI) makes it mandatory.
//! TOLLGATE_CONSOLE_SCREENSHOTS=<dir> saves the screenshots docs/console/ shows.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use support::{with_standin, Backend};

const SETUP: &str = "python3 -m venv .venv-console && .venv-console/bin/pip install -r tests/console/requirements.txt \
                     && apt-get install chromium";

fn python() -> PathBuf {
    std::env::var_os("TOLLGATE_CONSOLE_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv-console/bin/python"))
}

fn chromium() -> PathBuf {
    std::env::var_os("TOLLGATE_CHROMIUM").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"))
}

/// Why the browser tests cannot run here, if they cannot.
fn unusable(py: &Path, browser: &Path) -> Option<String> {
    if !browser.exists() {
        return Some(format!("no browser at {}", browser.display()));
    }
    let out = Command::new(py)
        .args(["-c", "import playwright.sync_api, axe_playwright_python, pytest"])
        .stdin(Stdio::null())
        .output();
    match out {
        Ok(o) if o.status.success() => None,
        Ok(o) => {
            Some(format!("{} cannot import playwright: {}", py.display(), String::from_utf8_lossy(&o.stderr).trim()))
        }
        Err(e) => Some(format!("cannot run {}: {e}", py.display())),
    }
}

/// Python and the browser, or None (skipped, said why) when they cannot run here and
/// TOLLGATE_REQUIRE_BROWSER_TESTS=1 does not make them mandatory.
fn python_and_browser(what: &str) -> Option<(PathBuf, PathBuf)> {
    let (py, browser) = (python(), chromium());
    let Some(reason) = unusable(&py, &browser) else { return Some((py, browser)) };
    if std::env::var("TOLLGATE_REQUIRE_BROWSER_TESTS").is_ok_and(|v| v == "1") {
        panic!("TOLLGATE_REQUIRE_BROWSER_TESTS=1 but {reason}; set up with `{SETUP}`");
    }
    eprintln!("skipping the console's {what}: {reason} (set up with `{SETUP}`)");
    None
}

#[test]
fn console_in_a_browser() {
    let Some((py, browser)) = python_and_browser("browser tests") else { return };
    let (mut g, _standin) = with_standin(&Backend::Sqlite, &[]);
    // The Evidence page verifies a period of more than 10 000 receipts in the browser.
    g.stop();
    seed_receipts(&g, 10_000);
    g.spawn();
    // A second tenant: its receipt is one a developer of the first may not open.
    let (_, other) = g.create_tenant_live("other");
    let status = pytest(&py, &browser, &g, "tests/console/test_console_browser.py")
        .env("TOLLGATE_OTHER_TENANT_KEY", &other)
        .status()
        .expect("run pytest");
    assert!(status.success(), "console browser tests failed ({status}); output above. Server log:\n{}", g.logs());
}

/// Issue 43's live policy check and webhook deliveries (tests/console/test_console_policy_live.py),
/// against a gateway of their own: it may call webhook receivers on 127.0.0.1 and polls its
/// outbox often.
#[test]
fn console_live_checks_in_a_browser() {
    let Some((py, browser)) = python_and_browser("live-check browser tests") else { return };
    let env = [("TOLLGATE_WEBHOOK_ALLOW_PRIVATE_URLS", "true"), ("TOLLGATE_WEBHOOK_POLL_MS", "50")];
    let g = support::Gateway::start(&Backend::Sqlite, &env);
    let status = pytest(&py, &browser, &g, "tests/console/test_console_policy_live.py").status().expect("run pytest");
    assert!(
        status.success(),
        "console live-check browser tests failed ({status}); output above. Server log:\n{}",
        g.logs()
    );
}

/// `python -m pytest <file>` against `g`, with the addresses and key tests/console/conftest.py reads.
fn pytest(py: &Path, browser: &Path, g: &support::Gateway, file: &str) -> Command {
    let mut pytest = Command::new(py);
    pytest
        .args(["-m", "pytest", file, "-q", "-s", "-p", "no:cacheprovider", "-x"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("TOLLGATE_CONSOLE_URL", format!("http://{}", g.mgmt))
        .env("TOLLGATE_GATEWAY_URL", format!("http://{}", g.gw))
        .env("TOLLGATE_MANAGER_KEY", &g.key)
        .env("TOLLGATE_SQLITE", g.dir.join("tollgate.db"))
        .env("TOLLGATE_CHROMIUM", browser);
    if let Some(dir) = std::env::var_os("TOLLGATE_CONSOLE_SCREENSHOTS") {
        pytest.env("TOLLGATE_CONSOLE_SCREENSHOTS", dir);
    }
    pytest
}

/// `n` signed, chained model-call receipts of the test tenant, stamped now, appended through the
/// receipt writer's own batch append with the server's signing key (the server is stopped).
fn seed_receipts(g: &support::Gateway, n: u64) {
    use std::sync::Arc;
    use tollgate::receipts::canonical::Check;
    use tollgate::receipts::signer::Signer;
    use tollgate::receipts::{CacheSide, Draft, Kind, UpstreamStatus};
    let signer = Arc::new(Signer::load_or_create(&g.dir.join("signing.key")).expect("the server's signing key"));
    let url = format!("sqlite://{}", g.dir.join("tollgate.db").display());
    let draft = |i: u64| Draft {
        tenant_id: g.tenant_id.as_str().into(),
        receipt_id: uuid::Uuid::now_v7().to_string(),
        request_id: format!("seed-{i}"),
        actor: "seeded-key".into(),
        provider: "openai".into(),
        model: "gpt-4o-mini".into(),
        prompt_tokens: 100 + i % 50,
        completion_tokens: 40,
        cost_usd: 0.000042,
        checks: vec![Check { name: "policy".into(), result: "allow".into() }],
        upstream_status: UpstreamStatus::Ok,
        ts: tollgate::receipts::receipt_ts(chrono::Utc::now()),
        kind: Kind::ModelCall,
        pack_version: "seed".into(),
        cache: CacheSide::default(),
        events: Vec::new(),
        outbox: Vec::new(),
        subject: None,
        latency_us: None,
        attempts: Vec::new(),
        key_id: "seeded-key".into(),
    };
    tollgate::store::db_runtime().block_on(async {
        let db = tollgate::store::Store::connect(&url).await.unwrap();
        let mut done = 0;
        while done < n {
            let batch: Vec<Draft> = (done..(done + 2000).min(n)).map(draft).collect();
            done += batch.len() as u64;
            tollgate::receipts::rows::append_batch(&db, batch, signer.clone()).await.unwrap();
        }
    });
}

/// The OpenID provider of the SSO test: `node tests/console/oidc/provider.mjs`, ready once it
/// says so; killed on drop.
struct Provider(std::process::Child);

impl Provider {
    fn start(port: u16, redirect: &str, tenant: &str) -> Provider {
        use std::io::BufRead;
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/console/oidc");
        let mut child = Command::new("node")
            .arg("provider.mjs")
            .current_dir(&dir)
            .env("PORT", port.to_string())
            .env("REDIRECT_URI", redirect)
            .env("TENANT", tenant)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start node");
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert!(line.starts_with("ready"), "oidc-provider did not start: {line}");
        // Keep reading what it prints: a closed pipe would end it (EPIPE).
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        Provider(child)
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Why the SSO test cannot run here (no node, or `npm ci` not run in tests/console/oidc).
fn no_provider() -> Option<String> {
    let modules = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/console/oidc/node_modules/oidc-provider");
    match Command::new("node").arg("--version").output() {
        Ok(o) if o.status.success() && modules.exists() => None,
        Ok(o) if o.status.success() => Some(format!("{} is missing (npm ci in tests/console/oidc)", modules.display())),
        _ => Some("no node".into()),
    }
}

#[test]
fn console_single_sign_on_in_a_browser() {
    let (py, browser) = (python(), chromium());
    if let Some(reason) = unusable(&py, &browser).or_else(no_provider) {
        if std::env::var("TOLLGATE_REQUIRE_BROWSER_TESTS").is_ok_and(|v| v == "1") {
            panic!("TOLLGATE_REQUIRE_BROWSER_TESTS=1 but {reason}; set up with `{SETUP}` and `npm ci` in tests/console/oidc");
        }
        eprintln!("skipping the console's SSO test: {reason}");
        return;
    }
    let idp = support::free_port();
    let conf = std::env::temp_dir().join(format!("tollgate-console-sso-{}.yaml", uuid::Uuid::new_v4().simple()));
    let yaml = format!(
        "console:\n  oidc:\n    issuer: \"http://localhost:{idp}\"\n    client_id: tollgate-console\n    \
         client_secret: console-secret\n    claims: {{ tenant: tenant, role: role }}\n"
    );
    std::fs::write(&conf, yaml).unwrap();
    // The stand-in provider answers the playground's runs.
    let (g, _standin) = with_standin(&Backend::Sqlite, &[("TOLLGATE_CONFIG", conf.to_str().unwrap())]);
    let _provider = Provider::start(idp, &format!("http://{}/console/auth/callback", g.mgmt), &g.tenant_id);
    let mut pytest = Command::new(&py);
    pytest
        .args(["-m", "pytest", "tests/console/test_console_oidc.py", "-q", "-p", "no:cacheprovider", "-x"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("TOLLGATE_CONSOLE_URL", format!("http://{}", g.mgmt))
        .env("TOLLGATE_GATEWAY_URL", format!("http://{}", g.gw))
        .env("TOLLGATE_MANAGER_KEY", &g.key)
        .env("TOLLGATE_SQLITE", g.dir.join("tollgate.db"))
        .env("TOLLGATE_IDP_URL", format!("http://localhost:{idp}"))
        .env("TOLLGATE_CHROMIUM", &browser);
    if let Some(dir) = std::env::var_os("TOLLGATE_CONSOLE_SCREENSHOTS") {
        pytest.env("TOLLGATE_CONSOLE_SCREENSHOTS", dir);
    }
    let status = pytest.status().expect("run pytest");
    let _ = std::fs::remove_file(&conf);
    assert!(status.success(), "console SSO tests failed ({status}); output above. Server log:\n{}", g.logs());
}
