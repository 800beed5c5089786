//! OpenAI Chat Completions ↔ Anthropic Messages, as pure functions over JSON (issue 18 §4).
//!
//! - [`to_anthropic_request`]: a `/v1/chat/completions` body → a `/v1/messages` body, or a
//!   [`TranslateError`] naming the field that has no Anthropic equivalent (the client's 400).
//! - [`to_openai_completion`]: an Anthropic message → a `chat.completion`.
//! - [`StreamTranslator`]: Anthropic SSE events in, `chat.completion.chunk` objects out; the
//!   caller writes each as `data: {json}` and, once [`StreamTranslator::is_done`], `data: [DONE]`.
//! - [`openai_error`]: an Anthropic error body or `error` event → the OpenAI error object.
//!
//! No I/O and no clock: the caller passes `created`, so the same input always gives the same
//! output (the golden tests rely on it). The mapping, and what is refused, is in
//! docs/decisions.md ("OpenAI ↔ Anthropic translation").

pub mod converse;
pub mod gemini;
mod request;
mod response;
mod stream;

pub use converse::{to_converse_request, ConverseStreamTranslator};
pub use gemini::{to_gemini_request, GeminiStreamTranslator};
pub use request::{include_usage, to_anthropic_request, DEFAULT_MAX_TOKENS};
pub use response::{openai_error, to_openai_completion};
pub use stream::StreamTranslator;

use serde_json::Value;

use crate::error::ApiError;

/// One upstream stream's events → `chat.completion.chunk` objects, whatever the upstream speaks
/// (Anthropic SSE, Bedrock ConverseStream frames, Gemini SSE). The gateway decodes the upstream
/// framing into one JSON value per event, feeds them in order, writes each returned object as
/// `data: {json}`, and once the upstream has ended writes [`Self::finish`]'s chunks and then
/// `data: [DONE]`. A returned object with a top-level `error` is an OpenAI error object: the
/// stream is over.
pub trait ChunkTranslator: Send {
    /// One upstream event → the chunks it becomes, often none.
    fn on_event(&mut self, event: &Value) -> Vec<Value>;
    /// The upstream stream ended: the chunks still owed (a usage chunk the upstream sends no
    /// closing event for), or none.
    fn finish(&mut self) -> Vec<Value>;
    /// The answer is complete (its closing event was seen).
    fn is_done(&self) -> bool;
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

/// Why a body cannot be translated: the field (a JSON path such as `messages[2].content[0]`)
/// and what is wrong with it. Shown to the client as `"{field}: {reason}"`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct TranslateError {
    pub field: String,
    pub reason: String,
}

impl TranslateError {
    pub(crate) fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self { field: field.into(), reason: reason.into() }
    }
}

/// A request that cannot be translated is the client's 400 (`invalid_request`), worded so the
/// client sees which field to change.
impl From<TranslateError> for ApiError {
    fn from(e: TranslateError) -> Self {
        ApiError::invalid(e.to_string())
    }
}

/// Anthropic `stop_reason` → OpenAI `finish_reason`. Reasons Anthropic may add later read as
/// `stop`: the turn ended, and `stop` is the one value every client handles.
fn finish_reason(stop_reason: &str) -> &'static str {
    match stop_reason {
        "max_tokens" | "model_context_window_exceeded" => "length",
        "tool_use" => "tool_calls",
        "refusal" => "content_filter",
        _ => "stop",
    }
}

#[cfg(test)]
mod tests;
