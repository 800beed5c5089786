//! The one interface every stream translation implements, whatever the upstream speaks.

use serde_json::Value;

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
