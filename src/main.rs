use std::process::ExitCode;

use clap::Parser;

// glibc malloc showed up as ~17% of the gateway's CPU under load (arena locks and
// consolidation across worker threads); mimalloc's per-thread heaps avoid that.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    tollgate::process::allocator::configure();
    let filter = std::env::var("TOLLGATE_LOG").unwrap_or_else(|_| "info".to_string());
    env_logger::Builder::new().parse_filters(&filter).format_timestamp_millis().init();
    if !tollgate::process::allocator::sqlite_on_mimalloc() {
        log::warn!("SQLite keeps the C library's allocator (it was initialised before the gateway could set it)");
    }
    tollgate::cli::run(tollgate::cli::Cli::parse())
}
