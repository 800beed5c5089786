//! `tollgate verify BUNDLE`: an evidence bundle checked offline; exit 0 only if all holds.

use std::process::ExitCode;

use super::setup::fail;

pub(super) fn verify_bundle(path: &std::path::Path, keys: &[String], tsa_ca: Option<&std::path::Path>) -> ExitCode {
    use base64::Engine;
    let mut pinned = Vec::new();
    for k in keys {
        match base64::engine::general_purpose::STANDARD.decode(k.trim()).ok().and_then(|r| <[u8; 32]>::try_from(r).ok())
        {
            Some(raw) => pinned.push(raw),
            None => return fail(format!("--key {k}: expected base64 of a raw 32-byte Ed25519 public key")),
        }
    }
    let roots = match tsa_ca.map(crate::tenant_log::timestamp::Roots::read).transpose() {
        Ok(r) => r,
        Err(e) => return fail(format!("--tsa-ca: {e}")),
    };
    let input: Box<dyn std::io::Read> = if path.as_os_str() == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        match std::fs::File::open(path) {
            Ok(f) => Box::new(f),
            Err(e) => return fail(format!("cannot read {}: {e}", path.display())),
        }
    };
    let report = crate::compliance::verify::verify(input, &pinned, roots.as_ref());
    for line in &report.lines {
        println!("{}  {}", if line.ok { "ok  " } else { "FAIL" }, line.text);
    }
    match &report.first_failure {
        None if report.ok() => {
            println!("verified: every check holds for {}", path.display());
            ExitCode::SUCCESS
        }
        first => {
            println!("NOT verified: first failure: {}", first.as_deref().unwrap_or("see above"));
            ExitCode::FAILURE
        }
    }
}
