//! The command line: serve | migrate | tenant create | key create | check-config | verify |
//! signing-key rotate | balance.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::config::Config;
use crate::store::{self, keys::NewKey, Store, StoreError};

#[derive(Parser, Debug)]
#[command(name = "tollgate", version, about = "AI governance and observability gateway")]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Debug, Clone)]
struct ConfigArg {
    /// Config file (YAML). Without it the embedded defaults are used.
    #[arg(long, env = "TOLLGATE_CONFIG")]
    config: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
enum Command {
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
    },
    /// Receipt signing-key administration.
    SigningKey {
        #[command(subcommand)]
        command: SigningKeyCommand,
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
enum SigningKeyCommand {
    /// Replace the signing key. The old key stays in the registry, retired, so the receipts it
    /// signed keep verifying. A running server signs with the new key after its next start.
    Rotate(ConfigArg),
}

#[derive(Subcommand, Debug)]
enum TenantCommand {
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
enum KeyCommand {
    /// Create a key for a tenant and print it (shown once).
    Create {
        #[arg(long)]
        tenant: String,
        /// Give the key manager rights.
        #[arg(long)]
        manager: bool,
        #[arg(long, default_value = "")]
        label: String,
        /// Print one JSON line: {"tenantId", "keyId", "key"}.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        config: ConfigArg,
    },
}

fn fail(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("tollgate: {msg}");
    ExitCode::FAILURE
}

fn load(arg: &ConfigArg) -> Result<Config, ExitCode> {
    Config::load(arg.config.as_deref()).map_err(fail)
}

/// Opens the database and applies pending migrations (every CLI command that touches it does).
fn open(cfg: &Config) -> Result<Store, ExitCode> {
    let rt = store::db_runtime();
    let store = rt.block_on(Store::connect(&cfg.database_url())).map_err(fail)?;
    rt.block_on(store.migrate()).map_err(fail)?;
    Ok(store)
}

/// Creates a key and returns (secret, key id).
pub async fn create_key(
    store: &Store,
    tenant_id: &str,
    manager: bool,
    label: &str,
) -> Result<(String, String), StoreError> {
    let secret = crate::keys::generate();
    let rec = store::keys::insert(
        store,
        NewKey {
            tenant_id: tenant_id.to_string(),
            key_hash: secret.hash_hex,
            key_hint: secret.hint,
            label: label.to_string(),
            key_class: "interactive".into(),
            role: if manager { "manager" } else { "developer" }.into(),
            team_id: None,
            budget_usd: None,
        },
    )
    .await?;
    Ok((secret.secret, rec.id))
}

/// Running servers on the same PostgreSQL database take the new tenant or key in at once
/// (`crate::notices`); otherwise at their next refresh. Not sending is no failure.
async fn notify_servers(store: &Store) {
    if store.backend() == store::Backend::Postgres {
        if let Err(e) = store::notices::send(store, "cli").await {
            eprintln!("tollgate: running servers take the change in at their next refresh ({e})");
        }
    }
}

fn print_key(json: bool, tenant_id: &str, key_id: &str, key: &str) {
    if json {
        println!("{}", serde_json::json!({ "tenantId": tenant_id, "keyId": key_id, "key": key }));
    } else {
        println!("tenant: {tenant_id}\nkey id: {key_id}\nkey:    {key}\n(the key is shown once; store it now)");
    }
}

pub fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Serve(arg) => {
            let cfg = match load(&arg) {
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
        Command::Migrate(arg) => {
            let cfg = match load(&arg) {
                Ok(c) => c,
                Err(code) => return code,
            };
            match open(&cfg) {
                Ok(_) => {
                    eprintln!("tollgate: migrations applied");
                    ExitCode::SUCCESS
                }
                Err(code) => code,
            }
        }
        Command::Tenant { command: TenantCommand::Create { name, json, config } } => {
            let name = name.trim().to_string();
            if name.is_empty() {
                return fail("--name must not be empty");
            }
            let result = load(&config).and_then(|cfg| open(&cfg)).and_then(|store| {
                store::db_runtime().block_on(async {
                    if store::tenants::by_name(&store, &name).await.map_err(fail)?.is_some() {
                        return Err(fail(format!("a tenant named `{name}` already exists")));
                    }
                    let t = store::tenants::create(&store, &name).await.map_err(fail)?;
                    let (key, key_id) = create_key(&store, &t.id, true, "tenant manager key").await.map_err(fail)?;
                    notify_servers(&store).await;
                    Ok((t.id, key_id, key))
                })
            });
            match result {
                Ok((t, k, key)) => {
                    print_key(json, &t, &k, &key);
                    ExitCode::SUCCESS
                }
                Err(code) => code,
            }
        }
        Command::Key { command: KeyCommand::Create { tenant, manager, label, json, config } } => {
            let result = load(&config).and_then(|cfg| open(&cfg)).and_then(|store| {
                store::db_runtime().block_on(async {
                    if !store::tenants::exists(&store, &tenant).await.map_err(fail)? {
                        return Err(fail(format!("no tenant with id `{tenant}`")));
                    }
                    let made = create_key(&store, &tenant, manager, &label).await.map_err(fail)?;
                    notify_servers(&store).await;
                    Ok(made)
                })
            });
            match result {
                Ok((key, key_id)) => {
                    print_key(json, &tenant, &key_id, &key);
                    ExitCode::SUCCESS
                }
                Err(code) => code,
            }
        }
        Command::SigningKey { command: SigningKeyCommand::Rotate(arg) } => {
            let result = load(&arg).and_then(|cfg| Ok((open(&cfg)?, cfg))).and_then(|(store, cfg)| {
                use crate::receipts::signer::{self, Signer};
                let (old, new) = Signer::rotate_file(&cfg.signing_key_path()).map_err(fail)?;
                store::db_runtime().block_on(async {
                    signer::register(&store, &old).await.map_err(fail)?;
                    signer::retire(&store, &old.key_id).await.map_err(fail)?;
                    signer::register(&store, &new).await.map_err(fail)
                })?;
                Ok((old.key_id.clone(), new.key_id.clone()))
            });
            match result {
                Ok((old, new)) => {
                    println!(
                        "retired signing key {old}; active signing key {new} (restart `tollgate serve` to use it)"
                    );
                    ExitCode::SUCCESS
                }
                Err(code) => code,
            }
        }
        Command::Verify { bundle, keys } => verify_bundle(&bundle, &keys),
        Command::Balance { listen, upstream } => match crate::balance::run(&listen, &upstream) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(e),
        },
        Command::CheckConfig { config: arg, packs } => match load(&arg) {
            Ok(cfg) => {
                if let Err(e) = crate::providers::pricing::Pricing::from_config(&cfg) {
                    return fail(e);
                }
                let dir = &cfg.policies.dir;
                let policies = match crate::checks::policy::files::check_dir(dir) {
                    Ok(n) => n,
                    Err(e) => return fail(format!("invalid policy file(s):\n{e}")),
                };
                let baseline = match check_packs(&packs) {
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
            Err(code) => code,
        },
    }
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

fn verify_bundle(path: &std::path::Path, keys: &[String]) -> ExitCode {
    use base64::Engine;
    let mut pinned = Vec::new();
    for k in keys {
        match base64::engine::general_purpose::STANDARD.decode(k.trim()).ok().and_then(|r| <[u8; 32]>::try_from(r).ok())
        {
            Some(raw) => pinned.push(raw),
            None => return fail(format!("--key {k}: expected base64 of a raw 32-byte Ed25519 public key")),
        }
    }
    let input: Box<dyn std::io::Read> = if path.as_os_str() == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        match std::fs::File::open(path) {
            Ok(f) => Box::new(f),
            Err(e) => return fail(format!("cannot read {}: {e}", path.display())),
        }
    };
    let report = crate::compliance::verify::verify(input, &pinned);
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
