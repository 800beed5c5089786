//! `GET /v1/models` and `GET /v1/models/{id}`: the models this key may call, in the shape the
//! client's SDK reads (OpenAI's list, or Anthropic's paginated one).
//!
//! A model is listed when the price table names it, the routing table sends the name a client
//! would use to a provider this tenant has credentials for, and neither an allowlist nor an
//! unconditional `deny` rule of the tenant's policies refuses this key. Nothing leaves the
//! gateway: the list is the gateway's own knowledge, so it answers in microseconds.

use serde_json::{json, Value};

use crate::checks::policy::{Decision, Facts};
use crate::error::{ApiError, ErrorKind};
use crate::providers;
use crate::receipts::Kind;
use crate::snapshot::{KeyEntry, Snapshot};

/// One model a key may call.
#[derive(Debug, Clone, PartialEq)]
pub struct Listed {
    /// The name a client sends as `model`.
    pub id: String,
    pub provider: &'static str,
}

/// The models `key` may call, sorted by id.
pub fn models(snap: &Snapshot, key: &KeyEntry, now: chrono::DateTime<chrono::Utc>) -> Vec<Listed> {
    let tenant = key.tenant_id();
    let policy = snap.policy(tenant);
    let team_id = key.record.team_id.as_deref();
    let mut out: Vec<Listed> = Vec::new();
    for priced in snap.pricing.models() {
        for p in crate::config::ProviderName::ALL {
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

/// OpenAI's `model` object.
pub fn openai_model(m: &Listed, created: i64) -> Value {
    json!({"id": m.id, "object": "model", "created": created, "owned_by": m.provider})
}

/// Anthropic's `ModelInfo`.
pub fn anthropic_model(m: &Listed, created_at: &str) -> Value {
    json!({"type": "model", "id": m.id, "display_name": m.id, "created_at": created_at})
}

/// OpenAI's list: every model at once (`object: "list"`).
pub fn openai_list(models: &[Listed], created: i64) -> Value {
    json!({"object": "list", "data": models.iter().map(|m| openai_model(m, created)).collect::<Vec<_>>()})
}

/// Anthropic's list query: `limit` (1–1000, default 20), `after_id`, `before_id`.
#[derive(Debug, Default, PartialEq)]
pub struct AnthropicPage {
    pub limit: usize,
    pub after_id: Option<String>,
    pub before_id: Option<String>,
}

impl AnthropicPage {
    pub fn parse(query: Option<&str>) -> Result<AnthropicPage, ApiError> {
        let mut page = AnthropicPage { limit: 20, ..Default::default() };
        for (k, v) in url_pairs(query.unwrap_or("")) {
            match k.as_str() {
                "limit" => {
                    page.limit = v.parse().ok().filter(|n| (1..=1000).contains(n)).ok_or_else(|| {
                        ApiError::new(ErrorKind::InvalidRequest, "`limit` must be an integer from 1 to 1000")
                    })?
                }
                "after_id" => page.after_id = Some(v),
                "before_id" => page.before_id = Some(v),
                _ => {}
            }
        }
        if page.after_id.is_some() && page.before_id.is_some() {
            return Err(ApiError::new(ErrorKind::InvalidRequest, "give `after_id` or `before_id`, not both"));
        }
        Ok(page)
    }
}

/// Anthropic's list: one page, with `has_more`, `first_id` and `last_id` (so the SDK's
/// auto-pagination walks on with `after_id = last_id` and stops).
pub fn anthropic_list(models: &[Listed], page: &AnthropicPage, created_at: &str) -> Value {
    let position = |id: &str| models.iter().position(|m| m.id == id);
    let (slice, has_more) = match (&page.after_id, &page.before_id) {
        (Some(after), _) => {
            let start = position(after).map_or(models.len(), |i| i + 1);
            let end = (start + page.limit).min(models.len());
            (&models[start..end], end < models.len())
        }
        (None, Some(before)) => {
            let end = position(before).unwrap_or(0);
            let start = end.saturating_sub(page.limit);
            (&models[start..end], start > 0)
        }
        (None, None) => {
            let end = page.limit.min(models.len());
            (&models[..end], end < models.len())
        }
    };
    json!({
        "data": slice.iter().map(|m| anthropic_model(m, created_at)).collect::<Vec<_>>(),
        "has_more": has_more,
        "first_id": slice.first().map(|m| m.id.as_str()),
        "last_id": slice.last().map(|m| m.id.as_str()),
    })
}

fn url_pairs(query: &str) -> impl Iterator<Item = (String, String)> + '_ {
    query.split('&').filter(|p| !p.is_empty()).map(|p| {
        let (k, v) = p.split_once('=').unwrap_or((p, ""));
        let dec = |s: &str| percent_encoding::percent_decode_str(&s.replace('+', " ")).decode_utf8_lossy().into_owned();
        (dec(k), dec(v))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(ids: &[&str]) -> Vec<Listed> {
        ids.iter().map(|id| Listed { id: id.to_string(), provider: "openai" }).collect()
    }

    #[test]
    fn anthropic_pages_walk_to_the_end_both_ways() {
        let all = listed(&["a", "b", "c", "d", "e"]);
        let page = |q: &str| anthropic_list(&all, &AnthropicPage::parse(Some(q)).unwrap(), "t");
        let first = page("limit=2");
        assert_eq!((first["first_id"].as_str(), first["last_id"].as_str()), (Some("a"), Some("b")));
        assert_eq!(first["has_more"], true);
        let last = page("limit=2&after_id=d");
        assert_eq!(last["data"].as_array().unwrap().len(), 1);
        assert_eq!(last["has_more"], false);
        let back = page("limit=2&before_id=c");
        assert_eq!((back["first_id"].as_str(), back["has_more"].as_bool()), (Some("a"), Some(false)));
        let back = page("limit=1&before_id=c");
        assert_eq!((back["first_id"].as_str(), back["has_more"].as_bool()), (Some("b"), Some(true)));
        let none = page("after_id=zzz");
        assert_eq!((none["data"].as_array().unwrap().len(), &none["first_id"]), (0, &Value::Null));
        assert_eq!(page("")["data"].as_array().unwrap().len(), 5);
        assert!(AnthropicPage::parse(Some("limit=0")).is_err());
        assert!(AnthropicPage::parse(Some("limit=x")).is_err());
        assert!(AnthropicPage::parse(Some("after_id=a&before_id=b")).is_err());
    }
}
