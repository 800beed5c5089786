//! `log:` — the tenant log's published form (docs/log.md): checkpoint origins, and later its
//! witnesses, timestamps and retention.

use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct LogSection {
    /// The checkpoints' origin is `<origin_prefix>/<tenantId>`; empty = `tollgate-<installId>`,
    /// the id this database was given once.
    pub origin_prefix: String,
}
