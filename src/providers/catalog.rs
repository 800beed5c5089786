//! Model lists in the shape the client's SDK reads: OpenAI's list, or Anthropic's paginated
//! one when the request comes from the anthropic SDK.

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{json, Value};

use super::envelope::Flavor;
use crate::error::{ApiError, ErrorKind};

/// One model a key may call.
#[derive(Debug, Clone, PartialEq)]
pub struct Listed {
    /// The name a client sends as `model`.
    pub id: String,
    pub provider: &'static str,
}

/// The shape a client reads model lists and aside errors in, told by its request headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListShape {
    /// The chat dialect's SDKs: every model at once.
    Chat,
    /// The Messages SDK: pages, and its own error envelope.
    Messages,
}

impl ListShape {
    /// The anthropic SDK sends `anthropic-version` and its key as `x-api-key`.
    pub fn of(headers: &http::HeaderMap) -> ListShape {
        if headers.contains_key("anthropic-version") || headers.contains_key("x-api-key") {
            ListShape::Messages
        } else {
            ListShape::Chat
        }
    }

    /// The error envelope this client reads.
    pub fn flavor(self) -> Flavor {
        match self {
            ListShape::Chat => Flavor::OpenAi,
            ListShape::Messages => Flavor::Anthropic,
        }
    }

    /// The list of `models`, as this client pages it (`query`).
    pub fn list(self, models: &[Listed], query: Option<&str>, created: DateTime<Utc>) -> Result<Value, ApiError> {
        Ok(match self {
            ListShape::Chat => openai_list(models, created.timestamp()),
            ListShape::Messages => {
                let page = AnthropicPage::parse(query)?;
                anthropic_list(models, &page, &created.to_rfc3339_opts(SecondsFormat::Secs, true))
            }
        })
    }

    /// One model's entry.
    pub fn entry(self, m: &Listed, created: DateTime<Utc>) -> Value {
        match self {
            ListShape::Chat => openai_model(m, created.timestamp()),
            ListShape::Messages => anthropic_model(m, &created.to_rfc3339_opts(SecondsFormat::Secs, true)),
        }
    }
}

/// OpenAI's `model` object.
fn openai_model(m: &Listed, created: i64) -> Value {
    json!({"id": m.id, "object": "model", "created": created, "owned_by": m.provider})
}

/// Anthropic's `ModelInfo`.
fn anthropic_model(m: &Listed, created_at: &str) -> Value {
    json!({"type": "model", "id": m.id, "display_name": m.id, "created_at": created_at})
}

/// OpenAI's list: every model at once (`object: "list"`).
fn openai_list(models: &[Listed], created: i64) -> Value {
    json!({"object": "list", "data": models.iter().map(|m| openai_model(m, created)).collect::<Vec<_>>()})
}

/// Anthropic's list query: `limit` (1–1000, default 20), `after_id`, `before_id`.
#[derive(Debug, Default, PartialEq)]
struct AnthropicPage {
    limit: usize,
    after_id: Option<String>,
    before_id: Option<String>,
}

impl AnthropicPage {
    fn parse(query: Option<&str>) -> Result<AnthropicPage, ApiError> {
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
fn anthropic_list(models: &[Listed], page: &AnthropicPage, created_at: &str) -> Value {
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
