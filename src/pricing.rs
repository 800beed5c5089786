//! Prices per model, from the shipped table (`conf/pricing.yaml`) plus config overrides.

use foldhash::HashMap;

use crate::config::{parse_yaml, Config, ConfigError, Price, PricingFile, PRICING_YAML};

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

    /// Cost in USD, rounded to 1e-9 so sums stay tidy; 0 for an unpriced model.
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

    pub fn cost(&self, model: &str, prompt_tokens: u64, completion_tokens: u64) -> f64 {
        let Some(p) = self.price(model) else { return 0.0 };
        let usd = (prompt_tokens as f64 * p.input + completion_tokens as f64 * p.output) / 1_000_000.0;
        (usd * 1e9).round() / 1e9
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_calls_cost_nothing_unless_the_table_names_them() {
        let mut cfg = Config::default();
        cfg.pricing.insert("tool:search".into(), crate::config::Price { input: 0.01, output: 0.0 });
        cfg.pricing.insert("tool:fs/read".into(), crate::config::Price { input: 0.002, output: 0.0 });
        let p = Pricing::from_config(&cfg).unwrap();
        assert_eq!(p.tool_cost("web", "search"), 0.01);
        assert_eq!(p.tool_cost("fs", "read"), 0.002);
        assert_eq!(p.tool_cost("other", "read"), 0.0);
        assert_eq!(p.tool_cost("web", "search-v2"), 0.0);
    }

    #[test]
    fn cloud_models_are_priced_under_their_routing_names() {
        let p = Pricing::from_config(&Config::default()).unwrap();
        let haiku = p.price("anthropic.claude-3-haiku-20240307-v1:0").unwrap();
        assert_eq!(p.price("bedrock/anthropic.claude-3-haiku-20240307-v1:0").unwrap().input, haiku.input);
        assert_eq!(p.price("bedrock/us.anthropic.claude-3-haiku-20240307-v1:0").unwrap().input, haiku.input);
        assert_eq!(p.price("vertex/gemini-2.0-flash").unwrap().input, 0.15);
        assert_eq!(p.price("gemini-2.0-flash-001").unwrap().input, 0.15);
    }

    #[test]
    fn prices_and_dated_models() {
        let p = Pricing::from_config(&Config::default()).unwrap();
        assert_eq!(p.price("gpt-4o-mini").unwrap().input, 0.15);
        assert_eq!(p.price("gpt-4o-mini-2024-07-18").unwrap().input, 0.15);
        assert_eq!(p.price("gpt-4o-2024-08-06").unwrap().input, 2.5);
        assert!(p.price("unknown-model").is_none());
        // 1000 prompt + 500 completion tokens of gpt-4o-mini
        assert_eq!(p.cost("gpt-4o-mini", 1000, 500), 0.00045);
        assert_eq!(p.cost("nope", 1000, 500), 0.0);
    }

    #[test]
    fn config_overrides_win() {
        let mut c = Config::default();
        c.pricing.insert("gpt-4o-mini".into(), Price { input: 1.0, output: 1.0 });
        let p = Pricing::from_config(&c).unwrap();
        assert_eq!(p.cost("gpt-4o-mini", 1_000_000, 0), 1.0);
    }
}
