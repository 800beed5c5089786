//! Runs tests/sdk: the official OpenAI and Anthropic Python SDKs against the built binary (on all
//! four providers' stand-ins; Bedrock's SigV4 recomputed by botocore, Vertex's JWT grant verified), and
//! the management API's `/openapi.json` validated (openapi-spec-validator) and fuzzed
//! (schemathesis, about a minute: `test_openapi.py`).
//! Python is found through TOLLGATE_PYTHON, else the repository's .venv. Without a usable
//! interpreter the suite is skipped, unless TOLLGATE_REQUIRE_SDK_TESTS=1 (CI) makes it mandatory.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const SETUP: &str = "python3 -m venv .venv && .venv/bin/pip install -r tests/sdk/requirements.txt";

/// What tests/sdk imports (tests/sdk/requirements.txt); scripts/test checks the same list.
const MODULES: &str =
    "openai, anthropic, pytest, openapi_spec_validator, schemathesis, botocore, jwt, yaml, mcp, standardwebhooks";

fn python() -> PathBuf {
    std::env::var_os("TOLLGATE_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python"))
}

/// Why `py` cannot run the suite, if it cannot.
fn unusable(py: &Path) -> Option<String> {
    let out = Command::new(py).args(["-c", &format!("import {MODULES}")]).stdin(Stdio::null()).output();
    match out {
        Ok(o) if o.status.success() => None,
        Ok(o) => {
            let err = String::from_utf8_lossy(&o.stderr);
            let last = err.trim().lines().last().unwrap_or("");
            Some(format!("{} cannot import {MODULES}: {last}", py.display()))
        }
        Err(e) => Some(format!("cannot run {}: {e}", py.display())),
    }
}

#[test]
fn python_sdk_suite() {
    let py = python();
    if let Some(reason) = unusable(&py) {
        if std::env::var("TOLLGATE_REQUIRE_SDK_TESTS").is_ok_and(|v| v == "1") {
            panic!("TOLLGATE_REQUIRE_SDK_TESTS=1 but {reason}; set up with `{SETUP}` or set TOLLGATE_PYTHON");
        }
        eprintln!("skipping python SDK tests: {reason} (set up with `{SETUP}`)");
        return;
    }
    // The fuzzer runs on PostgreSQL when there is one: it is the stricter store (no NUL in text).
    let fuzz_db = support::fresh_postgres();
    let mut pytest = Command::new(&py);
    pytest
        .args(["-m", "pytest", "tests/sdk", "-q", "-p", "no:cacheprovider"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("TOLLGATE_BIN", env!("CARGO_BIN_EXE_tollgate"));
    if let Some(url) = &fuzz_db {
        pytest.env("TOLLGATE_FUZZ_DATABASE_URL", url);
    }
    let status = pytest.status().expect("run pytest");
    if let Some(url) = &fuzz_db {
        support::drop_postgres(url);
    }
    assert!(status.success(), "python SDK suite failed ({status}); output above");
}
