//! The providers by name: what the registry, routes and credentials key on. Each provider's
//! [`ProviderSpec`](crate::config::ProviderSpec) (`<name>::SPEC`) takes its name from here, and
//! config reads names against those specs ([`super::VOCABULARY`]). This file imports no
//! provider's folder: they all import it.

use std::fmt;

/// The upstream providers Tollgate speaks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProviderName {
    OpenAi,
    Anthropic,
    Bedrock,
    Vertex,
}

impl ProviderName {
    pub const ALL: [ProviderName; 4] =
        [ProviderName::OpenAi, ProviderName::Anthropic, ProviderName::Bedrock, ProviderName::Vertex];

    /// The name in config, paths and receipts.
    pub const fn as_str(self) -> &'static str {
        match self {
            ProviderName::OpenAi => "openai",
            ProviderName::Anthropic => "anthropic",
            ProviderName::Bedrock => "bedrock",
            ProviderName::Vertex => "vertex",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

impl fmt::Display for ProviderName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
