//! `log:` — the tenant log's published form (docs/log.md): checkpoint origins, witnesses and
//! the retention floor.

use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogSection {
    /// The checkpoints' origin is `<origin_prefix>/<tenantId>`; empty = `tollgate-<installId>`,
    /// the id this database was given once.
    pub origin_prefix: String,
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
