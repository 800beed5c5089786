//! Reading the config: the file (or the embedded defaults), then the environment, then the
//! checks that span fields.

use std::path::Path;

use super::{env, parse_yaml, Config, ConfigError, DEFAULT_YAML};

impl Config {
    /// Loads the config from `path` (or the embedded defaults) and applies the environment.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        let mut cfg: Config = match path {
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .map_err(|source| ConfigError::Read { path: p.display().to_string(), source })?;
                if text.trim().is_empty() {
                    Config::default()
                } else {
                    parse_yaml(&text, &p.display().to_string())?
                }
            }
            None => parse_yaml(DEFAULT_YAML, "<embedded conf/tollgate.yaml>")?,
        };
        env::apply(&mut cfg, &|k| std::env::var(k).ok())?;
        cfg.validate()?;
        Ok(cfg)
    }
}
