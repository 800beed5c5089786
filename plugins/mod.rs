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
