//! A stand-in MCP tool server (Streamable HTTP, JSON-RPC 2.0) on a real socket. It records every
//! request and answers:
//! - `initialize`: a result, and an `mcp-session-id` header;
//! - `tools/list`: the tools `search` and `shell.exec`;
//! - `tools/call`: a text result echoing its `arguments` as JSON; of `search_sse`, the same as
//!   an SSE answer (a progress notification, then the result event);
//! - `tools/call` of `broken`: a JSON-RPC error;
//! - anything else with an id: an empty result; notifications: `202 Accepted`.

use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use super::standin::{read_request, write_json, Recorded};

pub struct McpStandin {
    pub addr: std::net::SocketAddr,
    log: Arc<Mutex<Vec<Recorded>>>,
    _rt: tokio::runtime::Runtime,
}

impl McpStandin {
    pub fn start() -> McpStandin {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let listener = rt.block_on(TcpListener::bind("127.0.0.1:0")).unwrap();
        let addr = listener.local_addr().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let l = log.clone();
        rt.spawn(async move {
            loop {
                let Ok((sock, _)) = listener.accept().await else { return };
                let l = l.clone();
                tokio::spawn(async move {
                    let _ = serve(sock, l).await;
                });
            }
        });
        McpStandin { addr, log, _rt: rt }
    }

    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.log.lock().unwrap().clone()
    }

    /// The `tools/call` requests it received.
    pub fn calls(&self) -> Vec<Value> {
        self.requests()
            .iter()
            .filter(|r| !r.body.is_empty())
            .filter_map(|r| serde_json::from_slice::<Value>(&r.body).ok())
            .filter(|v| v["method"] == "tools/call")
            .collect()
    }
}

async fn serve(mut sock: TcpStream, log: Arc<Mutex<Vec<Recorded>>>) -> std::io::Result<()> {
    let mut buf = Vec::new();
    while let Some(req) = read_request(&mut sock, &mut buf).await {
        log.lock().unwrap().push(req.clone());
        if req.method == "DELETE" {
            sock.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").await?;
            continue;
        }
        if req.method == "GET" {
            sock.write_all(b"HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n").await?;
            continue;
        }
        let msg: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        let id = msg.get("id").cloned();
        let Some(id) = id else {
            sock.write_all(b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n").await?;
            continue;
        };
        let method = msg["method"].as_str().unwrap_or_default();
        let tool = msg.pointer("/params/name").and_then(Value::as_str).unwrap_or_default();
        let result = match method {
            "initialize" => json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                "serverInfo": {"name": "standin", "version": "1"}}),
            "tools/list" => json!({"tools": [
                {"name": "search", "inputSchema": {"type": "object"}},
                {"name": "shell.exec", "inputSchema": {"type": "object"}},
            ]}),
            "tools/call" if tool == "broken" => {
                let e = json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32000, "message": "it broke"}});
                write_json(&mut sock, 200, &e).await?;
                continue;
            }
            "tools/call" => {
                let args = msg.pointer("/params/arguments").cloned().unwrap_or(Value::Null);
                json!({"content": [{"type": "text", "text": format!("args {args}")}], "isError": false})
            }
            _ => json!({}),
        };
        let answer = json!({"jsonrpc": "2.0", "id": id, "result": result});
        if tool == "search_sse" {
            let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progressToken": 1, "progress": 1}});
            let body = format!("event: message\ndata: {progress}\n\nevent: message\ndata: {answer}\n\n");
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nmcp-session-id: s-1\r\ncontent-length: {}\r\n\r\n",
                body.len()
            );
            sock.write_all(head.as_bytes()).await?;
            sock.write_all(body.as_bytes()).await?;
            continue;
        }
        let b = serde_json::to_vec(&answer).unwrap();
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nmcp-session-id: s-1\r\ncontent-length: {}\r\n\r\n",
            b.len()
        );
        sock.write_all(head.as_bytes()).await?;
        sock.write_all(&b).await?;
    }
    Ok(())
}
