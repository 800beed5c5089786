//! A translated stream: the provider's events (SSE, or Bedrock's frames) become OpenAI's
//! `chat.completion.chunk` events.

use bytes::{Bytes, BytesMut};
use serde_json::Value;

use super::plan::Translation;
use crate::gateway::sse::{event_json, write_event, SseSplitter};
use crate::providers::eventstream;
use crate::providers::translate::ChunkTranslator;
use crate::providers::usage::Dialect;

/// Upstream stream bytes → the client's SSE bytes (`chat.completion.chunk` events, then
/// `data: [DONE]`), for a translated stream.
pub(super) struct Translating {
    framing: Framing,
    chunks: Box<dyn ChunkTranslator>,
    /// An error object went out: the stream is over, nothing more is written.
    over: bool,
}

/// How the upstream frames its events.
enum Framing {
    Sse(SseSplitter),
    Frames(eventstream::Decoder),
}

impl Translating {
    pub(super) fn new(t: &Translation) -> Translating {
        let framing = match t.provider.dialect() {
            Dialect::Converse => Framing::Frames(eventstream::Decoder::default()),
            _ => Framing::Sse(SseSplitter::default()),
        };
        Translating { framing, chunks: t.provider.chunk_translator(&t.model, &t.id, t.created), over: false }
    }

    pub(super) fn push(&mut self, chunk: &[u8]) -> Bytes {
        let events = match &mut self.framing {
            Framing::Sse(s) => s.push(chunk).iter().filter_map(|e| event_json(e)).collect(),
            Framing::Frames(d) => d.push(chunk).unwrap_or_else(|e| {
                log::warn!("an event stream could not be decoded: {e}");
                vec![serde_json::json!({"internalServerException": {"message": "the provider's stream could not be decoded"}})]
            }),
        };
        let mut out = BytesMut::new();
        for event in events {
            let chunks = self.chunks.on_event(&event);
            self.write(&mut out, chunks);
        }
        out.freeze()
    }

    pub(super) fn finish(&mut self) -> Bytes {
        let mut out = BytesMut::new();
        if let Framing::Sse(s) = &mut self.framing {
            if let Some(event) = s.finish().as_deref().and_then(event_json) {
                let chunks = self.chunks.on_event(&event);
                self.write(&mut out, chunks);
            }
        }
        let chunks = self.chunks.finish();
        self.write(&mut out, chunks);
        if !self.over {
            out.extend_from_slice(b"data: [DONE]\n\n");
        }
        out.freeze()
    }

    fn write(&mut self, out: &mut BytesMut, chunks: Vec<Value>) {
        for chunk in chunks {
            if self.over {
                return;
            }
            self.over = chunk.get("error").is_some();
            write_event(out, "", &chunk);
        }
    }
}
