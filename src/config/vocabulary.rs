//! What config knows of the providers: nothing of its own. The providers layer (above this one)
//! hands in a [`Vocabulary`], plain data: which provider names exist, each one's section
//! defaults and default routes. Config reads `providers:` and `routes:` against it.
//!
//! The names must be checked while deserializing, so that an unknown one is reported at its
//! line and column like every other bad value (serde_yaml attaches the position to an error
//! raised inside `Deserialize`). Serde has no context parameter for derived impls, so the
//! vocabulary of the parse in progress sits in a thread-local for exactly its duration
//! ([`Scope`], set by `Config::parse`); a parse is synchronous, so nothing else runs on the
//! thread meanwhile.

use std::borrow::Borrow;
use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt;

use serde::de::Visitor;
use serde::{Deserialize, Deserializer};

use super::types::Glob;

/// The providers config may name, in the order their default routes are tried.
#[derive(Debug, Clone, Copy)]
pub struct Vocabulary {
    pub providers: &'static [ProviderSpec],
}

/// One provider as config sees it.
#[derive(Debug, Clone, Copy)]
pub struct ProviderSpec {
    /// Its key in `providers:` and in `routes[].provider`.
    pub name: &'static str,
    /// `providers.<name>.base_url` when the file has no such section.
    pub base_url: &'static str,
    /// `providers.<name>.version` when the file has no such section.
    pub version: &'static str,
    /// Model globs routed to it when the file has no `routes:`.
    pub routes: &'static [&'static str],
    /// Its calls go to `providers.<name>.base_url` unless a credential names its own, so that
    /// URL is checked at load (providers addressed by region have none).
    pub needs_base_url: bool,
}

impl Vocabulary {
    pub fn spec(&self, name: &str) -> Option<&'static ProviderSpec> {
        self.providers.iter().find(|p| p.name == name)
    }

    fn names(&self) -> String {
        self.providers.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
    }

    /// Every provider's section as the specs give it.
    pub(super) fn default_sections(&self) -> ProvidersSection {
        let sections = self.providers.iter().map(|p| (ProviderKey(p.name.into()), p.defaults()));
        ProvidersSection(sections.collect())
    }

    /// The default routing table: each provider's globs, in vocabulary order.
    pub(super) fn default_routes(&self) -> Vec<RouteRule> {
        let rule = |p: &ProviderSpec, g: &str| RouteRule { model: Glob::new(g), provider: ProviderKey(p.name.into()) };
        self.providers.iter().flat_map(|p| p.routes.iter().map(move |g| rule(p, g))).collect()
    }
}

impl ProviderSpec {
    fn defaults(&self) -> ProviderDefaults {
        ProviderDefaults { base_url: self.base_url.into(), version: self.version.into() }
    }
}

thread_local! {
    static CURRENT: Cell<Option<Vocabulary>> = const { Cell::new(None) };
}

/// The vocabulary of the parse in progress on this thread, from [`Scope::enter`] until the
/// guard drops (restoring whatever was there before, so scopes nest).
pub(super) struct Scope {
    before: Option<Vocabulary>,
}

impl Scope {
    pub(super) fn enter(vocab: &Vocabulary) -> Scope {
        Scope { before: CURRENT.replace(Some(*vocab)) }
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        CURRENT.set(self.before);
    }
}

fn current() -> Option<Vocabulary> {
    CURRENT.get()
}

/// A provider's name as config holds it: one of the vocabulary's, checked where it was read.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProviderKey(String);

impl ProviderKey {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Sections are looked up by a plain name (the derived order is the string's, as `Borrow` needs).
impl Borrow<str> for ProviderKey {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ProviderKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for ProviderKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(KeyVisitor)
    }
}

/// Checks the name inside the visitor, not after it: serde_yaml marks an error raised there
/// with the scalar's own line and column (after it, with the enclosing mapping's).
struct KeyVisitor;

impl Visitor<'_> for KeyVisitor {
    type Value = ProviderKey;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a provider name")
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<ProviderKey, E> {
        let Some(vocab) = current() else {
            // A programming error, not a user's: provider names are read through Config::parse.
            return Err(E::custom("provider names are read only through Config::parse"));
        };
        if vocab.spec(s).is_none() {
            return Err(E::custom(format!("unknown provider `{s}`, expected one of {}", vocab.names())));
        }
        Ok(ProviderKey(s.to_string()))
    }
}

/// `providers:`: each provider's section by name. A provider the file does not list keeps its
/// spec's defaults; one it lists takes the file's fields (an absent field is empty).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ProvidersSection(pub BTreeMap<ProviderKey, ProviderDefaults>);

impl<'de> Deserialize<'de> for ProvidersSection {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let listed = BTreeMap::<ProviderKey, ProviderDefaults>::deserialize(d)?;
        let mut all = current().map(|v| v.default_sections()).unwrap_or_default();
        all.0.extend(listed);
        Ok(all)
    }
}

/// The providers' sections of a file with none (serde's default for `providers:`).
pub(super) fn scoped_sections() -> ProvidersSection {
    current().map(|v| v.default_sections()).unwrap_or_default()
}

/// The routing table of a file with no `routes:`.
pub(super) fn scoped_routes() -> Vec<RouteRule> {
    current().map(|v| v.default_routes()).unwrap_or_default()
}

#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ProviderDefaults {
    pub base_url: String,
    /// The API version header a provider sends when the client sends none.
    pub version: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteRule {
    pub model: Glob,
    pub provider: ProviderKey,
}
