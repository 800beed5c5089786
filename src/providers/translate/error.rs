//! What a refused translation tells the client.

use crate::error::ApiError;

/// Why a body cannot be translated: the field (a JSON path such as `messages[2].content[0]`)
/// and what is wrong with it. Shown to the client as `"{field}: {reason}"`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct TranslateError {
    pub field: String,
    pub reason: String,
}

impl TranslateError {
    pub(crate) fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self { field: field.into(), reason: reason.into() }
    }
}

/// A request that cannot be translated is the client's 400 (`invalid_request`), worded so the
/// client sees which field to change.
impl From<TranslateError> for ApiError {
    fn from(e: TranslateError) -> Self {
        ApiError::invalid(e.to_string())
    }
}
