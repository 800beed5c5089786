//! `routes:`: each entry is either a default-provider rule (`{model: <glob>, provider}`, as
//! before) or a model route (`{model: <name>, targets: [...], strategy, retries, breaker}`, the
//! same body `PUT /v1/routes/{model}` takes). Config names no provider of its own: a target's
//! provider is checked against the vocabulary after the parse ([`Routes::check`]).

use serde::{Deserialize, Deserializer, Serialize};

use super::types::Glob;
use super::vocabulary::{ProviderKey, RouteRule, Vocabulary};

/// The routing table: default-provider rules (first match wins) and model routes by exact name.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Routes {
    pub rules: Vec<RouteRule>,
    pub models: Vec<RouteSpec>,
}

/// A model route: what a client's model name maps to.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RouteSpec {
    /// The model name clients use (set from the path on `PUT /v1/routes/{model}`).
    #[serde(default)]
    pub model: String,
    #[serde(default)]
    pub strategy: Strategy,
    pub targets: Vec<TargetSpec>,
    #[serde(default)]
    pub retries: Retries,
    #[serde(default)]
    pub breaker: Breaker,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// The targets in order.
    #[default]
    Fallback,
    /// One target drawn by weight, then the others in order.
    Weighted,
    /// The target with the fewest requests in flight first.
    LeastBusy,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TargetSpec {
    pub provider: String,
    #[serde(default = "default_credential")]
    pub credential: String,
    /// The provider's model id.
    pub model: String,
    #[serde(default = "one")]
    pub weight: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct Retries {
    /// The most tries one client request makes over all targets together, first try included.
    pub attempts: u32,
    pub per_attempt_timeout_ms: Option<u64>,
    pub total_timeout_ms: Option<u64>,
    pub backoff_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct Breaker {
    pub failures: u32,
    pub cooldown_seconds: u64,
}

impl Default for Retries {
    fn default() -> Self {
        Retries { attempts: 2, per_attempt_timeout_ms: None, total_timeout_ms: None, backoff_ms: 200 }
    }
}

impl Default for Breaker {
    fn default() -> Self {
        Breaker { failures: 5, cooldown_seconds: 30 }
    }
}

fn default_credential() -> String {
    "default".into()
}

fn one() -> u32 {
    1
}

/// The most targets and attempts a route may have (a guard against a typo that multiplies
/// upstream calls, not a tuning knob).
pub const MAX_TARGETS: usize = 16;
pub const MAX_ATTEMPTS: u32 = 10;

impl RouteSpec {
    /// Checks what serde cannot: names, counts and ranges. `known` says whether a provider name
    /// exists. The error names the field.
    pub fn check(&self, known: &dyn Fn(&str) -> bool) -> Result<(), String> {
        check_name("model", &self.model, 256)?;
        if self.targets.is_empty() || self.targets.len() > MAX_TARGETS {
            return Err(format!("targets: between 1 and {MAX_TARGETS} targets"));
        }
        for (i, t) in self.targets.iter().enumerate() {
            if !known(&t.provider) {
                return Err(format!("targets[{i}].provider: unknown provider `{}`", t.provider));
            }
            check_name(&format!("targets[{i}].credential"), &t.credential, 64)?;
            check_name(&format!("targets[{i}].model"), &t.model, 256)?;
            if t.weight == 0 || t.weight > 1_000_000 {
                return Err(format!("targets[{i}].weight: between 1 and 1000000"));
            }
        }
        let r = &self.retries;
        if r.attempts == 0 || r.attempts > MAX_ATTEMPTS {
            return Err(format!("retries.attempts: between 1 and {MAX_ATTEMPTS}"));
        }
        let positive = |v: Option<u64>| v.is_none_or(|ms| ms > 0 && ms <= 3_600_000);
        if !positive(r.per_attempt_timeout_ms) || !positive(r.total_timeout_ms) || r.backoff_ms > 60_000 {
            return Err("retries: timeouts between 1 ms and 1 hour, backoffMs at most 60000".into());
        }
        if self.breaker.failures == 0 || self.breaker.cooldown_seconds > 86_400 {
            return Err("breaker: failures at least 1, cooldownSeconds at most 86400".into());
        }
        Ok(())
    }
}

/// A name of printable characters, not blank, at most `max` bytes.
pub fn check_name(field: &str, v: &str, max: usize) -> Result<(), String> {
    if v.trim().is_empty() || v.len() > max || v.chars().any(|c| c.is_control()) {
        return Err(format!("{field}: 1 to {max} printable characters"));
    }
    Ok(())
}

/// One `routes:` entry as written: a rule has `provider`, a route has `targets`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Entry {
    model: String,
    provider: Option<ProviderKey>,
    strategy: Option<Strategy>,
    targets: Option<Vec<TargetSpec>>,
    retries: Option<Retries>,
    breaker: Option<Breaker>,
}

impl<'de> Deserialize<'de> for Routes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut routes = Routes::default();
        for e in Vec::<Entry>::deserialize(d)? {
            match (e.provider, e.targets) {
                (Some(provider), None) => routes.rules.push(RouteRule { model: Glob::new(e.model), provider }),
                (None, Some(targets)) => routes.models.push(RouteSpec {
                    model: e.model,
                    strategy: e.strategy.unwrap_or_default(),
                    targets,
                    retries: e.retries.unwrap_or_default(),
                    breaker: e.breaker.unwrap_or_default(),
                }),
                _ => return Err(D::Error::custom(format!("route `{}`: give either provider or targets", e.model))),
            }
        }
        Ok(routes)
    }
}

/// The routing table of a file with no `routes:` (serde's default): the vocabulary's rules.
pub(super) fn scoped() -> Routes {
    Routes { rules: super::vocabulary::scoped_routes(), models: Vec::new() }
}

impl Routes {
    /// A file whose `routes:` lists only model routes keeps the default rules.
    pub(super) fn with_default_rules(mut self, vocab: &Vocabulary) -> Routes {
        if self.rules.is_empty() && !self.models.is_empty() {
            self.rules = vocab.default_routes();
        }
        self
    }

    /// Each model route's names, counts and providers, and no model routed twice.
    pub(super) fn check(&self, vocab: &Vocabulary) -> Result<(), String> {
        let mut seen = std::collections::HashSet::new();
        for (i, r) in self.models.iter().enumerate() {
            r.check(&|p| vocab.spec(p).is_some()).map_err(|e| format!("routes (model route {i}): {e}"))?;
            if !seen.insert(r.model.as_str()) {
                return Err(format!("routes: model `{}` has two routes", r.model));
            }
        }
        Ok(())
    }
}
