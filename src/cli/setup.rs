//! What every command shares: reading the config, opening the database, reporting failure.

use std::process::ExitCode;

use super::args::ConfigArg;
use crate::config::Config;
use crate::store::{self, Store};

pub(super) fn fail(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("tollgate: {msg}");
    ExitCode::FAILURE
}

pub(super) fn load(arg: &ConfigArg) -> Result<Config, ExitCode> {
    Config::load(arg.config.as_deref(), &crate::providers::VOCABULARY).map_err(fail)
}

/// Opens the database and applies pending migrations (every CLI command that touches it does).
pub(super) fn open(cfg: &Config) -> Result<Store, ExitCode> {
    let rt = store::db_runtime();
    let store = rt.block_on(Store::connect_with(&cfg.database_url(), cfg.receipts.durability)).map_err(fail)?;
    rt.block_on(store.migrate()).map_err(fail)?;
    Ok(store)
}

/// Running servers on the same PostgreSQL database take the new tenant or key in at once
/// (`crate::notices`); otherwise at their next refresh. Not sending is no failure.
pub(super) async fn notify_servers(store: &Store) {
    if store.backend() == store::Backend::Postgres {
        if let Err(e) = store::notices::send(store, "cli").await {
            eprintln!("tollgate: running servers take the change in at their next refresh ({e})");
        }
    }
}

/// Runs `work` on the database runtime; the CLI's commands are synchronous.
pub(super) fn block_on<T>(work: impl std::future::Future<Output = T>) -> T {
    store::db_runtime().block_on(work)
}
