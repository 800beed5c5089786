//! The upstream HTTP client: Pingora's pooled `Connector`, driven by us.
//!
//! The gateway reads the whole request body before it picks a provider (docs/architecture.md, "The request path and the 64 KiB trap"), so it
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
use pingora::protocols::http::v1::client::{http_req_header_to_wire, HttpSession as HttpSessionV1};
use pingora::upstreams::peer::HttpPeer;
use pingora::{Error, ErrorType, RetryType};

use tokio::io::AsyncWriteExt;

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

    /// A Unix socket (the gateway's own, for calls the management API makes through it).
    pub fn unix(path: &std::path::Path) -> BaseUrl {
        BaseUrl { tls: false, host: path.display().to_string(), port: 0, prefix: String::new() }
    }

    fn is_unix(&self) -> bool {
        self.host.starts_with('/')
    }

    /// The `Host` header value.
    pub fn authority(&self) -> String {
        if self.is_unix() {
            return "localhost".to_string();
        }
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
        let mut peer = if base.is_unix() {
            HttpPeer::new_uds(&base.host, false, String::new())
                .map_err(|e| UpstreamError::Failed(format!("socket {}: {e}", base.host)))?
        } else {
            let addr = match base.host.parse::<IpAddr>() {
                Ok(ip) => SocketAddr::new(ip, base.port),
                Err(_) => tokio::net::lookup_host((base.host.as_str(), base.port))
                    .await
                    .map_err(|e| UpstreamError::Failed(format!("cannot resolve {}: {e}", base.host)))?
                    .next()
                    .ok_or_else(|| UpstreamError::Failed(format!("{} has no address", base.host)))?,
            };
            HttpPeer::new(addr, base.tls, base.host.clone())
        };
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
    async fn session(&self, peer: &HttpPeer) -> Result<(HttpSessionV1, bool), UpstreamError> {
        if let Some(s) = self.connector.reused_http_session(peer).await {
            return Ok((s, true));
        }
        Box::pin(self.connector.get_http_session(peer)).await.map_err(|e| UpstreamError::from_pingora(&e, "connect"))
    }

    /// Sends one request and returns once the response header has arrived.
    /// Header names are the providers' `&'static str`s, or a tool server's registered names.
    pub async fn send<K: pingora::http::IntoCaseHeaderName + Clone + AsRef<str>>(
        &self,
        base: &BaseUrl,
        method: &str,
        path: &str,
        headers: &[(K, String)],
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
        let req = request_head(method, path, host, headers, &body)?;
        let session = self.exchange(base, &peer, &req, &body).await?;
        if session.response_header().is_none() {
            return Err(UpstreamError::Failed("no response header".into()));
        }
        Ok(UpstreamResponse { client: self, session, peer, done: false })
    }

    /// Writes the request and reads the answer's head. A pooled connection may have been
    /// closed by the server while idle; that is not the provider failing, so such a failure is
    /// retried once on another one. Only a dead connection (the write failed, or it closed or
    /// was reset while the answer's head was awaited) is resent: a timeout or an answer that
    /// does not parse means the provider may have the request, and a second send would run
    /// (and bill) it twice.
    async fn exchange(
        &self,
        base: &BaseUrl,
        peer: &HttpPeer,
        req: &RequestHeader,
        body: &Bytes,
    ) -> Result<Box<HttpSession>, UpstreamError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let (session, reused) = self.session(peer).await?;
            match self.send_once(session, peer, req, body).await {
                Ok(session) => return Ok(session),
                Err((err, dead)) => {
                    if !(reused && attempt == 1 && dead && matches!(err, UpstreamError::Failed(_))) {
                        return Err(err);
                    }
                    log::warn!(
                        "upstream {}: a pooled connection failed ({err}); sending on a new one",
                        base.authority()
                    );
                }
            }
        }
    }

    /// One try on one connection; the error says whether the connection was dead.
    async fn send_once(
        &self,
        session: HttpSessionV1,
        peer: &HttpPeer,
        req: &RequestHeader,
        body: &Bytes,
    ) -> Result<Box<HttpSession>, (UpstreamError, bool)> {
        let session = write_whole_request(session, peer, req, body, self.timeouts.read).await.map_err(|e| (e, true))?;
        let mut session = Box::new(HttpSession::H1(session));
        // The connector does not carry the peer's read/write timeouts into the session.
        session.set_read_timeout(Some(self.timeouts.read));
        session.set_write_timeout(Some(self.timeouts.read));
        session.read_response_header().await.map_err(|e| {
            // Pingora's own mark (what pingora-proxy retries on): the connection closed or an
            // OS error (reset) while waiting for the answer's head.
            let dead = matches!(e.retry, RetryType::ReusedOnly | RetryType::Decided(true));
            (UpstreamError::from_pingora(&e, "request"), dead)
        })?;
        Ok(session)
    }
}

/// The request head, built once: it is only read when written, so a retry writes the same
/// header again. Without Pingora's case map (standard names then go out title-cased, others as
/// given): with it each insert would also store the name a second time (see `gateway::header`).
fn request_head<K: pingora::http::IntoCaseHeaderName + Clone + AsRef<str>>(
    method: &str,
    path: &str,
    host: http::HeaderValue,
    headers: &[(K, String)],
    body: &Bytes,
) -> Result<RequestHeader, UpstreamError> {
    let length = (method != "GET" || !body.is_empty()).then(|| body.len().to_string());
    let mut req = RequestHeader::build_no_case(method, path.as_bytes(), Some(headers.len() + 2))
        .map_err(|e| UpstreamError::Failed(format!("bad request line: {e}")))?;
    let bad = |k: &str| UpstreamError::Failed(format!("invalid value for header {k}"));
    req.insert_header("host", host).map_err(|_| bad("host"))?;
    for (k, v) in headers {
        req.insert_header(k.clone(), v.as_str()).map_err(|_| bad(k.as_ref()))?;
    }
    if let Some(len) = &length {
        req.insert_header("content-length", len.as_str()).map_err(|_| bad("content-length"))?;
    }
    Ok(req)
}

/// Bodies up to this size go out in the same write as the request head.
const COALESCE_LIMIT: usize = 64 * 1024;

/// Writes the request head and body with a single flush, so a small request leaves as one
/// segment instead of two. Pingora's `write_request_header` flushes the head on its own; the
/// gateway already holds the whole body (docs/architecture.md, "The request path and the 64 KiB trap"), so it frames the request itself
/// (`content-length` is set by `send`) and hands the connection back as a fresh session to
/// read the answer (one small allocation for its digest). On loopback a second segment cost the gateway and the upstream a send, a
/// receive and a wake-up each: about a sixth of a request's CPU in the load benchmark.
async fn write_whole_request(
    session: HttpSessionV1,
    peer: &HttpPeer,
    req: &RequestHeader,
    body: &Bytes,
    timeout: Duration,
) -> Result<HttpSessionV1, UpstreamError> {
    let mut wire = http_req_header_to_wire(req)
        .ok_or_else(|| UpstreamError::Failed("request line or header not writable".into()))?;
    let mut stream = session.into_inner();
    let write = async {
        if body.len() <= COALESCE_LIMIT {
            wire.extend_from_slice(body);
            stream.write_all(&wire).await?;
        } else {
            stream.write_all(&wire).await?;
            stream.write_all(body).await?;
        }
        stream.flush().await
    };
    match tokio::time::timeout(timeout, write).await {
        Ok(Ok(())) => Ok(HttpSessionV1::new_with_options(stream, peer)),
        Ok(Err(e)) => Err(UpstreamError::Failed(format!("request: while writing the request: {e}"))),
        Err(_) => Err(UpstreamError::Timeout("request: writing the request timed out".into())),
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

/// A blocking HTTP client for the process's own small outbound calls (the OTLP exporter, the
/// log auditor): reqwest's, which runs its own runtime thread, with TLS on rustls and ring and
/// the system's trust store (read, and its absence an error, only when `https`; it honours
/// `SSL_CERT_FILE`). Built on a thread of its own: reqwest refuses to build or drop a blocking
/// client inside an async runtime, and callers may be in one.
pub fn blocking_client(timeout: Duration, https: bool) -> Result<reqwest::blocking::Client, String> {
    std::thread::spawn(move || {
        let tls = blocking_tls(https).map_err(|e| format!("TLS setup: {e}"))?;
        reqwest::blocking::Client::builder()
            .timeout(timeout)
            .tls_backend_preconfigured(tls)
            .build()
            .map_err(|e| format!("HTTP client: {e}"))
    })
    .join()
    .map_err(|_| "building an HTTP client panicked".to_string())?
}

fn blocking_tls(https: bool) -> Result<rustls::ClientConfig, rustls::Error> {
    use rustls_platform_verifier::BuilderVerifierExt;
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider).with_safe_default_protocol_versions()?;
    let builder = match https {
        true => builder.with_platform_verifier()?,
        false => builder.with_root_certificates(rustls::RootCertStore::empty()),
    };
    Ok(builder.with_no_client_auth())
}

#[cfg(test)]
pub(crate) mod tests {
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

    /// A socket that records each write the session makes (and reads nothing).
    #[derive(Debug, Clone, Default)]
    struct Writes(Arc<std::sync::Mutex<Vec<Vec<u8>>>>);

    impl tokio::io::AsyncRead for Writes {
        fn poll_read(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            _: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    impl tokio::io::AsyncWrite for Writes {
        fn poll_write(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            self.0.lock().unwrap().push(buf.to_vec());
            std::task::Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    impl pingora::protocols::l4::virt::VirtualSocket for Writes {
        fn set_socket_option(&self, _: pingora::protocols::l4::virt::VirtualSockOpt) -> std::io::Result<()> {
            Ok(())
        }
    }

    async fn writes_of(body: &[u8]) -> Vec<Vec<u8>> {
        let writes = Writes::default();
        let virt = pingora::protocols::l4::virt::VirtualSocketStream::new(Box::new(writes.clone()));
        let session = HttpSessionV1::new(Box::new(pingora::protocols::l4::stream::Stream::from(virt)));
        let peer = HttpPeer::new("127.0.0.1:9".parse::<SocketAddr>().unwrap(), false, String::new());
        let mut req = RequestHeader::build("POST", b"/v1/chat/completions", None).unwrap();
        req.insert_header("content-length", body.len().to_string()).unwrap();
        write_whole_request(session, &peer, &req, &Bytes::copy_from_slice(body), Duration::from_secs(5)).await.unwrap();
        let w = writes.0.lock().unwrap().clone();
        w
    }

    #[tokio::test]
    async fn a_small_request_is_one_write_of_head_and_body() {
        let body = br#"{"model":"gpt-4o-mini","messages":[]}"#;
        let writes = writes_of(body).await;
        assert_eq!(writes.len(), 1, "head and body in one write: {writes:?}");
        let text = String::from_utf8(writes[0].clone()).unwrap();
        assert!(text.starts_with("POST /v1/chat/completions HTTP/1.1\r\n"), "{text}");
        assert!(text.ends_with(&format!("content-length: 37\r\n\r\n{}", std::str::from_utf8(body).unwrap())), "{text}");
    }

    #[tokio::test]
    async fn a_large_body_follows_its_head_unchanged() {
        let body: Vec<u8> = (0..COALESCE_LIMIT + 5000).map(|i| b'a' + (i % 26) as u8).collect();
        let wire = writes_of(&body).await.concat();
        let head_end = wire.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        assert!(wire[head_end..] == body[..], "the body follows the head byte for byte");
    }

    fn client(ca_file: &str) -> UpstreamClient {
        let t = Duration::from_secs(5);
        UpstreamClient::new(Timeouts { connect: t, read: t, idle_pool: t }, ca_file)
    }

    /// What a stand-in upstream reads of one request: the head, then as many body bytes as its
    /// content-length names. Returns the bytes and where the body starts.
    pub(crate) async fn read_request(conn: &mut (impl tokio::io::AsyncRead + Unpin)) -> (Vec<u8>, usize) {
        use tokio::io::AsyncReadExt;
        let mut got = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        let mut framing = None;
        loop {
            if let Some((head_end, length)) = framing {
                if got.len() >= head_end + length {
                    return (got, head_end);
                }
            }
            let n = conn.read(&mut buf).await.unwrap();
            assert!(n > 0, "connection closed early");
            got.extend_from_slice(&buf[..n]);
            if framing.is_none() {
                if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&got[..i]).to_lowercase();
                    let cl = head.lines().find_map(|l| l.strip_prefix("content-length: ")).unwrap();
                    framing = Some((i + 4, cl.trim().parse::<usize>().unwrap()));
                }
            }
        }
    }

    #[tokio::test]
    async fn a_body_above_the_coalescing_limit_arrives_whole() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let body = Bytes::from((0..COALESCE_LIMIT + 5000).map(|i| b'a' + (i % 26) as u8).collect::<Vec<u8>>());
        let expected = body.clone();
        let server = tokio::spawn(async move {
            let (mut conn, _) = listener.accept().await.unwrap();
            let (got, head_end) = read_request(&mut conn).await;
            conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").await.unwrap();
            got[head_end..] == expected[..]
        });
        let base = BaseUrl::parse(&format!("http://127.0.0.1:{port}")).unwrap();
        let c = client("");
        let answer = c.send::<&str>(&base, "POST", "/v1/embeddings", &[], body).await.unwrap();
        assert_eq!(answer.header().status.as_u16(), 200);
        assert!(server.await.unwrap(), "the body arrived byte for byte");
    }

    #[tokio::test]
    async fn a_tls_upstream_trusted_through_ca_file_gets_the_whole_request() {
        use tokio_rustls::rustls;
        let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
        let dir = std::env::temp_dir().join(format!("tg-upstream-tls-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, ck.cert.pem()).unwrap();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(ck.key_pair.serialize_der().into());
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![ck.cert.der().clone()], key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let mut tls = acceptor.accept(tcp).await.unwrap();
            let (got, _) = read_request(&mut tls).await;
            tls.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nover tls!").await.unwrap();
            tls.flush().await.unwrap();
            got
        });
        let c = client(ca.to_str().unwrap());
        let base = BaseUrl::parse(&format!("https://127.0.0.1:{port}")).unwrap();
        let body = Bytes::from_static(br#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}"#);
        let mut answer = c.send::<&str>(&base, "POST", "/v1/chat/completions", &[], body.clone()).await.unwrap();
        assert_eq!(answer.header().status.as_u16(), 200);
        assert_eq!(&answer.read_all(1024).await.unwrap()[..], b"over tls!");
        let got = String::from_utf8(server.await.unwrap()).unwrap();
        assert!(got.starts_with("POST /v1/chat/completions HTTP/1.1\r\n"), "{got}");
        // Built without a case map, standard names go out title-cased, as Pingora writes them.
        assert!(got.contains(&format!("\r\nHost: 127.0.0.1:{port}\r\n")), "{got}");
        assert!(got.ends_with(&format!("\r\n\r\n{}", std::str::from_utf8(&body).unwrap())), "{got}");
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A stand-in whose first connection answers one request and then does `second` with the
    /// next one it reads; later connections answer every request. Returns the requests it read
    /// and the connections it accepted, once the client's two sends are over.
    async fn second_request_on_a_pooled_connection(second: &'static [u8]) -> (Result<u16, String>, usize, usize) {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (requests, connections) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (r, n) = (requests.clone(), connections.clone());
        let server = tokio::spawn(async move {
            loop {
                let (mut conn, _) = listener.accept().await.unwrap();
                let first = n.fetch_add(1, SeqCst) == 0;
                let r = r.clone();
                tokio::spawn(async move {
                    for i in 0.. {
                        read_request(&mut conn).await;
                        r.fetch_add(1, SeqCst);
                        if first && i == 1 {
                            let _ = conn.write_all(second).await;
                            if second.is_empty() {
                                return; // closes it without an answer
                            }
                            continue;
                        }
                        conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await.unwrap();
                    }
                });
            }
        });
        let base = BaseUrl::parse(&format!("http://127.0.0.1:{port}")).unwrap();
        let c = client("");
        let body = Bytes::from_static(b"{}");
        let mut answer = c.send::<&str>(&base, "POST", "/v1/chat/completions", &[], body.clone()).await.unwrap();
        assert_eq!(&answer.read_all(16).await.unwrap()[..], b"ok");
        answer.release().await;
        let second = match c.send::<&str>(&base, "POST", "/v1/chat/completions", &[], body).await {
            Ok(a) => Ok(a.header().status.as_u16()),
            Err(e) => Err(e.to_string()),
        };
        server.abort();
        (second, requests.load(SeqCst), connections.load(SeqCst))
    }

    #[tokio::test]
    async fn a_pooled_connection_closed_before_answering_is_resent_once_on_a_new_one() {
        let (second, requests, connections) = second_request_on_a_pooled_connection(b"").await;
        assert_eq!(second, Ok(200));
        assert_eq!((requests, connections), (3, 2), "the second request went out again on a second connection");
    }

    #[tokio::test]
    async fn an_answer_that_does_not_parse_is_not_resent() {
        // The provider has the request: a second send could run (and bill) it twice.
        let (second, requests, connections) = second_request_on_a_pooled_connection(b"HTTP/1.1 2x0 ??\r\n\r\n").await;
        assert!(second.is_err(), "{second:?}");
        assert_eq!((requests, connections), (2, 1), "sent once, on the pooled connection");
    }
}
