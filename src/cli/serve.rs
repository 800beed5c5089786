//! `tollgate serve` and `tollgate migrate`.

use std::process::ExitCode;

use super::args::ConfigArg;
use super::setup::{fail, load, open};

/// Runs the gateway, management API and metrics listeners until shutdown.
pub(super) fn serve(arg: &ConfigArg) -> ExitCode {
    let cfg = match load(arg) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let prepared = match crate::server::prepare(cfg) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    let app = prepared.app.clone();
    let server = match crate::server::build(prepared) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let c = &app.config.listen;
    log::info!("tollgate listening: gateway {}, management {}, metrics {}", c.gateway, c.management, c.metrics);
    crate::server::run(server, app)
}

pub(super) fn migrate(arg: &ConfigArg) -> ExitCode {
    match load(arg).and_then(|cfg| open(&cfg)) {
        Ok(_) => {
            eprintln!("tollgate: migrations applied");
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}
