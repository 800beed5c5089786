//! A single sign-on session's own virtual key (docs/decisions/console.md). A playground run goes
//! through the gateway, which takes only a virtual key, and an SSO session has none: the first
//! run of such a session makes one (`POST /v1/keys`, labelled `console:<subject>`, of the
//! session's tenant and role), keeps it sealed in the session row, runs every later prompt of
//! the session with it, and revokes it (`DELETE /v1/keys/{id}`) when the session ends: at
//! sign-out, at the request that finds the session expired, or at a sweep (each sign-in, and the
//! management listener's periodic one) for a session nobody comes back to.
//!
//! Both calls go through the management API like any client's, so each leaves its admin receipt
//! (actor `sso:<subject>`) and its `key.created` / `key.revoked` webhook event; the key's own
//! calls carry the key's id as their actor. The secret goes only into the sealed column and the
//! `Authorization` header of the gateway call; it is never rendered, logged or sent back.

use std::sync::Arc;

use http::Method;
use serde_json::json;

use super::super::handler::Caller;
use super::api::Api;
use crate::app::App;
use crate::error::{ApiError, ErrorKind};
use crate::secrets::Secret;
use crate::snapshot::{KeyEntry, KeyState};
use crate::store::console_sessions::{self, SessionRow};
use crate::store::keys::KeyRecord;

/// The label of a session's key: `console:` and the identity provider's subject.
pub const LABEL_PREFIX: &str = "console:";
/// Expired sessions with a key ended per sweep (each one a revocation and a delete).
const SWEEP_BATCH: i64 = 100;

/// A key-less caller of the session's tenant acting as `sso:<subject>` with `role`: the session
/// itself (its own role), or, with `manager`, the maker and revoker of the session's own key
/// (those two calls only: the key is made with the session's role, never more).
pub fn identity(row: &SessionRow, role: &str) -> Caller {
    let id = format!("sso:{}", row.subject);
    let record = KeyRecord { role: role.to_string(), ..KeyRecord::fixture(&id, &row.tenant_id) };
    let key = Arc::new(KeyEntry::new(record, Arc::new(KeyState::default())));
    Caller { key, presented: Secret::new(String::new()) }
}

fn context(row: &SessionRow) -> String {
    format!("console-run-key:{}", row.id_hash)
}

/// The caller a playground run of SSO session `row` goes as: its own key, made now if it has
/// none. An auditor gets none: the run goes as the session itself, and the API refuses it.
pub async fn caller(app: &App, api: &dyn Api, row: &SessionRow) -> Result<Caller, ApiError> {
    if row.role == "auditor" {
        return Ok(identity(row, &row.role));
    }
    if let (Some(id), Some(sealed)) = (&row.run_key_id, &row.run_key_sealed) {
        let secret = app.master.decrypt(sealed, &context(row)).ok().and_then(|b| String::from_utf8(b).ok());
        let key = secret.as_deref().and_then(|s| app.snapshot.load().key(s).cloned());
        return match (key, secret) {
            (Some(key), Some(secret)) => Ok(Caller { key, presented: Secret::new(secret) }),
            // Revoked by a manager: not replaced behind the manager's back.
            _ => Err(ApiError::new(
                ErrorKind::Unauthorized,
                format!("this session's key ({id}) was revoked; sign out and in again to run prompts"),
            )),
        };
    }
    mint(app, api, row).await
}

/// Makes the session's key through `POST /v1/keys` and keeps it in the session row. Two first
/// runs at once: the one that stores its key second revokes its own and uses the other's.
async fn mint(app: &App, api: &dyn Api, row: &SessionRow) -> Result<Caller, ApiError> {
    let label: String = format!("{LABEL_PREFIX}{}", row.subject).chars().take(200).collect();
    let body = json!({"label": label, "role": row.role, "keyClass": "interactive"});
    let maker = identity(row, "manager");
    let made = super::api::send(api, &maker, Method::POST, "/v1/keys", &body).await?;
    let (Some(id), Some(secret)) = (made["id"].as_str(), made["key"].as_str()) else {
        return Err(ApiError::internal("POST /v1/keys answered without an id and a key"));
    };
    let sealed = app.master.encrypt(secret.as_bytes(), &context(row));
    if !console_sessions::set_run_key(&app.store, &row.id_hash, id.to_string(), sealed).await? {
        revoke(api, row, id).await?;
        let again = console_sessions::get(&app.store, &row.id_hash).await?;
        return match again.filter(|r| r.run_key_id.is_some()) {
            Some(r) => Box::pin(caller(app, api, &r)).await,
            None => Err(ApiError::new(ErrorKind::Unauthorized, "this console session has ended; sign in again")),
        };
    }
    let key = app.snapshot.load().key(secret).cloned();
    let key = key.ok_or_else(|| ApiError::internal("the new key is not in the snapshot"))?;
    Ok(Caller { key, presented: Secret::new(secret) })
}

/// `DELETE /v1/keys/{id}` as the session; a key already revoked (by a manager, or by another
/// process's sweep) is done too.
async fn revoke(api: &dyn Api, row: &SessionRow, id: &str) -> Result<(), ApiError> {
    let path = format!("/v1/keys/{}", super::api::seg(id));
    match api.call(&identity(row, "manager"), Method::DELETE, &path, &[], Vec::new()).await {
        Ok(_) => Ok(()),
        Err(e) if e.status() == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Ends session `row`: its key revoked first (so a failure leaves the row, and the key, for the
/// next attempt), then the row deleted.
pub async fn retire(app: &App, api: &dyn Api, row: &SessionRow) -> Result<(), ApiError> {
    if let Some(id) = &row.run_key_id {
        revoke(api, row, id).await?;
    }
    console_sessions::delete(&app.store, &row.id_hash).await?;
    Ok(())
}

/// The instants before which a session is too old (absolute expiry) or idle too long.
pub fn limits(app: &App, now_ms: i64) -> (i64, i64) {
    let cfg = &app.config.console;
    (now_ms - (cfg.session_hours * 3_600_000) as i64, now_ms - (cfg.idle_minutes * 60_000) as i64)
}

/// Ends every expired session: those without a key of their own in one delete, those with one
/// each after revoking its key (a batch per sweep; a failed revocation is retried next time).
pub async fn sweep(app: &App, api: &dyn Api) -> Result<(), ApiError> {
    let (oldest, idlest) = limits(app, chrono::Utc::now().timestamp_millis());
    console_sessions::sweep(&app.store, oldest, idlest).await?;
    for row in console_sessions::expired_with_keys(&app.store, oldest, idlest, SWEEP_BATCH).await? {
        if let Err(e) = retire(app, api, &row).await {
            log::warn!("console: revoking the key of an expired session failed (retried at the next sweep): {e}");
        }
    }
    Ok(())
}
