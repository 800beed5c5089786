//! Token usage read from provider answers: whole JSON bodies and SSE events.

use serde_json::Value;

/// What one answer used, as the provider billed it. `prompt_tokens` and `completion_tokens` are
/// the totals receipts, limits and metrics count; the other members say which part of those
/// totals is priced at another rate ([`crate::providers::pricing::Pricing::cost`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Every input token: uncached, read from the provider's prompt cache, and written to it.
    pub prompt_tokens: u64,
    /// Every output token, reasoning ("thinking") tokens included.
    pub completion_tokens: u64,
    /// Of `prompt_tokens`, the tokens read from the prompt cache.
    pub cache_read_tokens: u64,
    /// Of `prompt_tokens`, the tokens written to the prompt cache (Anthropic, Bedrock).
    pub cache_write_tokens: u64,
    /// Of `cache_write_tokens`, those written with Anthropic's one-hour lifetime (dearer).
    pub cache_write_1h_tokens: u64,
    /// Of `completion_tokens`, the reasoning tokens (priced as output; kept for what it says).
    pub reasoning_tokens: u64,
}

impl Usage {
    /// Usage with no cached or reasoning part.
    pub fn plain(prompt_tokens: u64, completion_tokens: u64) -> Usage {
        Usage { prompt_tokens, completion_tokens, ..Usage::default() }
    }

    /// Input and output tokens: what a tokens-per-minute limit counts.
    pub fn total(&self) -> u64 {
        self.prompt_tokens.saturating_add(self.completion_tokens)
    }
}

/// What an API speaks: the format of its requests, answers and stream events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// OpenAI chat completions / embeddings.
    OpenAi,
    /// OpenAI Responses (`/v1/responses`): `usage.{input,output}_tokens`; streams are typed
    /// events (`response.output_text.delta`, ...) ending with `response.completed`.
    Responses,
    /// Anthropic Messages.
    Anthropic,
    /// AWS Bedrock Converse (JSON answers; streams in AWS event-stream frames).
    Converse,
    /// Google Gemini `generateContent` (Vertex AI; streams as SSE with `alt=sse`).
    Gemini,
}

impl Dialect {
    /// The chat completions dialect: the gateway's lingua franca, which every provider
    /// translates from and to.
    pub const CHAT: Dialect = Dialect::OpenAi;

    /// Whether an SSE event (trimmed) is the one that closes a stream: the chat dialect's
    /// `data: [DONE]`, Messages' `message_stop`. Gemini's stream has no closing event (its end
    /// is the end of the body); Converse streams are frames, not SSE; Responses' terminal
    /// events are typed events the gateway's Responses module reads.
    pub fn is_closing_event(self, trimmed: &[u8]) -> bool {
        match self {
            Dialect::OpenAi => trimmed == b"data: [DONE]" || trimmed == b"data:[DONE]",
            Dialect::Anthropic => {
                trimmed.starts_with(b"event: message_stop") || trimmed.starts_with(b"event:message_stop")
            }
            Dialect::Responses | Dialect::Converse | Dialect::Gemini => false,
        }
    }

    /// The bytes every event that carries usage contains: cheaper to look for than parsing
    /// every token event.
    pub fn usage_marker(self) -> &'static [u8] {
        match self {
            Dialect::Gemini => b"\"usageMetadata\"",
            _ => b"\"usage\"",
        }
    }

    /// The line an error event starts with in this dialect's SSE stream (none: a bare `data:`).
    pub fn error_event_line(self) -> &'static [u8] {
        match self {
            Dialect::Anthropic => b"event: error\n",
            _ => b"",
        }
    }
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
        #[serde(default)]
        usage: Nested<Counts>,
    }
    match serde_json::from_slice::<Typed>(bytes) {
        Ok(t) => t.usage.0.map(|c| c.raw().usage(dialect)),
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

/// The counts an OpenAI or Anthropic `usage` object may carry, each `None` unless it is a
/// non-negative integer. Both reads (typed and general) fill this, and one function does the
/// arithmetic, so they cannot disagree on it.
#[derive(Debug, Default, PartialEq)]
struct Raw {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    /// Anthropic's `cache_creation.ephemeral_1h_input_tokens`.
    cache_creation_1h: Option<u64>,
    /// OpenAI chat's `prompt_tokens_details.cached_tokens`.
    prompt_cached: Option<u64>,
    /// OpenAI chat's `completion_tokens_details.reasoning_tokens`.
    completion_reasoning: Option<u64>,
    /// OpenAI Responses' `input_tokens_details.cached_tokens`.
    input_cached: Option<u64>,
    /// OpenAI Responses' `output_tokens_details.reasoning_tokens`.
    output_reasoning: Option<u64>,
}

impl Raw {
    fn of(u: &Value) -> Raw {
        let n = |path: &str| u.pointer(path).and_then(Value::as_u64);
        Raw {
            prompt_tokens: n("/prompt_tokens"),
            completion_tokens: n("/completion_tokens"),
            input_tokens: n("/input_tokens"),
            output_tokens: n("/output_tokens"),
            cache_creation_input_tokens: n("/cache_creation_input_tokens"),
            cache_read_input_tokens: n("/cache_read_input_tokens"),
            cache_creation_1h: n("/cache_creation/ephemeral_1h_input_tokens"),
            prompt_cached: n("/prompt_tokens_details/cached_tokens"),
            completion_reasoning: n("/completion_tokens_details/reasoning_tokens"),
            input_cached: n("/input_tokens_details/cached_tokens"),
            output_reasoning: n("/output_tokens_details/reasoning_tokens"),
        }
    }

    /// OpenAI's `prompt_tokens` (Responses: `input_tokens`) already includes the cached tokens,
    /// and `completion_tokens` the reasoning ones. `cache_creation_input_tokens` is no OpenAI
    /// member: the gateway's own translations from Anthropic and Bedrock add it (as LiteLLM
    /// does), inside `prompt_tokens` too, so writes keep their price through a translated stream.
    /// Anthropic's `input_tokens` excludes the cache reads and writes: they are added.
    fn usage(&self, dialect: Dialect) -> Usage {
        let z = |n: Option<u64>| n.unwrap_or(0);
        match dialect {
            Dialect::OpenAi | Dialect::Responses => Usage {
                prompt_tokens: z(self.prompt_tokens.or(self.input_tokens)),
                completion_tokens: z(self.completion_tokens.or(self.output_tokens)),
                cache_read_tokens: z(self.prompt_cached.or(self.input_cached)),
                cache_write_tokens: z(self.cache_creation_input_tokens),
                cache_write_1h_tokens: z(self.cache_creation_1h),
                reasoning_tokens: z(self.completion_reasoning.or(self.output_reasoning)),
            },
            Dialect::Anthropic | Dialect::Converse | Dialect::Gemini => {
                let (read, write) = (z(self.cache_read_input_tokens), z(self.cache_creation_input_tokens));
                Usage {
                    prompt_tokens: z(self.input_tokens).saturating_add(read).saturating_add(write),
                    completion_tokens: z(self.output_tokens),
                    cache_read_tokens: read,
                    cache_write_tokens: write,
                    cache_write_1h_tokens: z(self.cache_creation_1h),
                    reasoning_tokens: 0,
                }
            }
        }
    }
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
    #[serde(default)]
    cache_creation: Nested<CacheCreation>,
    #[serde(default)]
    prompt_tokens_details: Nested<Cached>,
    #[serde(default)]
    completion_tokens_details: Nested<Reasoning>,
    #[serde(default)]
    input_tokens_details: Nested<Cached>,
    #[serde(default)]
    output_tokens_details: Nested<Reasoning>,
}

#[derive(serde::Deserialize, Default)]
struct CacheCreation {
    #[serde(default)]
    ephemeral_1h_input_tokens: Count,
}

#[derive(serde::Deserialize, Default)]
struct Cached {
    #[serde(default)]
    cached_tokens: Count,
}

#[derive(serde::Deserialize, Default)]
struct Reasoning {
    #[serde(default)]
    reasoning_tokens: Count,
}

/// A member that counts only when it is a non-negative integer (other values are ignored).
#[derive(Default)]
struct Count(Option<u64>);

impl<'de> serde::Deserialize<'de> for Count {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Count(Value::deserialize(d)?.as_u64()))
    }
}

/// An object of counts; `null` reads as absent. Anything else (an array too, which serde would
/// read into a struct field by field) fails the typed read, and the general path answers.
struct Nested<T>(Option<T>);

impl<T> Default for Nested<T> {
    fn default() -> Self {
        Nested(None)
    }
}

impl<'de, T: serde::Deserialize<'de>> serde::Deserialize<'de> for Nested<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ObjectOrNull<T>(std::marker::PhantomData<T>);
        impl<'de, T: serde::Deserialize<'de>> serde::de::Visitor<'de> for ObjectOrNull<T> {
            type Value = Nested<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object or null")
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(Nested(None))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(|t| Nested(Some(t)))
            }
        }
        d.deserialize_any(ObjectOrNull(std::marker::PhantomData))
    }
}

impl Counts {
    fn raw(&self) -> Raw {
        let n = |c: &Count| c.0;
        Raw {
            prompt_tokens: n(&self.prompt_tokens),
            completion_tokens: n(&self.completion_tokens),
            input_tokens: n(&self.input_tokens),
            output_tokens: n(&self.output_tokens),
            cache_creation_input_tokens: n(&self.cache_creation_input_tokens),
            cache_read_input_tokens: n(&self.cache_read_input_tokens),
            cache_creation_1h: self.cache_creation.0.as_ref().and_then(|c| n(&c.ephemeral_1h_input_tokens)),
            prompt_cached: self.prompt_tokens_details.0.as_ref().and_then(|c| n(&c.cached_tokens)),
            completion_reasoning: self.completion_tokens_details.0.as_ref().and_then(|c| n(&c.reasoning_tokens)),
            input_cached: self.input_tokens_details.0.as_ref().and_then(|c| n(&c.cached_tokens)),
            output_reasoning: self.output_tokens_details.0.as_ref().and_then(|c| n(&c.reasoning_tokens)),
        }
    }
}

/// Usage from an answer's `usage` member.
fn from_usage(dialect: Dialect, u: &Value) -> Option<Usage> {
    Some(Raw::of(u).usage(dialect))
}

/// Usage of a whole Converse or Gemini answer (or of one Gemini stream event, or a whole
/// non-SSE Gemini stream): read by the same functions the translations use, so a receipt and
/// a translated answer's `usage` always agree.
pub fn from_value(dialect: Dialect, v: &Value) -> Option<Usage> {
    match dialect {
        Dialect::Converse => converse_usage(v.get("usage")?),
        Dialect::Gemini => gemini_usage(v),
        _ => from_usage(dialect, v.get("usage")?),
    }
}

/// The usage of a Bedrock `usage` object. Cache reads and writes are input too, counted apart
/// from `inputTokens` (as Anthropic counts them; the same sum `providers::usage` takes for
/// Anthropic), and priced at their own rates.
fn converse_usage(usage: &Value) -> Option<Usage> {
    let n = |key: &str| usage.get(key).and_then(Value::as_u64);
    let input = n("inputTokens")?;
    let output = n("outputTokens")?;
    let (read, write) = (n("cacheReadInputTokens").unwrap_or(0), n("cacheWriteInputTokens").unwrap_or(0));
    Some(Usage {
        prompt_tokens: input.saturating_add(read).saturating_add(write),
        completion_tokens: output,
        cache_read_tokens: read,
        cache_write_tokens: write,
        ..Usage::default()
    })
}

/// The usage of a Gemini answer, or of one `streamGenerateContent` event (each carries the
/// counts so far; the last one the totals), or of a whole non-SSE stream (a JSON array of such
/// answers: the last counts are the totals). `None` without `usageMetadata`. The cached tokens
/// (`cachedContentTokenCount`) are inside the prompt, the thinking tokens inside the completion.
pub fn gemini_usage(gemini: &Value) -> Option<Usage> {
    let meta = match gemini {
        Value::Array(events) => events.iter().rev().find_map(|e| e.get("usageMetadata"))?,
        _ => gemini.get("usageMetadata")?,
    };
    let c = GeminiCounts::of(meta);
    Some(Usage {
        prompt_tokens: c.prompt,
        completion_tokens: c.completion,
        cache_read_tokens: c.cached,
        reasoning_tokens: c.reasoning,
        ..Usage::default()
    })
}

/// Gemini's counts as OpenAI reckons them. The thinking tokens are output Google bills apart
/// from `candidatesTokenCount`; OpenAI counts reasoning inside `completion_tokens`. Tokens of
/// tool-use prompts are input. The cached tokens are already inside `promptTokenCount`, as they
/// are inside OpenAI's `prompt_tokens`.
pub(crate) struct GeminiCounts {
    pub(crate) prompt: u64,
    pub(crate) completion: u64,
    pub(crate) total: u64,
    pub(crate) cached: u64,
    pub(crate) reasoning: u64,
}

impl GeminiCounts {
    pub(crate) fn of(meta: &Value) -> Self {
        let n = |key: &str| meta.get(key).and_then(Value::as_u64).unwrap_or(0);
        let prompt = n("promptTokenCount").saturating_add(n("toolUsePromptTokenCount"));
        let reasoning = n("thoughtsTokenCount");
        let completion = n("candidatesTokenCount").saturating_add(reasoning);
        let total = meta.get("totalTokenCount").and_then(Value::as_u64).unwrap_or(prompt.saturating_add(completion));
        Self { prompt, completion, total, cached: n("cachedContentTokenCount"), reasoning }
    }
}

/// Folds the usage carried by one SSE event's JSON data into `acc`.
///
/// OpenAI sends one final chunk with `usage` (when `stream_options.include_usage`). Anthropic
/// sends the input side (cache reads and writes too) in `message_start`, and cumulative counts
/// in `message_delta`: output always, the input side when it changed (each count it carries
/// replaces the one before; a count it leaves out or sends as `null` stays).
pub fn fold_event(dialect: Dialect, data: &Value, acc: &mut Option<Usage>) {
    match dialect {
        Dialect::OpenAi => {
            if let Some(u) = data.get("usage").filter(|u| u.is_object()) {
                *acc = from_usage(Dialect::OpenAi, u);
            }
        }
        Dialect::Anthropic => {
            let cur = acc.get_or_insert_with(Usage::default);
            let u = match data.get("type").and_then(Value::as_str) {
                Some("message_start") => data.pointer("/message/usage"),
                Some("message_delta") => data.get("usage"),
                _ => None,
            };
            if let Some(u) = u {
                *cur = anthropic_update(*cur, &Raw::of(u));
            }
        }
        // The terminal events (`response.completed`, `.incomplete`, `.failed`) carry the whole
        // response, its usage included; the earlier ones carry `usage: null`.
        Dialect::Responses => {
            if let Some(u) = data.pointer("/response/usage").filter(|u| u.is_object()) {
                *acc = from_usage(Dialect::Responses, u);
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

/// `cur` with the Anthropic counts `u` carries put in place of the ones they update.
fn anthropic_update(cur: Usage, u: &Raw) -> Usage {
    let uncached = cur.prompt_tokens.saturating_sub(cur.cache_read_tokens).saturating_sub(cur.cache_write_tokens);
    let input = u.input_tokens.unwrap_or(uncached);
    let read = u.cache_read_input_tokens.unwrap_or(cur.cache_read_tokens);
    let write = u.cache_creation_input_tokens.unwrap_or(cur.cache_write_tokens);
    Usage {
        prompt_tokens: input.saturating_add(read).saturating_add(write),
        completion_tokens: u.output_tokens.unwrap_or(cur.completion_tokens),
        cache_read_tokens: read,
        cache_write_tokens: write,
        cache_write_1h_tokens: u.cache_creation_1h.unwrap_or(cur.cache_write_1h_tokens),
        reasoning_tokens: 0,
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

    fn cached(prompt: u64, completion: u64, read: u64, write: u64) -> Usage {
        Usage { cache_read_tokens: read, cache_write_tokens: write, ..Usage::plain(prompt, completion) }
    }

    #[test]
    fn bodies() {
        let o = json!({"usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}});
        assert_eq!(from_body(Dialect::OpenAi, &o), Some(Usage::plain(11, 7)));
        let e = json!({"usage": {"prompt_tokens": 5, "total_tokens": 5}});
        assert_eq!(from_body(Dialect::OpenAi, &e), Some(Usage::plain(5, 0)));
        let a = json!({"usage": {"input_tokens": 13, "output_tokens": 6, "cache_read_input_tokens": 2}});
        assert_eq!(from_body(Dialect::Anthropic, &a), Some(cached(15, 6, 2, 0)));
        assert_eq!(from_body(Dialect::OpenAi, &json!({})), None);
    }

    /// Anthropic's `input_tokens` leaves the cache out: the prompt is the sum of the three.
    #[test]
    fn anthropic_cache_reads_and_writes_are_added_to_the_input() {
        let a = json!({"id": "msg", "usage": {"input_tokens": 21, "cache_creation_input_tokens": 188,
            "cache_read_input_tokens": 2048, "output_tokens": 393, "service_tier": "standard",
            "cache_creation": {"ephemeral_5m_input_tokens": 88, "ephemeral_1h_input_tokens": 100}}});
        let u = from_body(Dialect::Anthropic, &a).unwrap();
        assert_eq!(u, Usage { cache_write_1h_tokens: 100, ..cached(21 + 188 + 2048, 393, 2048, 188) });
        assert_eq!(u.total(), 21 + 188 + 2048 + 393);
    }

    /// OpenAI's `prompt_tokens` already holds the cached tokens, `completion_tokens` the
    /// reasoning ones: nothing is added, the parts are only told apart.
    #[test]
    fn openai_cached_and_reasoning_tokens_are_parts_of_the_totals() {
        let o = json!({"usage": {"prompt_tokens": 2006, "completion_tokens": 300, "total_tokens": 2306,
            "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 256, "audio_tokens": 0,
                "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}});
        let u = from_body(Dialect::OpenAi, &o).unwrap();
        assert_eq!(u, Usage { reasoning_tokens: 256, ..cached(2006, 300, 1920, 0) });
        // The Responses API spells them `input_tokens_details` / `output_tokens_details`.
        let r = json!({"usage": {"input_tokens": 900, "output_tokens": 40, "total_tokens": 940,
            "input_tokens_details": {"cached_tokens": 512}, "output_tokens_details": {"reasoning_tokens": 30}}});
        assert_eq!(from_body(Dialect::OpenAi, &r), Some(Usage { reasoning_tokens: 30, ..cached(900, 40, 512, 0) }));
        // The gateway's translation from Anthropic repeats cache writes (inside prompt_tokens).
        let t = json!({"usage": {"prompt_tokens": 300, "completion_tokens": 5, "cache_creation_input_tokens": 200,
            "prompt_tokens_details": {"cached_tokens": 90}}});
        assert_eq!(from_body(Dialect::OpenAi, &t), Some(cached(300, 5, 90, 200)));
    }

    #[test]
    fn usage_from_raw_bytes() {
        let raw =
            br#"{"id":"x","choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#;
        assert_eq!(from_json_bytes(Dialect::OpenAi, raw), Some(Usage::plain(3, 2)));
        assert_eq!(from_json_bytes(Dialect::OpenAi, b"{\"error\":{}}"), None);
        assert_eq!(from_json_bytes(Dialect::OpenAi, b"not json"), None);
    }

    #[test]
    fn the_typed_read_equals_the_general_one() {
        let bodies: &[&[u8]] = &[
            br#"{"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5,"prompt_tokens_details":{"cached_tokens":1}}}"#,
            br#"{"usage":{"input_tokens":13,"output_tokens":6,"cache_creation_input_tokens":4,"cache_read_input_tokens":2}}"#,
            br#"{"usage":{"prompt_tokens":-1,"completion_tokens":2.5,"input_tokens":"7","output_tokens":9}}"#,
            br#"{"usage":{"prompt_tokens":null,"completion_tokens":[1],"input_tokens":{}}}"#,
            br#"{"usage":{}}"#,
            br#"{"usage":null}"#,
            br#"{"usage":5}"#,
            br#"{"usage":"x"}"#,
            br#"{"usage":[3,2]}"#,
            br#"{"usage":{"prompt_tokens":1,"prompt_tokens":2}}"#,
            br#"{"choices":[]}"#,
            br#"[1,2]"#,
            br#"{"usage":{"prompt_tokens":18446744073709551615,"completion_tokens":1e3}}"#,
            // The cached and reasoning parts, in every shape a provider (or a broken one) sends.
            br#"{"usage":{"prompt_tokens":9,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":8},"completion_tokens_details":{"reasoning_tokens":3}}}"#,
            br#"{"usage":{"input_tokens":9,"output_tokens":4,"input_tokens_details":{"cached_tokens":8},"output_tokens_details":{"reasoning_tokens":3}}}"#,
            br#"{"usage":{"prompt_tokens":9,"prompt_tokens_details":null,"completion_tokens_details":null}}"#,
            br#"{"usage":{"prompt_tokens":9,"prompt_tokens_details":[8]}}"#,
            br#"{"usage":{"prompt_tokens":9,"prompt_tokens_details":8}}"#,
            br#"{"usage":{"prompt_tokens":9,"prompt_tokens_details":{"cached_tokens":-8}}}"#,
            br#"{"usage":{"prompt_tokens":9,"prompt_tokens_details":{"cached_tokens":1,"cached_tokens":2}}}"#,
            br#"{"usage":{"prompt_tokens":9,"completion_tokens_details":{"reasoning_tokens":"3"}}}"#,
            br#"{"usage":{"input_tokens":1,"cache_creation_input_tokens":2,"cache_creation":{"ephemeral_5m_input_tokens":1,"ephemeral_1h_input_tokens":1}}}"#,
            br#"{"usage":{"input_tokens":1,"cache_creation":{"ephemeral_1h_input_tokens":null}}}"#,
            br#"{"usage":{"input_tokens":1,"cache_creation":[1,2]}}"#,
            br#"{"usage":{"input_tokens":1,"cache_read_input_tokens":18446744073709551615,"cache_creation_input_tokens":9}}"#,
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
        // Not a vacuous equality: the typed read does answer these itself.
        #[derive(serde::Deserialize)]
        struct Typed {
            #[serde(default)]
            usage: Nested<Counts>,
        }
        let typed = |b: &[u8]| serde_json::from_slice::<Typed>(b).ok().and_then(|t| t.usage.0).map(|c| c.raw());
        assert_eq!(typed(bodies[13]).map(|r| (r.prompt_cached, r.completion_reasoning)), Some((Some(8), Some(3))));
        assert!(typed(bodies[16]).is_none(), "an array is not read as an object");
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
        assert_eq!(acc, Some(Usage::plain(13, 6)));
    }

    /// The cache counts come in `message_start`; `message_delta` repeats the cumulative counts
    /// it has (newer API versions send them all, some `null`), and a count it leaves out stays.
    #[test]
    fn anthropic_stream_with_cache_counts() {
        let start = json!({"type": "message_start", "message": {"usage": {"input_tokens": 4,
            "cache_creation_input_tokens": 1000, "cache_read_input_tokens": 3000, "output_tokens": 1,
            "cache_creation": {"ephemeral_5m_input_tokens": 1000, "ephemeral_1h_input_tokens": 0}}}});
        let mut acc = None;
        fold_event(Dialect::Anthropic, &start, &mut acc);
        assert_eq!(acc, Some(cached(4004, 1, 3000, 1000)));
        fold_event(Dialect::Anthropic, &json!({"type": "message_delta", "usage": {"output_tokens": 50}}), &mut acc);
        assert_eq!(acc, Some(cached(4004, 50, 3000, 1000)), "the delta without input counts keeps them");
        let delta = json!({"type": "message_delta", "usage": {"input_tokens": 6, "cache_creation_input_tokens": null,
            "cache_read_input_tokens": 3000, "output_tokens": 77}});
        fold_event(Dialect::Anthropic, &delta, &mut acc);
        assert_eq!(acc, Some(cached(4006, 77, 3000, 1000)), "null keeps the count, a number replaces it");
        // A stream whose message_start has no cache counts at all, only the delta.
        let mut acc = None;
        fold_event(
            Dialect::Anthropic,
            &json!({"type": "message_start", "message": {"usage": {"input_tokens": 4, "output_tokens": 1}}}),
            &mut acc,
        );
        let delta = json!({"type": "message_delta", "usage": {"input_tokens": 4, "cache_read_input_tokens": 10,
            "cache_creation_input_tokens": 20, "output_tokens": 2}});
        fold_event(Dialect::Anthropic, &delta, &mut acc);
        assert_eq!(acc, Some(cached(34, 2, 10, 20)));
    }

    #[test]
    fn converse_and_gemini() {
        let c = json!({"output": {}, "usage": {"inputTokens": 12, "outputTokens": 5, "totalTokens": 17}});
        assert_eq!(from_body(Dialect::Converse, &c), Some(Usage::plain(12, 5)));
        let g = json!({"candidates": [], "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 4,
            "thoughtsTokenCount": 2, "totalTokenCount": 15}});
        assert_eq!(from_body(Dialect::Gemini, &g), Some(Usage { reasoning_tokens: 2, ..Usage::plain(9, 6) }));
        let mut acc = None;
        fold_event(Dialect::Converse, &json!({"contentBlockDelta": {"delta": {"text": "x"}}}), &mut acc);
        assert_eq!(acc, None);
        fold_event(Dialect::Converse, &json!({"metadata": {"usage": {"inputTokens": 3, "outputTokens": 2}}}), &mut acc);
        assert_eq!(acc, Some(Usage::plain(3, 2)));
        let mut acc = None;
        fold_event(Dialect::Gemini, &g, &mut acc);
        assert_eq!(acc, Some(Usage { reasoning_tokens: 2, ..Usage::plain(9, 6) }));
    }

    /// Bedrock counts cache reads and writes apart from `inputTokens` (as Anthropic does);
    /// Gemini's `promptTokenCount` already holds `cachedContentTokenCount` (as OpenAI's does).
    #[test]
    fn converse_and_gemini_cache_counts() {
        let c = json!({"usage": {"inputTokens": 7, "outputTokens": 5, "cacheReadInputTokens": 600,
            "cacheWriteInputTokens": 400, "totalTokens": 1012}});
        assert_eq!(from_body(Dialect::Converse, &c), Some(cached(1007, 5, 600, 400)));
        let mut acc = None;
        fold_event(Dialect::Converse, &json!({"metadata": c}), &mut acc);
        assert_eq!(acc, Some(cached(1007, 5, 600, 400)), "the stream's metadata event reads the same");
        let g = json!({"usageMetadata": {"promptTokenCount": 5000, "cachedContentTokenCount": 4096,
            "candidatesTokenCount": 40, "thoughtsTokenCount": 60, "totalTokenCount": 5100}});
        assert_eq!(from_body(Dialect::Gemini, &g), Some(Usage { reasoning_tokens: 60, ..cached(5000, 100, 4096, 0) }));
    }

    #[test]
    fn responses_body_and_stream() {
        let body = json!({"id": "resp_1", "object": "response", "output": [],
            "usage": {"input_tokens": 12, "input_tokens_details": {"cached_tokens": 4}, "output_tokens": 5,
                      "output_tokens_details": {"reasoning_tokens": 2}, "total_tokens": 17}});
        let want = Usage { cache_read_tokens: 4, reasoning_tokens: 2, ..Usage::plain(12, 5) };
        assert_eq!(from_body(Dialect::Responses, &body), Some(want));
        let mut acc = None;
        fold_event(Dialect::Responses, &json!({"type": "response.created", "response": {"usage": null}}), &mut acc);
        assert_eq!(acc, None);
        fold_event(Dialect::Responses, &json!({"type": "response.completed", "response": body}), &mut acc);
        assert_eq!(acc, Some(want));
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
        assert_eq!(acc, Some(Usage::plain(3, 4)));
        fold_event(
            Dialect::OpenAi,
            &json!({"choices": [], "usage": {"prompt_tokens": 1200, "completion_tokens": 40,
                "prompt_tokens_details": {"cached_tokens": 1024}, "completion_tokens_details": {"reasoning_tokens": 32}}}),
            &mut acc,
        );
        assert_eq!(acc, Some(Usage { reasoning_tokens: 32, ..cached(1200, 40, 1024, 0) }));
    }
}
