//! One policy rule, ready to match a request's [`Facts`].

use chrono::{Datelike, Timelike};

use super::document::{self, KindDoc, MatchDoc, RuleAction, RuleDoc, Weekday};
use super::facts::Facts;
use crate::config::Glob;
use crate::receipts::Kind;

#[derive(Debug, Clone)]
pub struct Rule {
    pub id: String,
    pub action: RuleAction,
    pub reason: Option<String>,
    when: MatchDoc,
    /// Bit `n` set = weekday `n` (Monday = 0) is listed; 0 = any day.
    days: u8,
    /// Minutes after midnight UTC, end exclusive; end < start wraps midnight.
    hours: Option<(u16, u16)>,
}

impl Rule {
    pub fn compile(doc: &RuleDoc) -> Result<Rule, String> {
        let time = doc.matches.time.as_ref();
        let hours = match time.and_then(|t| t.hours.as_deref()) {
            Some(h) => Some(document::parse_hours(h).map_err(|e| format!("rule `{}`: {e}", doc.id))?),
            None => None,
        };
        let days = time.map_or(0, |t| t.days.iter().fold(0u8, |m, d| m | 1 << day_index(*d)));
        Ok(Rule {
            id: doc.id.clone(),
            action: doc.action,
            reason: doc.reason.clone(),
            when: doc.matches.clone(),
            days,
            hours,
        })
    }

    /// All listed conditions hold (a list is any-of; an absent condition always holds).
    pub fn matches(&self, f: &Facts) -> bool {
        let m = &self.when;
        any_glob(&m.model.0, f.model)
            && any_glob(&m.provider.0, f.provider)
            && (m.kind.0.is_empty() || m.kind.0.iter().any(|k| kind(*k) == f.kind))
            // Only tool calls name a tool: a rule about tools never matches a model call.
            && (m.tool.0.is_empty() || f.tool.is_some_and(|t| any_glob(&m.tool.0, t)))
            && any_glob(&m.key_class.0, f.key_class)
            && any_glob(&m.role.0, f.role)
            && (m.team.0.is_empty()
                || f.team_name.is_some_and(|t| any_glob(&m.team.0, t))
                || f.team_id.is_some_and(|t| any_glob(&m.team.0, t)))
            // A request that sets no max_tokens is not "above" any threshold.
            && m.max_tokens_above.is_none_or(|n| f.max_tokens.is_some_and(|v| v > n))
            && m.prompt_tokens_above.is_none_or(|n| f.prompt_tokens > n)
            && self.in_time(f.now)
    }

    fn in_time(&self, now: chrono::DateTime<chrono::Utc>) -> bool {
        let day_ok = self.days == 0 || self.days & (1 << now.weekday().num_days_from_monday()) != 0;
        let minute = (now.hour() * 60 + now.minute()) as u16;
        let hour_ok = match self.hours {
            None => true,
            Some((start, end)) if start < end => (start..end).contains(&minute),
            Some((start, end)) => minute >= start || minute < end,
        };
        day_ok && hour_ok
    }
}

fn any_glob(list: &[Glob], value: &str) -> bool {
    list.is_empty() || list.iter().any(|g| g.matches(value))
}

fn kind(k: KindDoc) -> Kind {
    match k {
        KindDoc::ModelCall => Kind::ModelCall,
        KindDoc::ToolCall => Kind::ToolCall,
    }
}

fn day_index(d: Weekday) -> u32 {
    match d {
        Weekday::Mon => 0,
        Weekday::Tue => 1,
        Weekday::Wed => 2,
        Weekday::Thu => 3,
        Weekday::Fri => 4,
        Weekday::Sat => 5,
        Weekday::Sun => 6,
    }
}
