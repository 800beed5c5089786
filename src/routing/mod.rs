//! Model routes as the hot path holds them: a model name a client uses → its targets (a
//! provider, a named credential and the provider's model id), the strategy that orders them,
//! the retry budget, and each target's health (circuit breaker, rate-limit cool-down, requests
//! in flight). Health outlives snapshot rebuilds: a rebuild carries each target's
//! [`Health`] over by its key (docs/decisions/routes.md).

pub mod health;
pub mod retry;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::config::{Breaker, Retries, RouteSpec, Strategy};
use crate::providers::ProviderName;

pub use health::{Admission, Health, TargetState};

/// One target of a route.
#[derive(Debug)]
pub struct RouteTarget {
    pub provider: ProviderName,
    pub credential: Arc<str>,
    pub model: Arc<str>,
    pub weight: u32,
    pub health: Arc<Health>,
}

impl RouteTarget {
    /// `route:<model>/<provider>/<credential>`, the name `/status` lists it under.
    pub fn component(&self, route_model: &str) -> String {
        format!("route:{route_model}/{}/{}", self.provider, self.credential)
    }

    /// `<provider>/<credential>/<model>`: the `target` label of the metrics.
    pub fn label(&self) -> String {
        format!("{}/{}/{}", self.provider, self.credential, self.model)
    }
}

/// A compiled route.
#[derive(Debug)]
pub struct ModelRoute {
    pub model: String,
    pub strategy: Strategy,
    pub targets: Vec<RouteTarget>,
    pub retries: Retries,
    pub breaker: Breaker,
    /// Draws of the weighted strategy so far (a Weyl sequence over them spreads the draws
    /// evenly: the shares match the weights closely even over a few hundred requests).
    draws: AtomicU64,
}

/// Where a compiled route's target health comes from: the old snapshot's, by key.
pub type HealthOf<'a> = &'a dyn Fn(&str) -> Option<Arc<Health>>;

impl ModelRoute {
    /// `spec` compiled; targets naming an unknown provider are left out (checked on write).
    /// `scope` keys the health (`tenant` or `*` for config routes).
    pub fn compile(spec: &RouteSpec, scope: &str, old: HealthOf<'_>) -> ModelRoute {
        let targets = spec
            .targets
            .iter()
            .filter_map(|t| {
                let provider = ProviderName::parse(&t.provider)?;
                let key = health_key(scope, &spec.model, &t.provider, &t.credential, &t.model);
                Some(RouteTarget {
                    provider,
                    credential: t.credential.as_str().into(),
                    model: t.model.as_str().into(),
                    weight: t.weight.max(1),
                    health: old(&key).unwrap_or_default(),
                })
            })
            .collect();
        ModelRoute {
            model: spec.model.clone(),
            strategy: spec.strategy,
            targets,
            retries: spec.retries,
            breaker: spec.breaker,
            draws: AtomicU64::new(0),
        }
    }

    /// Every target's health by key, for the next rebuild to carry over.
    pub fn health_keys(&self, scope: &str) -> impl Iterator<Item = (String, Arc<Health>)> + '_ {
        let scope = scope.to_string();
        self.targets.iter().map(move |t| {
            let key = health_key(&scope, &self.model, t.provider.as_str(), &t.credential, &t.model);
            (key, t.health.clone())
        })
    }

    /// The targets in the order this request tries them (by the strategy), without the ones
    /// skipped right now (breaker open, rate limit used up until its reset).
    pub fn order(&self, now_ms: i64) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.targets.len()).collect();
        match self.strategy {
            Strategy::Fallback => {}
            Strategy::Weighted => {
                let first = self.draw();
                order.retain(|&i| i != first);
                order.insert(0, first);
            }
            Strategy::LeastBusy => order.sort_by_key(|&i| self.targets[i].health.in_flight()),
        }
        order.retain(|&i| self.targets[i].health.available(now_ms));
        order
    }

    /// A target drawn by weight.
    fn draw(&self) -> usize {
        // The golden ratio's fractional part in 64-bit fixed point: n·φ mod 1 is the most
        // evenly spread sequence there is over [0, 1).
        const PHI: u64 = 0x9E37_79B9_7F4A_7C15;
        let n = self.draws.fetch_add(1, Ordering::Relaxed);
        let total: u64 = self.targets.iter().map(|t| u64::from(t.weight)).sum();
        let x = ((n.wrapping_mul(PHI) as u128 * total as u128) >> 64) as u64;
        let mut acc = 0;
        for (i, t) in self.targets.iter().enumerate() {
            acc += u64::from(t.weight);
            if x < acc {
                return i;
            }
        }
        0
    }
}

fn health_key(scope: &str, route: &str, provider: &str, credential: &str, model: &str) -> String {
    format!("{scope}\u{0}{route}\u{0}{provider}\u{0}{credential}\u{0}{model}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TargetSpec;

    fn spec(strategy: Strategy, weights: &[u32]) -> RouteSpec {
        let targets = weights
            .iter()
            .enumerate()
            .map(|(i, w)| TargetSpec {
                provider: "openai".into(),
                credential: format!("k{i}"),
                model: "m".into(),
                weight: *w,
            })
            .collect();
        RouteSpec { model: "r".into(), strategy, targets, retries: Retries::default(), breaker: Breaker::default() }
    }

    #[test]
    fn weighted_draws_follow_the_weights_closely() {
        let r = ModelRoute::compile(&spec(Strategy::Weighted, &[3, 1]), "t", &|_| None);
        let firsts: Vec<usize> = (0..1000).map(|_| r.order(0)[0]).collect();
        let zeros = firsts.iter().filter(|&&i| i == 0).count();
        assert!((745..=755).contains(&zeros), "{zeros}");
        assert_eq!(r.order(0).len(), 2, "the other target stays as a fallback");
    }

    #[test]
    fn least_busy_puts_the_idle_target_first() {
        let r = ModelRoute::compile(&spec(Strategy::LeastBusy, &[1, 1]), "t", &|_| None);
        let _busy = r.targets[0].health.enter();
        assert_eq!(r.order(0), [1, 0]);
    }
}
