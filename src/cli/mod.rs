//! The command line: serve | migrate | tenant create | key create | check-config | verify |
//! signing-key rotate | log audit | log sweep | balance. One file per command; `args` holds what
//! clap parses.

mod args;
mod check_config;
mod log_audit;
mod log_sweep;
mod serve;
mod setup;
mod signing_key;
mod tenants;
mod verify;

use std::process::ExitCode;

pub use args::Cli;
use args::{Command, KeyCommand, LogCommand, SigningKeyCommand, TenantCommand};

pub fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Serve(arg) => serve::serve(&arg),
        Command::Migrate(arg) => serve::migrate(&arg),
        Command::Tenant { command: TenantCommand::Create { name, json, config } } => {
            tenants::create_tenant(&name, json, &config)
        }
        Command::Key { command: KeyCommand::Create { tenant, manager, role, label, json, config } } => {
            let role = role.unwrap_or_else(|| if manager { "manager" } else { "developer" }.to_string());
            tenants::create_key(&tenant, &role, &label, json, &config)
        }
        Command::SigningKey { command: SigningKeyCommand::Rotate(arg) } => signing_key::rotate(&arg),
        Command::Verify { bundle, keys, tsa_ca } => verify::verify_bundle(&bundle, &keys, tsa_ca.as_deref()),
        Command::Log { command: LogCommand::Audit { url, key, state, verifier_keys } } => {
            log_audit::audit(&url, &key, &state, &verifier_keys)
        }
        Command::Log { command: LogCommand::Sweep { as_of, config } } => log_sweep::sweep(as_of.as_deref(), &config),
        Command::Balance { listen, upstream } => match crate::balance::run(&listen, &upstream) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => setup::fail(e),
        },
        Command::CheckConfig { config, packs } => check_config::check(&config, &packs),
    }
}
