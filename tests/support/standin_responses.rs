//! The stand-in's OpenAI Responses API (see [`super::standin`]), in OpenAI's own shapes:
//! - `POST /v1/responses`: a `response` object, or (`stream: true`) its typed events
//!   (`response.created`, `response.in_progress`, `response.output_item.added`,
//!   `response.content_part.added`, `response.output_text.delta`…, `response.output_text.done`,
//!   `response.content_part.done`, `response.output_item.done`, `response.completed`), each with
//!   its `sequence_number`. The answer is stored (ids are fresh each time);
//! - `GET /v1/responses/{id}`, `DELETE /v1/responses/{id}`, `GET /v1/responses/{id}/input_items`:
//!   the stored response, 404 in OpenAI's envelope for an id it never issued (or deleted);
//! - `POST /v1/responses/input_tokens`: `{object: "response.input_tokens", input_tokens}`.
//!
//! The last input text decides the answer: `ECHO:a|b` answers `ab` (streamed as `a`, `b`),
//! `TOOLS` (with `tools` in the request) answers a `get_weather` function call (its arguments
//! streamed in two pieces); anything else answers `Hello from stand-in`. Usage is always 12
//! input and 5 output tokens.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

use super::standin::{write_json, write_sse, Recorded};

pub const INPUT_TOKENS: u64 = 12;
pub const OUTPUT_TOKENS: u64 = 5;

/// A stored response and its input items.
type Stored = (Value, Vec<Value>);

/// Stored responses by id (ids are unique across stand-ins).
fn stored() -> &'static Mutex<HashMap<String, Stored>> {
    static STORED: OnceLock<Mutex<HashMap<String, Stored>>> = OnceLock::new();
    STORED.get_or_init(Default::default)
}

fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

fn not_found(id: &str) -> Value {
    json!({"error": {"message": format!("Response with id '{id}' not found."), "type": "invalid_request_error",
                     "param": null, "code": null}})
}

/// What the stand-in answers for this request, if it is a Responses call; `Some(true)` when
/// the connection is done (a stream was written and closed).
pub async fn serve(
    sock: &mut TcpStream,
    req: &Recorded,
    gate: &Semaphore,
    gated: &std::sync::atomic::AtomicBool,
) -> std::io::Result<Option<bool>> {
    let path = req.path.split('?').next().unwrap_or_default();
    let Some(rest) = path.strip_prefix("/v1/responses") else { return Ok(None) };
    let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
    match (req.method.as_str(), rest) {
        ("POST", "") => return create(sock, &body, gate, gated).await.map(Some),
        ("POST", "/input_tokens") => {
            let n = input_text(&body).len() as u64 / 4 + 3;
            write_json(sock, 200, &json!({"object": "response.input_tokens", "input_tokens": n})).await?;
        }
        (method, rest) => {
            let rest = rest.trim_start_matches('/');
            let (id, items) = match rest.strip_suffix("/input_items") {
                Some(id) => (id, true),
                None => (rest, false),
            };
            let found = stored().lock().unwrap().get(id).cloned();
            match (method, found) {
                (_, None) => write_json(sock, 404, &not_found(id)).await?,
                ("GET", Some((_, input))) if items => {
                    let (first, last) = (input.first().map(|i| i["id"].clone()), input.last().map(|i| i["id"].clone()));
                    let list =
                        json!({"object": "list", "data": input, "first_id": first, "last_id": last, "has_more": false});
                    write_json(sock, 200, &list).await?
                }
                ("GET", Some((response, _))) => write_json(sock, 200, &response).await?,
                ("DELETE", Some(_)) => {
                    stored().lock().unwrap().remove(id);
                    write_json(sock, 200, &json!({"id": id, "object": "response", "deleted": true})).await?
                }
                _ => write_json(sock, 405, &json!({"error": {"message": "method not allowed"}})).await?,
            }
        }
    }
    Ok(Some(false))
}

/// The text of the last input item (a string input is its own text); a function call's output
/// counts as text too.
fn input_text(body: &Value) -> String {
    match body.get("input") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(items)) => {
            let Some(last) = items.last() else { return String::new() };
            if let Some(out) = last.get("output").and_then(Value::as_str) {
                return format!("tool said {out}");
            }
            match last.get("content") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(parts)) => {
                    parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect()
                }
                _ => String::new(),
            }
        }
        _ => String::new(),
    }
}

/// The request's input as stored input items (each with an id, as OpenAI lists them).
fn input_items(body: &Value) -> Vec<Value> {
    let text_item = |t: &str| {
        json!({"type": "message", "id": new_id("msg"), "status": "completed", "role": "user",
               "content": [{"type": "input_text", "text": t}]})
    };
    match body.get("input") {
        Some(Value::String(s)) => vec![text_item(s)],
        Some(Value::Array(items)) => items
            .iter()
            .map(|i| {
                let mut i = i.clone();
                if let Some(o) = i.as_object_mut() {
                    o.entry("id").or_insert_with(|| Value::String(new_id("msg")));
                }
                i
            })
            .collect(),
        _ => Vec::new(),
    }
}

async fn create(
    sock: &mut TcpStream,
    body: &Value,
    gate: &Semaphore,
    gated: &std::sync::atomic::AtomicBool,
) -> std::io::Result<bool> {
    let model = body.get("model").and_then(Value::as_str).unwrap_or_default();
    let text = input_text(body);
    let tools = body.get("tools").and_then(Value::as_array).is_some_and(|t| !t.is_empty());
    let pieces: Vec<String> = match text.strip_prefix("ECHO:") {
        Some(e) => e.split('|').map(str::to_string).collect(),
        None => vec!["Hello".into(), " from stand-in".into()],
    };
    let call = (tools && text == "TOOLS").then(|| (new_id("fc"), new_id("call"), r#"{"city":"Paris"}"#));
    let item = match &call {
        Some((id, call_id, args)) => json!({"type": "function_call", "id": id, "call_id": call_id,
            "name": "get_weather", "arguments": args, "status": "completed"}),
        None => json!({"type": "message", "id": new_id("msg"), "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": pieces.concat(), "annotations": [], "logprobs": []}]}),
    };
    let usage = json!({"input_tokens": INPUT_TOKENS, "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": OUTPUT_TOKENS, "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS});
    let response = |status: &str, output: Value, usage: Value| {
        json!({"id": "", "object": "response", "created_at": 1_741_476_542, "status": status, "background": false,
            "error": null, "incomplete_details": null, "instructions": body.get("instructions").cloned().unwrap_or(Value::Null),
            "max_output_tokens": body.get("max_output_tokens").cloned().unwrap_or(Value::Null), "model": model,
            "output": output, "parallel_tool_calls": true,
            "previous_response_id": body.get("previous_response_id").cloned().unwrap_or(Value::Null),
            "reasoning": {"effort": null, "summary": null}, "store": true, "temperature": 1.0,
            "text": {"format": {"type": "text"}}, "tool_choice": "auto",
            "tools": body.get("tools").cloned().unwrap_or(json!([])), "top_p": 1.0, "truncation": "disabled",
            "usage": usage, "user": null, "metadata": {}})
    };
    let id = new_id("resp");
    let with_id = |mut r: Value| {
        r["id"] = json!(id);
        r
    };
    let done = with_id(response("completed", json!([item.clone()]), usage));
    stored().lock().unwrap().insert(id.clone(), (done.clone(), input_items(body)));
    if !body.get("stream").and_then(Value::as_bool).unwrap_or(false) {
        write_json(sock, 200, &done).await?;
        return Ok(false);
    }

    let mut events: Vec<Value> = vec![
        json!({"type": "response.created", "response": with_id(response("in_progress", json!([]), Value::Null))}),
        json!({"type": "response.in_progress", "response": with_id(response("in_progress", json!([]), Value::Null))}),
    ];
    let item_id = item["id"].clone();
    match &call {
        Some((_, _, args)) => {
            let mut started = item.clone();
            started["arguments"] = json!("");
            started["status"] = json!("in_progress");
            events.push(json!({"type": "response.output_item.added", "output_index": 0, "item": started}));
            let (a, b) = args.split_at(args.len() / 2);
            for d in [a, b] {
                events.push(json!({"type": "response.function_call_arguments.delta", "item_id": item_id,
                    "output_index": 0, "delta": d}));
            }
            events.push(json!({"type": "response.function_call_arguments.done", "item_id": item_id,
                "output_index": 0, "arguments": args}));
        }
        None => {
            let mut started = item.clone();
            started["content"] = json!([]);
            started["status"] = json!("in_progress");
            events.push(json!({"type": "response.output_item.added", "output_index": 0, "item": started}));
            let at = json!({"item_id": item_id, "output_index": 0, "content_index": 0});
            let with = |kind: &str, extra: Value| {
                let mut e = at.clone();
                e["type"] = json!(kind);
                e.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
                e
            };
            events.push(with(
                "response.content_part.added",
                json!({"part": {"type": "output_text", "text": "", "annotations": []}}),
            ));
            for p in &pieces {
                events.push(with("response.output_text.delta", json!({"delta": p, "logprobs": []})));
            }
            let full = pieces.concat();
            events.push(with("response.output_text.done", json!({"text": full, "logprobs": []})));
            events.push(with(
                "response.content_part.done",
                json!({"part": {"type": "output_text", "text": full, "annotations": []}}),
            ));
        }
    }
    events.push(json!({"type": "response.output_item.done", "output_index": 0, "item": item}));
    events.push(json!({"type": "response.completed", "response": done}));
    let texts: Vec<String> = events
        .into_iter()
        .enumerate()
        .map(|(n, mut e)| {
            e["sequence_number"] = json!(n);
            format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap())
        })
        .collect();
    write_sse(sock, &texts, gate, gated).await?;
    Ok(true)
}
