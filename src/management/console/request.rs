//! One console request, as the listener read it.

use std::net::IpAddr;

use bytes::Bytes;
use http::Method;

/// One console request, as the listener read it.
pub struct Request {
    pub method: Method,
    /// The path's segments after `console`.
    pub path: Vec<String>,
    pub query: Vec<(String, String)>,
    pub cookie: String,
    pub origin: Option<String>,
    pub host: String,
    /// `Sec-Fetch-Site`, when the browser sent it.
    pub fetch_site: Option<String>,
    pub body: Bytes,
    pub client: Option<IpAddr>,
}

impl Request {
    pub fn query(&self, name: &str) -> Option<&str> {
        self.query.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str()).filter(|v| !v.is_empty())
    }
}
