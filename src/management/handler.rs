//! What every management handler receives and answers: the authenticated [`Caller`], the
//! request ([`Req`]) and the readers of its query values, and the reply ([`Reply`], or an
//! error: [`Handled`]), with the page shape and the `?limit=` paging that the cursor-paginated
//! lists share.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use http::Method;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::nul;
use crate::error::ApiError;
use crate::providers::Flavor;
use crate::snapshot::KeyEntry;

/// The authenticated key behind a management call.
pub struct Caller {
    pub key: Arc<KeyEntry>,
    /// The key as presented (a prompt run sends it on to the gateway, which checks it again).
    pub presented: crate::secrets::Secret,
}

impl Caller {
    pub fn tenant(&self) -> &str {
        self.key.tenant_id()
    }
    pub fn require_manager(&self) -> Result<(), ApiError> {
        if self.key.is_manager() {
            Ok(())
        } else {
            Err(ApiError::forbidden())
        }
    }
}

/// A handler's answer.
pub enum Reply {
    Json(u16, Value),
    NoContent,
    /// A whole body that is not JSON (the log's checkpoint note, its tiles), with its headers
    /// (`content-type` first).
    Bytes {
        headers: Vec<(&'static str, String)>,
        body: Vec<u8>,
    },
    /// A whole body with its own status and headers (the console's pages, redirects, assets).
    Page {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: Vec<u8>,
    },
    /// A body produced piece by piece (exports), so large answers never sit in memory whole.
    Stream {
        headers: Vec<(&'static str, String)>,
        body: Box<dyn BodyStream>,
    },
}

/// A streamed response body.
#[async_trait]
pub trait BodyStream: Send {
    /// The next piece; `Ok(None)` at the end. An error ends the response early.
    async fn next(&mut self) -> Result<Option<Bytes>, ApiError>;
}

impl Reply {
    /// A typed answer, serialized as it will be sent (field order kept).
    pub fn json<T: Serialize>(status: u16, body: &T) -> Reply {
        match serde_json::to_value(body) {
            Ok(v) => Reply::Json(status, v),
            Err(e) => Reply::Json(500, ApiError::internal(e.to_string()).envelope(Flavor::Plain)),
        }
    }
}

/// One page of a cursor-paginated list: pass `nextCursor` back as `?cursor=` for the next one.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Page<T> {
    pub data: Vec<T>,
    /// Null on the last page.
    pub next_cursor: Option<String>,
}

pub type Handled = Result<Reply, ApiError>;

/// One request as the handlers see it.
pub struct Req {
    pub method: Method,
    pub segments: Vec<String>,
    pub query: Vec<(String, String)>,
    pub body: bytes::Bytes,
    /// The call's `X-Request-Id` (its admin receipt's `requestId`), else one generated.
    pub request_id: String,
}

impl Req {
    /// The body as JSON of type `T`; errors name the offending field. An empty body reads as `{}`.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, ApiError> {
        let body: &[u8] = if self.body.iter().all(u8::is_ascii_whitespace) { b"{}" } else { &self.body };
        let mut de = serde_json::Deserializer::from_slice(body);
        let parsed: Result<T, _> = serde_path_to_error::deserialize(&mut de);
        let parsed = parsed.map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            let msg = inner.to_string();
            let msg = msg.split(" at line ").next().unwrap_or(&msg).to_string();
            if inner.is_syntax() || inner.is_eof() {
                ApiError::invalid(format!("request body is not valid JSON: {msg}"))
            } else if path.is_empty() || path == "." {
                ApiError::invalid(format!("invalid request body: {msg}"))
            } else {
                ApiError::invalid(format!("field `{path}`: {msg}"))
            }
        })?;
        nul::check_json(body)?;
        Ok(parsed)
    }

    pub fn query(&self, name: &str) -> Option<&str> {
        self.query.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    pub fn seg(&self) -> Vec<&str> {
        self.segments.iter().map(String::as_str).collect()
    }
}

/// `?limit=` of a cursor-paginated list: default 50, at most 200.
pub fn page_limit(req: &Req) -> Result<i64, ApiError> {
    match req.query("limit") {
        None => Ok(50),
        Some(v) => v
            .parse::<i64>()
            .ok()
            .filter(|n| (1..=200).contains(n))
            .ok_or_else(|| ApiError::invalid("query `limit` must be an integer from 1 to 200")),
    }
}

/// RFC 3339 → the receipts' own `YYYY-MM-DD HH:MM:SS.mmm` UTC form, which sorts as text.
pub fn ts_bound(req: &Req, name: &str) -> Result<Option<String>, ApiError> {
    let Some(v) = req.query(name) else { return Ok(None) };
    let t = chrono::DateTime::parse_from_rfc3339(v).map_err(|_| {
        ApiError::invalid(format!("query `{name}` must be an RFC 3339 timestamp such as 2026-01-31T12:00:00Z"))
    })?;
    Ok(Some(crate::receipts::receipt_ts(t.with_timezone(&chrono::Utc))))
}

/// A whole-number query value within `min..=max`; absent or empty reads as None.
pub fn number(req: &Req, name: &str, min: u64, max: u64) -> Result<Option<u64>, ApiError> {
    match req.query(name) {
        None | Some("") => Ok(None),
        Some(v) => v
            .parse::<u64>()
            .ok()
            .filter(|n| (min..=max).contains(n))
            .map(Some)
            .ok_or_else(|| ApiError::invalid(format!("query `{name}` must be an integer from {min} to {max}"))),
    }
}

/// Cuts `limit + 1` fetched rows to a page and the cursor of the next one (the last id shown,
/// when there is more).
pub fn paginate<T>(mut rows: Vec<T>, limit: i64, id: impl Fn(&T) -> &str) -> (Vec<T>, Option<String>) {
    let more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    let next = if more { rows.last().map(|r| id(r).to_string()) } else { None };
    (rows, next)
}
