//! Prices per model, from the shipped table (`conf/pricing.yaml`) plus config overrides.

use foldhash::HashMap;

use crate::config::{parse_yaml, Config, ConfigError, Price, PricingFile, PRICING_YAML};
use crate::providers::Usage;

#[derive(Debug, Clone)]
pub struct Pricing {
    models: HashMap<String, Price>,
    pub source: String,
    pub taken: String,
}

impl Pricing {
    pub fn from_config(cfg: &Config) -> Result<Pricing, ConfigError> {
        let file: PricingFile = parse_yaml(PRICING_YAML, "conf/pricing.yaml")?;
        let mut models: HashMap<String, Price> = file.models.into_iter().collect();
        models.extend(cfg.pricing.iter().map(|(k, v)| (k.clone(), *v)));
        Ok(Pricing { models, source: file.source, taken: file.taken })
    }

    /// The price of `model`: an exact entry, else the longest entry `e` with `model` = `e-…`
    /// (dated snapshots such as `gpt-4o-2024-08-06` take the price of `gpt-4o`).
    pub fn price(&self, model: &str) -> Option<Price> {
        // `bedrock/<id>` and `vertex/<model>` (the routing prefix on /v1/chat/completions), and
        // Bedrock's cross-region inference profiles (`us.<id>`), cost what the model costs.
        let model = model.strip_prefix("bedrock/").or_else(|| model.strip_prefix("vertex/")).unwrap_or(model);
        let model = ["us.", "eu.", "apac.", "global."]
            .iter()
            .find_map(|r| model.strip_prefix(r).filter(|m| m.contains('.')))
            .unwrap_or(model);
        if let Some(p) = self.models.get(model) {
            return Some(*p);
        }
        let mut best: Option<(&str, Price)> = None;
        for (name, p) in &self.models {
            let prefixed =
                model.len() > name.len() && model.starts_with(name.as_str()) && model.as_bytes()[name.len()] == b'-';
            if prefixed && best.is_none_or(|(b, _)| name.len() > b.len()) {
                best = Some((name, *p));
            }
        }
        best.map(|(_, p)| p)
    }

    /// The names the table prices (shipped table and config overrides).
    pub fn models(&self) -> impl Iterator<Item = &str> {
        self.models.keys().map(String::as_str)
    }

    /// The price of one call of `tool` on tool server `server`: the `input` of the pricing entry
    /// `tool:<server>/<tool>`, else `tool:<tool>`, read as USD per call (a tool call has no
    /// tokens); 0 when neither is listed. Exact names only: tools have no dated snapshots.
    pub fn tool_cost(&self, server: &str, tool: &str) -> f64 {
        let entry =
            self.models.get(&format!("tool:{server}/{tool}")).or_else(|| self.models.get(&format!("tool:{tool}")));
        entry.map_or(0.0, |p| (p.input.max(0.0) * 1e9).round() / 1e9)
    }

    /// Cost in USD of `usage`, rounded to 1e-9 so sums stay tidy; 0 for an unpriced model.
    ///
    /// `uncached × input + cache reads × cache_read + cache writes × cache_write (one-hour
    /// writes × cache_write_1h) + completion × output`, where uncached = prompt − reads − writes.
    /// A model without a cache column prices those tokens at its input rate. Reasoning tokens
    /// are inside the completion and priced as output. Cached counts larger than the prompt they
    /// are part of (a provider's error) are cut to it, so the cost never goes below zero.
    pub fn cost(&self, model: &str, usage: &Usage) -> f64 {
        let Some(p) = self.price(model) else { return 0.0 };
        let read = usage.cache_read_tokens.min(usage.prompt_tokens);
        let write = usage.cache_write_tokens.min(usage.prompt_tokens - read);
        let write_1h = usage.cache_write_1h_tokens.min(write);
        let uncached = usage.prompt_tokens - read - write;
        let write_rate = p.cache_write.unwrap_or(p.input);
        let usd = (uncached as f64 * p.input
            + read as f64 * p.cache_read.unwrap_or(p.input)
            + (write - write_1h) as f64 * write_rate
            + write_1h as f64 * p.cache_write_1h.unwrap_or(write_rate)
            + usage.completion_tokens as f64 * p.output)
            / 1_000_000.0;
        (usd * 1e9).round() / 1e9
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_calls_cost_nothing_unless_the_table_names_them() {
        let mut cfg = Config::defaults(&crate::providers::VOCABULARY);
        cfg.pricing
            .insert("tool:search".into(), crate::config::Price { input: 0.01, output: 0.0, ..Default::default() });
        cfg.pricing
            .insert("tool:fs/read".into(), crate::config::Price { input: 0.002, output: 0.0, ..Default::default() });
        let p = Pricing::from_config(&cfg).unwrap();
        assert_eq!(p.tool_cost("web", "search"), 0.01);
        assert_eq!(p.tool_cost("fs", "read"), 0.002);
        assert_eq!(p.tool_cost("other", "read"), 0.0);
        assert_eq!(p.tool_cost("web", "search-v2"), 0.0);
    }

    #[test]
    fn cloud_models_are_priced_under_their_routing_names() {
        let p = Pricing::from_config(&Config::defaults(&crate::providers::VOCABULARY)).unwrap();
        let haiku = p.price("anthropic.claude-3-haiku-20240307-v1:0").unwrap();
        assert_eq!(p.price("bedrock/anthropic.claude-3-haiku-20240307-v1:0").unwrap().input, haiku.input);
        assert_eq!(p.price("bedrock/us.anthropic.claude-3-haiku-20240307-v1:0").unwrap().input, haiku.input);
        assert_eq!(p.price("vertex/gemini-2.0-flash").unwrap().input, 0.15);
        assert_eq!(p.price("gemini-2.0-flash-001").unwrap().input, 0.15);
    }

    #[test]
    fn prices_and_dated_models() {
        let p = Pricing::from_config(&Config::defaults(&crate::providers::VOCABULARY)).unwrap();
        assert_eq!(p.price("gpt-4o-mini").unwrap().input, 0.15);
        assert_eq!(p.price("gpt-4o-mini-2024-07-18").unwrap().input, 0.15);
        assert_eq!(p.price("gpt-4o-2024-08-06").unwrap().input, 2.5);
        assert!(p.price("unknown-model").is_none());
        // 1000 prompt + 500 completion tokens of gpt-4o-mini
        assert_eq!(p.cost("gpt-4o-mini", &Usage::plain(1000, 500)), 0.00045);
        assert_eq!(p.cost("nope", &Usage::plain(1000, 500)), 0.0);
    }

    #[test]
    fn config_overrides_win() {
        let mut c = Config::defaults(&crate::providers::VOCABULARY);
        c.pricing.insert("gpt-4o-mini".into(), Price::plain(1.0, 1.0));
        let p = Pricing::from_config(&c).unwrap();
        assert_eq!(p.cost("gpt-4o-mini", &Usage::plain(1_000_000, 0)), 1.0);
    }

    fn close(got: f64, want: f64) {
        assert!((got - want).abs() < 1e-12, "{got} != {want}");
    }

    /// The arithmetic per dialect: the usage as the gateway reads it from each provider's own
    /// answer, priced by the shipped table.
    #[test]
    fn cached_tokens_are_priced_at_their_own_rates() {
        use crate::providers::usage::{from_json_bytes, Dialect};
        let p = Pricing::from_config(&Config::defaults(&crate::providers::VOCABULARY)).unwrap();
        let read = |d: Dialect, body: &str| from_json_bytes(d, body.as_bytes()).unwrap();

        // Anthropic: 21 uncached at $3, 2048 hits at $0.30, 188 5-minute writes at $3.75,
        // 393 output at $15 (claude-sonnet-4-5).
        let a = read(
            Dialect::Anthropic,
            r#"{"usage":{"input_tokens":21,"cache_creation_input_tokens":188,"cache_read_input_tokens":2048,"output_tokens":393}}"#,
        );
        assert_eq!(a.prompt_tokens, 21 + 188 + 2048);
        close(
            p.cost("claude-sonnet-4-5-20250929", &a),
            (21.0 * 3.0 + 2048.0 * 0.30 + 188.0 * 3.75 + 393.0 * 15.0) / 1e6,
        );
        // 100 of the writes for an hour, at $6.
        let a1h = read(
            Dialect::Anthropic,
            r#"{"usage":{"input_tokens":21,"cache_creation_input_tokens":188,"cache_read_input_tokens":2048,"output_tokens":393,
                "cache_creation":{"ephemeral_5m_input_tokens":88,"ephemeral_1h_input_tokens":100}}}"#,
        );
        close(
            p.cost("claude-sonnet-4-5", &a1h),
            (21.0 * 3.0 + 2048.0 * 0.30 + 88.0 * 3.75 + 100.0 * 6.0 + 393.0 * 15.0) / 1e6,
        );

        // OpenAI: prompt_tokens holds the 1920 cached; the 256 reasoning tokens are output.
        let o = read(
            Dialect::OpenAi,
            r#"{"usage":{"prompt_tokens":2006,"completion_tokens":300,"prompt_tokens_details":{"cached_tokens":1920},
                "completion_tokens_details":{"reasoning_tokens":256}}}"#,
        );
        close(p.cost("gpt-4o-mini", &o), (86.0 * 0.15 + 1920.0 * 0.075 + 300.0 * 0.60) / 1e6);

        // Bedrock Converse: reads and writes are apart from inputTokens.
        let c = read(
            Dialect::Converse,
            r#"{"usage":{"inputTokens":7,"outputTokens":5,"cacheReadInputTokens":600,"cacheWriteInputTokens":400}}"#,
        );
        close(
            p.cost("bedrock/us.anthropic.claude-sonnet-4-20250514-v1:0", &c),
            (7.0 * 3.0 + 600.0 * 0.30 + 400.0 * 3.75 + 5.0 * 15.0) / 1e6,
        );

        // Gemini: promptTokenCount holds the cached tokens; thinking is output.
        let g = read(
            Dialect::Gemini,
            r#"{"usageMetadata":{"promptTokenCount":5000,"cachedContentTokenCount":4096,"candidatesTokenCount":40,
                "thoughtsTokenCount":60}}"#,
        );
        close(p.cost("vertex/gemini-2.5-flash", &g), (904.0 * 0.30 + 4096.0 * 0.03 + 100.0 * 2.50) / 1e6);
    }

    #[test]
    fn without_a_cache_column_cached_tokens_cost_the_input_rate() {
        let p = Pricing::from_config(&Config::defaults(&crate::providers::VOCABULARY)).unwrap();
        assert!(p.price("gpt-4-turbo").unwrap().cache_read.is_none());
        let u = Usage { cache_read_tokens: 1500, cache_write_tokens: 300, ..Usage::plain(2000, 10) };
        assert_eq!(p.cost("gpt-4-turbo", &u), p.cost("gpt-4-turbo", &Usage::plain(2000, 10)));
        // Only a write rate: one-hour writes take it too.
        let mut c = Config::defaults(&crate::providers::VOCABULARY);
        c.pricing.insert("m".into(), Price { cache_write: Some(2.0), ..Price::plain(1.0, 0.0) });
        let p = Pricing::from_config(&c).unwrap();
        let u = Usage { cache_write_tokens: 1_000_000, cache_write_1h_tokens: 400_000, ..Usage::plain(3_000_000, 0) };
        assert_eq!(p.cost("m", &u), 2.0 * 1.0 + 2.0);
    }

    /// A provider reporting more cached tokens than the prompt (a broken answer) is cut to the
    /// prompt: never a negative uncached part, never a cost below zero.
    #[test]
    fn cached_counts_above_the_prompt_are_cut_to_it() {
        let p = Pricing::from_config(&Config::defaults(&crate::providers::VOCABULARY)).unwrap();
        let u = Usage { cache_read_tokens: u64::MAX, cache_write_tokens: u64::MAX, ..Usage::plain(1_000_000, 0) };
        assert_eq!(p.cost("claude-sonnet-4-5", &u), 0.30);
        let u = Usage { cache_read_tokens: 400_000, cache_write_tokens: u64::MAX, ..Usage::plain(1_000_000, 0) };
        close(p.cost("claude-sonnet-4-5", &u), 0.4 * 0.30 + 0.6 * 3.75);
    }

    /// The shipped table: every price non-negative; a cache read never dearer than input, a
    /// write never cheaper.
    #[test]
    fn the_shipped_cache_columns_are_sane() {
        let file: PricingFile = parse_yaml(PRICING_YAML, "conf/pricing.yaml").unwrap();
        for (model, p) in &file.models {
            assert!(p.input >= 0.0 && p.output >= 0.0, "{model}");
            if let Some(r) = p.cache_read {
                assert!((0.0..p.input).contains(&r), "{model}: cache_read {r}");
            }
            if let Some(w) = p.cache_write {
                assert!(w >= p.input && p.cache_write_1h.is_none_or(|h| h >= w), "{model}: cache_write {w}");
            }
        }
        assert_eq!(file.models["gpt-4o-mini"].cache_read, Some(0.075));
        assert_eq!(file.models["claude-sonnet-4-5"].cache_write, Some(3.75));
    }
}
