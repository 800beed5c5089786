//! `log:` — the tenant log's published form (docs/log.md): checkpoint origins, the checkpoint
//! publisher, RFC 3161 timestamps, witnesses and the retention floor.

use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogSection {
    /// The checkpoints' origin is `<origin_prefix>/<tenantId>`; empty = `tollgate-<installId>`,
    /// the id this database was given once.
    pub origin_prefix: String,
    /// How often the publisher signs and stores a checkpoint for every tenant whose log grew.
    pub publish_interval_seconds: u64,
    /// RFC 3161 timestamps of the newest checkpoints (log.md §6); absent = none.
    pub timestamping: Option<Timestamping>,
    /// Witnesses every published checkpoint is sent to (C2SP tlog-witness).
    pub witnesses: Vec<WitnessConfig>,
    /// `/status` shows `witnesses` degraded while one has not cosigned for this long.
    pub witness_stale_seconds: u64,
    /// The shortest retention a tenant may set (`PUT /v1/log/retention`), in days; a sweep
    /// never prunes a receipt younger than this either, whatever the tenant set before.
    pub retention_floor_days: u32,
}

/// Six months: the shortest retention a tenant may set unless the operator lowers it.
pub const DEFAULT_RETENTION_FLOOR_DAYS: u32 = 183;

impl Default for LogSection {
    fn default() -> Self {
        LogSection {
            origin_prefix: String::new(),
            publish_interval_seconds: 60,
            timestamping: None,
            witnesses: Vec::new(),
            witness_stale_seconds: 3600,
            retention_floor_days: DEFAULT_RETENTION_FLOOR_DAYS,
        }
    }
}

/// One witness: its name (the cosignature lines' key name), its tlog-witness base URL (the
/// gateway posts to `<url>/add-checkpoint`) and its cosigning key in signed-note form
/// (`<name>+<key hash>+<base64(0x04 || Ed25519 public key)>`, C2SP tlog-cosignature).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WitnessConfig {
    pub name: String,
    pub url: String,
    pub verifier_key: String,
}

/// `log.timestamping`: the Time-Stamping Authority and how often to ask it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Timestamping {
    /// Where `TimeStampReq`s are posted (`application/timestamp-query`), http or https.
    pub url: String,
    /// At most one timestamp per tenant per interval: the newest checkpoint, if not stamped yet.
    #[serde(default = "default_timestamp_interval")]
    pub interval_seconds: u64,
    /// PEM certificates trusted as the TSA's roots: with it the token's signature and the TSA
    /// certificate's path (timeStamping extended key usage) are checked before it is kept;
    /// without it only the status, the imprint and the nonce are.
    #[serde(default)]
    pub ca_file: String,
}

/// An hour: a checkpoint stamped within the hour is as good as stamped at once for an audit,
/// and a public TSA asked once an hour per tenant is not asked too often.
pub const DEFAULT_TIMESTAMP_INTERVAL_SECONDS: u64 = 3600;

fn default_timestamp_interval() -> u64 {
    DEFAULT_TIMESTAMP_INTERVAL_SECONDS
}
