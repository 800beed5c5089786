//! A stand-in provider upstream on a real socket. It records every request byte for byte and
//! answers like OpenAI or Anthropic would. Behaviour is chosen by the request:
//! - model `gpt-hang`: never answers (for upstream timeouts);
//! - model `gpt-fail`: HTTP 500 with an OpenAI error body;
//! - model `gpt-busy`: HTTP 429 with `retry-after: 7` and an OpenAI error body;
//! - model `gpt-slow`: answers normally after one second (requests in flight for a while);
//! - `"stream": true`: SSE; when the stand-in is gated, it sends the first event, then waits
//!   for [`Standin::release`] before the rest (to prove the gateway does not buffer);
//! - a last message whose text starts with `ECHO:`: the answer text is the rest of it, and a
//!   streamed answer sends each `|`-separated piece as its own event (to split text on purpose);
//! - a last message whose text starts with `DELAY:<ms>` (digits, then anything): answers
//!   normally after that many milliseconds (requests of distinct, known latencies);
//! - a last message whose text starts with `USAGE:<n>`: a chat answer reports `n` completion
//!   tokens (11 prompt tokens as always), to use up token limits with few requests;
//! - a last message whose text is `CACHE:<read>,<write>`: the usage reports prompt-cache tokens
//!   as each provider does. OpenAI: `prompt_tokens` 11 + read, of them `cached_tokens` read
//!   (writes are not an OpenAI count), and 3 of the 7 completion tokens as `reasoning_tokens`.
//!   Anthropic: `input_tokens` 13 plus `cache_read_input_tokens` read and
//!   `cache_creation_input_tokens` write, in the JSON answer, in `message_start` and again
//!   (cumulative, as the API now sends them) in `message_delta`;
//! - `/v1/responses` and its stored-response calls: [`super::standin_responses`];
//! - the failures routes fall back from, a target that recovers and one that holds its
//!   requests until released: [`super::standin_routes`].

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

pub struct Standin {
    pub addr: SocketAddr,
    log: Arc<Mutex<Vec<Recorded>>>,
    gate: Arc<Semaphore>,
    gated: Arc<std::sync::atomic::AtomicBool>,
    refuse_tokens: Arc<std::sync::atomic::AtomicBool>,
    /// Permits for requests of model `gpt-held` ([`Standin::release_held`]).
    held: Arc<Semaphore>,
    _rt: tokio::runtime::Runtime,
}

impl Standin {
    pub fn start() -> Standin {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let listener = rt.block_on(TcpListener::bind("127.0.0.1:0")).unwrap();
        let addr = listener.local_addr().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let gate = Arc::new(Semaphore::new(0));
        let gated = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let refuse_tokens = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let held = Arc::new(Semaphore::new(0));
        let (l, g, gd, rt_, h) = (log.clone(), gate.clone(), gated.clone(), refuse_tokens.clone(), held.clone());
        rt.spawn(async move {
            loop {
                let Ok((sock, _)) = listener.accept().await else { return };
                let (l, g, gd, r, h) = (l.clone(), g.clone(), gd.clone(), rt_.clone(), h.clone());
                tokio::spawn(async move {
                    let _ = serve_conn(sock, l, g, gd, r, h).await;
                });
            }
        });
        Standin { addr, log, gate, gated, refuse_tokens, held, _rt: rt }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.log.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.log.lock().unwrap().len()
    }

    /// From now on, streams pause after their first event until [`Standin::release`].
    pub fn gate_streams(&self) {
        self.gated.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn release(&self) {
        self.gate.add_permits(1);
    }

    /// Lets `n` requests of model `gpt-held` answer.
    pub fn release_held(&self, n: usize) {
        self.held.add_permits(n);
    }

    /// From now on, the token endpoint refuses every grant (`invalid_grant`).
    pub fn refuse_tokens(&self) {
        self.refuse_tokens.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// One HTTP/1.1 request with a `content-length` body off `sock` (`buf` keeps what was read past it).
pub async fn read_request<S: tokio::io::AsyncRead + Unpin>(sock: &mut S, buf: &mut Vec<u8>) -> Option<Recorded> {
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let mut tmp = [0u8; 65536];
        let n = sock.read(&mut tmp).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split_whitespace();
    let (method, path) = (first.next()?.to_string(), first.next()?.to_string());
    let headers: Vec<(String, String)> =
        lines.filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim().to_lowercase(), v.trim().to_string())).collect();
    let len: usize = headers.iter().find(|(k, _)| k == "content-length").map(|(_, v)| v.parse().unwrap()).unwrap_or(0);
    while buf.len() < head_end + len {
        let mut tmp = vec![0u8; 1 << 20];
        let n = sock.read(&mut tmp).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
    }
    let body = buf[head_end..head_end + len].to_vec();
    buf.drain(..head_end + len);
    Some(Recorded { method, path, headers, body })
}

async fn serve_conn(
    mut sock: TcpStream,
    log: Arc<Mutex<Vec<Recorded>>>,
    gate: Arc<Semaphore>,
    gated: Arc<std::sync::atomic::AtomicBool>,
    refuse_tokens: Arc<std::sync::atomic::AtomicBool>,
    held: Arc<Semaphore>,
) -> std::io::Result<()> {
    let mut buf = Vec::new();
    while let Some(req) = read_request(&mut sock, &mut buf).await {
        log.lock().unwrap().push(req.clone());
        let refuse = refuse_tokens.load(std::sync::atomic::Ordering::SeqCst);
        match super::standin_cloud::serve(&mut sock, &req, refuse).await? {
            Some(true) => return Ok(()),
            Some(false) => continue,
            None => {}
        }
        match super::standin_routes::serve(&mut sock, &req, &log, &held).await? {
            Some(true) => return Ok(()),
            Some(false) => continue,
            None => {}
        }
        match super::standin_responses::serve(&mut sock, &req, &gate, &gated).await? {
            Some(true) => return Ok(()),
            Some(false) => continue,
            None => {}
        }
        let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        let model = body.get("model").and_then(Value::as_str).unwrap_or("").to_string();
        if model == "gpt-hang" {
            std::future::pending::<()>().await;
        }
        if model == "gpt-slow" {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
        if let Some(ms) = delay_ms(&body) {
            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
        }
        if model == "gpt-busy" {
            let b = serde_json::to_vec(
                &json!({"error": {"message": "slow down", "type": "requests", "code": "rate_limit_exceeded"}}),
            )
            .unwrap();
            let head = format!(
                "HTTP/1.1 429 X\r\ncontent-type: application/json\r\nretry-after: 7\r\ncontent-length: {}\r\n\r\n",
                b.len()
            );
            sock.write_all(head.as_bytes()).await?;
            sock.write_all(&b).await?;
            continue;
        }
        if model == "claude-overloaded" {
            let b = json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
            write_json(&mut sock, 529, &b).await?;
            continue;
        }
        if req.path.split('?').next() == Some("/v1/messages/count_tokens") {
            write_json(&mut sock, 200, &json!({"input_tokens": 42})).await?;
            continue;
        }
        if model == "gpt-fail" {
            let b =
                json!({"error": {"message": "stand-in failure", "type": "server_error", "param": null, "code": null}});
            write_json(&mut sock, 500, &b).await?;
            continue;
        }
        let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
        let echo = echo_text(&body);
        let completion_tokens = last_text(&body)
            .and_then(|t| t.strip_prefix("USAGE:").and_then(|n| n.trim().parse::<u64>().ok()))
            .unwrap_or(7);
        let cache = cache_marker(&body);
        let usage = match cache {
            Some((read, _)) => json!({"prompt_tokens": 11 + read, "completion_tokens": completion_tokens,
                "total_tokens": 11 + read + completion_tokens, "prompt_tokens_details": {"cached_tokens": read},
                "completion_tokens_details": {"reasoning_tokens": 3}}),
            None => {
                json!({"prompt_tokens": 11, "completion_tokens": completion_tokens, "total_tokens": 11 + completion_tokens})
            }
        };
        let reply = echo.clone().map(|e| e.replace('|', "")).unwrap_or_else(|| "Hello from stand-in".to_string());
        let pieces: Vec<String> = match &echo {
            Some(e) => e.split('|').map(str::to_string).collect(),
            None => vec!["Hello".into(), " from stand-in".into()],
        };
        match (req.path.as_str(), stream) {
            ("/v1/models", _) => {
                write_json(
                    &mut sock,
                    200,
                    &json!({"object": "list", "data": [{"id": "gpt-4o-mini", "object": "model"}]}),
                )
                .await?
            }
            ("/v1/embeddings", _) => {
                let b = json!({"object": "list", "model": model, "data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2]}],
                                "usage": {"prompt_tokens": 5, "total_tokens": 5}});
                write_json(&mut sock, 200, &b).await?
            }
            ("/v1/chat/completions", false) => {
                let b = json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": model,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}],
                    "usage": usage});
                write_json(&mut sock, 200, &b).await?
            }
            ("/v1/chat/completions", true) => {
                let include_usage =
                    body.pointer("/stream_options/include_usage").and_then(Value::as_bool) == Some(true);
                let chunk = |delta: Value, finish: Value| {
                    json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": model,
                           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
                };
                let mut events = vec![chunk(json!({"role": "assistant", "content": pieces[0]}), Value::Null)];
                for p in &pieces[1..] {
                    events.push(chunk(json!({"content": p}), Value::Null));
                }
                events.push(chunk(json!({}), json!("stop")));
                if include_usage {
                    events.push(
                        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": model,
                        "choices": [], "usage": usage}),
                    );
                }
                let mut texts: Vec<String> = events.iter().map(|e| format!("data: {e}\n\n")).collect();
                texts.push("data: [DONE]\n\n".into());
                write_sse(&mut sock, &texts, &gate, &gated).await?;
                return Ok(());
            }
            ("/v1/messages", false) if last_text(&body).as_deref() == Some("TOOLS") => {
                let b = json!({"id": "msg_1", "type": "message", "role": "assistant", "model": model,
                    "content": [
                        {"type": "tool_use", "id": "toolu_0", "name": "get_weather", "input": {"city": "Paris"}},
                        {"type": "tool_use", "id": "toolu_1", "name": "get_time", "input": {"zone": "CET"}}],
                    "stop_reason": "tool_use", "stop_sequence": null, "usage": {"input_tokens": 13, "output_tokens": 6}});
                write_json(&mut sock, 200, &b).await?
            }
            ("/v1/messages", true) if last_text(&body).as_deref() == Some("TOOLS") => {
                write_sse(&mut sock, &anthropic_tool_stream(&model), &gate, &gated).await?;
                return Ok(());
            }
            ("/v1/messages", false) => {
                let b = json!({"id": "msg_1", "type": "message", "role": "assistant", "model": model,
                    "content": [{"type": "text", "text": reply}], "stop_reason": "end_turn",
                    "stop_sequence": null, "usage": anthropic_usage(cache, 6)});
                write_json(&mut sock, 200, &b).await?
            }
            ("/v1/messages", true) => {
                let ev = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
                let mut texts = vec![
                    ev(
                        "message_start",
                        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
                        "model": model, "content": [], "stop_reason": null, "stop_sequence": null,
                        "usage": anthropic_usage(cache, 1)}}),
                    ),
                    ev(
                        "content_block_start",
                        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
                    ),
                ];
                for p in &pieces {
                    texts.push(ev(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}}),
                    ));
                }
                texts.extend([
                    ev("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
                    ev(
                        "message_delta",
                        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null},
                            "usage": if cache.is_some() { anthropic_usage(cache, 6) } else { json!({"output_tokens": 6}) }}),
                    ),
                    ev("message_stop", json!({"type": "message_stop"})),
                ]);
                write_sse(&mut sock, &texts, &gate, &gated).await?;
                return Ok(());
            }
            _ => write_json(&mut sock, 404, &json!({"error": {"message": "no such route"}})).await?,
        }
    }
    Ok(())
}

/// An Anthropic stream of two parallel tool calls, their arguments in two pieces each.
fn anthropic_tool_stream(model: &str) -> Vec<String> {
    let ev = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
    let mut texts = vec![ev(
        "message_start",
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
            "model": model, "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 13, "output_tokens": 1}}}),
    )];
    for (i, (id, name, args)) in
        [("toolu_0", "get_weather", r#"{"city":"Paris"}"#), ("toolu_1", "get_time", r#"{"zone":"CET"}"#)]
            .into_iter()
            .enumerate()
    {
        texts.push(ev(
            "content_block_start",
            json!({"type": "content_block_start", "index": i,
                "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
        ));
        let (a, b) = args.split_at(args.len() / 2);
        for part in [a, b] {
            texts.push(ev(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": part}}),
            ));
        }
        texts.push(ev("content_block_stop", json!({"type": "content_block_stop", "index": i})));
    }
    texts.push(ev(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 6}}),
    ));
    texts.push(ev("message_stop", json!({"type": "message_stop"})));
    texts
}

/// `(read, write)` of a last message `CACHE:<read>,<write>`.
fn cache_marker(body: &Value) -> Option<(u64, u64)> {
    let text = last_text(body)?;
    let (read, write) = text.strip_prefix("CACHE:")?.split_once(',')?;
    Some((read.trim().parse().ok()?, write.trim().parse().ok()?))
}

/// Anthropic's `usage`: 13 uncached input tokens, the cache counts apart from them.
fn anthropic_usage(cache: Option<(u64, u64)>, output_tokens: u64) -> Value {
    match cache {
        Some((read, write)) => json!({"input_tokens": 13, "cache_creation_input_tokens": write,
            "cache_read_input_tokens": read, "output_tokens": output_tokens}),
        None => json!({"input_tokens": 13, "output_tokens": output_tokens}),
    }
}

/// The milliseconds of a last message `DELAY:<ms>…`.
fn delay_ms(body: &Value) -> Option<u64> {
    let text = last_text(body)?;
    let digits: String = text.strip_prefix("DELAY:")?.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// The text after `ECHO:` in the last message.
fn echo_text(body: &Value) -> Option<String> {
    last_text(body)?.strip_prefix("ECHO:").map(str::to_string)
}

/// The text of the last message (string content or text parts).
fn last_text(body: &Value) -> Option<String> {
    let last = body.get("messages")?.as_array()?.last()?;
    match last.get("content")? {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => Some(parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect()),
        _ => None,
    }
}

pub async fn write_json(sock: &mut TcpStream, status: u16, body: &Value) -> std::io::Result<()> {
    let b = serde_json::to_vec(body).unwrap();
    let head = format!("HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n", b.len());
    sock.write_all(head.as_bytes()).await?;
    sock.write_all(&b).await
}

pub async fn write_sse(
    sock: &mut TcpStream,
    events: &[String],
    gate: &Semaphore,
    gated: &std::sync::atomic::AtomicBool,
) -> std::io::Result<()> {
    sock.write_all(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n",
    )
    .await?;
    for (i, e) in events.iter().enumerate() {
        sock.write_all(e.as_bytes()).await?;
        sock.flush().await?;
        if i == 0 && gated.load(std::sync::atomic::Ordering::SeqCst) {
            gate.acquire().await.unwrap().forget();
        }
    }
    sock.shutdown().await
}
