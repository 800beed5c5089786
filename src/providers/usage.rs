//! Token usage read from provider answers: whole JSON bodies and SSE events.

use serde_json::Value;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// Which provider's answer format to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// OpenAI chat completions / embeddings (also Anthropic's OpenAI-compatible endpoint).
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
}

fn num(v: &Value, field: &str) -> Option<u64> {
    v.get(field).and_then(Value::as_u64)
}

/// Usage from the raw bytes of a whole JSON answer. Only `usage` is materialized: the rest of
/// the answer (often most of it) is skipped by the parser, not built into values.
pub fn from_json_bytes(dialect: Dialect, bytes: &[u8]) -> Option<Usage> {
    #[derive(serde::Deserialize)]
    struct UsageOnly {
        usage: Option<Value>,
    }
    let u = serde_json::from_slice::<UsageOnly>(bytes).ok()?.usage?;
    from_usage(dialect, &u)
}

/// Usage from a whole (non-streamed) JSON answer.
pub fn from_body(dialect: Dialect, body: &Value) -> Option<Usage> {
    from_usage(dialect, body.get("usage")?)
}

/// Usage from an answer's `usage` member.
fn from_usage(dialect: Dialect, u: &Value) -> Option<Usage> {
    Some(match dialect {
        Dialect::OpenAi => Usage {
            prompt_tokens: num(u, "prompt_tokens").or_else(|| num(u, "input_tokens")).unwrap_or(0),
            completion_tokens: num(u, "completion_tokens").or_else(|| num(u, "output_tokens")).unwrap_or(0),
        },
        Dialect::Anthropic => {
            Usage { prompt_tokens: anthropic_input(u), completion_tokens: num(u, "output_tokens").unwrap_or(0) }
        }
    })
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
