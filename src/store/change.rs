//! What a store write hands back to `Store::write` (`store::audit`): the transaction it runs in,
//! and what it changed. A module of its own, below every resource module that writes.

use std::future::Future;
use std::pin::Pin;

use super::StoreError;

/// The transaction a write's statements run in.
pub type WriteTx = sqlx::Transaction<'static, sqlx::Any>;

/// A change's work, borrowing its transaction.
pub type Pending<'c, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'c>>;

/// What a write did: its value, and the id of the resource it changed (None: nothing changed,
/// so no receipt is appended, e.g. a delete of an id that is not there).
pub struct Changed<T> {
    pub value: T,
    pub subject: Option<String>,
}

impl<T> Changed<T> {
    /// `value`, having changed the resource `subject`.
    pub fn to(subject: impl Into<String>, value: T) -> Changed<T> {
        Changed { value, subject: Some(subject.into()) }
    }

    /// `value`, having changed nothing.
    pub fn nothing(value: T) -> Changed<T> {
        Changed { value, subject: None }
    }
}
