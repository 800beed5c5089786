//! `log:` — the tenant log's published form (docs/log.md): checkpoint origins, and later its
//! witnesses, timestamps and retention.

use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogSection {
    /// The checkpoints' origin is `<origin_prefix>/<tenantId>`; empty = `tollgate-<installId>`,
    /// the id this database was given once.
    pub origin_prefix: String,
    /// The shortest retention a tenant may set (`PUT /v1/log/retention`), in days; a sweep
    /// never prunes a receipt younger than this either, whatever the tenant set before.
    pub retention_floor_days: u32,
}

/// Six months: the shortest retention a tenant may set unless the operator lowers it.
pub const DEFAULT_RETENTION_FLOOR_DAYS: u32 = 183;

impl Default for LogSection {
    fn default() -> Self {
        LogSection { origin_prefix: String::new(), retention_floor_days: DEFAULT_RETENTION_FLOOR_DAYS }
    }
}
