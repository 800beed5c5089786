//! A fast stand-in OpenAI upstream for the load benchmark (`benches/load.sh`).
//!
//! Usage: `standin_upstream 127.0.0.1:18091`
//!
//! - `POST /v1/chat/completions`: a fixed `chat.completion` JSON (~400 bytes) with
//!   `usage.prompt_tokens` 11 and `usage.completion_tokens` 7;
//! - `GET /v1/models`: a tiny model list;
//! - `POST /v1/traces`: an empty OTLP answer (all accepted), so Tollgate's traces have a sink
//!   (`TRACING=1 benches/load.sh`);
//! - anything else: a 404 JSON error.
//!
//! The request body is always read to the end and discarded, so the connection stays keep-alive.
//! One Pingora worker thread: the stand-in must cost as little CPU as possible on a 2-core machine.

use async_trait::async_trait;
use http::{Method, Response, StatusCode};
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;
use pingora::server::configuration::ServerConf;
use pingora::server::Server;
use pingora::services::listening::Service;

const CHAT_COMPLETION: &str = concat!(
    r#"{"id":"chatcmpl-standin0000000000000000000001","object":"chat.completion","created":1700000000,"#,
    r#""model":"gpt-4o-mini-2024-07-18","choices":[{"index":0,"message":{"role":"assistant","#,
    r#""content":"Hello! This is the stand-in upstream answering a benchmark request.","refusal":null},"#,
    r#""logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":11,"completion_tokens":7,"#,
    r#""total_tokens":18},"system_fingerprint":"fp_standin"}"#
);

const MODELS: &str = concat!(
    r#"{"object":"list","data":[{"id":"gpt-4o-mini","object":"model","created":1700000000,"#,
    r#""owned_by":"standin"}]}"#
);

const NOT_FOUND: &str =
    r#"{"error":{"message":"no such route on the stand-in","type":"invalid_request_error","param":null,"code":404}}"#;

struct Standin;

fn json(status: StatusCode, body: &'static str) -> Response<Vec<u8>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .header("content-length", body.len())
        .body(body.as_bytes().to_vec())
        .expect("static response is valid")
}

#[async_trait]
impl ServeHttp for Standin {
    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        // Read and discard the body so the connection can be reused.
        loop {
            match session.read_request_body().await {
                Ok(Some(_)) => continue,
                Ok(None) => break,
                Err(_) => {
                    session.set_keepalive(None);
                    break;
                }
            }
        }
        let req = session.req_header();
        match (&req.method, req.uri.path()) {
            (&Method::POST, "/v1/chat/completions") => json(StatusCode::OK, CHAT_COMPLETION),
            (&Method::GET, "/v1/models") => json(StatusCode::OK, MODELS),
            (&Method::POST, "/v1/traces") => Response::builder()
                .status(StatusCode::OK)
                .header("content-type", "application/x-protobuf")
                .header("content-length", 0)
                .body(Vec::new())
                .expect("static response is valid"),
            _ => json(StatusCode::NOT_FOUND, NOT_FOUND),
        }
    }
}

fn main() {
    let listen = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:18091".to_string());
    let tmp = std::env::temp_dir().join(format!("standin_upstream.{}", std::process::id()));
    let conf = ServerConf {
        threads: 1,
        grace_period_seconds: Some(0),
        graceful_shutdown_timeout_seconds: Some(1),
        pid_file: format!("{}.pid", tmp.display()),
        upgrade_sock: format!("{}.sock", tmp.display()),
        ..Default::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    let mut service = Service::new("standin upstream".to_string(), Standin);
    service.add_tcp(&listen);
    server.add_service(service);
    eprintln!("standin_upstream listening on {listen}");
    server.run_forever()
}
