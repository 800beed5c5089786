//! The order the checks run in, apart from the table that builds them: compliance ranks
//! receipts by it without reaching the checks themselves.

use crate::receipts::CheckName;

/// The checks in the order they run.
pub const ORDER: [CheckName; 6] = [
    CheckName::Allowlist,
    CheckName::Policy,
    CheckName::RateLimit,
    CheckName::Budget,
    CheckName::Guardrail,
    CheckName::Cache,
];
