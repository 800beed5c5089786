//! Gemini `streamGenerateContent?alt=sse` events → `chat.completion.chunk` objects.

use serde_json::{json, Value};

use super::parts::{answer_text, finish_reason, tool_call, tool_call_id};
use super::response::{openai_error, usage};
use crate::providers::translate::ChunkTranslator;

/// The state of one streamed answer. Each SSE event of `:streamGenerateContent?alt=sse` is a
/// whole `GenerateContentResponse` holding the next piece of the first candidate: text, or
/// whole function calls (Gemini never splits a call's arguments across events). Gemini sends no
/// closing event: the last one has the `finishReason`, and the stream then ends, so the usage
/// chunk is [`ChunkTranslator::finish`]'s.
#[derive(Debug)]
pub struct GeminiStreamTranslator {
    id: String,
    model: String,
    created: i64,
    include_usage: bool,
    /// The first chunk (with the role) is out.
    started: bool,
    /// Tool calls sent so far: the next one's `index`.
    tool_calls: usize,
    /// The latest `usageMetadata`: every event may repeat it, each with the counts so far.
    usage: Value,
    /// The chunk with the `finish_reason` is out.
    finished: bool,
    done: bool,
}

impl GeminiStreamTranslator {
    /// `model` and `id` are stamped on every chunk (and `id` seeds the tool-call ids), `created`
    /// is the Unix time, `include_usage` the client's `stream_options.include_usage`
    /// ([`crate::providers::translate::include_usage`]).
    pub fn new(model: &str, id: &str, created: i64, include_usage: bool) -> Self {
        Self {
            id: id.to_string(),
            model: model.to_string(),
            created,
            include_usage,
            started: false,
            tool_calls: 0,
            usage: Value::Null,
            finished: false,
            done: false,
        }
    }

    /// The usage of the latest event, in OpenAI's shape.
    pub fn usage(&self) -> Value {
        usage(&self.usage)
    }

    /// The first candidate's parts → text and tool-call chunks; its `finishReason` → the finish
    /// chunk. Thought parts and other part kinds have no Chat Completions form and are skipped.
    fn candidate(&mut self, candidate: &Value, out: &mut Vec<Value>) {
        let parts = candidate.pointer("/content/parts").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
        for part in parts {
            if let Some(text) = answer_text(part) {
                out.push(self.chunk(json!({ "content": text }), Value::Null));
            }
            match tool_call(part, tool_call_id(&self.id, self.tool_calls)) {
                Ok(Some(call)) => out.push(self.tool_call_chunk(call)),
                Ok(None) => {}
                Err(e) => {
                    self.done = true;
                    out.push(error(&e.reason));
                    return;
                }
            }
        }
        if let Some(reason) = candidate.get("finishReason").and_then(Value::as_str) {
            self.finish_chunk(finish_reason(reason, self.tool_calls > 0), out);
        }
    }

    /// A whole call in one chunk: `index`, `id`, `type`, `name` and all of `arguments`, which
    /// the openai SDK's accumulator takes as a call that starts and ends at once.
    fn tool_call_chunk(&mut self, call: Value) -> Value {
        let mut indexed = json!({ "index": self.tool_calls });
        if let (Some(fields), Value::Object(call)) = (indexed.as_object_mut(), call) {
            fields.extend(call);
        }
        self.tool_calls += 1;
        self.chunk(json!({ "tool_calls": [indexed] }), Value::Null)
    }

    fn finish_chunk(&mut self, finish: &str, out: &mut Vec<Value>) {
        if !self.finished {
            self.finished = true;
            out.push(self.chunk(json!({}), finish.into()));
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

impl ChunkTranslator for GeminiStreamTranslator {
    /// One event's JSON → its chunks. The first event also yields the role chunk; a prompt
    /// Gemini blocked (`promptFeedback.blockReason`, no candidates) ends with `content_filter`;
    /// an event with a top-level `error` becomes the OpenAI error object and ends the stream.
    fn on_event(&mut self, event: &Value) -> Vec<Value> {
        if self.done {
            return Vec::new();
        }
        if event.get("error").is_some() {
            self.done = true;
            return vec![openai_error(event)];
        }
        if let Some(meta) = event.get("usageMetadata") {
            self.usage = meta.clone();
        }
        let mut out = Vec::new();
        if !self.started {
            self.started = true;
            out.push(self.chunk(json!({ "role": "assistant", "content": "" }), Value::Null));
        }
        match event.get("candidates").and_then(Value::as_array).and_then(|c| c.first()) {
            Some(candidate) => self.candidate(candidate, &mut out),
            None if event.pointer("/promptFeedback/blockReason").is_some() => {
                self.finish_chunk("content_filter", &mut out)
            }
            None => {}
        }
        out
    }

    /// The upstream ended: the usage chunk when asked for. A stream that ended before any
    /// `finishReason` was cut short, and the client gets an error rather than a truncated answer
    /// that looks whole.
    fn finish(&mut self) -> Vec<Value> {
        if self.done {
            return Vec::new();
        }
        self.done = true;
        if !self.finished {
            return vec![error("the Vertex AI stream ended before the answer was complete")];
        }
        if self.include_usage {
            return vec![self.usage_chunk()];
        }
        Vec::new()
    }

    fn is_done(&self) -> bool {
        self.done
    }
}

fn error(message: &str) -> Value {
    json!({ "error": { "message": message, "type": "api_error", "param": null, "code": null } })
}
