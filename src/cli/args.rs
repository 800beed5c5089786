//! The command line's arguments (clap): one variant per command.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "tollgate", version, about = "AI governance and observability gateway")]
pub struct Cli {
    #[command(subcommand)]
    pub(super) command: Command,
}

#[derive(Args, Debug, Clone)]
pub(super) struct ConfigArg {
    /// Config file (YAML). Without it the embedded defaults are used.
    #[arg(long, env = "TOLLGATE_CONFIG")]
    pub(super) config: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub(super) enum Command {
    /// Run the gateway, management API and metrics listeners.
    Serve(ConfigArg),
    /// Apply pending database migrations and exit.
    Migrate(ConfigArg),
    /// Tenant administration.
    Tenant {
        #[command(subcommand)]
        command: TenantCommand,
    },
    /// Virtual key administration.
    Key {
        #[command(subcommand)]
        command: KeyCommand,
    },
    /// Validate the configuration and exit (errors name file, line and field).
    CheckConfig {
        #[command(flatten)]
        config: ConfigArg,
        /// A compliance pack YAML to validate as a tenant pack (repeatable), before a
        /// `PUT /v1/compliance/packs/{framework}`.
        #[arg(long = "pack")]
        packs: Vec<PathBuf>,
    },
    /// Verify an evidence bundle offline: signatures, hashes, chain, Merkle root, signed tree
    /// head. Exit status 0 only if every check holds.
    Verify {
        /// The bundle (GET /v1/compliance/evidence-bundle); `-` reads standard input.
        bundle: PathBuf,
        /// Trusted Ed25519 public key (base64 of the raw 32 bytes), repeatable. Without it the
        /// keys listed in the bundle itself are used.
        #[arg(long = "key")]
        keys: Vec<String>,
        /// The RFC 3161 TSA's root certificate(s), PEM: the log's timestamp (docs/log.md §6) is
        /// checked to be signed by a TSA certificate chaining to them. Without it the timestamp's
        /// imprint and genTime are checked and its signature is reported unchecked.
        #[arg(long = "tsa-ca")]
        tsa_ca: Option<PathBuf>,
    },
    /// Receipt signing-key administration.
    SigningKey {
        #[command(subcommand)]
        command: SigningKeyCommand,
    },
    /// The tenant log (docs/log.md).
    Log {
        #[command(subcommand)]
        command: LogCommand,
    },
    /// A round-robin front for several gateway instances on this machine (a local cluster,
    /// scripts/cluster). Answers name the instance in `x-tollgate-upstream`.
    Balance {
        /// Where the front listens.
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: String,
        /// The instances' gateway addresses, comma-separated (HOST:PORT,HOST:PORT,...).
        #[arg(long, value_delimiter = ',', required = true)]
        upstream: Vec<String>,
    },
}

#[derive(Subcommand, Debug)]
pub(super) enum LogCommand {
    /// Audit a tenant's log as an outsider (docs/log.md §9): fetch the checkpoint, check its
    /// signature, prove it consistent with the checkpoint saved in --state, check every new
    /// leaf's entry against the tile hashes, save the new checkpoint. Exit 0 when all holds;
    /// 1 on a bad signature, a shrunk, forked or rewritten log, or a leaf that does not match.
    Audit {
        /// The management API's base URL, e.g. http://127.0.0.1:8081.
        #[arg(long)]
        url: String,
        /// A key of the tenant (an auditor key is enough).
        #[arg(long, env = "TOLLGATE_AUDIT_KEY", hide_env_values = true)]
        key: String,
        /// Where the last checkpoint seen and the trusted verifier keys are kept.
        #[arg(long)]
        state: PathBuf,
        /// A trusted verifier key (signed-note form, `<name>+<hash>+<base64>`), repeatable.
        /// Without it: the keys saved in --state, else the log's own, trusted on first use.
        #[arg(long = "verifier-key")]
        verifier_keys: Vec<String>,
    },
    /// Apply every tenant's retention now (docs/log.md §7), as the server does daily: delete the
    /// contents of receipts older than the retention that no legal hold covers, keeping their
    /// seq, receipt id and thisHash (the log's leaves). Idempotent.
    Sweep {
        /// Sweep as if it were this instant (RFC 3339), e.g. to see what a later sweep prunes;
        /// default now.
        #[arg(long)]
        as_of: Option<String>,
        #[command(flatten)]
        config: ConfigArg,
    },
}

#[derive(Subcommand, Debug)]
pub(super) enum SigningKeyCommand {
    /// Replace the signing key. The old key stays in the registry, retired, so the receipts it
    /// signed keep verifying. A running server signs with the new key after its next start.
    Rotate(ConfigArg),
}

#[derive(Subcommand, Debug)]
pub(super) enum TenantCommand {
    /// Create a tenant and print its id and a manager key (shown once).
    Create {
        #[arg(long)]
        name: String,
        /// Print one JSON line: {"tenantId", "keyId", "key"}.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        config: ConfigArg,
    },
}

#[derive(Subcommand, Debug)]
pub(super) enum KeyCommand {
    /// Create a key for a tenant and print it (shown once).
    Create {
        #[arg(long)]
        tenant: String,
        /// Give the key manager rights (the same as `--role manager`).
        #[arg(long, conflicts_with = "role")]
        manager: bool,
        /// The key's role: `developer` (the default) calls the gateway and reads; `manager` also
        /// changes the tenant's settings; `auditor` only reads evidence (receipts, the log,
        /// compliance, analytics, audit events) and calls nothing (docs/log.md §8).
        #[arg(long, value_parser = ["manager", "developer", "auditor"])]
        role: Option<String>,
        #[arg(long, default_value = "")]
        label: String,
        /// Print one JSON line: {"tenantId", "keyId", "key"}.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        config: ConfigArg,
    },
}
