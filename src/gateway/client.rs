//! What the client's request header says: the key it presents and its actor.

use pingora::proxy::Session;

pub(super) fn header_str(session: &Session, name: &str) -> Option<String> {
    let v = session.req_header().headers.get(name)?.to_str().ok()?.trim();
    (!v.is_empty()).then(|| v.chars().take(128).collect())
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
