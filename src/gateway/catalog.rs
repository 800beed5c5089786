//! `GET /v1/models` and `GET /v1/models/{id}`: the models this key may call, in the shape the
//! client's SDK reads (`providers::catalog`).
//!
//! A model is listed when the price table names it, the routing table sends the name a client
//! would use to a provider this tenant has credentials for, and neither an allowlist nor an
//! unconditional `deny` rule of the tenant's policies refuses this key. Nothing leaves the
//! gateway: the list is the gateway's own knowledge, so it answers in microseconds.

use crate::checks::policy::{Decision, Facts};
use crate::providers;
use crate::providers::catalog::Listed;
use crate::receipts::Kind;
use crate::snapshot::{KeyEntry, Snapshot};

/// The models `key` may call, sorted by id.
pub fn models(snap: &Snapshot, key: &KeyEntry, now: chrono::DateTime<chrono::Utc>) -> Vec<Listed> {
    let tenant = key.tenant_id();
    let policy = snap.policy(tenant);
    let team_id = key.record.team_id.as_deref();
    let mut out: Vec<Listed> = Vec::new();
    for priced in snap.pricing.models() {
        for p in crate::providers::ProviderName::ALL {
            let Some(id) = providers::provider(p).listed_as(priced) else { continue };
            if snap.route(&id) != Some(p) || snap.provider(tenant, p).is_none() {
                continue;
            }
            // As a request naming this model with nothing else would be judged: conditions on
            // max_tokens or prompt size do not hide a model.
            let facts = Facts {
                kind: Kind::ModelCall,
                model: &id,
                provider: p.as_str(),
                tool: None,
                betas: &[],
                key_class: &key.record.key_class,
                role: &key.record.role,
                team_id,
                team_name: team_id.and_then(|t| snap.teams.get(t)).map(String::as_str),
                max_tokens: None,
                prompt_tokens: 0,
                now,
            };
            let allowed = policy.allowlist_violation(&facts).is_none()
                && (!policy.has_rules() || policy.evaluate(&facts) == Decision::Allow);
            if allowed {
                out.push(Listed { id, provider: p.as_str() });
            }
        }
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    out.dedup_by(|a, b| a.id == b.id);
    out
}

/// When the listed models were "created": the price table's date (`taken: 2025-08` → the 1st).
pub fn created(snap: &Snapshot) -> chrono::DateTime<chrono::Utc> {
    let taken = &snap.pricing.taken;
    chrono::NaiveDate::parse_from_str(&format!("{taken}-01"), "%Y-%m-%d")
        .or_else(|_| chrono::NaiveDate::parse_from_str(taken, "%Y-%m-%d"))
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|t| t.and_utc())
        .unwrap_or(chrono::DateTime::UNIX_EPOCH)
}
