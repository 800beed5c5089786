//! How the console reaches the management API: as an ordinary client. Every page calls the
//! public routes through [`Api`] with the signed-in key's [`Caller`], so the same route table,
//! authorization, auditor refusals and admin receipts apply as for a `curl` with that key; the
//! console has no endpoint of its own that reads or writes tenant data.

use async_trait::async_trait;
use http::Method;
use serde_json::Value;

use super::super::handler::{Caller, Handled, Reply};
use crate::error::ApiError;

/// The management API as the console calls it (the listener implements it with its own
/// dispatch, so nothing here can skip a check).
#[async_trait]
pub trait Api: Send + Sync {
    /// One call of `method path?query` with `body` as `caller`.
    async fn call(
        &self,
        caller: &Caller,
        method: Method,
        path: &str,
        query: &[(String, String)],
        body: Vec<u8>,
    ) -> Handled;
}

/// A call's JSON answer; any other answer is an internal error here.
pub fn json(reply: Handled) -> Result<Value, ApiError> {
    match reply? {
        Reply::Json(_, v) => Ok(v),
        Reply::NoContent => Ok(Value::Null),
        Reply::Bytes { body, .. } | Reply::Page { body, .. } => {
            Ok(Value::String(String::from_utf8_lossy(&body).into_owned()))
        }
        Reply::Stream { .. } => Err(ApiError::internal("a streamed answer where JSON was expected")),
    }
}

/// `GET path?query` as `caller`, as JSON.
pub async fn get(api: &dyn Api, caller: &Caller, path: &str, query: &[(String, String)]) -> Result<Value, ApiError> {
    json(api.call(caller, Method::GET, path, query, Vec::new()).await)
}

/// `method path` with a JSON body as `caller`.
pub async fn send(api: &dyn Api, caller: &Caller, method: Method, path: &str, body: &Value) -> Result<Value, ApiError> {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    json(api.call(caller, method, path, &[], bytes).await)
}

/// A path segment as the API's router reads it back (`percent_decode` of each segment).
pub fn seg(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}
