//! A stand-in OpenTelemetry collector on a real socket: it accepts OTLP/HTTP protobuf exports on
//! `POST /v1/traces`, keeps each body as received, and decodes the spans in them.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};
use prost::Message;
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

use super::standin::{read_request, Recorded};

/// One exported span, flattened: its resource's and its own attributes as JSON values.
#[derive(Debug, Clone)]
pub struct Span {
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    /// `SpanKind` as the protocol numbers it (2 = server).
    pub kind: i32,
    pub attributes: Value,
    /// `(name, attributes)` of each event, in order.
    pub events: Vec<(String, Value)>,
    /// Status code as the protocol numbers it (0 unset, 1 ok, 2 error) and its message.
    pub status: (i32, String),
    pub resource: Value,
}

impl Span {
    pub fn attr(&self, key: &str) -> &Value {
        &self.attributes[key]
    }
}

pub struct Collector {
    pub addr: SocketAddr,
    scheme: &'static str,
    exports: Arc<Mutex<Vec<Recorded>>>,
    _rt: tokio::runtime::Runtime,
}

impl Collector {
    /// A collector on plain HTTP.
    pub fn start() -> Collector {
        Self::listen(None)
    }

    /// A collector on HTTPS with a fresh self-signed certificate for 127.0.0.1, written as PEM
    /// to `ca_file` (for the gateway's `SSL_CERT_FILE`).
    pub fn start_tls(ca_file: &std::path::Path) -> Collector {
        use tokio_rustls::rustls;
        let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
        std::fs::write(ca_file, ck.cert.pem()).unwrap();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(ck.key_pair.serialize_der().into());
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![ck.cert.der().clone()], key)
            .unwrap();
        Self::listen(Some(tokio_rustls::TlsAcceptor::from(Arc::new(config))))
    }

    fn listen(tls: Option<tokio_rustls::TlsAcceptor>) -> Collector {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let listener = rt.block_on(TcpListener::bind("127.0.0.1:0")).unwrap();
        let addr = listener.local_addr().unwrap();
        let exports = Arc::new(Mutex::new(Vec::new()));
        let kept = exports.clone();
        let scheme = if tls.is_some() { "https" } else { "http" };
        rt.spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                let (kept, tls) = (kept.clone(), tls.clone());
                tokio::spawn(async move {
                    match tls {
                        Some(acceptor) => {
                            if let Ok(s) = acceptor.accept(sock).await {
                                serve(s, kept).await
                            }
                        }
                        None => serve(sock, kept).await,
                    }
                });
            }
        });
        Collector { addr, scheme, exports, _rt: rt }
    }

    /// The base endpoint, as an operator would configure it.
    pub fn url(&self) -> String {
        format!("{}://{}", self.scheme, self.addr)
    }

    /// Every export request received, as sent.
    pub fn exports(&self) -> Vec<Recorded> {
        self.exports.lock().unwrap().clone()
    }

    /// Every span of every export, decoded.
    pub fn spans(&self) -> Vec<Span> {
        self.exports().iter().flat_map(|r| decode(&r.body)).collect()
    }

    /// The first span `pick` accepts, waiting up to 30 s for it to be exported.
    pub fn wait_span(&self, what: &str, pick: impl Fn(&Span) -> bool) -> Span {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(s) = self.spans().into_iter().find(|s| pick(s)) {
                return s;
            }
            assert!(Instant::now() < deadline, "no span {what} exported; got {:#?}", self.spans());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(mut sock: S, exports: Arc<Mutex<Vec<Recorded>>>) {
    let mut buf = Vec::new();
    while let Some(req) = read_request(&mut sock, &mut buf).await {
        let ok = req.method == "POST" && req.path == "/v1/traces";
        exports.lock().unwrap().push(req);
        // An empty ExportTraceServiceResponse: everything accepted.
        let head = if ok {
            "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n"
        } else {
            "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"
        };
        if sock.write_all(head.as_bytes()).await.is_err() {
            return;
        }
    }
}

fn decode(body: &[u8]) -> Vec<Span> {
    let req = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf trace export");
    let mut out = Vec::new();
    for rs in req.resource_spans {
        let resource = attributes(&rs.resource.map(|r| r.attributes).unwrap_or_default());
        for s in rs.scope_spans.into_iter().flat_map(|ss| ss.spans) {
            out.push(Span {
                name: s.name,
                trace_id: hex::encode(&s.trace_id),
                span_id: hex::encode(&s.span_id),
                parent_span_id: hex::encode(&s.parent_span_id),
                kind: s.kind,
                attributes: attributes(&s.attributes),
                events: s.events.iter().map(|e| (e.name.clone(), attributes(&e.attributes))).collect(),
                status: s.status.map(|st| (st.code, st.message)).unwrap_or_default(),
                resource: resource.clone(),
            });
        }
    }
    out
}

fn attributes(kvs: &[KeyValue]) -> Value {
    let mut map = serde_json::Map::new();
    for kv in kvs {
        let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
            Some(any_value::Value::StringValue(s)) => json!(s),
            Some(any_value::Value::IntValue(i)) => json!(i),
            Some(any_value::Value::DoubleValue(d)) => json!(d),
            Some(any_value::Value::BoolValue(b)) => json!(b),
            other => json!(format!("{other:?}")),
        };
        map.insert(kv.key.clone(), v);
    }
    Value::Object(map)
}
