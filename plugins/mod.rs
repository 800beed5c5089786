//! The checks, one file each, and the one table that orders them (DESIGN.md §4).
//!
//! Order matters and is written down only here: cheap refusals first (allowlist, policy), then
//! the counters that reserve (rate limit, budget), then guardrails (which may rewrite the
//! request), then the cache (keyed on the request as it will really be sent). Key
//! authentication runs before all of them in the gateway: without a key there is no tenant.

pub mod allowlist;
pub mod budget;
pub mod cache;
pub mod guardrail;
pub mod policy;
pub mod rate_limit;

use crate::app::App;
use crate::pipeline::Check;

pub fn table(app: &App) -> Vec<Box<dyn Check>> {
    vec![
        Box::new(allowlist::Allowlist),
        Box::new(policy::Policy),
        Box::new(rate_limit::RateLimit),
        Box::new(budget::Budget::new(app.ledger.clone())),
        Box::new(guardrail::Guardrail),
        Box::new(cache::Cache::new(app.cache.clone())),
    ]
}

/// Fixtures for the plugins' unit tests: a snapshot whose tenant `t1` has one policy.
#[cfg(test)]
pub(crate) mod fixtures {
    use std::collections::HashMap;
    use std::sync::Arc;

    use crate::config::Config;
    use crate::pipeline::Exchange;
    use crate::policy::{validate, CompiledPolicy, TenantPolicy};
    use crate::pricing::Pricing;
    use crate::snapshot::Snapshot;

    pub fn snapshot(yaml: &str) -> Snapshot {
        let cfg = Arc::new(Config::default());
        let pricing = Arc::new(Pricing::from_config(&cfg).unwrap());
        let doc = validate::parse_api(yaml).unwrap();
        let compiled = Arc::new(CompiledPolicy::compile("test", yaml, doc).unwrap());
        let policies = HashMap::from([("t1".to_string(), Arc::new(TenantPolicy::merge(vec![compiled])))]);
        Snapshot::empty(cfg, pricing).with_policies(policies)
    }

    pub fn exchange(yaml: &str, body: serde_json::Value) -> Exchange {
        Exchange::fixture_in(Arc::new(snapshot(yaml)), body)
    }
}
