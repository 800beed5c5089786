//! The checks, one file each, and the one table that orders them (docs/architecture.md, "Checks").
//!
//! Order matters and is written down only in [`ORDER`] (`order.rs`, a leaf): cheap refusals first (allowlist,
//! policy), then the counters that reserve (rate limit, budget), then guardrails (which may
//! rewrite the request), then the cache (keyed on the request as it will really be sent). Key
//! authentication runs before all of them in the gateway: without a key there is no tenant.
//! Compliance ranks receipts by the same order (`compliance::walk::CHECK_ORDER`).

pub mod allowlist;
pub mod budget;
pub mod cache;
pub mod guardrail;
mod order;
pub mod pipeline;
pub mod policy;
pub mod rate_limit;
pub mod shared;

pub use order::ORDER;

use std::sync::Arc;

use crate::checks::budget::Ledger;
use crate::checks::cache::AnswerCache;
use crate::checks::pipeline::Check;
use crate::checks::shared::Cluster;
use crate::receipts::CheckName;

/// The checks, built in [`ORDER`] over the long-lived state they keep (spend, cached answers).
/// With `shared` (several processes, `cluster`), the counters and the cache live in Redis.
/// `RATELIMIT` is two plugins: each end user's limits, then the key's (one recorded result).
pub fn table(ledger: Arc<Ledger>, answers: Arc<AnswerCache>, shared: Option<Arc<Cluster>>) -> Vec<Box<dyn Check>> {
    let mut out: Vec<Box<dyn Check>> = Vec::with_capacity(ORDER.len() + 1);
    for name in ORDER {
        match name {
            CheckName::Allowlist => out.push(Box::new(allowlist::Allowlist)),
            CheckName::Policy => out.push(Box::new(policy::plugin::Policy)),
            CheckName::RateLimit => {
                out.push(Box::new(rate_limit::end_user::EndUserRateLimit::new(shared.clone())));
                out.push(Box::new(rate_limit::plugin::RateLimit::new(shared.clone())));
            }
            CheckName::Budget => out.push(Box::new(budget::plugin::Budget::new(ledger.clone(), shared.clone()))),
            CheckName::Guardrail => out.push(Box::new(guardrail::plugin::Guardrail)),
            CheckName::Cache => out.push(Box::new(cache::plugin::Cache::new(answers.clone(), shared.clone()))),
            CheckName::Upstream | CheckName::Authz => {
                unreachable!("the upstream call is the gateway's, and authz the management API's: not checks")
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_runs_in_order_under_its_own_names() {
        let table = table(Arc::new(Ledger::new()), Arc::new(AnswerCache::new(1 << 20, 1 << 10)), None);
        let mut names: Vec<CheckName> = table.iter().map(|c| c.name()).collect();
        assert_eq!(names.len(), ORDER.len() + 1, "RATELIMIT is two plugins");
        names.dedup();
        assert_eq!(names, ORDER);
    }
}

/// Fixtures for the plugins' unit tests: a snapshot whose tenant `t1` has one policy.
#[cfg(test)]
pub(crate) mod fixtures {
    use std::collections::HashMap;
    use std::sync::Arc;

    use crate::checks::pipeline::Exchange;
    use crate::checks::policy::{validate, CompiledPolicy, TenantPolicy};
    use crate::config::Config;
    use crate::providers::pricing::Pricing;
    use crate::snapshot::Snapshot;

    pub fn snapshot(yaml: &str) -> Snapshot {
        let cfg = Arc::new(Config::defaults(&crate::providers::VOCABULARY));
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
