//! The provider seam: one folder per provider behind [`Provider`] (the pattern of TensorZero's
//! `providers/<name>/`). A provider knows its credential's fields and how they are encrypted
//! at rest, how it authenticates and addresses an upstream request, what it speaks
//! ([`Dialect`]: usage, stream framing and errors are read by dialect), how an OpenAI-shaped
//! request is put into its own API, which model names it serves, and its minimal test call.
//! What dialects share lives here, not in any provider's folder: reading usage ([`usage`]),
//! the Converse dialect's stream framing ([`eventstream`]), translating between dialects
//! ([`translate`]) and prices ([`pricing`]).
//!
//! Adding a provider is its folder and one line in [`provider`], plus what the config layer
//! (below this one) must know to read its file: the name in [`ProviderName`] and its
//! `providers.<name>` section.

pub mod anthropic;
pub mod bedrock;
pub mod catalog;
pub mod credential;
pub mod encrypted;
pub mod envelope;
pub mod eventstream;
mod headers;
pub mod openai;
pub mod pricing;
mod provider;
pub mod route;
pub mod translate;
pub mod usage;
pub mod vertex;

pub use anthropic::{requested_betas, BETA as BETA_HEADER};
pub use credential::{CredentialBody, ProviderAuth, ProviderCred};
pub use envelope::Flavor;
pub use provider::{ClientHeader, Env, Probe, Provider, Target, UpstreamCall};
pub use route::Route;
pub use translate::ensure_stream_usage;
pub use usage::{Dialect, Usage};
pub use vertex::auth::TokenCache;

use crate::config::ProviderName;

/// The provider behind a name: the registry, one line per provider.
pub fn provider(name: ProviderName) -> &'static dyn Provider {
    match name {
        ProviderName::OpenAi => &openai::OpenAi,
        ProviderName::Anthropic => &anthropic::Anthropic,
        ProviderName::Bedrock => &bedrock::Bedrock,
        ProviderName::Vertex => &vertex::Vertex,
    }
}

/// `gen_ai.provider.name`: the semantic conventions' name for a provider Tollgate routes to.
pub fn semconv_name(provider: &str) -> &str {
    match provider {
        "bedrock" => "aws.bedrock",
        "vertex" => "gcp.vertex_ai",
        p => p,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_provider_has_its_entry() {
        for p in ProviderName::ALL {
            assert_eq!(provider(p).name(), p);
        }
    }
}
