//! Token usage read from provider answers: whole JSON bodies and SSE events.

use serde_json::Value;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// What an API speaks: the format of its requests, answers and stream events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// OpenAI chat completions / embeddings.
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
    /// AWS Bedrock Converse (JSON answers; streams in AWS event-stream frames).
    Converse,
    /// Google Gemini `generateContent` (Vertex AI; streams as SSE with `alt=sse`).
    Gemini,
}

fn num(v: &Value, field: &str) -> Option<u64> {
    v.get(field).and_then(Value::as_u64)
}

/// Usage from the raw bytes of a whole JSON answer. Only `usage` is read: the rest of the
/// answer (often most of it) is skipped by the parser, not built into values. An object
/// `usage` is read into plain numbers without allocating; anything else takes the general path,
/// which gives the same result (a unit test holds the two equal).
pub fn from_json_bytes(dialect: Dialect, bytes: &[u8]) -> Option<Usage> {
    if matches!(dialect, Dialect::Converse | Dialect::Gemini) {
        // Not on the measured path: these answers are read whole.
        return from_value(dialect, &serde_json::from_slice(bytes).ok()?);
    }
    #[derive(serde::Deserialize)]
    struct Typed {
        usage: Option<Counts>,
    }
    match serde_json::from_slice::<Typed>(bytes) {
        Ok(t) => t.usage.map(|c| c.usage(dialect)),
        Err(_) => from_json_bytes_general(dialect, bytes),
    }
}

/// The `model` member of a whole JSON answer (the model that answered), other members skipped.
pub fn answer_model(bytes: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct ModelOnly {
        model: Option<Value>,
    }
    match serde_json::from_slice::<ModelOnly>(bytes).ok()?.model? {
        Value::String(m) if !m.is_empty() => Some(m),
        _ => None,
    }
}

fn from_json_bytes_general(dialect: Dialect, bytes: &[u8]) -> Option<Usage> {
    #[derive(serde::Deserialize)]
    struct UsageOnly {
        usage: Option<Value>,
    }
    let u = serde_json::from_slice::<UsageOnly>(bytes).ok()?.usage?;
    from_usage(dialect, &u)
}

/// The token counts of a `usage` object, each read as `Value::as_u64` reads it.
#[derive(serde::Deserialize)]
struct Counts {
    #[serde(default)]
    prompt_tokens: Count,
    #[serde(default)]
    completion_tokens: Count,
    #[serde(default)]
    input_tokens: Count,
    #[serde(default)]
    output_tokens: Count,
    #[serde(default)]
    cache_creation_input_tokens: Count,
    #[serde(default)]
    cache_read_input_tokens: Count,
}

/// A member that counts only when it is a non-negative integer (other values are ignored).
#[derive(Default)]
struct Count(Option<u64>);

impl<'de> serde::Deserialize<'de> for Count {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Count(Value::deserialize(d)?.as_u64()))
    }
}

impl Counts {
    fn usage(&self, dialect: Dialect) -> Usage {
        let n = |c: &Count| c.0;
        match dialect {
            Dialect::OpenAi => Usage {
                prompt_tokens: n(&self.prompt_tokens).or(n(&self.input_tokens)).unwrap_or(0),
                completion_tokens: n(&self.completion_tokens).or(n(&self.output_tokens)).unwrap_or(0),
            },
            Dialect::Anthropic | Dialect::Converse | Dialect::Gemini => Usage {
                prompt_tokens: n(&self.input_tokens).unwrap_or(0)
                    + n(&self.cache_creation_input_tokens).unwrap_or(0)
                    + n(&self.cache_read_input_tokens).unwrap_or(0),
                completion_tokens: n(&self.output_tokens).unwrap_or(0),
            },
        }
    }
}

/// Usage from an answer's `usage` member.
fn from_usage(dialect: Dialect, u: &Value) -> Option<Usage> {
    Some(match dialect {
        Dialect::OpenAi => Usage {
            prompt_tokens: num(u, "prompt_tokens").or_else(|| num(u, "input_tokens")).unwrap_or(0),
            completion_tokens: num(u, "completion_tokens").or_else(|| num(u, "output_tokens")).unwrap_or(0),
        },
        Dialect::Anthropic | Dialect::Converse | Dialect::Gemini => {
            Usage { prompt_tokens: anthropic_input(u), completion_tokens: num(u, "output_tokens").unwrap_or(0) }
        }
    })
}

/// Usage of a whole Converse or Gemini answer (or of one Gemini stream event, or a whole
/// non-SSE Gemini stream): read by the same functions the translations use, so a receipt and
/// a translated answer's `usage` always agree.
pub fn from_value(dialect: Dialect, v: &Value) -> Option<Usage> {
    let counts = match dialect {
        Dialect::Converse => crate::providers::bedrock::eventstream::usage_counts(v.get("usage")?),
        Dialect::Gemini => crate::translate::gemini::usage_of(v),
        _ => return from_usage(dialect, v.get("usage")?),
    };
    counts.map(|(prompt_tokens, completion_tokens)| Usage { prompt_tokens, completion_tokens })
}

/// Anthropic bills cache reads and writes as input too.
fn anthropic_input(u: &Value) -> u64 {
    num(u, "input_tokens").unwrap_or(0)
        + num(u, "cache_creation_input_tokens").unwrap_or(0)
        + num(u, "cache_read_input_tokens").unwrap_or(0)
}

/// Folds the usage carried by one SSE event's JSON data into `acc`.
///
/// OpenAI sends one final chunk with `usage` (when `stream_options.include_usage`). Anthropic
/// sends input tokens in `message_start` and cumulative output tokens in `message_delta`.
pub fn fold_event(dialect: Dialect, data: &Value, acc: &mut Option<Usage>) {
    match dialect {
        Dialect::OpenAi => {
            if let Some(u) = data.get("usage").filter(|u| u.is_object()) {
                *acc = from_usage(Dialect::OpenAi, u);
            }
        }
        Dialect::Anthropic => {
            let cur = acc.get_or_insert_with(Usage::default);
            match data.get("type").and_then(Value::as_str) {
                Some("message_start") => {
                    if let Some(u) = data.pointer("/message/usage") {
                        cur.prompt_tokens = anthropic_input(u);
                        cur.completion_tokens = num(u, "output_tokens").unwrap_or(cur.completion_tokens);
                    }
                }
                Some("message_delta") => {
                    if let Some(u) = data.get("usage") {
                        if let Some(out) = num(u, "output_tokens") {
                            cur.completion_tokens = out;
                        }
                        if num(u, "input_tokens").is_some() {
                            cur.prompt_tokens = anthropic_input(u);
                        }
                    }
                }
                _ => {}
            }
        }
        // ConverseStream's `metadata` event carries the whole usage; Gemini repeats its
        // `usageMetadata` on several events, the last one complete.
        Dialect::Converse => {
            if let Some(u) = data.get("metadata").and_then(|m| from_value(Dialect::Converse, m)) {
                *acc = Some(u);
            }
        }
        Dialect::Gemini => {
            if let Some(u) = from_value(Dialect::Gemini, data) {
                *acc = Some(u);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A whole answer, read as the gateway reads it: from its bytes.
    fn from_body(dialect: Dialect, body: &Value) -> Option<Usage> {
        from_json_bytes(dialect, &serde_json::to_vec(body).unwrap())
    }

    #[test]
    fn bodies() {
        let o = json!({"usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}});
        assert_eq!(from_body(Dialect::OpenAi, &o), Some(Usage { prompt_tokens: 11, completion_tokens: 7 }));
        let e = json!({"usage": {"prompt_tokens": 5, "total_tokens": 5}});
        assert_eq!(from_body(Dialect::OpenAi, &e), Some(Usage { prompt_tokens: 5, completion_tokens: 0 }));
        let a = json!({"usage": {"input_tokens": 13, "output_tokens": 6, "cache_read_input_tokens": 2}});
        assert_eq!(from_body(Dialect::Anthropic, &a), Some(Usage { prompt_tokens: 15, completion_tokens: 6 }));
        assert_eq!(from_body(Dialect::OpenAi, &json!({})), None);
    }

    #[test]
    fn usage_from_raw_bytes() {
        let raw =
            br#"{"id":"x","choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#;
        assert_eq!(from_json_bytes(Dialect::OpenAi, raw), Some(Usage { prompt_tokens: 3, completion_tokens: 2 }));
        assert_eq!(from_json_bytes(Dialect::OpenAi, b"{\"error\":{}}"), None);
        assert_eq!(from_json_bytes(Dialect::OpenAi, b"not json"), None);
    }

    #[test]
    fn the_typed_read_equals_the_general_one() {
        let bodies: [&[u8]; 12] = [
            br#"{"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5,"prompt_tokens_details":{"cached_tokens":1}}}"#,
            br#"{"usage":{"input_tokens":13,"output_tokens":6,"cache_creation_input_tokens":4,"cache_read_input_tokens":2}}"#,
            br#"{"usage":{"prompt_tokens":-1,"completion_tokens":2.5,"input_tokens":"7","output_tokens":9}}"#,
            br#"{"usage":{"prompt_tokens":null,"completion_tokens":[1],"input_tokens":{}}}"#,
            br#"{"usage":{}}"#,
            br#"{"usage":null}"#,
            br#"{"usage":5}"#,
            br#"{"usage":"x"}"#,
            br#"{"usage":{"prompt_tokens":1,"prompt_tokens":2}}"#,
            br#"{"choices":[]}"#,
            br#"[1,2]"#,
            br#"{"usage":{"prompt_tokens":18446744073709551615,"completion_tokens":1e3}}"#,
        ];
        for body in bodies {
            for dialect in [Dialect::OpenAi, Dialect::Anthropic] {
                assert_eq!(
                    from_json_bytes(dialect, body),
                    from_json_bytes_general(dialect, body),
                    "{dialect:?} {}",
                    String::from_utf8_lossy(body)
                );
            }
        }
    }

    #[test]
    fn the_answering_model_is_read_from_a_whole_answer() {
        assert_eq!(
            answer_model(br#"{"id":"x","model":"gpt-4o-2024-08-06","choices":[]}"#).as_deref(),
            Some("gpt-4o-2024-08-06")
        );
        assert_eq!(answer_model(br#"{"model":5}"#), None);
        assert_eq!(answer_model(br#"{"choices":[]}"#), None);
        assert_eq!(answer_model(b"[1]"), None);
    }

    #[test]
    fn anthropic_stream() {
        let mut acc = None;
        fold_event(
            Dialect::Anthropic,
            &json!({"type": "message_start", "message": {"usage": {"input_tokens": 13, "output_tokens": 1}}}),
            &mut acc,
        );
        fold_event(Dialect::Anthropic, &json!({"type": "content_block_delta"}), &mut acc);
        fold_event(Dialect::Anthropic, &json!({"type": "message_delta", "usage": {"output_tokens": 6}}), &mut acc);
        assert_eq!(acc, Some(Usage { prompt_tokens: 13, completion_tokens: 6 }));
    }

    #[test]
    fn converse_and_gemini() {
        let c = json!({"output": {}, "usage": {"inputTokens": 12, "outputTokens": 5, "totalTokens": 17}});
        assert_eq!(from_body(Dialect::Converse, &c), Some(Usage { prompt_tokens: 12, completion_tokens: 5 }));
        let g = json!({"candidates": [], "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 4,
            "thoughtsTokenCount": 2, "totalTokenCount": 15}});
        assert_eq!(from_body(Dialect::Gemini, &g), Some(Usage { prompt_tokens: 9, completion_tokens: 6 }));
        let mut acc = None;
        fold_event(Dialect::Converse, &json!({"contentBlockDelta": {"delta": {"text": "x"}}}), &mut acc);
        assert_eq!(acc, None);
        fold_event(Dialect::Converse, &json!({"metadata": {"usage": {"inputTokens": 3, "outputTokens": 2}}}), &mut acc);
        assert_eq!(acc, Some(Usage { prompt_tokens: 3, completion_tokens: 2 }));
        let mut acc = None;
        fold_event(Dialect::Gemini, &g, &mut acc);
        assert_eq!(acc, Some(Usage { prompt_tokens: 9, completion_tokens: 6 }));
    }

    #[test]
    fn openai_stream() {
        let mut acc = None;
        fold_event(Dialect::OpenAi, &json!({"choices": [{"delta": {"content": "x"}}], "usage": null}), &mut acc);
        assert_eq!(acc, None);
        fold_event(
            Dialect::OpenAi,
            &json!({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}}),
            &mut acc,
        );
        assert_eq!(acc, Some(Usage { prompt_tokens: 3, completion_tokens: 4 }));
    }
}
