//! The fast path of the JSON guardrails: scan a body's text fields straight from its bytes,
//! without building its JSON tree (an allocation per member and string).
//!
//! The walk mirrors [`super::json_text`]'s and visits every string that walk would visit; for
//! a duplicated member it visits more (the tree keeps only the last one). So "clean here"
//! implies "nothing found by the tree walk". Anything else (a finding, a body that is not
//! JSON, a shape or a spelling this walk does not take on) answers "use the tree", whose walk
//! alone redacts and reports. A gap in this walk could only cost time, never a missed finding,
//! as long as it never skips a string the tree walk scans; `tests` holds the two walks to that.
//!
//! The reader is our own, not serde's visitor: it calls "clean" only what serde_json also reads
//! as a document (JSON's grammar, strictly); what it does not take on (a `\u` escape of a
//! surrogate, a number with an exponent or of more than [`MAX_NUMBER`] characters, a member
//! name spelt with escapes, nesting deeper than [`MAX_NESTING`]) goes to the tree. Why: with
//! serde's visitor the two scans of the bench's chat request and its answer, every check on,
//! took 21 300 instructions an answer; with this reader 14 900, of which the regexes 5 500
//! (callgrind, session 54). A generic reader shared with `gateway::request` (closures for
//! members and elements) was tried too: 16 750 here, and the request's own parse gained 400.

use super::json_text::MAX_DEPTH;
use super::rails::Guardrails;

/// A request body ([`super::apply_to_request_json`]'s fields) is JSON and holds no finding.
pub fn request_is_clean(g: &Guardrails, raw: &[u8]) -> bool {
    is_clean(g, raw, Side::Request)
}

/// A non-streamed answer ([`super::apply_to_response_json`]'s fields) is JSON and holds no finding.
pub fn response_is_clean(g: &Guardrails, raw: &[u8]) -> bool {
    is_clean(g, raw, Side::Response)
}

fn is_clean(g: &Guardrails, raw: &[u8], side: Side) -> bool {
    if g.is_empty() {
        return true;
    }
    let Ok(text) = std::str::from_utf8(raw) else { return false };
    let mut walk = Walk { g, text, at: 0, depth: 0, unescaped: String::new() };
    walk.value(Some(Shape::Top(side))).is_ok() && {
        walk.skip_space();
        walk.at == raw.len()
    }
}

#[derive(Clone, Copy)]
enum Side {
    Request,
    Response,
}

/// What the value at hand is to the walk.
#[derive(Clone, Copy)]
enum Shape {
    /// The body itself.
    Top(Side),
    /// Text content at a depth: a string, or a list of strings and blocks. `arrays_only`:
    /// a plain string here is not scanned (an answer's top-level `content`/`output`).
    Content { depth: usize, arrays_only: bool },
    /// An element of a content list: a string, or a block with `text` and `content`.
    Item { depth: usize },
    /// A string to scan, anything else ignored.
    Text,
    /// A list of `messages` (request) or `choices` (answer).
    List(Elem),
    /// A message object (a `messages[]` element, a choice's `message`, Bedrock's
    /// `output.message`): its `content`.
    Message,
    /// An answer's choice: `message.content` and legacy `text`.
    Choice,
    /// An answer's `output`: a list of items (Responses), or Bedrock's `{message}`.
    Output,
    /// A Gemini `Content` (a `contents[]` element, `systemInstruction`, a candidate's
    /// `content`): its `parts`.
    Turn,
    /// A Gemini answer's candidate: its `content`.
    Candidate,
}

#[derive(Clone, Copy)]
enum Elem {
    Message,
    Choice,
    Turn,
    Candidate,
}

/// The member names the walk follows; every other member is skipped unread.
enum Key {
    Messages,
    System,
    Input,
    Prompt,
    Choices,
    Content,
    Output,
    Message,
    Text,
    Contents,
    SystemInstruction,
    Parts,
    Candidates,
    Other,
}

impl Key {
    fn of(name: &str) -> Key {
        match name {
            "messages" => Key::Messages,
            "system" => Key::System,
            "input" => Key::Input,
            "prompt" => Key::Prompt,
            "choices" => Key::Choices,
            "content" => Key::Content,
            "output" => Key::Output,
            "message" => Key::Message,
            "text" => Key::Text,
            "contents" => Key::Contents,
            "systemInstruction" => Key::SystemInstruction,
            "parts" => Key::Parts,
            "candidates" => Key::Candidates,
            _ => Key::Other,
        }
    }
}

impl Shape {
    /// The shape of a member's value inside an object of this shape; `None`: skip it.
    fn member(self, key: Key) -> Option<Shape> {
        let content = Shape::Content { depth: 0, arrays_only: false };
        match (self, key) {
            (Shape::Top(Side::Request), Key::Messages) => Some(Shape::List(Elem::Message)),
            (Shape::Top(Side::Request), Key::System | Key::Input | Key::Prompt) => Some(content),
            (Shape::Top(Side::Request), Key::Contents) => Some(Shape::List(Elem::Turn)),
            (Shape::Top(Side::Request), Key::SystemInstruction) => Some(Shape::Turn),
            (Shape::Top(Side::Response), Key::Choices) => Some(Shape::List(Elem::Choice)),
            (Shape::Top(Side::Response), Key::Content) => Some(Shape::Content { depth: 0, arrays_only: true }),
            (Shape::Top(Side::Response), Key::Output) => Some(Shape::Output),
            (Shape::Top(Side::Response), Key::Candidates) => Some(Shape::List(Elem::Candidate)),
            (Shape::Output, Key::Message) => Some(Shape::Message),
            (Shape::Turn, Key::Parts) => Some(content),
            (Shape::Candidate, Key::Content) => Some(Shape::Turn),
            (Shape::Item { .. }, Key::Text) => Some(Shape::Text),
            (Shape::Item { depth }, Key::Content) => Some(Shape::Content { depth: depth + 1, arrays_only: false }),
            (Shape::Message, Key::Content) => Some(content),
            (Shape::Choice, Key::Message) => Some(Shape::Message),
            (Shape::Choice, Key::Text) => Some(Shape::Text),
            _ => None,
        }
    }

    /// The shape of a list's elements; `None`: skip them.
    fn element(self) -> Option<Shape> {
        match self {
            Shape::Content { depth, .. } if depth < MAX_DEPTH => Some(Shape::Item { depth }),
            // Only a list `output` is content (as `Content { arrays_only }` at depth 0).
            Shape::Output => Some(Shape::Item { depth: 0 }),
            Shape::List(Elem::Message) => Some(Shape::Message),
            Shape::List(Elem::Choice) => Some(Shape::Choice),
            Shape::List(Elem::Turn) => Some(Shape::Turn),
            Shape::List(Elem::Candidate) => Some(Shape::Candidate),
            _ => None,
        }
    }

    fn scans_strings(self) -> bool {
        match self {
            Shape::Content { arrays_only, .. } => !arrays_only,
            Shape::Item { .. } | Shape::Text => true,
            _ => false,
        }
    }
}

/// Where the walk stops: a finding, or something it leaves to the tree.
struct Stop;

type Step = Result<(), Stop>;

/// Nesting beyond this goes to the tree (serde_json's own limit is 128).
const MAX_NESTING: usize = 100;

/// Longest number taken on: 300 digits cannot overflow a double (serde_json refuses one that does).
const MAX_NUMBER: usize = 300;

/// The reader over one body, already known to be UTF-8.
struct Walk<'a> {
    g: &'a Guardrails,
    text: &'a str,
    at: usize,
    depth: usize,
    /// A string with escapes, decoded (reused).
    unescaped: String,
}

impl Walk<'_> {
    fn bytes(&self) -> &[u8] {
        self.text.as_bytes()
    }

    fn peek(&self) -> Option<u8> {
        self.bytes().get(self.at).copied()
    }

    fn eat(&mut self, b: u8) -> bool {
        let hit = self.peek() == Some(b);
        self.at += usize::from(hit);
        hit
    }

    fn skip_space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\n' | b'\t' | b'\r')) {
            self.at += 1;
        }
    }

    /// One value, walked as `shape` says (`None`: read and skipped).
    fn value(&mut self, shape: Option<Shape>) -> Step {
        self.skip_space();
        match self.peek() {
            Some(b'{') => self.object(shape),
            Some(b'[') => self.array(shape),
            Some(b'"') => self.string(shape.is_some_and(Shape::scans_strings)),
            Some(b't') => self.word("true"),
            Some(b'f') => self.word("false"),
            Some(b'n') => self.word("null"),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(Stop),
        }
    }

    fn object(&mut self, shape: Option<Shape>) -> Step {
        self.enter()?;
        self.skip_space();
        if self.eat(b'}') {
            return self.leave();
        }
        loop {
            self.skip_space();
            let key = self.key()?;
            self.skip_space();
            if !self.eat(b':') {
                return Err(Stop);
            }
            self.value(shape.and_then(|s| s.member(key)))?;
            self.skip_space();
            if self.eat(b'}') {
                return self.leave();
            }
            if !self.eat(b',') {
                return Err(Stop);
            }
        }
    }

    fn array(&mut self, shape: Option<Shape>) -> Step {
        self.enter()?;
        self.skip_space();
        if self.eat(b']') {
            return self.leave();
        }
        let element = shape.and_then(Shape::element);
        loop {
            self.value(element)?;
            self.skip_space();
            if self.eat(b']') {
                return self.leave();
            }
            if !self.eat(b',') {
                return Err(Stop);
            }
        }
    }

    fn enter(&mut self) -> Step {
        self.at += 1;
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(Stop);
        }
        Ok(())
    }

    fn leave(&mut self) -> Step {
        self.depth -= 1;
        Ok(())
    }

    /// A member's name. One spelt with escapes goes to the tree (no name the walk follows needs one).
    fn key(&mut self) -> Result<Key, Stop> {
        if !self.eat(b'"') {
            return Err(Stop);
        }
        let start = self.at;
        let end = plain_end(self.bytes(), start);
        if self.bytes().get(end) != Some(&b'"') {
            return Err(Stop);
        }
        self.at = end + 1;
        Ok(Key::of(&self.text[start..end]))
    }

    /// A string; scanned when `scan`. Stops at a finding.
    fn string(&mut self, scan: bool) -> Step {
        self.at += 1;
        let start = self.at;
        let end = plain_end(self.bytes(), start);
        let found = match self.bytes().get(end) {
            Some(b'"') => {
                self.at = end + 1;
                scan && self.g.finds_anything(&self.text[start..end])
            }
            Some(b'\\') => {
                self.unescape(start, end)?;
                scan && self.g.finds_anything(&self.unescaped)
            }
            _ => return Err(Stop),
        };
        if found {
            return Err(Stop);
        }
        Ok(())
    }

    /// Decodes a string with escapes into `unescaped`: `text[start..end]` is its plain start,
    /// `end` its first backslash.
    fn unescape(&mut self, start: usize, mut end: usize) -> Step {
        let mut out = std::mem::take(&mut self.unescaped);
        out.clear();
        out.push_str(&self.text[start..end]);
        loop {
            match self.bytes().get(end) {
                Some(b'"') => break,
                Some(b'\\') => end = self.escape(end + 1, &mut out)?,
                _ => return Err(Stop),
            }
            let plain = plain_end(self.bytes(), end);
            out.push_str(&self.text[end..plain]);
            end = plain;
        }
        self.at = end + 1;
        self.unescaped = out;
        Ok(())
    }

    /// One escape after its backslash, pushed onto `out`; returns where the string goes on.
    fn escape(&self, at: usize, out: &mut String) -> Result<usize, Stop> {
        let c = match self.bytes().get(at) {
            Some(b'"') => '"',
            Some(b'\\') => '\\',
            Some(b'/') => '/',
            Some(b'b') => '\u{8}',
            Some(b'f') => '\u{c}',
            Some(b'n') => '\n',
            Some(b'r') => '\r',
            Some(b't') => '\t',
            Some(b'u') => {
                let hex = self.text.get(at + 1..at + 5).filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()));
                let code = hex.and_then(|h| u32::from_str_radix(h, 16).ok()).ok_or(Stop)?;
                // A surrogate (half of a pair, or alone) goes to the tree.
                out.push(char::from_u32(code).ok_or(Stop)?);
                return Ok(at + 5);
            }
            _ => return Err(Stop),
        };
        out.push(c);
        Ok(at + 1)
    }

    fn word(&mut self, word: &str) -> Step {
        if !self.text[self.at..].starts_with(word) {
            return Err(Stop);
        }
        self.at += word.len();
        Ok(())
    }

    /// JSON's number grammar, without an exponent (the tree decides those, and the longest).
    fn number(&mut self) -> Step {
        let start = self.at;
        self.eat(b'-');
        match self.peek() {
            Some(b'0') => self.at += 1,
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(Stop),
        }
        if self.eat(b'.') {
            if !self.peek().is_some_and(|b| b.is_ascii_digit()) {
                return Err(Stop);
            }
            self.digits();
        }
        if matches!(self.peek(), Some(b'e' | b'E')) || self.at - start > MAX_NUMBER {
            return Err(Stop);
        }
        Ok(())
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.at += 1;
        }
    }
}

/// The first byte from `at` that ends a string's plain run: a quote, a backslash or a control
/// character (which JSON forbids there); `b.len()` if none. Eight bytes a step (the SWAR
/// zero-byte test: the lowest flagged byte is exact, borrows only run upwards); `plain_end_slow`
/// in `tests` is its reference.
fn plain_end(b: &[u8], mut at: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero = |x: u64| x.wrapping_sub(ONES) & !x;
    while let Some(chunk) = b.get(at..at + 8) {
        let w = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
        let hits = (zero(w ^ (ONES * u64::from(b'"')))
            | zero(w ^ (ONES * u64::from(b'\\')))
            | (w.wrapping_sub(ONES * 0x20) & !w))
            & HIGH;
        if hits != 0 {
            return at + (hits.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    while b.get(at).is_some_and(|&c| c != b'"' && c != b'\\' && c >= 0x20) {
        at += 1;
    }
    at
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::super::{apply_to_request_json, apply_to_response_json, Guardrails};
    use super::*;
    use crate::checks::policy::document::GuardrailsDoc;

    fn rails() -> Guardrails {
        let doc: GuardrailsDoc = serde_yaml::from_str("pii: {email: redact, credit_card: block}\n").unwrap();
        Guardrails::compile(&[&doc]).unwrap()
    }

    /// Every place a text can sit, on both sides, at every depth the tree walk follows and one
    /// beyond, inside strings, lists and blocks, and in members the walks must both skip.
    fn bodies(text: &str) -> Vec<Value> {
        let t = json!(text);
        let nested = |depth: usize| {
            let mut c = json!([{"type": "text", "text": t}]);
            for _ in 0..depth {
                c = json!([{"type": "tool_result", "content": c}]);
            }
            c
        };
        let mut v = vec![
            json!({"messages": [{"role": "user", "content": t}]}),
            json!({"messages": [{"role": "user", "content": [t]}]}),
            json!({"messages": [{"role": "user", "content": [{"type": "text", "text": t}]}]}),
            json!({"messages": [{"role": "user", "content": {"text": t}}]}),
            json!({"messages": [[{"content": t}]]}),
            json!({"messages": {"a": {"content": t}}}),
            json!({"system": t}),
            json!({"system": [{"text": t}]}),
            json!({"input": t}),
            json!({"input": [t, t]}),
            json!({"input": [{"role": "user", "content": [{"type": "input_text", "text": t}]}]}),
            json!({"prompt": [t]}),
            json!({"model": t, "user": t, "tools": [{"description": t}]}),
            json!({"choices": [{"message": {"content": t}}]}),
            json!({"choices": [{"message": {"content": [{"text": t}]}}]}),
            json!({"choices": [{"text": t}]}),
            json!({"choices": [{"text": [t]}]}),
            json!({"choices": [{"delta": {"content": t}}]}),
            json!({"content": [{"type": "text", "text": t}]}),
            json!({"content": t}),
            json!({"output": [{"content": [{"type": "output_text", "text": t}]}]}),
            json!({"output": t}),
            json!({"output": {"message": {"role": "assistant", "content": [{"text": t}]}}}),
            json!({"output": {"message": {"content": t}}}),
            json!({"output": {"text": t, "message": [{"content": t}]}}),
            json!({"messages": [{"role": "user", "content": [{"toolUse": {"input": {"q": t}}}, {"text": t}]}]}),
            json!({"contents": [{"role": "user", "parts": [{"text": t}]}]}),
            json!({"contents": [{"role": "model", "parts": [{"functionCall": {"name": "f", "args": {"q": t}}}]}]}),
            json!({"contents": [{"parts": t}, {"text": t}]}),
            json!({"contents": {"parts": [{"text": t}]}}),
            json!({"systemInstruction": {"parts": [{"text": t}]}}),
            json!({"systemInstruction": t}),
            json!({"candidates": [{"content": {"role": "model", "parts": [{"text": t, "thought": true}]}}]}),
            json!({"candidates": [{"content": t, "finishReason": "STOP"}]}),
            json!({"candidates": [{"content": {"parts": [{"functionCall": {"name": "f", "args": {"q": t}}}]}}]}),
            json!({"id": t, "object": "chat.completion", "usage": {"prompt_tokens": 1}}),
            json!([t]),
            json!(t),
        ];
        for depth in 0..=MAX_DEPTH + 1 {
            v.push(json!({"messages": [{"content": nested(depth)}]}));
            v.push(json!({"content": nested(depth)}));
            v.push(json!({"output": nested(depth)}));
            v.push(json!({"output": {"message": {"content": nested(depth)}}}));
            v.push(json!({"contents": [{"parts": nested(depth)}]}));
            v.push(json!({"candidates": [{"content": {"parts": nested(depth)}}]}));
        }
        v
    }

    #[test]
    fn clean_exactly_when_the_tree_walk_finds_nothing() {
        let g = rails();
        for text in ["write to a@b.io", "card 4111 1111 1111 1111", "nothing to see", "escaped \"a@b.io\"\n"] {
            for body in bodies(text) {
                let raw = serde_json::to_vec(&body).unwrap();
                let tree_req = apply_to_request_json(&g, &mut body.clone()).findings.is_empty();
                let tree_resp = apply_to_response_json(&g, &mut body.clone()).findings.is_empty();
                assert_eq!(request_is_clean(&g, &raw), tree_req, "request {body}");
                assert_eq!(response_is_clean(&g, &raw), tree_resp, "response {body}");
            }
        }
    }

    #[test]
    fn a_duplicated_member_is_scanned_in_every_copy() {
        // The tree keeps the last copy only; scanning both can only send more bodies to it.
        let raw = br#"{"messages":[{"content":"a@b.io","content":"fine"}]}"#;
        assert!(!request_is_clean(&rails(), raw));
        assert!(apply_to_request_json(&rails(), &mut serde_json::from_slice(raw).unwrap()).findings.is_empty());
    }

    #[test]
    fn not_json_or_trailing_bytes_is_never_clean() {
        let g = rails();
        for raw in [&b"not json"[..], b"{\"messages\":[]} x", b"{\"messages\":[", b""] {
            assert!(!request_is_clean(&g, raw) && !response_is_clean(&g, raw), "{raw:?}");
        }
        assert!(request_is_clean(&Guardrails::none(), b"not json"), "nothing active: nothing to find");
    }

    #[test]
    fn escapes_are_decoded_before_the_scan() {
        let g = rails();
        assert!(!request_is_clean(&g, br#"{"messages":[{"content":"write to a\u0040b.io"}]}"#));
        assert!(!request_is_clean(&g, br#"{"messages":[{"content":"\"a@b.io\"\n"}]}"#));
        assert!(request_is_clean(&g, br#"{"messages":[{"content":"tab\there \u00e9t\u00E9 \/ \\ \b\f\r"}]}"#));
    }

    #[test]
    fn what_the_reader_does_not_take_on_goes_to_the_tree() {
        let g = rails();
        let deep = format!("{{\"messages\":{}{}}}", "[".repeat(MAX_NESTING), "]".repeat(MAX_NESTING));
        for raw in [
            &br#"{"messages":[],"n":1e5}"#[..],
            br#"{"messages":[{"content":"\ud83d\ude00"}]}"#,
            br#"{"m\u0065ssages":[]}"#,
            br#"{"messages":[],"n":01}"#,
            br#"{"messages":[{"content":"a\x"}]}"#,
            b"{\"messages\":[{\"content\":\"a\x01\"}]}",
            deep.as_bytes(),
        ] {
            assert!(!request_is_clean(&g, raw), "{}", String::from_utf8_lossy(raw));
        }
        assert!(request_is_clean(&g, format!("{{\"n\":{}}}", "1".repeat(MAX_NUMBER)).as_bytes()));
    }

    #[test]
    fn every_usual_value_is_read_not_left_to_the_tree() {
        let raw = br#" { "model" : "m", "n": -0.5, "k": 120, "t": true, "f": false, "z": null,
            "messages": [ {"role": "user", "content": [ {"type": "text", "text": "hi"} ] } ], "o": {}, "l": [] } "#;
        assert!(request_is_clean(&rails(), raw));
    }

    /// Clean here must mean: serde_json reads the same bytes as a document, and the tree walk
    /// finds nothing in it. Every body of `bodies`, pretty and compact, with one byte changed,
    /// dropped or the rest cut off at each place.
    #[test]
    fn clean_only_when_serde_reads_it_and_the_tree_finds_nothing() {
        let g = rails();
        let swaps =
            [b'"', b'\\', b'{', b'}', b'[', b']', b',', b':', b' ', b'0', b'-', b'.', b'e', b't', b'u', 1, 0xff, b'@'];
        let mut docs = Vec::new();
        for body in bodies("a\tb@ 4111 x").into_iter().take(40).chain(bodies("fine \u{e9}").into_iter().take(40)) {
            docs.push(serde_json::to_vec(&body).unwrap());
            docs.push(serde_json::to_vec_pretty(&body).unwrap());
        }
        docs.push(br#"{"messages":[{"content":"x\u0041y"}],"n":[-0,1.25,10,0.0]}"#.to_vec());
        let holds = |raw: &[u8]| {
            for (clean, walk) in [
                (request_is_clean(&g, raw), apply_to_request_json as fn(&Guardrails, &mut Value) -> _),
                (response_is_clean(&g, raw), apply_to_response_json),
            ] {
                if clean {
                    let mut tree: Value = serde_json::from_slice(raw)
                        .unwrap_or_else(|e| panic!("clean but not JSON ({e}): {}", String::from_utf8_lossy(raw)));
                    assert!(
                        walk(&g, &mut tree).findings.is_empty(),
                        "clean but found: {}",
                        String::from_utf8_lossy(raw)
                    );
                }
            }
        };
        for doc in &docs {
            holds(doc);
            for at in 0..doc.len() {
                holds(&doc[..at]);
                let mut dropped = doc.clone();
                dropped.remove(at);
                holds(&dropped);
                for &b in &swaps {
                    let mut changed = doc.clone();
                    changed[at] = b;
                    holds(&changed);
                }
            }
        }
    }

    /// `plain_end`'s reference: one byte a step.
    fn plain_end_slow(b: &[u8], mut at: usize) -> usize {
        while at < b.len() && !matches!(b[at], b'"' | b'\\' | 0..=0x1f) {
            at += 1;
        }
        at
    }

    #[test]
    fn plain_end_equals_its_byte_by_byte_reference() {
        let alphabet =
            [b'a', b'"', b'\\', 0, 0x1f, 0x20, 0x7f, 0x80, 0xc3, 0xff, b'!', b'#', b'[', b']', 0x21, 0x5b, 0x5d];
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..20_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let len = (seed % 40) as usize;
            let b: Vec<u8> =
                (0..len).map(|i| alphabet[((seed >> (i % 60)) as usize + i * 7) % alphabet.len()]).collect();
            for at in 0..=len {
                assert_eq!(plain_end(&b, at), plain_end_slow(&b, at), "{b:?} from {at}");
            }
        }
    }
}
