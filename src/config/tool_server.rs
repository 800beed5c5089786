//! What a tool-server registration must look like (name, URL, headers): checked alike for
//! `tool_servers` in the config and for `PUT /v1/tool-servers/{name}`.

use crate::upstream::BaseUrl;

/// Header values a registration may not set: the gateway owns them, or they describe the hop.
const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "content-type",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "proxy-connection",
    "accept",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
];

pub const MAX_HEADERS: usize = 32;

/// A tool server's name: the `{server}` of `/mcp/{server}`, so one plain path segment.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err("must be 1 to 64 characters of letters, digits, `.`, `_` and `-`, starting with a letter or digit".into())
    }
}

/// Checks registered headers: valid names and values, none the gateway sets itself.
pub fn check_headers<'a>(headers: impl Iterator<Item = (&'a String, &'a String)>) -> Result<(), String> {
    let mut n = 0;
    for (k, v) in headers {
        n += 1;
        let name = http::HeaderName::from_bytes(k.as_bytes()).map_err(|_| format!("`{k}` is not a header name"))?;
        if RESERVED_HEADERS.contains(&name.as_str()) {
            return Err(format!("header `{name}` is set by the gateway and cannot be registered"));
        }
        // The value is a secret: the error names the header, never the value.
        if http::HeaderValue::from_str(v).is_err() || v.len() > 8192 {
            return Err(format!(
                "the value of header `{name}` is not a valid header value (printable, at most 8192 bytes)"
            ));
        }
    }
    if n > MAX_HEADERS {
        return Err(format!("at most {MAX_HEADERS} headers"));
    }
    Ok(())
}

/// Where a tool server answers: the connection, and the path (with query) every MCP message
/// is posted to. Kept whole (unlike provider base URLs, which drop a trailing `/v1`).
#[derive(Debug, Clone)]
pub struct ServerUrl {
    pub base: BaseUrl,
    pub path: String,
}

impl ServerUrl {
    pub fn parse(s: &str) -> Result<ServerUrl, String> {
        if s.len() > 2048 {
            return Err("must be at most 2048 characters".into());
        }
        let uri: http::Uri = s.trim().parse().map_err(|_| format!("`{s}` is not a URL"))?;
        let tls = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(format!("`{s}` must start with http:// or https://")),
        };
        let host = uri.host().filter(|h| !h.is_empty()).ok_or_else(|| format!("`{s}` has no host"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
        if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
            return Err(format!("`{s}` must not carry credentials; register them as headers"));
        }
        let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        let path = if path.is_empty() { "/".to_string() } else { path.to_string() };
        Ok(ServerUrl { base: BaseUrl { tls, host, port, prefix: String::new() }, path })
    }
}
