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

mod chunks;
pub mod converse;
mod error;
pub mod gemini;
mod request;
mod response;
mod stream;

pub use chunks::ChunkTranslator;
pub use converse::{to_converse_request, ConverseStreamTranslator};
pub use error::TranslateError;
pub use gemini::{to_gemini_request, GeminiStreamTranslator};
pub use request::{ensure_stream_usage, include_usage, to_anthropic_request, DEFAULT_MAX_TOKENS};
pub use response::{openai_error, to_openai_completion};
pub use stream::StreamTranslator;

#[cfg(test)]
mod tests;
