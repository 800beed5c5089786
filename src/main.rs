use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let filter = std::env::var("TOLLGATE_LOG").unwrap_or_else(|_| "info".to_string());
    env_logger::Builder::new().parse_filters(&filter).format_timestamp_millis().init();
    tollgate::cli::run(tollgate::cli::Cli::parse())
}
