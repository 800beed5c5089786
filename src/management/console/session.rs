//! Console sessions: a random 256-bit id in an `HttpOnly; SameSite=Strict` cookie, kept in the
//! store only as its SHA-256, with a CSRF token of its own, ended 12 h after sign-in or 30 min
//! after its last request (config `console`), at sign-out, or when its key is revoked. A single
//! sign-on session's own key ([`run_key`]) is revoked whenever the session ends.

use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::super::handler::Caller;
use super::api::Api;
use super::run_key;
use crate::app::App;
use crate::error::ApiError;
use crate::secrets::Secret;
use crate::snapshot::KeyEntry;
use crate::store::console_sessions::{self, SessionRow};

/// The session cookie's name.
pub const COOKIE: &str = "tollgate_console";
/// The sign-in form's own CSRF cookie (double submit: there is no session yet).
pub const PRE_COOKIE: &str = "tollgate_console_pre";
/// Touching a session's `seen_ms` on every request would be a write per page; a minute's
/// slack on a 30-minute idle limit costs nothing.
const TOUCH_EVERY_MS: i64 = 60_000;

/// A signed-in session and the caller it acts as.
pub struct Session {
    pub row: SessionRow,
    pub caller: Caller,
}

/// Who signs in: a virtual key, or a single sign-on identity.
pub enum Who {
    Key(Arc<KeyEntry>, String),
    Sso { tenant: String, subject: String, role: String },
}

/// 32 random bytes, URL-safe base64 without padding (43 characters).
pub fn token() -> String {
    use base64::Engine;
    let mut raw = [0u8; 32];
    getrandom::getrandom(&mut raw).expect("the OS random source");
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

pub fn hash(id: &str) -> String {
    hex::encode(Sha256::digest(id.as_bytes()))
}

/// Compares two tokens in time independent of where they differ.
pub fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The value of cookie `name` in a `Cookie` header.
pub fn cookie(header: &str, name: &str) -> Option<String> {
    header.split(';').filter_map(|p| p.trim().split_once('=')).find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
}

/// A `Set-Cookie` value for the console's path; `max_age: Some(0)` deletes it.
pub fn set_cookie(name: &str, value: &str, max_age: Option<u64>, secure: bool) -> String {
    let mut c = format!("{name}={value}; Path=/console; HttpOnly; SameSite=Strict");
    if secure {
        c.push_str("; Secure");
    }
    if let Some(age) = max_age {
        c.push_str(&format!("; Max-Age={age}"));
    }
    c
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Opens a session for `who`; returns the cookie's id (shown to nobody else, stored hashed).
pub async fn open(app: &App, api: &dyn Api, who: Who) -> Result<(String, SessionRow), ApiError> {
    let id = token();
    let id_hash = hash(&id);
    let (tenant_id, key_hash, key_sealed, subject, role) = match who {
        Who::Key(key, presented) => {
            let sealed = app.master.encrypt(presented.as_bytes(), &format!("console-session:{id_hash}"));
            let k = &key.record;
            (k.tenant_id.clone(), Some(k.key_hash.clone()), Some(sealed), k.id.clone(), k.role.clone())
        }
        Who::Sso { tenant, subject, role } => (tenant, None, None, subject, role),
    };
    let now = now_ms();
    let row = SessionRow {
        id_hash,
        tenant_id,
        key_hash,
        key_sealed,
        subject,
        role,
        csrf: token(),
        created_ms: now,
        seen_ms: now,
        run_key_id: None,
        run_key_sealed: None,
    };
    // Sessions that ended by expiry without a last request are ended here too, at each sign-in
    // (and by the listener's periodic sweep).
    run_key::sweep(app, api).await?;
    console_sessions::insert(&app.store, row.clone()).await?;
    Ok((id, row))
}

/// The live session behind cookie value `id`, or None (unknown, expired, or its key revoked:
/// then the session is ended too, its own key revoked).
pub async fn resume(app: &App, api: &dyn Api, id: &str) -> Result<Option<Session>, ApiError> {
    let id_hash = hash(id);
    let Some(row) = console_sessions::get(&app.store, &id_hash).await? else { return Ok(None) };
    let now = now_ms();
    let (oldest, idlest) = run_key::limits(app, now);
    let expired = row.created_ms < oldest || row.seen_ms < idlest;
    let caller = if expired { None } else { caller_of(app, &row) };
    let Some(caller) = caller else {
        run_key::retire(app, api, &row).await?;
        return Ok(None);
    };
    if now - row.seen_ms > TOUCH_EVERY_MS {
        console_sessions::touch(&app.store, &id_hash, now).await?;
    }
    Ok(Some(Session { row, caller }))
}

/// The caller a session acts as: its key as the snapshot has it now (None once revoked), or a
/// key-less identity of the SSO tenant and role.
fn caller_of(app: &App, row: &SessionRow) -> Option<Caller> {
    match (&row.key_hash, &row.key_sealed) {
        (Some(digest), Some(sealed)) => {
            let raw: [u8; 32] = hex::decode(digest).ok()?.try_into().ok()?;
            let key = app.snapshot.load().key_by_digest(&raw).cloned()?;
            let presented = app.master.decrypt(sealed, &format!("console-session:{}", row.id_hash)).ok()?;
            Some(Caller { key, presented: Secret::new(String::from_utf8(presented).ok()?) })
        }
        _ => Some(run_key::identity(row, &row.role)),
    }
}

/// Ends a session at once (sign-out), its own key revoked.
pub async fn end(app: &App, api: &dyn Api, id: &str) -> Result<(), ApiError> {
    match console_sessions::get(&app.store, &hash(id)).await? {
        Some(row) => run_key::retire(app, api, &row).await,
        None => Ok(()),
    }
}
