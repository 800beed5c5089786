//! What the client's request header says: the key it presents, its actor, and the Anthropic
//! beta features it asks for.

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

/// The Anthropic beta features a request asks for: every `anthropic-beta` header, comma-separated.
pub(super) fn anthropic_betas(headers: &http::HeaderMap) -> Vec<String> {
    headers
        .get_all("anthropic-beta")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|b| !b.is_empty())
        .map(str::to_string)
        .collect()
}
