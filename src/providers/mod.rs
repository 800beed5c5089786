//! The provider seam: one folder per provider behind [`Provider`] (the pattern of TensorZero's
//! `providers/<name>/`). A provider knows its credential's fields and how they are encrypted
//! at rest, how it authenticates and addresses an upstream request, what it speaks
//! ([`Dialect`]: usage, stream framing and errors are read by dialect), how an OpenAI-shaped
//! request is put into its own API, which model names it serves, and its minimal test call.
//! What dialects share lives here, not in any provider's folder: reading usage ([`usage`]),
//! the Converse dialect's stream framing ([`eventstream`]), translating between dialects
//! ([`translate`]), where each dialect's bodies and events carry their text ([`text`]) and
//! prices ([`pricing`]).
//!
//! Adding a provider is its folder (with its [`ProviderSpec`](crate::config::ProviderSpec),
//! `<name>::SPEC`: what the config layer below must know to read its file) and one line in
//! each of [`ProviderName`], [`provider`] and [`VOCABULARY`].

pub mod anthropic;
pub mod bedrock;
pub mod catalog;
pub mod credential;
pub mod encrypted;
pub mod envelope;
pub mod eventstream;
mod headers;
mod name;
pub mod openai;
pub mod pricing;
mod provider;
pub(crate) mod ratelimit;
pub mod route;
pub mod text;
pub mod translate;
pub mod usage;
pub mod vertex;

pub use anthropic::{requested_betas, BETA as BETA_HEADER};
pub use credential::{CredentialBody, ProviderAuth, ProviderCred};
pub use envelope::Flavor;
pub use name::ProviderName;
pub use provider::{ClientHeader, Env, Probe, Provider, Target, UpstreamCall};
pub use route::Route;
pub use translate::ensure_stream_usage;
pub use usage::{Dialect, Usage};
pub use vertex::auth::TokenCache;

use crate::config::Vocabulary;

/// What config may name: every provider's spec, in the order of [`ProviderName::ALL`] (the
/// order default routes are tried). `Config::load` and `Config::defaults` take it.
pub const VOCABULARY: Vocabulary =
    Vocabulary { providers: &[openai::SPEC, anthropic::SPEC, bedrock::SPEC, vertex::SPEC] };

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
            assert_eq!(ProviderName::parse(p.as_str()), Some(p));
        }
        let names: Vec<&str> = VOCABULARY.providers.iter().map(|s| s.name).collect();
        assert_eq!(names, ProviderName::ALL.map(ProviderName::as_str), "the vocabulary is the registry's");
    }

    /// `/status` lists the providers whose credentials are API keys.
    #[test]
    fn the_api_key_providers() {
        let keyed: Vec<ProviderName> =
            ProviderName::ALL.into_iter().filter(|&p| provider(p).keyed_by_api_key()).collect();
        assert_eq!(keyed, [ProviderName::OpenAi, ProviderName::Anthropic]);
    }
}
