//! Prompt-cache-aware usage over real sockets: the stand-in answers with cache tokens (a last
//! message `CACHE:<read>,<write>`), and each receipt's `promptTokens` and `costUsd` must be
//! what this file computes from the rates in `conf/pricing.yaml`: every input token counted
//! (uncached + cache reads + cache writes), each part priced at its own rate.

mod support;

use serde_json::{json, Value};
use support::{backends, http, with_standin, Gateway};

const READ: u64 = 2048;
const WRITE: u64 = 188;

/// A model's rates from the shipped table, read here rather than through the gateway's code.
struct Rates {
    input: f64,
    output: f64,
    cache_read: Option<f64>,
    cache_write: Option<f64>,
}

fn rates(model: &str) -> Rates {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/conf/pricing.yaml");
    let table: Value = serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let m = &table["models"][model];
    let rate = |k: &str| m.get(k).and_then(Value::as_f64);
    Rates {
        input: rate("input").unwrap_or_else(|| panic!("{model} is not in the table")),
        output: rate("output").unwrap(),
        cache_read: rate("cache_read"),
        cache_write: rate("cache_write"),
    }
}

/// USD of one answer: uncached × input + reads × cache_read + writes × cache_write +
/// completion × output (a missing cache column is the input rate), rounded to 1e-9 as receipts
/// are.
fn cost(model: &str, uncached: u64, read: u64, write: u64, completion: u64) -> f64 {
    let r = rates(model);
    let usd = (uncached as f64 * r.input
        + read as f64 * r.cache_read.unwrap_or(r.input)
        + write as f64 * r.cache_write.unwrap_or(r.input)
        + completion as f64 * r.output)
        / 1e6;
    (usd * 1e9).round() / 1e9
}

fn assert_receipt(g: &Gateway, r: &http::Resp, prompt: u64, completion: u64, usd: f64) {
    assert_eq!(r.status, 200, "{}", r.text());
    let rc = g.receipt_of(r);
    assert_eq!(
        (rc["promptTokens"].as_u64(), rc["completionTokens"].as_u64()),
        (Some(prompt), Some(completion)),
        "{rc}"
    );
    let got = rc["costUsd"].as_f64().unwrap();
    assert!((got - usd).abs() < 1e-12, "costUsd {got}, computed {usd}: {rc}");
    // The cache counts are not receipt members: the signed format has no field for them.
    assert!(rc.get("cacheReadTokens").is_none() && rc.get("cache_read_tokens").is_none(), "{rc}");
}

fn messages(g: &Gateway, key: &str, body: &Value) -> http::Resp {
    http::request(
        g.gw,
        "POST",
        "/v1/messages",
        &[("x-api-key", key), ("anthropic-version", "2023-06-01"), ("content-type", "application/json")],
        body.to_string().as_bytes(),
    )
}

fn anthropic_body(text: &str, stream: bool) -> Value {
    json!({"model": "claude-sonnet-4-5", "max_tokens": 64, "stream": stream,
        "messages": [{"role": "user", "content": text}]})
}

fn chat_body(model: &str, text: &str, stream: bool) -> Value {
    json!({"model": model, "stream": stream, "messages": [{"role": "user", "content": text}]})
}

#[test]
fn anthropic_cache_reads_and_writes_are_counted_and_priced_json_and_stream() {
    for b in backends() {
        let (g, _up) = with_standin(&b, &[]);
        let ask = format!("CACHE:{READ},{WRITE}");
        // The stand-in: 13 uncached input tokens, the cache counts apart, 6 output tokens.
        let prompt = 13 + READ + WRITE;
        let usd = cost("claude-sonnet-4-5", 13, READ, WRITE, 6);
        assert!(usd < cost("claude-sonnet-4-5", prompt, 0, 0, 6), "the reads' discount outweighs the writes'");

        let r = messages(&g, &g.key, &anthropic_body(&ask, false));
        assert_eq!(r.json()["usage"]["cache_read_input_tokens"], READ, "the answer passes unchanged");
        assert_receipt(&g, &r, prompt, 6, usd);

        // Streamed: the counts come in message_start and (cumulative) again in message_delta.
        let r = messages(&g, &g.key, &anthropic_body(&ask, true));
        assert!(r.text().contains("event: message_delta"), "{}", r.text());
        assert_receipt(&g, &r, prompt, 6, usd);

        // Without cache counts, nothing changes.
        let r = messages(&g, &g.key, &anthropic_body("hi", false));
        assert_receipt(&g, &r, 13, 6, cost("claude-sonnet-4-5", 13, 0, 0, 6));
    }
}

#[test]
fn openai_cached_tokens_are_inside_prompt_tokens_and_priced_json_and_stream() {
    for b in backends() {
        let (g, _up) = with_standin(&b, &[]);
        let ask = format!("CACHE:{READ},0");
        // The stand-in: prompt_tokens 11 + READ, READ of them cached; 7 completion tokens, 3 of
        // them reasoning (output: nothing apart).
        let prompt = 11 + READ;
        let usd = cost("gpt-4o-mini", 11, READ, 0, 7);
        assert_eq!(rates("gpt-4o-mini").cache_read, Some(0.075), "the table's published cached-input rate");

        let r = g.post_gw("/v1/chat/completions", &g.key, chat_body("gpt-4o-mini", &ask, false).to_string().as_bytes());
        assert_eq!(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"], READ);
        assert_receipt(&g, &r, prompt, 7, usd);

        // Streamed without include_usage: the gateway asks for the usage chunk and hides it.
        let r = g.post_gw("/v1/chat/completions", &g.key, chat_body("gpt-4o-mini", &ask, true).to_string().as_bytes());
        assert!(!r.text().contains("cached_tokens"), "the usage chunk the client did not ask for is not sent");
        assert_receipt(&g, &r, prompt, 7, usd);

        // Streamed with include_usage: the client gets the chunk, the receipt the same numbers.
        let mut body = chat_body("gpt-4o-mini", &ask, true);
        body["stream_options"] = json!({"include_usage": true});
        let r = g.post_gw("/v1/chat/completions", &g.key, body.to_string().as_bytes());
        assert!(r.text().contains(r#""reasoning_tokens":3"#), "{}", r.text());
        assert_receipt(&g, &r, prompt, 7, usd);

        // A model without a cache column (gpt-4-turbo) pays the input rate for cached tokens.
        let r = g.post_gw("/v1/chat/completions", &g.key, chat_body("gpt-4-turbo", &ask, false).to_string().as_bytes());
        assert!(rates("gpt-4-turbo").cache_read.is_none());
        assert_receipt(&g, &r, prompt, 7, cost("gpt-4-turbo", prompt, 0, 0, 7));
    }
}

/// `claude-*` on /v1/chat/completions: the gateway reads a translated stream's usage from the
/// OpenAI chunk it made, where the writes travel as `cache_creation_input_tokens`; the receipt
/// is the same as on the native route.
#[test]
fn translated_anthropic_answers_keep_the_cache_prices() {
    let (g, _up) = with_standin(&backends()[0], &[]);
    let ask = format!("CACHE:{READ},{WRITE}");
    let (prompt, usd) = (13 + READ + WRITE, cost("claude-sonnet-4-5", 13, READ, WRITE, 6));

    let r =
        g.post_gw("/v1/chat/completions", &g.key, chat_body("claude-sonnet-4-5", &ask, false).to_string().as_bytes());
    let usage = &r.json()["usage"];
    assert_eq!(
        (usage["prompt_tokens"].as_u64(), usage["cache_creation_input_tokens"].as_u64()),
        (Some(prompt), Some(WRITE))
    );
    assert_receipt(&g, &r, prompt, 6, usd);

    for include_usage in [false, true] {
        let mut body = chat_body("claude-sonnet-4-5", &ask, true);
        if include_usage {
            body["stream_options"] = json!({"include_usage": true});
        }
        let r = g.post_gw("/v1/chat/completions", &g.key, body.to_string().as_bytes());
        assert_eq!(r.text().contains("cache_creation_input_tokens"), include_usage, "{}", r.text());
        assert_receipt(&g, &r, prompt, 6, usd);
    }
}

/// A key's tokens-per-minute limit counts cached tokens too: one answer that read 2000 cached
/// tokens uses up a 1000-token limit, though only 13 of its input tokens were uncached.
#[test]
fn cached_tokens_count_against_the_token_limit() {
    let (g, _up) = with_standin(&backends()[0], &[]);
    let (id, key) = g.create_key("tpm");
    let r = g.mgmt("PATCH", &format!("/v1/keys/{id}/limits"), Some(&g.key), Some(&json!({"tpmLimit": 1000})));
    assert_eq!(r.status, 200, "{}", r.text());

    let ok = messages(&g, &key, &anthropic_body("CACHE:2000,0", false));
    assert_eq!(ok.status, 200, "{}", ok.text());
    assert_eq!(g.receipt_of(&ok)["promptTokens"], 2013);
    let limited = messages(&g, &key, &anthropic_body("hi", false));
    assert_eq!(limited.status, 429, "{}", limited.text());
    assert_eq!(limited.header("x-ratelimit-remaining-tokens"), Some("0"));
}
