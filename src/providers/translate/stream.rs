//! Anthropic SSE events → `chat.completion.chunk` objects, one stream at a time.

use serde_json::{json, Value};

use super::chunks::ChunkTranslator;
use super::response::{finish_reason, openai_error, usage};

/// The state of one streamed answer. Feed each SSE event's parsed `data` to [`Self::on_event`]
/// in order and write every returned object as `data: {json}`; once [`Self::is_done`], write
/// `data: [DONE]`. After an `error` event the returned object is an OpenAI error object and
/// the stream is over (also `is_done`).
#[derive(Debug)]
pub struct StreamTranslator {
    id: Value,
    model: Value,
    created: i64,
    include_usage: bool,
    /// Anthropic content-block index → OpenAI tool-call index, for `tool_use` blocks only:
    /// the client's tool calls are numbered 0, 1, ... in the order the blocks start.
    tool_index: Vec<(u64, usize)>,
    /// Anthropic's usage so far: `message_start` has the input side, `message_delta` the
    /// cumulative output count.
    usage: Value,
    done: bool,
}

impl StreamTranslator {
    /// `created`: the Unix time stamped on every chunk. `include_usage`: the client's
    /// `stream_options.include_usage` ([`super::include_usage`]).
    pub fn new(created: i64, include_usage: bool) -> Self {
        Self {
            id: Value::Null,
            model: Value::Null,
            created,
            include_usage,
            tool_index: Vec::new(),
            usage: json!({}),
            done: false,
        }
    }

    /// Whether the answer is complete (`message_stop` or `error` seen): time for `[DONE]`.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The usage accumulated so far, in OpenAI's shape.
    pub fn usage(&self) -> Value {
        usage(&self.usage)
    }

    /// One Anthropic event (its JSON `data`) → the chunks it becomes, often none. Event types
    /// Anthropic may add later are skipped, as its streaming documentation asks of clients.
    pub fn on_event(&mut self, event: &Value) -> Vec<Value> {
        match event.get("type").and_then(Value::as_str) {
            Some("message_start") => self.message_start(event),
            Some("content_block_start") => self.block_start(event),
            Some("content_block_delta") => self.block_delta(event),
            Some("message_delta") => self.message_delta(event),
            Some("message_stop") => {
                self.done = true;
                if self.include_usage {
                    return vec![self.usage_chunk()];
                }
                Vec::new()
            }
            Some("error") => {
                self.done = true;
                vec![openai_error(event)]
            }
            _ => Vec::new(),
        }
    }

    /// The first chunk carries the role, as OpenAI's does.
    fn message_start(&mut self, event: &Value) -> Vec<Value> {
        let message = event.get("message").unwrap_or(&Value::Null);
        self.id = message.get("id").cloned().unwrap_or(Value::Null);
        self.model = message.get("model").cloned().unwrap_or(Value::Null);
        if let Some(u) = message.get("usage") {
            self.usage = u.clone();
        }
        vec![self.chunk(json!({ "role": "assistant", "content": "" }), Value::Null)]
    }

    /// A `tool_use` block opens tool call number N: its first chunk has the id, the name and
    /// empty arguments. A text block's start holds no text in practice; any it has is sent.
    fn block_start(&mut self, event: &Value) -> Vec<Value> {
        let block = event.get("content_block").unwrap_or(&Value::Null);
        let anthropic_index = event.get("index").and_then(Value::as_u64).unwrap_or(0);
        match block.get("type").and_then(Value::as_str) {
            Some("tool_use") => {
                let index = self.tool_index.len();
                self.tool_index.push((anthropic_index, index));
                let call = json!({
                    "index": index,
                    "id": block.get("id").cloned().unwrap_or(Value::Null),
                    "type": "function",
                    "function": { "name": block.get("name").cloned().unwrap_or(Value::Null), "arguments": "" },
                });
                vec![self.chunk(json!({ "tool_calls": [call] }), Value::Null)]
            }
            Some("text") => self.text(block.get("text")),
            _ => Vec::new(),
        }
    }

    /// Text deltas → `content`; `input_json_delta` → the arguments fragment of its tool call.
    /// Thinking and signature deltas have no Chat Completions form and are skipped.
    fn block_delta(&mut self, event: &Value) -> Vec<Value> {
        let delta = event.get("delta").unwrap_or(&Value::Null);
        match delta.get("type").and_then(Value::as_str) {
            Some("text_delta") => self.text(delta.get("text")),
            Some("input_json_delta") => {
                let fragment = delta.get("partial_json").and_then(Value::as_str).unwrap_or("");
                let anthropic_index = event.get("index").and_then(Value::as_u64).unwrap_or(0);
                let Some(&(_, index)) = self.tool_index.iter().find(|(a, _)| *a == anthropic_index) else {
                    return Vec::new();
                };
                if fragment.is_empty() {
                    return Vec::new();
                }
                let call = json!({ "index": index, "function": { "arguments": fragment } });
                vec![self.chunk(json!({ "tool_calls": [call] }), Value::Null)]
            }
            _ => Vec::new(),
        }
    }

    fn text(&self, text: Option<&Value>) -> Vec<Value> {
        match text.and_then(Value::as_str) {
            Some(t) if !t.is_empty() => vec![self.chunk(json!({ "content": t }), Value::Null)],
            _ => Vec::new(),
        }
    }

    /// The stop reason → the last choice chunk's `finish_reason`; the usage counts are merged
    /// (Anthropic's are cumulative, so the latest wins).
    fn message_delta(&mut self, event: &Value) -> Vec<Value> {
        if let (Some(u), Some(acc)) = (event.get("usage").and_then(Value::as_object), self.usage.as_object_mut()) {
            for (k, v) in u {
                if !v.is_null() {
                    acc.insert(k.clone(), v.clone());
                }
            }
        }
        match event.pointer("/delta/stop_reason").and_then(Value::as_str) {
            Some(stop) => vec![self.chunk(json!({}), finish_reason(stop).into())],
            None => Vec::new(),
        }
    }

    fn chunk(&self, delta: Value, finish_reason: Value) -> Value {
        let mut chunk = self.envelope();
        chunk["choices"] = json!([{ "index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason }]);
        if self.include_usage {
            // OpenAI marks every chunk but the last with `usage: null` when usage was asked.
            chunk["usage"] = Value::Null;
        }
        chunk
    }

    /// The chunk OpenAI sends last when `include_usage` is set: no choices, the whole usage.
    fn usage_chunk(&self) -> Value {
        let mut chunk = self.envelope();
        chunk["choices"] = json!([]);
        chunk["usage"] = self.usage();
        chunk
    }

    fn envelope(&self) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [],
        })
    }
}

impl ChunkTranslator for StreamTranslator {
    fn on_event(&mut self, event: &Value) -> Vec<Value> {
        StreamTranslator::on_event(self, event)
    }
    fn finish(&mut self) -> Vec<Value> {
        Vec::new()
    }
    fn is_done(&self) -> bool {
        StreamTranslator::is_done(self)
    }
}
