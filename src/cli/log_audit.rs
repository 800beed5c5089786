//! `tollgate log audit`: the auditor's monitor of a tenant's log over the management API
//! (`tenant_log::audit`). Exit 0 when every check holds, 1 at the first failure.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use super::setup::fail;
use crate::tenant_log::audit::{self, Fetch};

/// The management API over blocking HTTP, with the auditor's key.
struct Api {
    client: reqwest::blocking::Client,
    base: String,
    key: String,
}

impl Fetch for Api {
    fn get(&self, path: &str) -> Result<(u16, Vec<u8>), String> {
        let r = self
            .client
            .get(format!("{}{path}", self.base))
            .bearer_auth(&self.key)
            .send()
            .map_err(|e| format!("GET {path}: {e}"))?;
        let status = r.status().as_u16();
        Ok((status, r.bytes().map_err(|e| format!("GET {path}: {e}"))?.to_vec()))
    }
}

pub(super) fn audit(url: &str, key: &str, state: &Path, verifier_keys: &[String]) -> ExitCode {
    let https = url.starts_with("https://");
    let client = match crate::upstream::blocking_client(Duration::from_secs(30), https) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    let api = Api { client, base: url.trim_end_matches('/').to_string(), key: key.to_string() };
    match audit::audit(&api, state, verifier_keys) {
        Ok(a) => {
            let since = a.since.map_or("first audit".to_string(), |s| format!("consistent with size {s}"));
            println!("log audit: ok: {} at size {} ({since}; every new leaf matches the tiles)", a.origin, a.size);
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("log audit: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}
