//! `tollgate check-config`: the config, prices, policy files and compliance packs, validated.

use std::path::PathBuf;
use std::process::ExitCode;

use super::args::ConfigArg;
use super::setup::{fail, load};

pub(super) fn check(arg: &ConfigArg, packs: &[PathBuf]) -> ExitCode {
    let cfg = match load(arg) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if let Err(e) = crate::providers::pricing::Pricing::from_config(&cfg) {
        return fail(e);
    }
    let dir = &cfg.policies.dir;
    let policies = match crate::checks::policy::files::check_dir(dir) {
        Ok(n) => n,
        Err(e) => return fail(format!("invalid policy file(s):\n{e}")),
    };
    let baseline = match check_packs(packs) {
        Ok(n) => n,
        Err(e) => return fail(format!("invalid compliance pack:\n{e}")),
    };
    let origin = arg.config.as_ref().map(|p| p.display().to_string());
    println!(
        "tollgate: config OK ({}); {policies} policy file(s) OK in {}; {baseline} baseline and {} given \
         compliance pack(s) OK",
        origin.as_deref().unwrap_or("embedded defaults"),
        dir.display(),
        packs.len()
    );
    ExitCode::SUCCESS
}

/// Parses the embedded baseline packs and each pack file; returns the number of baseline packs.
fn check_packs(files: &[PathBuf]) -> Result<usize, String> {
    use crate::compliance::pack::{Pack, Source, BASELINE_FILES};
    for (origin, raw) in BASELINE_FILES {
        Pack::parse(raw, &format!("<embedded {origin}>"), Source::Baseline)?;
    }
    for f in files {
        let raw = std::fs::read_to_string(f).map_err(|e| format!("cannot read {}: {e}", f.display()))?;
        Pack::parse(&raw, &f.display().to_string(), Source::Tenant)?;
    }
    Ok(BASELINE_FILES.len())
}
