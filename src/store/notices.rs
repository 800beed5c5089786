//! Change notices on PostgreSQL (`LISTEN/NOTIFY`): the channel and the one statement that sends
//! one. The listener is `crate::notices`.

use super::{Store, StoreError};

/// The channel every Tollgate process sharing a database listens on.
pub const CHANNEL: &str = "tollgate_changes";

/// Sends a notice that the configuration changed; `from` (the payload) is the sender's instance
/// id, so its own listener can skip it. PostgreSQL only (the caller checks the backend).
pub async fn send(store: &Store, from: &str) -> Result<(), StoreError> {
    let from = from.to_string();
    store
        .run(|pool, _| async move {
            sqlx::query("SELECT pg_notify($1, $2)").bind(CHANNEL).bind(from).execute(&pool).await?;
            Ok(())
        })
        .await
}
