//! MCP tool servers: what a tenant registers (name, URL, headers) and how the request path sees
//! it. The gateway side of `/mcp/{server}` is `gateway::mcp`; the management routes are
//! `management::tool_servers`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::secrets::at_rest::MasterKey;
use crate::secrets::Secret;

pub use crate::config::tool_server::{check_headers, check_name, ServerUrl, MAX_HEADERS};

/// What the gateway counts of one tool server; carried over snapshot rebuilds (for `/status`).
#[derive(Debug, Default)]
pub struct ToolServerState {
    pub calls: AtomicU64,
    pub failures: AtomicU64,
    /// The last upstream leg failed (connection, HTTP error, JSON-RPC error).
    pub last_failed: AtomicBool,
}

impl ToolServerState {
    pub fn record(&self, ok: bool) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if !ok {
            self.failures.fetch_add(1, Ordering::Relaxed);
        }
        self.last_failed.store(!ok, Ordering::Relaxed);
    }
}

/// Where a registration comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Config,
    Api,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Config => "config",
            Source::Api => "api",
        }
    }
}

/// A tenant's tool server as the request path sees it, headers opened.
#[derive(Debug)]
pub struct ToolServer {
    pub tenant_id: String,
    pub name: String,
    pub url: ServerUrl,
    /// Header names are lower case (validated on write).
    pub headers: Vec<(http::HeaderName, Secret)>,
    pub source: Source,
    pub state: Arc<ToolServerState>,
}

/// The sealing context of a server's headers: bound to the tenant and the name, so sealed
/// headers copied onto another row do not open.
fn context(tenant_id: &str, name: &str) -> String {
    format!("{tenant_id}/tool-server/{name}")
}

pub fn encrypt_headers(master: &MasterKey, tenant_id: &str, name: &str, headers: &[(String, String)]) -> String {
    let map: serde_json::Map<String, serde_json::Value> =
        headers.iter().map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone()))).collect();
    let clear = serde_json::Value::Object(map).to_string();
    master.encrypt(clear.as_bytes(), &context(tenant_id, name))
}

pub fn decrypt_headers(
    master: &MasterKey,
    tenant_id: &str,
    name: &str,
    sealed: &str,
) -> Result<Vec<(http::HeaderName, Secret)>, String> {
    let clear = master.decrypt(sealed, &context(tenant_id, name)).map_err(|e| e.to_string())?;
    let map: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&clear).map_err(|_| "the sealed headers are not a JSON object".to_string())?;
    map.into_iter()
        .map(|(k, v)| {
            let name = http::HeaderName::from_bytes(k.as_bytes()).map_err(|_| format!("bad header name `{k}`"))?;
            Ok((name, Secret::new(v.as_str().unwrap_or_default())))
        })
        .collect()
}

/// A server entry from its parts (config or an opened row).
pub fn server(
    tenant_id: &str,
    name: &str,
    url: &str,
    headers: Vec<(http::HeaderName, Secret)>,
    source: Source,
    state: Arc<ToolServerState>,
) -> Result<ToolServer, String> {
    Ok(ToolServer {
        tenant_id: tenant_id.to_string(),
        name: name.to_string(),
        url: ServerUrl::parse(url)?,
        headers,
        source,
        state,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_urls_and_headers() {
        assert!(check_name("search").is_ok() && check_name("fs-1.v2_x").is_ok());
        for bad in ["", "-x", "a/b", "a b", &"x".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
        let u = ServerUrl::parse("http://127.0.0.1:9000/v1").unwrap();
        assert_eq!((u.base.port, u.path.as_str(), u.base.prefix.as_str()), (9000, "/v1", ""));
        assert_eq!(ServerUrl::parse("https://tools.example.com").unwrap().path, "/");
        assert!(ServerUrl::parse("ftp://x").is_err() && ServerUrl::parse("http://u:p@x/").is_err());
        let h = |k: &str, v: &str| vec![(k.to_string(), v.to_string())];
        assert!(check_headers(h("authorization", "Bearer x").iter().map(|(a, b)| (a, b))).is_ok());
        let e = check_headers(h("mcp-session-id", "x").iter().map(|(a, b)| (a, b))).unwrap_err();
        assert!(e.contains("mcp-session-id"));
        let e = check_headers(h("x-key", "sec\nret").iter().map(|(a, b)| (a, b))).unwrap_err();
        assert!(!e.contains("sec"), "never echoes the value: {e}");
    }

    #[test]
    fn headers_encrypt_bound_to_their_row() {
        let mk = MasterKey::from_bytes(&[3u8; 32]);
        let sealed = encrypt_headers(&mk, "t1", "search", &[("authorization".into(), "Bearer s3cret".into())]);
        assert!(!sealed.contains("s3cret"));
        let opened = decrypt_headers(&mk, "t1", "search", &sealed).unwrap();
        assert_eq!(opened[0].0.as_str(), "authorization");
        assert_eq!(opened[0].1.expose(), "Bearer s3cret");
        assert!(decrypt_headers(&mk, "t2", "search", &sealed).is_err());
        assert!(decrypt_headers(&mk, "t1", "other", &sealed).is_err());
    }
}
