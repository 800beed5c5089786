use std::process::ExitCode;

use clap::Parser;

// glibc malloc showed up as ~17% of the gateway's CPU under load (arena locks and
// consolidation across worker threads); mimalloc's per-thread heaps avoid that.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The allocator's options, set before `main` and before the first allocation: mimalloc reserves
/// its first arena at the first allocation, with the options it has then (`arena_eager_commit`
/// set later in `main` reached no arena: RSS did not move). Linux runs `.init_array` entries
/// before `main`.
#[cfg(target_os = "linux")]
#[used]
#[unsafe(link_section = ".init_array")]
static ALLOCATOR_OPTIONS: extern "C" fn() = {
    extern "C" fn set() {
        tollgate::process::allocator::set_options();
    }
    set
};

fn main() -> ExitCode {
    tollgate::process::allocator::configure();
    let filter = std::env::var("TOLLGATE_LOG").unwrap_or_else(|_| "info".to_string());
    env_logger::Builder::new().parse_filters(&filter).format_timestamp_millis().init();
    if !tollgate::process::allocator::sqlite_on_mimalloc() {
        log::warn!("SQLite keeps the C library's allocator (it was initialised before the gateway could set it)");
    }
    tollgate::cli::run(tollgate::cli::Cli::parse())
}
