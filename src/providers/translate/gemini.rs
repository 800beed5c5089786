//! OpenAI Chat Completions ↔ Google Gemini `generateContent` as Vertex AI serves it (v1 REST:
//! `GenerateContentRequest` / `GenerateContentResponse`), as pure functions over JSON.
//!
//! - [`to_gemini_request`]: a `/v1/chat/completions` body → a `generateContent` body (the model
//!   and streaming are in the URL, not the body), or a [`TranslateError`] naming the field that
//!   has no Gemini equivalent (the client's 400).
//! - [`to_openai_completion`]: a `GenerateContentResponse` → a `chat.completion`.
//! - [`GeminiStreamTranslator`]: the events of `:streamGenerateContent?alt=sse` (each one a
//!   `GenerateContentResponse`) → `chat.completion.chunk` objects.
//! - [`usage_of`]: (prompt, completion) tokens of an answer or of one stream event, for receipts.
//! - [`openai_error`]: Google's `{"error": {code, message, status}}` → the OpenAI error object.
//!
//! No I/O and no clock: the caller passes `id` and `created`, so the same input always gives the
//! same output (the golden tests in tests/fixtures/translate/gemini/ rely on it). The mapping, and
//! what is refused, is in docs/decisions.md ("Vertex Gemini translation").

mod media;
mod parts;
mod request;
mod response;
mod stream;
mod tools;

pub use crate::providers::usage::gemini_usage as usage_of;
pub use request::to_gemini_request;
pub use response::{openai_error, to_openai_completion};
pub use stream::GeminiStreamTranslator;

#[cfg(test)]
mod tests;
