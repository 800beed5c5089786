//! The stand-in's Bedrock, Vertex and Google-token answers (see [`super::standin`]):
//! - `POST /token`: an OAuth2 token endpoint; answers `ya29.standin` to any JWT-bearer grant
//!   (the test verifies the recorded assertion itself), 400 `invalid_grant` when the stand-in
//!   was told to refuse;
//! - `POST /model/{id}/converse[-stream]`: Bedrock Converse, refused with 403 unless the request
//!   carries a SigV4 `authorization`, 400 `ValidationException` for empty `messages` (the
//!   provider test's call); streams in real AWS event-stream frames;
//! - `POST /v1/projects/{p}/locations/{l}/publishers/google/models/{m}:generateContent` and
//!   `:streamGenerateContent` (SSE with `alt=sse`): Gemini, 401 without the stand-in's token.
//!
//! As for OpenAI and Anthropic: a last message `ECHO:a|b` answers `ab` (streamed as `a`, `b`),
//! and a last message `TOOLS` answers two parallel tool calls (`get_weather`, `get_time`).
//! A model id with `unavailable` in it answers 503, in each API's error shape (for routes).

use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::standin::{write_json, Recorded};
use tollgate::providers::eventstream::{encode_event, encode_exception};

pub const TOKEN: &str = "ya29.standin";

/// What the stand-in answers for this request, if it is one of the cloud APIs.
pub async fn serve(sock: &mut TcpStream, req: &Recorded, refuse_tokens: bool) -> std::io::Result<Option<bool>> {
    let path = req.path.as_str();
    if path == "/token" {
        if refuse_tokens {
            let b = json!({"error": "invalid_grant", "error_description": "Invalid JWT Signature."});
            write_json(sock, 400, &b).await?;
        } else {
            write_json(sock, 200, &json!({"access_token": TOKEN, "expires_in": 3599, "token_type": "Bearer"})).await?;
        }
        return Ok(Some(false));
    }
    if let Some(rest) = path.strip_prefix("/model/") {
        return bedrock(sock, req, rest).await.map(Some);
    }
    if path.starts_with("/v1/projects/") {
        return vertex(sock, req, path).await.map(Some);
    }
    Ok(None)
}

/// The text of the last Converse message or Gemini turn.
fn last_text(body: &Value, list: &str, parts: &str) -> String {
    let last = body.get(list).and_then(Value::as_array).and_then(|l| l.last());
    let parts = last.and_then(|m| m.get(parts)).and_then(Value::as_array);
    parts.map(|p| p.iter().filter_map(|b| b.get("text").and_then(Value::as_str)).collect()).unwrap_or_default()
}

fn pieces(text: &str) -> Vec<String> {
    match text.strip_prefix("ECHO:") {
        Some(e) => e.split('|').map(str::to_string).collect(),
        None => vec!["Hello".into(), " from stand-in".into()],
    }
}

const TOOLS: [(&str, &str); 2] = [("get_weather", r#"{"city":"Paris"}"#), ("get_time", r#"{"zone":"CET"}"#)];

/// Returns true when the connection is done (a stream was written and closed).
async fn bedrock(sock: &mut TcpStream, req: &Recorded, rest: &str) -> std::io::Result<bool> {
    let signed = req.header("authorization").is_some_and(|a| a.starts_with("AWS4-HMAC-SHA256 Credential="));
    if !signed {
        let b = json!({"message": "The security token included in the request is invalid."});
        write_aws_error(sock, 403, "UnrecognizedClientException", &b).await?;
        return Ok(false);
    }
    if rest.contains("unavailable") {
        let b = json!({"message": "Bedrock is unable to process your request."});
        write_aws_error(sock, 503, "ServiceUnavailableException", &b).await?;
        return Ok(false);
    }
    let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
    if body.get("messages").and_then(Value::as_array).is_none_or(|m| m.is_empty()) {
        let b = json!({"message": "A conversation must start with a user message."});
        write_aws_error(sock, 400, "ValidationException", &b).await?;
        return Ok(false);
    }
    let text = last_text(&body, "messages", "content");
    let usage = json!({"inputTokens": 17, "outputTokens": 9, "totalTokens": 26});
    if !rest.ends_with("/converse-stream") {
        let content: Value = if text == "TOOLS" {
            TOOLS
                .iter()
                .enumerate()
                .map(|(i, (name, args))| {
                    json!({"toolUse": {"toolUseId": format!("tooluse_{i}"), "name": name,
                        "input": serde_json::from_str::<Value>(args).unwrap()}})
                })
                .collect()
        } else {
            json!([{"text": pieces(&text).concat()}])
        };
        let stop = if text == "TOOLS" { "tool_use" } else { "end_turn" };
        let b = json!({"output": {"message": {"role": "assistant", "content": content}}, "stopReason": stop,
            "usage": usage, "metrics": {"latencyMs": 12}});
        write_json(sock, 200, &b).await?;
        return Ok(false);
    }
    let mut frames = vec![encode_event("messageStart", &json!({"role": "assistant"})).unwrap()];
    if text == "TOOLS" {
        for (i, (name, args)) in TOOLS.iter().enumerate() {
            let start = json!({"contentBlockIndex": i, "start": {"toolUse": {"toolUseId": format!("tooluse_{i}"), "name": name}}});
            frames.push(encode_event("contentBlockStart", &start).unwrap());
            let (a, b) = args.split_at(args.len() / 2);
            for part in [a, b] {
                let d = json!({"contentBlockIndex": i, "delta": {"toolUse": {"input": part}}});
                frames.push(encode_event("contentBlockDelta", &d).unwrap());
            }
            frames.push(encode_event("contentBlockStop", &json!({"contentBlockIndex": i})).unwrap());
        }
        frames.push(encode_event("messageStop", &json!({"stopReason": "tool_use"})).unwrap());
    } else if text == "THROTTLE" {
        frames.push(encode_exception("throttlingException", &json!({"message": "Too many requests"})).unwrap());
    } else {
        for p in pieces(&text) {
            frames.push(
                encode_event("contentBlockDelta", &json!({"contentBlockIndex": 0, "delta": {"text": p}})).unwrap(),
            );
        }
        frames.push(encode_event("contentBlockStop", &json!({"contentBlockIndex": 0})).unwrap());
        frames.push(encode_event("messageStop", &json!({"stopReason": "end_turn"})).unwrap());
    }
    frames.push(encode_event("metadata", &json!({"usage": usage, "metrics": {"latencyMs": 12}})).unwrap());
    sock.write_all(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/vnd.amazon.eventstream\r\nx-amzn-requestid: standin\r\nconnection: close\r\n\r\n",
    )
    .await?;
    for f in frames {
        sock.write_all(&f).await?;
        sock.flush().await?;
    }
    sock.shutdown().await?;
    Ok(true)
}

async fn write_aws_error(sock: &mut TcpStream, status: u16, code: &str, body: &Value) -> std::io::Result<()> {
    let b = serde_json::to_vec(body).unwrap();
    let head = format!(
        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\nx-amzn-errortype: {code}\r\ncontent-length: {}\r\n\r\n",
        b.len()
    );
    sock.write_all(head.as_bytes()).await?;
    sock.write_all(&b).await
}

async fn vertex(sock: &mut TcpStream, req: &Recorded, path: &str) -> std::io::Result<bool> {
    if req.header("authorization") != Some(&format!("Bearer {TOKEN}")) {
        let b = json!({"error": {"code": 401, "message": "Request had invalid authentication credentials.",
            "status": "UNAUTHENTICATED"}});
        write_json(sock, 401, &b).await?;
        return Ok(false);
    }
    let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
    let model = path.rsplit('/').next().and_then(|m| m.split(':').next()).unwrap_or("").to_string();
    if model.contains("unavailable") {
        let b = json!({"error": {"code": 503, "message": "The service is currently unavailable.", "status": "UNAVAILABLE"}});
        write_json(sock, 503, &b).await?;
        return Ok(false);
    }
    let text = last_text(&body, "contents", "parts");
    let usage = json!({"promptTokenCount": 21, "candidatesTokenCount": 8, "totalTokenCount": 29});
    let answer = |parts: Value, finish: Option<&str>, usage: Option<&Value>| {
        let mut candidate = json!({"index": 0, "content": {"role": "model", "parts": parts}});
        if let Some(f) = finish {
            candidate["finishReason"] = f.into();
        }
        let mut a = json!({"candidates": [candidate], "modelVersion": model, "responseId": "resp-1"});
        if let Some(u) = usage {
            a["usageMetadata"] = u.clone();
        }
        a
    };
    let calls: Vec<Value> = TOOLS
        .iter()
        .map(|(name, args)| json!({"functionCall": {"name": name, "args": serde_json::from_str::<Value>(args).unwrap()}}))
        .collect();
    if !path.contains(":streamGenerateContent") {
        let parts = if text == "TOOLS" { Value::Array(calls) } else { json!([{"text": pieces(&text).concat()}]) };
        write_json(sock, 200, &answer(parts, Some("STOP"), Some(&usage))).await?;
        return Ok(false);
    }
    let mut events: Vec<Value> = Vec::new();
    if text == "TOOLS" {
        events.push(answer(Value::Array(calls), Some("STOP"), Some(&usage)));
    } else {
        let ps = pieces(&text);
        let last = ps.len() - 1;
        for (i, p) in ps.iter().enumerate() {
            let done = i == last;
            events.push(answer(json!([{"text": p}]), done.then_some("STOP"), done.then_some(&usage)));
        }
    }
    sock.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n").await?;
    for e in events {
        sock.write_all(format!("data: {e}\r\n\r\n").as_bytes()).await?;
        sock.flush().await?;
    }
    sock.shutdown().await?;
    Ok(true)
}
