//! Tenant policies: the YAML language (`document`) and its whole-document checks (`validate`),
//! compiled per tenant (`compiled`, with `rules` and `allowlist`) into the snapshot, from the
//! API's rows and from policy files on disk (`files`).

pub mod allowlist;
pub mod compiled;
pub mod document;
mod facts;
pub mod files;
pub mod plugin;
pub mod rules;
pub mod validate;

pub use compiled::{CacheSettings, CompiledPolicy, Decision, TenantPolicy};
pub use facts::Facts;
