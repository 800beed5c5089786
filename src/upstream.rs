//! The upstream HTTP client: Pingora's pooled `Connector`, driven by us.
//!
//! The gateway reads the whole request body before it picks a provider (DESIGN.md §2), so it
//! runs the upstream leg itself with this client instead of letting pingora-proxy replay a
//! body from its 64 KiB retry buffer. The management API uses the same client for provider tests.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use pingora::connectors::http::v1::Connector;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::protocols::http::client::HttpSession;
use pingora::upstreams::peer::HttpPeer;
use pingora::{Error, ErrorType};

/// A provider base URL: scheme, host, port and an optional path prefix (no trailing `/v1`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseUrl {
    pub tls: bool,
    pub host: String,
    pub port: u16,
    pub prefix: String,
}

impl BaseUrl {
    pub fn parse(s: &str) -> Result<BaseUrl, String> {
        let uri: http::Uri = s.trim().parse().map_err(|_| format!("`{s}` is not a URL"))?;
        let tls = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(format!("`{s}` must start with http:// or https://")),
        };
        let host = uri.host().ok_or_else(|| format!("`{s}` has no host"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
        if uri.query().is_some() {
            return Err(format!("`{s}` must not have a query string"));
        }
        let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
        // Clients often paste the SDK-style base (".../v1"); routes already start with /v1.
        let mut prefix = uri.path().trim_end_matches('/').to_string();
        if prefix.ends_with("/v1") {
            prefix.truncate(prefix.len() - 3);
        }
        Ok(BaseUrl { tls, host, port, prefix })
    }

    /// The `Host` header value.
    pub fn authority(&self) -> String {
        let default = if self.tls { 443 } else { 80 };
        let host = if self.host.contains(':') { format!("[{}]", self.host) } else { self.host.clone() };
        if self.port == default {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub connect: Duration,
    pub read: Duration,
    pub idle_pool: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("upstream timed out: {0}")]
    Timeout(String),
    #[error("upstream failed: {0}")]
    Failed(String),
}

impl UpstreamError {
    fn from_pingora(e: &Error, during: &str) -> Self {
        let text = format!("{during}: {e}");
        match e.etype() {
            ErrorType::ConnectTimedout
            | ErrorType::ReadTimedout
            | ErrorType::WriteTimedout
            | ErrorType::TLSHandshakeTimedout => UpstreamError::Timeout(text),
            _ => UpstreamError::Failed(text),
        }
    }
}

pub struct UpstreamClient {
    connector: Connector,
    /// One peer per upstream (TLS, host, port), resolved at most every [`DNS_TTL`]: building an
    /// `HttpPeer` per request cost allocations, and carrying its 672 bytes through the relay
    /// made every answer's futures larger (and copied more) than they need to be.
    /// By host (looked up by `&str`, no key built per request), then TLS flag and port.
    peers: RwLock<HashMap<String, Vec<Upstream>>>,
    pub timeouts: Timeouts,
}

const DNS_TTL: Duration = Duration::from_secs(60);

/// What every request to one upstream shares: its peer and `Host` value, and when it was resolved.
#[derive(Clone)]
struct Upstream {
    tls: bool,
    port: u16,
    peer: Arc<HttpPeer>,
    host: http::HeaderValue,
    resolved: Instant,
}

impl UpstreamClient {
    /// `ca_file`: a PEM bundle trusted instead of the system store (empty: system store).
    pub fn new(timeouts: Timeouts, ca_file: &str) -> Self {
        let options = (!ca_file.is_empty()).then(|| {
            let conf =
                pingora::server::configuration::ServerConf { ca_file: Some(ca_file.to_string()), ..Default::default() };
            pingora::connectors::ConnectorOptions::from_server_conf(&conf)
        });
        UpstreamClient { connector: Connector::new(options), peers: RwLock::new(HashMap::new()), timeouts }
    }

    /// The peer for `base`, resolved without blocking (HttpPeer::new would block and panic on
    /// failure) and kept for [`DNS_TTL`].
    async fn upstream(&self, base: &BaseUrl) -> Result<Upstream, UpstreamError> {
        let cached = self.peers.read().ok().and_then(|m| {
            let u = m.get(base.host.as_str())?.iter().find(|u| u.tls == base.tls && u.port == base.port)?;
            (u.resolved.elapsed() < DNS_TTL).then(|| u.clone())
        });
        if let Some(u) = cached {
            return Ok(u);
        }
        let addr = match base.host.parse::<IpAddr>() {
            Ok(ip) => SocketAddr::new(ip, base.port),
            Err(_) => tokio::net::lookup_host((base.host.as_str(), base.port))
                .await
                .map_err(|e| UpstreamError::Failed(format!("cannot resolve {}: {e}", base.host)))?
                .next()
                .ok_or_else(|| UpstreamError::Failed(format!("{} has no address", base.host)))?,
        };
        let mut peer = HttpPeer::new(addr, base.tls, base.host.clone());
        peer.options.connection_timeout = Some(self.timeouts.connect);
        peer.options.total_connection_timeout = Some(self.timeouts.connect);
        peer.options.read_timeout = Some(self.timeouts.read);
        peer.options.write_timeout = Some(self.timeouts.read);
        peer.options.idle_timeout = Some(self.timeouts.idle_pool);
        let host = http::HeaderValue::from_str(&base.authority())
            .map_err(|_| UpstreamError::Failed(format!("invalid host `{}`", base.host)))?;
        let u = Upstream { tls: base.tls, port: base.port, peer: Arc::new(peer), host, resolved: Instant::now() };
        if let Ok(mut m) = self.peers.write() {
            let same_host = m.entry(base.host.clone()).or_default();
            same_host.retain(|old| !(old.tls == u.tls && old.port == u.port));
            same_host.push(u.clone());
        }
        Ok(u)
    }

    /// A pooled connection, or a new one. Peers are HTTP/1.1 only (no ALPN), so this is the
    /// HTTP/1 connector Pingora's generic one would pick. The pool is asked first with its own
    /// small future; connecting (TCP, TLS) is a large future, so it is boxed and built only
    /// when a connection must be made, instead of being part of, and copied with, every request.
    async fn session(&self, peer: &HttpPeer) -> Result<(HttpSession, bool), UpstreamError> {
        if let Some(s) = self.connector.reused_http_session(peer).await {
            return Ok((HttpSession::H1(s), true));
        }
        let (s, reused) = Box::pin(self.connector.get_http_session(peer))
            .await
            .map_err(|e| UpstreamError::from_pingora(&e, "connect"))?;
        Ok((HttpSession::H1(s), reused))
    }

    /// Sends one request and returns once the response header has arrived.
    pub async fn send(
        &self,
        base: &BaseUrl,
        method: &str,
        path: &str,
        headers: &[(&'static str, String)],
        body: Bytes,
    ) -> Result<UpstreamResponse<'_>, UpstreamError> {
        let Upstream { peer, host, .. } = self.upstream(base).await?;
        let full_path;
        let path = if base.prefix.is_empty() {
            path
        } else {
            full_path = format!("{}{}", base.prefix, path);
            &full_path
        };
        let length = (method != "GET" || !body.is_empty()).then(|| body.len().to_string());
        // Built per attempt (a retry needs a fresh one) rather than built once and deep-cloned.
        let build = || -> Result<Box<RequestHeader>, UpstreamError> {
            let mut req = RequestHeader::build(method, path.as_bytes(), Some(headers.len() + 2))
                .map_err(|e| UpstreamError::Failed(format!("bad request line: {e}")))?;
            let bad = |k: &str| UpstreamError::Failed(format!("invalid value for header {k}"));
            req.insert_header("host", host.clone()).map_err(|_| bad("host"))?;
            for (k, v) in headers {
                req.insert_header(*k, v.as_str()).map_err(|_| bad(k))?;
            }
            if let Some(len) = &length {
                req.insert_header("content-length", len.as_str()).map_err(|_| bad("content-length"))?;
            }
            Ok(Box::new(req))
        };

        // A pooled connection may have been closed by the server while idle; that is not the
        // provider failing, so such a failure (never a timeout) is retried once on another one.
        let mut attempt = 0;
        let session = loop {
            attempt += 1;
            let (session, reused) = self.session(&peer).await?;
            let mut session = Box::new(session);
            // The connector does not carry the peer's read/write timeouts into the session.
            session.set_read_timeout(Some(self.timeouts.read));
            session.set_write_timeout(Some(self.timeouts.read));
            let req = build()?;
            let sent = async {
                session.write_request_header(req).await?;
                if !body.is_empty() {
                    session.write_request_body(body.clone(), true).await?;
                }
                session.finish_request_body().await?;
                session.read_response_header().await
            }
            .await;
            match sent {
                Ok(()) => break session,
                Err(e) => {
                    let err = UpstreamError::from_pingora(&e, "request");
                    if !(reused && attempt == 1 && matches!(err, UpstreamError::Failed(_))) {
                        return Err(err);
                    }
                }
            }
        };
        if session.response_header().is_none() {
            return Err(UpstreamError::Failed("no response header".into()));
        }
        Ok(UpstreamResponse { client: self, session, peer, done: false })
    }
}

/// Small on purpose: it travels through the relay's futures, which are copied when boxed.
pub struct UpstreamResponse<'a> {
    client: &'a UpstreamClient,
    session: Box<HttpSession>,
    peer: Arc<HttpPeer>,
    done: bool,
}

impl UpstreamResponse<'_> {
    /// The answer's header, as the session holds it (read before the body; never cloned).
    pub fn header(&self) -> &ResponseHeader {
        static NONE: std::sync::OnceLock<ResponseHeader> = std::sync::OnceLock::new();
        // `send` only returns sessions that hold a response header.
        self.session.response_header().unwrap_or_else(|| NONE.get_or_init(|| ResponseHeader::build(502, None).unwrap()))
    }

    /// The next body chunk; `None` at the end of the body.
    pub async fn next_chunk(&mut self) -> Result<Option<Bytes>, UpstreamError> {
        if self.done {
            return Ok(None);
        }
        match self.session.read_response_body().await {
            Ok(Some(b)) => Ok(Some(b)),
            Ok(None) => {
                self.done = true;
                Ok(None)
            }
            Err(e) => Err(UpstreamError::from_pingora(&e, "reading response body")),
        }
    }

    /// Reads the whole body, up to `limit` bytes.
    pub async fn read_all(&mut self, limit: usize) -> Result<Bytes, UpstreamError> {
        let mut buf = bytes::BytesMut::new();
        while let Some(c) = self.next_chunk().await? {
            if buf.len() + c.len() > limit {
                return Err(UpstreamError::Failed(format!("response larger than {limit} bytes")));
            }
            buf.extend_from_slice(&c);
        }
        Ok(buf.freeze())
    }

    /// Returns a fully read connection to the pool; an unfinished one is dropped (closed).
    pub async fn release(self) {
        if self.done {
            let idle = Some(self.client.timeouts.idle_pool);
            if let HttpSession::H1(s) = *self.session {
                self.client.connector.release_http_session(s, &*self.peer, idle).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls() {
        let b = BaseUrl::parse("https://api.openai.com").unwrap();
        assert_eq!((b.tls, b.host.as_str(), b.port, b.prefix.as_str()), (true, "api.openai.com", 443, ""));
        assert_eq!(b.authority(), "api.openai.com");
        let b = BaseUrl::parse("http://127.0.0.1:9000/v1/").unwrap();
        assert_eq!((b.tls, b.port, b.prefix.as_str()), (false, 9000, ""));
        assert_eq!(b.authority(), "127.0.0.1:9000");
        let b = BaseUrl::parse("https://gw.example.com/openai/v1").unwrap();
        assert_eq!(b.prefix, "/openai");
        assert!(BaseUrl::parse("ftp://x").is_err());
        assert!(BaseUrl::parse("not a url").is_err());
    }
}
