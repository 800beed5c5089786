//! Configuration: YAML (embedded defaults or a file) → typed, validated [`Config`], then
//! `TOLLGATE_*` environment overrides.
//!
//! Validation happens while deserializing (newtypes that parse themselves, `deny_unknown_fields`),
//! so every error carries the file, line, column and dotted field path of the offending value.
//! Config names no provider: which names `providers:` and `routes:` may use, and their defaults,
//! come from the [`Vocabulary`] the providers layer passes in (`vocabulary.rs`).

pub mod console;
mod env;
mod load;
pub mod otlp;
pub mod routes;
pub mod tenant_log;
pub mod tool_server;
mod types;
mod validate;
mod vocabulary;

use std::collections::BTreeMap;
use std::path::PathBuf;

pub use crate::store::Durability;
pub use routes::{Breaker, Retries, RouteSpec, Routes, Strategy, TargetSpec};
use serde::Deserialize;
pub use types::{Glob, ListenAddr};
pub use vocabulary::{ProviderDefaults, ProviderKey, ProviderSpec, ProvidersSection, RouteRule, Vocabulary};

/// The documented defaults, embedded so `tollgate serve` runs with no file at all.
pub const DEFAULT_YAML: &str = include_str!("../../conf/tollgate.yaml");
/// The shipped pricing table.
pub const PRICING_YAML: &str = include_str!("../../conf/pricing.yaml");

/// Every section takes its type's default when the file leaves it out, except `providers` and
/// `routes`, whose defaults come from the providers' [`Vocabulary`] (see [`Config::parse`]).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub server: ServerSection,
    #[serde(default)]
    pub listen: ListenSection,
    #[serde(default)]
    pub storage: StorageSection,
    #[serde(default)]
    pub limits: LimitsSection,
    #[serde(default)]
    pub upstream: UpstreamSection,
    #[serde(default = "vocabulary::scoped_sections")]
    pub providers: ProvidersSection,
    #[serde(default = "routes::scoped")]
    pub routes: Routes,
    #[serde(default)]
    pub pricing: BTreeMap<String, Price>,
    #[serde(default)]
    pub policies: PoliciesSection,
    #[serde(default)]
    pub compliance: ComplianceSection,
    #[serde(default)]
    pub receipts: ReceiptsSection,
    #[serde(default)]
    pub telemetry: TelemetrySection,
    /// MCP tool servers listed in config, each for one tenant (beside those registered with
    /// `POST /v1/tool-servers`).
    #[serde(default)]
    pub tool_servers: Vec<ToolServerConfig>,
    #[serde(default)]
    pub webhooks: WebhooksSection,
    #[serde(default)]
    pub billing: BillingSection,
    #[serde(default)]
    pub cluster: ClusterSection,
    #[serde(default)]
    pub log: tenant_log::LogSection,
    #[serde(default)]
    pub console: console::ConsoleSection,
}

/// What the checks that keep their counters in Redis do while it does not answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnRedisDown {
    /// Fall back to this process's own counters (limits hold per process, not across them).
    Open,
    /// Refuse requests that have a rate limit or a budget with 503 until Redis is back.
    Closed,
}

impl OnRedisDown {
    pub fn as_str(self) -> &'static str {
        match self {
            OnRedisDown::Open => "open",
            OnRedisDown::Closed => "closed",
        }
    }
}

/// Several gateway processes sharing rate limits, budgets and the cache (`cluster`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterSection {
    /// `redis://[user:password@]host:port[/db]` (`TOLLGATE_REDIS_URL`). Empty: everything stays
    /// in this process.
    pub redis_url: String,
    /// Prefix of every Redis key (`TOLLGATE_REDIS_PREFIX`): deployments sharing one Redis need
    /// their own.
    pub redis_prefix: String,
    /// `open` or `closed` (`TOLLGATE_REDIS_ON_DOWN`).
    pub on_redis_down: OnRedisDown,
    /// The longest a request waits on Redis before the store counts as down.
    pub redis_timeout_ms: u64,
    /// Cached answers in Redis too, shared by every process (`TOLLGATE_REDIS_SHARED_CACHE`).
    pub shared_cache: bool,
    /// How long a budget reservation of a request in flight is held at most: the holds of a
    /// process that died are released after this.
    pub reservation_ttl_seconds: u64,
}

impl Default for ClusterSection {
    fn default() -> Self {
        ClusterSection {
            redis_url: String::new(),
            redis_prefix: "tollgate:".into(),
            on_redis_down: OnRedisDown::Open,
            redis_timeout_ms: 100,
            shared_cache: false,
            reservation_ttl_seconds: 900,
        }
    }
}

/// A tool server of one tenant, from config. Its header values are secrets: they stay in the
/// process and go only to the server, never into an answer or a log.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolServerConfig {
    /// The tenant's id (the tenant must exist; `tollgate bootstrap` prints it).
    pub tenant: String,
    pub name: String,
    pub url: String,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

/// When a request's receipt is committed relative to its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommitMode {
    /// The last byte of an answer leaves only after its receipt is committed (docs/API.md).
    BeforeAnswer,
    /// The answer leaves first and the receipt follows: less latency, but a crash or a database
    /// outage can lose receipts of answered requests.
    AfterAnswer,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReceiptsSection {
    pub commit: CommitMode,
    /// How long a batch is retried before its waiting requests are answered 503.
    pub commit_timeout_ms: u64,
    /// SQLite: how often the WAL is checkpointed in the background (0 = never: SQLite's own
    /// automatic checkpoint on other connections only).
    pub wal_checkpoint_ms: u64,
    /// SQLite: commit receipts to an append-only journal beside the database and write them
    /// to the database in large batches off the request path (`store::journal`).
    pub journal: bool,
    /// With the journal: how often its records are written to the database (readers of receipts
    /// never wait for the period: they have them written at once). 100 ms (20 until session 32):
    /// fewer, larger transactions cost the applier ~3 µs less a receipt flat out, and the single
    /// client's p99 was no worse (docs/decisions.md, "The receipt journal").
    pub journal_apply_ms: u64,
    /// When a commit counts: `page-cache` (written to the OS; a process crash cannot lose it, a
    /// power loss can) or `fsync` (flushed to stable storage first, one flush per batch).
    pub durability: Durability,
}

impl Default for ReceiptsSection {
    fn default() -> Self {
        ReceiptsSection {
            commit: CommitMode::BeforeAnswer,
            commit_timeout_ms: 5000,
            wal_checkpoint_ms: 5,
            journal: true,
            journal_apply_ms: 100,
            durability: Durability::PageCache,
        }
    }
}

/// OpenTelemetry traces (`telemetry`): one span per gateway request, exported over OTLP/HTTP.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetrySection {
    /// The collector's OTLP/HTTP base URL (`/v1/traces` is appended unless the path already ends
    /// with it). Empty: tracing is off and the request path only tests an `Option`.
    pub otlp_endpoint: String,
    /// The `service.name` resource attribute.
    pub service_name: String,
    /// Put the prompt (the request's `messages` and `system`, as sent upstream, after redaction)
    /// on the span as `gen_ai.input.messages` / `gen_ai.system_instructions`. Prompts are
    /// often personal data: off unless an operator turns it on.
    pub capture_prompts: bool,
}

impl Default for TelemetrySection {
    fn default() -> Self {
        TelemetrySection { otlp_endpoint: String::new(), service_name: "tollgate".into(), capture_prompts: false }
    }
}

/// Outbound webhooks (`webhooks`): how the background sender retries, and where it may send.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebhooksSection {
    /// The delay after the first failed attempt; each further failure doubles it (with jitter:
    /// each delay is 75-100% of its nominal value), up to `retry_max_ms`.
    pub retry_base_ms: u64,
    pub retry_max_ms: u64,
    /// Attempts per delivery, the first included; then it is given up (`status = failed`).
    pub max_attempts: u32,
    /// How often the sender looks for due deliveries when it found none.
    pub poll_ms: u64,
    /// One attempt's limit (connect, send, answer header and body).
    pub timeout_ms: u64,
    /// Allow endpoint URLs on loopback, private, link-local and other non-public addresses. A
    /// webhook URL is a request the server makes on a tenant's behalf: off by default.
    pub allow_private_urls: bool,
    /// `budget.threshold_reached` fires when spend crosses this percentage of a budget.
    pub budget_threshold_percent: u32,
}

impl Default for WebhooksSection {
    fn default() -> Self {
        WebhooksSection {
            retry_base_ms: 10_000,
            retry_max_ms: 3_600_000,
            max_attempts: 10,
            poll_ms: 1000,
            timeout_ms: 10_000,
            allow_private_urls: false,
            budget_threshold_percent: 80,
        }
    }
}

/// Billing checkout (`billing`) through Stripe. The secret key comes only from the environment
/// (`TOLLGATE_STRIPE_SECRET_KEY`), never from a file that might be shared or committed.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BillingSection {
    pub stripe_price_id: String,
    pub stripe_api_base: String,
    #[serde(skip)]
    pub stripe_secret_key: Option<crate::secrets::Secret>,
}

impl Default for BillingSection {
    fn default() -> Self {
        BillingSection {
            stripe_price_id: String::new(),
            stripe_api_base: "https://api.stripe.com".into(),
            stripe_secret_key: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ComplianceSection {
    /// Stamp each receipt with the tenant's compliance pack-set version (`receiptPackVersion`).
    pub stamp_pack_version: bool,
}

impl Default for ComplianceSection {
    fn default() -> Self {
        ComplianceSection { stamp_pack_version: true }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerSection {
    pub threads: usize,
    pub grace_period_seconds: u64,
    pub graceful_shutdown_timeout_seconds: u64,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ListenSection {
    pub gateway: ListenAddr,
    pub management: ListenAddr,
    pub metrics: ListenAddr,
    /// PEM certificate chain and key: when both are set, gateway and management speak TLS.
    pub tls_cert_file: String,
    pub tls_key_file: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageSection {
    pub data_dir: PathBuf,
    pub database_url: String,
    pub master_key_file: String,
    pub signing_key_file: String,
    pub snapshot_refresh_ms: u64,
    /// How often the chain auditor walks blocks not yet in the verified-span memo; 0 = never.
    pub chain_audit_seconds: u64,
}

/// Policy files on disk (read-only through the API), applied beside the tenants' API policies.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PoliciesSection {
    /// Directory of `*.yaml` / `*.yml` policy files; relative to the working directory. A
    /// missing directory means no file policies.
    pub dir: PathBuf,
    /// How often the directory is checked for changes.
    pub watch_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsSection {
    pub max_body_bytes: usize,
    pub management_max_body_bytes: usize,
    /// Answer tokens reserved (rate limits, budgets) when a request sets no `max_tokens`.
    pub default_completion_tokens: u64,
    /// Memory of the exact-match answer cache, and the largest answer it keeps.
    pub cache_max_bytes: u64,
    pub cache_max_entry_bytes: usize,
    /// `POST /v1/messages/count_tokens` per key and minute, apart from the key's own rpm: agent
    /// clients count tokens on every turn and at start-up. 0 = unlimited.
    pub count_tokens_rpm: u64,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamSection {
    pub connect_timeout_ms: u64,
    pub read_timeout_ms: u64,
    pub idle_pool_seconds: u64,
    /// PEM CA bundle trusted for upstream TLS instead of the system store (private providers).
    pub ca_file: String,
}

#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input: f64,
    pub output: f64,
    /// Prompt tokens read from the provider's prompt cache; absent = the input rate.
    #[serde(default)]
    pub cache_read: Option<f64>,
    /// Prompt tokens written to the prompt cache (Anthropic's 5-minute writes, Bedrock's);
    /// absent = the input rate.
    #[serde(default)]
    pub cache_write: Option<f64>,
    /// Prompt tokens written to Anthropic's one-hour cache; absent = `cache_write`.
    #[serde(default)]
    pub cache_write_1h: Option<f64>,
}

impl Price {
    /// Input and output only, cached tokens at the input rate.
    pub fn plain(input: f64, output: f64) -> Price {
        Price { input, output, cache_read: None, cache_write: None, cache_write_1h: None }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PricingFile {
    pub source: String,
    pub taken: String,
    pub models: BTreeMap<String, Price>,
}

impl Default for ServerSection {
    fn default() -> Self {
        ServerSection { threads: 2, grace_period_seconds: 30, graceful_shutdown_timeout_seconds: 5 }
    }
}
impl Default for ListenSection {
    fn default() -> Self {
        ListenSection {
            gateway: ListenAddr::parse("0.0.0.0:8080").unwrap(),
            management: ListenAddr::parse("0.0.0.0:8081").unwrap(),
            metrics: ListenAddr::parse("127.0.0.1:9090").unwrap(),
            tls_cert_file: String::new(),
            tls_key_file: String::new(),
        }
    }
}
impl Default for StorageSection {
    fn default() -> Self {
        StorageSection {
            data_dir: PathBuf::from("./data"),
            database_url: String::new(),
            master_key_file: String::new(),
            signing_key_file: String::new(),
            snapshot_refresh_ms: 2000,
            chain_audit_seconds: 300,
        }
    }
}
impl Default for PoliciesSection {
    fn default() -> Self {
        PoliciesSection { dir: PathBuf::from("conf/policies"), watch_ms: 1000 }
    }
}
impl Default for LimitsSection {
    fn default() -> Self {
        LimitsSection {
            max_body_bytes: 32 << 20,
            management_max_body_bytes: 16 << 20,
            default_completion_tokens: 1024,
            cache_max_bytes: 64 << 20,
            cache_max_entry_bytes: 1 << 20,
            count_tokens_rpm: 600,
        }
    }
}
impl Default for UpstreamSection {
    fn default() -> Self {
        UpstreamSection {
            connect_timeout_ms: 10_000,
            read_timeout_ms: 600_000,
            idle_pool_seconds: 60,
            ca_file: String::new(),
        }
    }
}
impl Config {
    /// The same values as the embedded `conf/tollgate.yaml` (a unit test holds them equal):
    /// every section's default, the providers' sections and routes from `vocab`.
    pub fn defaults(vocab: &Vocabulary) -> Config {
        Config {
            server: ServerSection::default(),
            listen: ListenSection::default(),
            storage: StorageSection::default(),
            limits: LimitsSection::default(),
            upstream: UpstreamSection::default(),
            providers: vocab.default_sections(),
            compliance: ComplianceSection::default(),
            receipts: ReceiptsSection::default(),
            cluster: ClusterSection::default(),
            log: tenant_log::LogSection::default(),
            console: console::ConsoleSection::default(),
            telemetry: TelemetrySection::default(),
            webhooks: WebhooksSection::default(),
            billing: BillingSection::default(),
            routes: Routes { rules: vocab.default_routes(), models: Vec::new() },
            pricing: BTreeMap::new(),
            policies: PoliciesSection::default(),
            tool_servers: Vec::new(),
        }
    }

    /// Parses a config file's text, reading provider names against `vocab` (an unknown one is
    /// an error at its line and column, like any bad value).
    pub fn parse<'a>(text: &str, origin: impl Into<Origin<'a>>, vocab: &Vocabulary) -> Result<Config, ConfigError> {
        let _scope = vocabulary::Scope::enter(vocab);
        let mut cfg: Config = parse_yaml(text, origin)?;
        cfg.routes = std::mem::take(&mut cfg.routes).with_default_rules(vocab);
        Ok(cfg)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{0}")]
    Invalid(String),
    #[error("cannot read config file {path}: {source}")]
    Read { path: String, source: std::io::Error },
}

/// Where YAML came from, which decides how an error names its position. A file reads
/// `path:3:12: …`, the form editors, terminals and CI logs jump to; a request body has no name,
/// and API users are not compilers: it reads `line 3, column 12: …`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin<'a> {
    File(&'a str),
    Body,
}

impl<'a, S: AsRef<str> + ?Sized> From<&'a S> for Origin<'a> {
    fn from(name: &'a S) -> Self {
        Origin::File(name.as_ref())
    }
}

impl Origin<'_> {
    /// `msg` led by this origin and the 1-based (line, column), when known.
    pub fn locate(self, at: Option<(usize, usize)>, msg: &str) -> String {
        match (self, at) {
            (Origin::File(name), Some((line, col))) => format!("{name}:{line}:{col}: {msg}"),
            (Origin::File(name), None) => format!("{name}: {msg}"),
            (Origin::Body, Some((line, col))) => format!("line {line}, column {col}: {msg}"),
            (Origin::Body, None) => msg.to_string(),
        }
    }
}

/// Parses YAML into `T`, naming the position (see [`Origin`]) and the dotted field path on error.
pub fn parse_yaml<'a, T: serde::de::DeserializeOwned>(
    text: &str,
    origin: impl Into<Origin<'a>>,
) -> Result<T, ConfigError> {
    let origin = origin.into();
    let de = serde_yaml::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let at = inner.location().map(|l| (l.line(), l.column()));
        // serde_yaml appends its own " at line X column Y"; we already lead with it.
        let msg = inner.to_string();
        let mut msg = msg.split(" at line ").next().unwrap_or(&msg).to_string();
        // Errors raised inside a value (custom validation) come prefixed with serde_yaml's own,
        // shorter path; the field we name already says where.
        if let Some((head, rest)) = msg.split_once(": ") {
            if !head.is_empty() && !head.contains(' ') && path.starts_with(head) {
                msg = rest.to_string();
            }
        }
        if path.is_empty() || path == "." {
            ConfigError::Invalid(origin.locate(at, &msg))
        } else {
            ConfigError::Invalid(origin.locate(at, &format!("field `{path}`: {msg}")))
        }
    })
}

impl Config {
    pub fn database_url(&self) -> String {
        if self.storage.database_url.is_empty() {
            format!("sqlite://{}", self.storage.data_dir.join("tollgate.db").display())
        } else {
            self.storage.database_url.clone()
        }
    }

    pub fn master_key_path(&self) -> PathBuf {
        if self.storage.master_key_file.is_empty() {
            self.storage.data_dir.join("master.key")
        } else {
            PathBuf::from(&self.storage.master_key_file)
        }
    }

    pub fn signing_key_path(&self) -> PathBuf {
        if self.storage.signing_key_file.is_empty() {
            self.storage.data_dir.join("signing.key")
        } else {
            PathBuf::from(&self.storage.signing_key_file)
        }
    }

    /// `providers.<name>`; empty for a name the config does not know.
    pub fn provider_defaults(&self, name: &str) -> &ProviderDefaults {
        static NONE: ProviderDefaults = ProviderDefaults { base_url: String::new(), version: String::new() };
        self.providers.0.get(name).unwrap_or(&NONE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::VOCABULARY;

    fn parse(text: &str, origin: impl Into<Origin<'static>>) -> Result<Config, ConfigError> {
        Config::parse(text, origin, &VOCABULARY)
    }

    fn defaults() -> Config {
        Config::defaults(&VOCABULARY)
    }

    #[test]
    fn embedded_defaults_parse() {
        let c = parse(DEFAULT_YAML, "embedded").unwrap();
        assert_eq!(c, defaults(), "conf/tollgate.yaml and Config::defaults() must agree");
        assert_eq!(c.listen.gateway.0.port(), 8080);
        assert_eq!(c.listen.management.0.port(), 8081);
        assert_eq!(c.listen.metrics.to_string(), "127.0.0.1:9090");
        assert!(c.routes.rules.iter().any(|r| r.provider.as_str() == "anthropic"));
        let p: PricingFile = parse_yaml(PRICING_YAML, "pricing").unwrap();
        assert!(p.models.contains_key("gpt-4o-mini"));
    }

    #[test]
    fn errors_name_line_and_field() {
        let y = "listen:\n  gateway: \"nope\"\n";
        let e = parse(y, "t.yaml").unwrap_err().to_string();
        assert!(e.starts_with("t.yaml:2:"), "{e}");
        assert!(e.contains("listen.gateway"), "{e}");

        let y = "server:\n  threads: 2\n  colour: red\n";
        let e = parse(y, "t.yaml").unwrap_err().to_string();
        assert!(e.contains("t.yaml:3:") && e.contains("colour"), "{e}");

        let y = "routes:\n  - { model: \"x-*\", provider: mistral }\n";
        let e = parse(y, "t.yaml").unwrap_err().to_string();
        assert!(e.contains("routes[0].provider") && e.contains("t.yaml:2:"), "{e}");
    }

    #[test]
    fn price_overrides_take_cache_columns_and_refuse_negative_ones() {
        let y = "pricing:\n  m: { input: 1.0, output: 2.0, cache_read: 0.1, cache_write: 1.25 }\n";
        let c = parse(y, "t.yaml").unwrap();
        let p = c.pricing["m"];
        assert_eq!((p.cache_read, p.cache_write, p.cache_write_1h), (Some(0.1), Some(1.25), None));
        assert!(c.validate(&VOCABULARY).is_ok());
        let mut c = defaults();
        c.pricing.insert("m".into(), Price { cache_read: Some(-0.1), ..Price::plain(1.0, 2.0) });
        let e = c.validate(&VOCABULARY).unwrap_err().to_string();
        assert!(e.contains("pricing.m"), "{e}");
        let e = parse("pricing:\n  m: { input: 1, output: 2, cache_hit: 1 }\n", "t.yaml").unwrap_err();
        assert!(e.to_string().contains("cache_hit"), "an unknown column is refused: {e}");
    }

    #[test]
    fn two_listeners_on_one_address_are_refused() {
        let mut c = defaults();
        c.listen.gateway = ListenAddr::parse("127.0.0.1:8080").unwrap();
        c.listen.management = c.listen.gateway;
        let e = c.validate(&VOCABULARY).unwrap_err().to_string();
        assert!(e.contains("listen.management") && e.contains("listen.gateway"), "{e}");
        c.listen.management = ListenAddr::parse("0.0.0.0:8080").unwrap();
        assert!(c.validate(&VOCABULARY).is_err(), "0.0.0.0 covers 127.0.0.1");
        c.listen.management = ListenAddr::parse("127.0.0.2:8080").unwrap();
        assert!(c.validate(&VOCABULARY).is_ok(), "another address on the same port is fine");
    }

    #[test]
    fn a_request_body_names_its_position_in_words() {
        let y = "server:\n  threads: 2\n  colour: red\n";
        let e = parse(y, Origin::Body).unwrap_err().to_string();
        assert!(e.starts_with("line 3, column 3: field `server.colour`: unknown field `colour`"), "{e}");
        assert_eq!(Origin::Body.locate(None, "field `x`: bad"), "field `x`: bad");
        assert_eq!(Origin::from("f.yaml").locate(None, "bad"), "f.yaml: bad");
    }

    #[test]
    fn env_overrides_apply_and_name_the_variable() {
        let mut c = defaults();
        let vars = |k: &str| match k {
            "TOLLGATE_GATEWAY_LISTEN" => Some("127.0.0.1:1234".to_string()),
            "TOLLGATE_MAX_BODY_BYTES" => Some("1024".to_string()),
            _ => None,
        };
        env::apply(&mut c, &vars).unwrap();
        assert_eq!(c.listen.gateway.to_string(), "127.0.0.1:1234");
        assert_eq!(c.limits.max_body_bytes, 1024);
        let bad = |k: &str| (k == "TOLLGATE_UPSTREAM_READ_TIMEOUT_MS").then(|| "soon".to_string());
        let e = env::apply(&mut c, &bad).unwrap_err().to_string();
        assert!(e.contains("TOLLGATE_UPSTREAM_READ_TIMEOUT_MS"), "{e}");
        let bad = |k: &str| (k == "TOLLGATE_OTLP_CAPTURE_PROMPTS").then(|| "yes".to_string());
        let e = env::apply(&mut c, &bad).unwrap_err().to_string();
        assert!(e.contains("TOLLGATE_OTLP_CAPTURE_PROMPTS"), "{e}");
    }

    /// `receipts.durability`: `page-cache` unless set; a bad value is named where it is written
    /// (file, line, column, field) or by its variable.
    #[test]
    fn receipts_durability_is_page_cache_or_fsync() {
        assert_eq!(defaults().receipts.durability, Durability::PageCache);
        let c = parse("receipts:\n  commit: before_answer\n  durability: fsync\n", "t.yaml").unwrap();
        assert_eq!(c.receipts.durability, Durability::Fsync);
        let c = parse("receipts:\n  durability: page-cache\n", "t.yaml").unwrap();
        assert_eq!(c.receipts.durability, Durability::PageCache);
        let e = parse("receipts:\n  durability: fdatasync\n", "t.yaml").unwrap_err().to_string();
        assert_eq!(
            e,
            "t.yaml:2:15: field `receipts.durability`: unknown variant `fdatasync`, expected `page-cache` or `fsync`"
        );
        let mut c = defaults();
        env::apply(&mut c, &|k| (k == "TOLLGATE_RECEIPTS_DURABILITY").then(|| "fsync".to_string())).unwrap();
        assert_eq!(c.receipts.durability, Durability::Fsync);
        let e = env::apply(&mut c, &|k| (k == "TOLLGATE_RECEIPTS_DURABILITY").then(|| "full".to_string()));
        let e = e.unwrap_err().to_string();
        assert_eq!(e, "environment variable TOLLGATE_RECEIPTS_DURABILITY: must be page-cache or fsync");
    }

    /// API.md "Console": `console.public_url` and `TOLLGATE_CONSOLE_*`; the issuer variable
    /// turns single sign-on on; `oidc.public_url` is not a field of the file.
    #[test]
    fn console_settings_from_file_and_env() {
        let c = parse("console:\n  public_url: https://t.example\n  oidc:\n    issuer: https://idp\n    client_id: c\n    scopes: [openid, email]\n", "t.yaml").unwrap();
        assert_eq!(c.console.public_url, "https://t.example");
        assert_eq!(c.console.oidc.as_ref().unwrap().scopes, ["openid", "email"]);
        assert!(parse("console:\n  oidc:\n    issuer: x\n    client_id: c\n    public_url: y\n", "t.yaml").is_err());
        let vars = [
            ("TOLLGATE_CONSOLE_PUBLIC_URL", "https://p.example"),
            ("TOLLGATE_CONSOLE_OIDC_ISSUER", "https://login.example"),
            ("TOLLGATE_CONSOLE_OIDC_CLIENT_ID", "console"),
            ("TOLLGATE_CONSOLE_OIDC_SCOPES", "openid, email ,groups"),
            ("TOLLGATE_CONSOLE_OIDC_CLAIMS_TENANT", "org"),
            ("TOLLGATE_CONSOLE_OIDC_CLAIMS_ROLE", "grp"),
        ];
        let mut c = defaults();
        env::apply(&mut c, &|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())).unwrap();
        let o = c.console.oidc.as_ref().expect("the issuer variable turns SSO on");
        assert_eq!((o.issuer.as_str(), o.client_id.as_str()), ("https://login.example", "console"));
        assert_eq!(o.scopes, ["openid", "email", "groups"]);
        assert_eq!((o.claims.tenant.as_str(), o.claims.role.as_str()), ("org", "grp"));
        assert_eq!(c.console.public_url, "https://p.example");
    }

    /// Tollgate's own variable and file first; the standard OpenTelemetry ones fill in, and
    /// `OTEL_SDK_DISABLED` turns tracing off.
    #[test]
    fn telemetry_env_precedence() {
        let traced = |file: &str, vars: &[(&str, &str)]| {
            let mut c = defaults();
            c.telemetry.otlp_endpoint = file.into();
            let vars: Vec<(String, String)> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            env::apply(&mut c, &|k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())).unwrap();
            c.telemetry
        };
        let std_endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://std:4318");
        assert_eq!(traced("", &[]).otlp_endpoint, "", "off by default");
        assert_eq!(traced("", &[std_endpoint]).otlp_endpoint, "http://std:4318");
        assert_eq!(traced("http://file:4318", &[std_endpoint]).otlp_endpoint, "http://file:4318");
        let ours = ("TOLLGATE_OTLP_ENDPOINT", "http://ours:4318");
        assert_eq!(traced("http://file:4318", &[ours, std_endpoint]).otlp_endpoint, "http://ours:4318");
        assert_eq!(traced("", &[ours, ("OTEL_SDK_DISABLED", "TRUE")]).otlp_endpoint, "");
        let t = traced("", &[("OTEL_SERVICE_NAME", "gw-eu"), ("TOLLGATE_OTLP_CAPTURE_PROMPTS", "1")]);
        assert_eq!((t.service_name.as_str(), t.capture_prompts), ("gw-eu", true));
        assert!(!defaults().telemetry.capture_prompts);
    }

    /// An unknown provider name fails while deserializing, at its line and column, both as a
    /// section name and as a route's provider.
    #[test]
    fn an_unknown_provider_is_named_where_it_is_written() {
        let y = "routes:\n  - { model: \"a-*\", provider: openai }\n  - { model: \"x-*\", provider: mistral }\n";
        let e = parse(y, "t.yaml").unwrap_err().to_string();
        let expected = "unknown provider `mistral`, expected one of openai, anthropic, bedrock, vertex";
        assert_eq!(e, format!("t.yaml:3:31: field `routes[1].provider`: {expected}"));
        let y = "providers:\n  openai:\n    base_url: \"https://a.example\"\n  mistral:\n    base_url: \"https://b\"\n";
        let e = parse(y, "t.yaml").unwrap_err().to_string();
        assert_eq!(e, format!("t.yaml:4:3: field `providers.mistral`: {expected}"));
    }

    /// A section the file lists replaces that provider's defaults (absent fields are empty); the
    /// others keep theirs; a file without `routes:` routes as the vocabulary says.
    #[test]
    fn config_knows_only_the_vocabulary_it_is_given() {
        static ACME: Vocabulary = Vocabulary {
            providers: &[
                ProviderSpec {
                    name: "acme",
                    base_url: "https://acme.example",
                    version: "1",
                    routes: &["acme-*"],
                    needs_base_url: true,
                },
                ProviderSpec {
                    name: "zed",
                    base_url: "",
                    version: "",
                    routes: &["zed/*", "z-*"],
                    needs_base_url: false,
                },
            ],
        };
        let c = Config::parse("server:\n  threads: 3\n", "t.yaml", &ACME).unwrap();
        let routes: Vec<(&str, &str)> =
            c.routes.rules.iter().map(|r| (r.model.as_str(), r.provider.as_str())).collect();
        assert_eq!(routes, [("acme-*", "acme"), ("zed/*", "zed"), ("z-*", "zed")]);
        assert_eq!(
            c,
            Config { server: ServerSection { threads: 3, ..ServerSection::default() }, ..Config::defaults(&ACME) }
        );
        assert_eq!(c.provider_defaults("acme").version, "1");
        assert!(c.validate(&ACME).is_ok());

        let c = Config::parse("providers:\n  acme: { version: \"2\" }\n", "t.yaml", &ACME).unwrap();
        assert_eq!(
            (c.provider_defaults("acme").base_url.as_str(), c.provider_defaults("acme").version.as_str()),
            ("", "2")
        );
        assert_eq!(c.provider_defaults("zed"), &ProviderDefaults::default());
        let e = c.validate(&ACME).unwrap_err().to_string();
        assert!(e.starts_with("field `providers.acme.base_url`"), "{e}");
        let e = Config::parse("routes: [{ model: m, provider: openai }]\n", "t.yaml", &ACME).unwrap_err().to_string();
        assert!(e.ends_with("unknown provider `openai`, expected one of acme, zed"), "{e}");
        let e = parse_yaml::<Config>("routes: [{ model: m, provider: acme }]\n", "t.yaml").unwrap_err().to_string();
        assert!(e.contains("read only through Config::parse"), "no vocabulary, no provider names: {e}");
    }
}
