//! Server-sent events, split at event boundaries as bytes arrive.
//!
//! The gateway forwards whole events, so it can read usage from them (and drop the usage-only
//! chunk it asked for itself) without holding anything back longer than one event.

use bytes::{Bytes, BytesMut};

/// Longest partial event kept while waiting for its end; past it, bytes pass through as-is.
const MAX_PENDING: usize = 1 << 20;

#[derive(Default)]
pub struct SseSplitter {
    pending: BytesMut,
}

impl SseSplitter {
    /// Appends `chunk` and returns the complete events now available (each with its
    /// terminating blank line).
    pub fn push(&mut self, chunk: &[u8]) -> Vec<Bytes> {
        self.pending.extend_from_slice(chunk);
        let mut out = Vec::new();
        while let Some(end) = event_end(&self.pending) {
            out.push(self.pending.split_to(end).freeze());
        }
        if self.pending.len() > MAX_PENDING {
            out.push(self.pending.split().freeze());
        }
        out
    }

    /// Whatever is left when the stream ends (an unterminated last event).
    pub fn finish(&mut self) -> Option<Bytes> {
        (!self.pending.is_empty()).then(|| self.pending.split().freeze())
    }
}

/// Index just past the first blank line (`\n\n`, `\r\n\r\n` or `\r\r`), if any.
fn event_end(buf: &[u8]) -> Option<usize> {
    let mut i = 0;
    while i + 1 < buf.len() {
        match (buf[i], buf[i + 1]) {
            (b'\n', b'\n') => return Some(i + 2),
            (b'\r', b'\n') if buf.get(i + 2..i + 4) == Some(b"\r\n") => return Some(i + 4),
            (b'\r', b'\r') => return Some(i + 2),
            _ => i += 1,
        }
    }
    None
}

/// The joined `data:` lines of one event (None when it has none).
pub fn event_data(event: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(event).ok()?;
    let mut data: Option<String> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("data:") {
            let rest = rest.strip_prefix(' ').unwrap_or(rest);
            match data.as_mut() {
                Some(d) => {
                    d.push('\n');
                    d.push_str(rest);
                }
                None => data = Some(rest.to_string()),
            }
        }
    }
    data
}

/// The lines of an event other than `data:` (e.g. Anthropic's `event: …`).
pub fn other_lines(event: &[u8]) -> String {
    let text = String::from_utf8_lossy(event);
    text.lines().filter(|l| !l.is_empty() && !l.starts_with("data:")).map(|l| format!("{l}\n")).collect()
}

pub fn write_event(out: &mut BytesMut, lines: &str, data: &serde_json::Value) {
    out.extend_from_slice(lines.as_bytes());
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(&serde_json::to_vec(data).unwrap_or_default());
    out.extend_from_slice(b"\n\n");
}

/// An event's data as JSON, when it is.
pub fn event_json(event: &[u8]) -> Option<serde_json::Value> {
    serde_json::from_str(&event_data(event)?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_across_chunks() {
        let mut s = SseSplitter::default();
        assert!(s.push(b"data: {\"a\"").is_empty());
        let ev = s.push(b":1}\n\ndata: [DO");
        assert_eq!(ev.len(), 1);
        assert_eq!(&ev[0][..], b"data: {\"a\":1}\n\n");
        let ev = s.push(b"NE]\n\n");
        assert_eq!(event_data(&ev[0]).unwrap(), "[DONE]");
        assert!(s.finish().is_none());
    }

    #[test]
    fn crlf_and_event_lines() {
        let mut s = SseSplitter::default();
        let ev = s.push(b"event: message_start\r\ndata: {\"x\":1}\r\n\r\nevent: ping\r\ndata: {}\r\n\r\n");
        assert_eq!(ev.len(), 2);
        assert_eq!(event_data(&ev[0]).unwrap(), "{\"x\":1}");
        let mut s = SseSplitter::default();
        s.push(b"data: tail");
        assert_eq!(&s.finish().unwrap()[..], b"data: tail");
    }
}
