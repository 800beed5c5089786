//! `log:` — the tenant log's published form (docs/log.md): checkpoint origins and witnesses.

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
}

impl Default for LogSection {
    fn default() -> Self {
        LogSection { origin_prefix: String::new(), witnesses: Vec::new(), witness_stale_seconds: 3600 }
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
