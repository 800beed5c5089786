//! Guardrails on a streamed response, delta by delta.
//!
//! A match may be split across deltas ("4111 1111" + " 1111 1111"), so the scanner holds back
//! text that could still change and emits only what cannot:
//! - the last `WINDOW` bytes (longer than any match with spaces in it: cards, phones, IBANs,
//!   phrases);
//! - the trailing run of token characters, up to `MAX_TOKEN` (a key, JWT or e-mail address
//!   still arriving can be longer than the window), with a `Bearer ` just before it;
//! - any candidate that reaches into the held text (it may still grow, or vanish).
//!
//! Emitted text is never rescanned; up to `CONTEXT` bytes of it stay as left context for the
//! boundary checks. A single candidate longer than `MAX_HOLD` (a huge PEM block) is emitted
//! in parts, each part masked; what follows the cut is scanned afresh.

use std::sync::Arc;

use super::resolve::{self, Cand};
use super::scan::{Finding, Inner};

const WINDOW: usize = 128;
const MAX_TOKEN: usize = 8 * 1024;
const MAX_HOLD: usize = 64 * 1024;
const CONTEXT: usize = 16;

/// What may be sent to the client now.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StreamOut {
    /// Final text, redacted (and `block` findings masked).
    pub text: String,
    /// Findings in `text`; positions are offsets into the whole stream as received.
    pub findings: Vec<Finding>,
    /// A `block` finding is in this output: the caller stops relaying the response.
    pub blocked: bool,
}

/// Per-response streaming state; see the module doc. Text held back when the upstream's last
/// text event passes comes out of a later `push` or of `finish`: the caller puts it into the
/// next text event it relays, or into one it writes before the stream's closing event.
pub struct StreamScanner {
    inner: Arc<Inner>,
    /// `buf[..ctx]` was already emitted (kept as context); `buf[ctx..]` is held.
    buf: String,
    ctx: usize,
    /// Stream offset of `buf[ctx]`.
    base: usize,
}

impl StreamScanner {
    pub(crate) fn new(inner: Arc<Inner>) -> StreamScanner {
        StreamScanner { inner, buf: String::new(), ctx: 0, base: 0 }
    }

    /// Adds a delta; returns the text that can no longer change.
    pub fn push(&mut self, delta: &str) -> StreamOut {
        if self.inner.detectors.is_empty() {
            self.base += delta.len();
            return StreamOut { text: delta.to_string(), ..StreamOut::default() };
        }
        self.buf.push_str(delta);
        self.step(false)
    }

    /// End of the stream: everything held back, scanned as final.
    pub fn finish(&mut self) -> StreamOut {
        self.step(true)
    }

    fn step(&mut self, last: bool) -> StreamOut {
        let mut cands = self.inner.candidates(&self.buf, self.ctx);
        let cut = if last { self.buf.len() } else { hold_point(&self.buf, self.ctx, &cands) };
        if cut <= self.ctx {
            return StreamOut::default();
        }
        // Only a forced cut (see MAX_HOLD) splits a candidate: its emitted part is masked.
        cands.retain(|c| c.start < cut);
        for c in &mut cands {
            c.end = c.end.min(cut);
        }
        let kept = resolve::resolve(cands, &self.inner.detectors);
        let text = resolve::render(&self.buf[self.ctx..cut], self.ctx, &kept, &self.inner.detectors).into_owned();
        let (ctx, base) = (self.ctx, self.base);
        let (findings, blocked) = self.inner.findings(&kept, |p| base + (p - ctx));

        self.base += cut - self.ctx;
        let keep_from = floor_char(&self.buf, cut.saturating_sub(CONTEXT));
        self.buf.drain(..keep_from);
        self.ctx = cut - keep_from;
        StreamOut { text, findings, blocked }
    }
}

/// Where the emitted prefix ends: see the module doc.
fn hold_point(buf: &str, from: usize, cands: &[Cand]) -> usize {
    let len = buf.len();
    let mut cut = floor_char(buf, len.saturating_sub(WINDOW)).max(from);
    let tok = trailing_token(buf, from);
    if len - tok <= MAX_TOKEN {
        cut = cut.min(tok);
    }
    loop {
        let crossing = cands.iter().filter(|c| c.start < cut && c.end > cut).map(|c| c.start).min();
        match crossing {
            Some(s) => cut = s,
            None => break,
        }
    }
    if len - cut > MAX_HOLD {
        cut = floor_char(buf, len - WINDOW);
    }
    cut.max(from)
}

/// Start of the trailing run of characters keys, tokens and addresses are made of, extended
/// over a `Bearer ` right before it (the scheme is part of that secret's match).
fn trailing_token(buf: &str, from: usize) -> usize {
    let b = buf.as_bytes();
    let is_tok = |c: u8| c.is_ascii_alphanumeric() || b"._%+-@/=~".contains(&c);
    let mut i = b.len();
    while i > from && is_tok(b[i - 1]) {
        i -= 1;
    }
    let mut j = i;
    while j > from && (b[j - 1] == b' ' || b[j - 1] == b'\t') {
        j -= 1;
    }
    if j < i && j >= from + 6 && b[j - 6..j].eq_ignore_ascii_case(b"bearer") {
        return j - 6;
    }
    i
}

fn floor_char(s: &str, mut i: usize) -> usize {
    i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}
