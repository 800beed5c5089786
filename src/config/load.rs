//! Reading the config: the file (or the embedded defaults), then the environment, then the
//! checks that span fields.

use std::path::Path;

use super::{env, Config, ConfigError, Vocabulary, DEFAULT_YAML};

impl Config {
    /// Loads the config from `path` (or the embedded defaults) and applies the environment.
    /// `vocab` is what the providers layer says config may name (`providers::VOCABULARY`).
    pub fn load(path: Option<&Path>, vocab: &Vocabulary) -> Result<Config, ConfigError> {
        let mut cfg: Config = match path {
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .map_err(|source| ConfigError::Read { path: p.display().to_string(), source })?;
                if text.trim().is_empty() {
                    Config::defaults(vocab)
                } else {
                    Config::parse(&text, &p.display().to_string(), vocab)?
                }
            }
            None => Config::parse(DEFAULT_YAML, "<embedded conf/tollgate.yaml>", vocab)?,
        };
        env::apply(&mut cfg, &|k| std::env::var(k).ok())?;
        cfg.validate(vocab)?;
        Ok(cfg)
    }
}
