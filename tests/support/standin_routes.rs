//! The stand-in's failures for routes and fallbacks (`tests/routes.rs`), chosen by the model a
//! request names:
//! - `gpt-reset`: the connection closes without an answer (a connect-level failure);
//! - `gpt-unavailable`: HTTP 503 with `retry-after-ms: 30`;
//! - `claude-overloaded-x`: HTTP 529 (Anthropic's overloaded);
//! - `gpt-exhausted`: a normal answer that says the key's request limit is used up
//!   (`x-ratelimit-remaining-requests: 0`, `x-ratelimit-reset-requests: 2s`);
//! - `gpt-stream-break`: a stream's head and first event, then the connection closes before the
//!   stream's end;
//! - `gpt-bad-request`: HTTP 400 (the request's own fault: never retried);
//! - `gpt-recover-<n>`: HTTP 503 to its first `n` requests (counted over every connection),
//!   then normal answers: a target that fails, then recovers;
//! - `gpt-held`: a normal answer once [`super::Standin::release_held`] lets it (requests kept in
//!   flight for as long as a test needs, without a timed wait).

use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

use super::standin::Recorded;

/// Some(true): the connection is done; Some(false): answered, keep reading; None: not ours (or
/// ours, and answered normally by the caller). `log` holds every request so far, this one last.
pub async fn serve(
    sock: &mut TcpStream,
    req: &Recorded,
    log: &Mutex<Vec<Recorded>>,
    held: &Arc<Semaphore>,
) -> std::io::Result<Option<bool>> {
    let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
    let model = body.get("model").and_then(Value::as_str).unwrap_or("");
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    if let Some(n) = model.strip_prefix("gpt-recover-").and_then(|n| n.parse::<usize>().ok()) {
        let before = log.lock().unwrap().iter().filter(|r| model_of(r) == model).count() - 1;
        if before >= n {
            return Ok(None);
        }
        let b = json!({"error": {"message": "down for now", "type": "server_error"}});
        super::standin::write_json(sock, 503, &b).await?;
        return Ok(Some(false));
    }
    if model == "gpt-held" {
        held.acquire().await.expect("the semaphore is never closed").forget();
        return Ok(None);
    }
    match model {
        "gpt-reset" => Ok(Some(true)),
        "gpt-unavailable" => {
            let b = serde_json::to_vec(&json!({"error": {"message": "try later", "type": "server_error"}})).unwrap();
            let head = format!(
                "HTTP/1.1 503 X\r\ncontent-type: application/json\r\nretry-after-ms: 30\r\ncontent-length: {}\r\n\r\n",
                b.len()
            );
            sock.write_all(head.as_bytes()).await?;
            sock.write_all(&b).await?;
            Ok(Some(false))
        }
        "gpt-bad-request" => {
            let b = json!({"error": {"message": "bad request", "type": "invalid_request_error"}});
            super::standin::write_json(sock, 400, &b).await?;
            Ok(Some(false))
        }
        "gpt-exhausted" => {
            let b = serde_json::to_vec(&chat_answer(model, "from the exhausted key")).unwrap();
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-ratelimit-remaining-requests: 0\r\n\
                 x-ratelimit-reset-requests: 2s\r\ncontent-length: {}\r\n\r\n",
                b.len()
            );
            sock.write_all(head.as_bytes()).await?;
            sock.write_all(&b).await?;
            Ok(Some(false))
        }
        "gpt-stream-break" if stream => {
            // Chunked, and closed before the last chunk: a stream that breaks off.
            sock.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
                .await?;
            let chunk = json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": model,
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}, "finish_reason": null}]});
            let event = format!("data: {chunk}\n\n");
            sock.write_all(format!("{:x}\r\n{event}\r\n", event.len()).as_bytes()).await?;
            sock.flush().await?;
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            Ok(Some(true))
        }
        _ => Ok(None),
    }
}

fn model_of(r: &Recorded) -> String {
    let body: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
    body.get("model").and_then(Value::as_str).unwrap_or("").to_string()
}

fn chat_answer(model: &str, text: &str) -> Value {
    json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}})
}
