//! What the client's request header says: the key it presents and its actor.

use pingora::proxy::Session;

use crate::error::ApiError;

/// The most bytes an end-user id may have (docs/API.md, "End users").
pub(super) const END_USER_MAX_BYTES: usize = 256;

/// The end user the header `X-Tollgate-Actor` names: `None` when absent or blank, `400` when it
/// is not UTF-8, longer than [`END_USER_MAX_BYTES`] or holds control characters.
pub(super) fn end_user_header(session: &Session) -> Result<Option<String>, ApiError> {
    let Some(v) = session.req_header().headers.get("x-tollgate-actor") else { return Ok(None) };
    let text = std::str::from_utf8(v.as_bytes())
        .map_err(|_| ApiError::invalid("header `X-Tollgate-Actor` must be UTF-8 text"))?;
    end_user("header `X-Tollgate-Actor`", text.trim())
}

/// `value` as an end-user id (from `what`): blank is none; at most [`END_USER_MAX_BYTES`] bytes of
/// printable text, else `400`.
pub(super) fn end_user(what: &str, value: &str) -> Result<Option<String>, ApiError> {
    if value.is_empty() {
        return Ok(None);
    }
    if value.len() > END_USER_MAX_BYTES {
        return Err(ApiError::invalid(format!(
            "{what} names the end user and must be at most {END_USER_MAX_BYTES} bytes (got {})",
            value.len()
        )));
    }
    if value.chars().any(char::is_control) {
        return Err(ApiError::invalid(format!("{what} names the end user and must be printable text")));
    }
    Ok(Some(value.to_string()))
}

/// The presented key: `Authorization: Bearer …`, or `x-api-key` (Anthropic clients).
pub(super) fn presented_key(session: &Session) -> Option<&str> {
    let h = &session.req_header().headers;
    if let Some(v) = h.get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()) {
        let (scheme, token) = v.trim().split_once(' ')?;
        return scheme.eq_ignore_ascii_case("bearer").then(|| token.trim());
    }
    h.get("x-api-key").and_then(|v| v.to_str().ok()).map(str::trim)
}
