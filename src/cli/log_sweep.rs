//! `tollgate log sweep [--as-of RFC3339]`: every tenant's retention applied now (docs/log.md §7),
//! the same sweep the server runs daily.

use std::process::ExitCode;

use super::args::ConfigArg;
use super::setup::{block_on, fail, load, open};
use crate::tenant_log::retention;

pub(super) fn sweep(as_of: Option<&str>, arg: &ConfigArg) -> ExitCode {
    let as_of = match as_of.map(chrono::DateTime::parse_from_rfc3339) {
        None => chrono::Utc::now(),
        Some(Ok(t)) => t.with_timezone(&chrono::Utc),
        Some(Err(_)) => return fail("--as-of must be an RFC 3339 instant such as 2027-01-31T00:00:00Z"),
    };
    let result = load(arg)
        .and_then(|cfg| Ok((open(&cfg)?, cfg)))
        .and_then(|(store, cfg)| block_on(retention::sweep(&store, cfg.log.retention_floor_days, as_of)).map_err(fail));
    match result {
        Ok(swept) => {
            for s in &swept {
                println!(
                    "tenant {}: retention {} days, pruned {} receipts older than {} UTC",
                    s.tenant, s.days, s.pruned, s.cutoff
                );
            }
            let total: u64 = swept.iter().map(|s| s.pruned).sum();
            println!("swept {} tenants with a retention: {total} receipts pruned", swept.len());
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}
