//! The fast path of the JSON guardrails: scan a body's text fields straight from its bytes,
//! without building its JSON tree (an allocation per member and string).
//!
//! The walk mirrors [`super::json_text`]'s and visits every string that walk would visit; for
//! a duplicated member it visits more (the tree keeps only the last one). So "clean here"
//! implies "nothing found by the tree walk". Anything else (a finding, a body that is not
//! JSON, a shape this walk did not expect) answers "use the tree", whose walk alone redacts
//! and reports. A gap in this walk could only cost time, never a missed finding, as long as
//! it never skips a string the tree walk scans; `tests` holds the two walks to that.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

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
    let mut de = serde_json::Deserializer::from_slice(raw);
    Node { g, shape: Shape::Top(side) }.deserialize(&mut de).is_ok() && de.end().is_ok()
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

impl<'de> de::Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Key, D::Error> {
        struct Name;
        impl Visitor<'_> for Name {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Key, E> {
                Ok(match s {
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
                })
            }
        }
        d.deserialize_str(Name)
    }
}

/// One value of the body, walked as `shape` says.
struct Node<'g> {
    g: &'g Guardrails,
    shape: Shape,
}

impl Node<'_> {
    fn child(&self, shape: Shape) -> Self {
        Node { g: self.g, shape }
    }

    /// The shape of a member's value inside an object of this shape; `None`: skip it.
    fn member(&self, key: Key) -> Option<Shape> {
        let content = Shape::Content { depth: 0, arrays_only: false };
        match (self.shape, key) {
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
    fn element(&self) -> Option<Shape> {
        match self.shape {
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

    fn scans_strings(&self) -> bool {
        match self.shape {
            Shape::Content { arrays_only, .. } => !arrays_only,
            Shape::Item { .. } | Shape::Text => true,
            _ => false,
        }
    }
}

impl<'de> DeserializeSeed<'de> for Node<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<(), E> {
        // Stops the parse at the first finding: the tree walk takes over from the start.
        if self.scans_strings() && self.g.finds_anything(s) {
            return Err(E::custom("a guardrail finding"));
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        match self.element() {
            Some(shape) => while seq.next_element_seed(self.child(shape))?.is_some() {},
            None => while seq.next_element::<IgnoredAny>()?.is_some() {},
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Key>()? {
            match self.member(key) {
                Some(shape) => map.next_value_seed(self.child(shape))?,
                None => map.next_value::<IgnoredAny>().map(drop)?,
            }
        }
        Ok(())
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
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
}
