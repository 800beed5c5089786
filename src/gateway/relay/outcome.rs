//! How the upstream leg ended, for metrics and the receipt.

use crate::receipts::UpstreamStatus;
use crate::upstream::UpstreamError;

/// How the upstream leg ended, for metrics and the receipt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UpstreamOutcome {
    /// No upstream call was made (a check or an error answered first).
    #[default]
    Skipped,
    /// The provider answered 2xx and the whole answer was relayed.
    Pass,
    /// The provider answered an error status, or the connection failed.
    Fail,
    Timeout,
}

impl UpstreamOutcome {
    pub fn from_error(e: &UpstreamError) -> Self {
        match e {
            UpstreamError::Timeout(_) => UpstreamOutcome::Timeout,
            UpstreamError::Failed(_) => UpstreamOutcome::Fail,
        }
    }

    /// The receipt's `upstreamStatus`.
    pub fn status(self) -> UpstreamStatus {
        match self {
            UpstreamOutcome::Skipped => UpstreamStatus::Skipped,
            UpstreamOutcome::Pass => UpstreamStatus::Ok,
            UpstreamOutcome::Fail => UpstreamStatus::Error,
            UpstreamOutcome::Timeout => UpstreamStatus::Timeout,
        }
    }
}
