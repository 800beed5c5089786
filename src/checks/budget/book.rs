//! Which limits apply to a request: built once per snapshot from the budget rows, the keys'
//! `budgetUsd` and the teams' `budgetPoolUsd`, then only read.

use foldhash::HashMap;

use super::period::Period;
use crate::store::{budgets::Budget, keys::KeyRecord, teams::Team};

/// One cap a request's cost counts against.
#[derive(Debug, Clone, PartialEq)]
pub struct Limit {
    /// The budget row; None for a key's `budgetUsd` or a team's `budgetPoolUsd`.
    pub budget_id: Option<String>,
    /// `key`, `team` or `tenant`.
    pub scope: &'static str,
    pub scope_id: String,
    pub amount_usd: f64,
    pub period: Period,
}

/// Limits by the id of what they cap, each with the tenant it belongs to, so a stray id of
/// another tenant can never apply.
#[derive(Debug, Default)]
pub struct BudgetBook {
    keys: HashMap<String, Vec<(String, Limit)>>,
    teams: HashMap<String, Vec<(String, Limit)>>,
    tenants: HashMap<String, Vec<(String, Limit)>>,
}

/// The scope names the ledger and the API use, as `'static` strings.
pub(crate) fn scope_name(s: &str) -> Option<&'static str> {
    match s {
        "key" => Some("key"),
        "team" => Some("team"),
        "tenant" => Some("tenant"),
        _ => None,
    }
}

impl BudgetBook {
    pub fn build<'a>(
        budgets: &[Budget],
        keys: impl IntoIterator<Item = &'a KeyRecord>,
        teams: impl IntoIterator<Item = &'a Team>,
    ) -> BudgetBook {
        let mut book = BudgetBook::default();
        for b in budgets {
            let (Some(scope), Some(period)) = (scope_name(&b.scope), Period::parse(&b.period)) else {
                log::warn!("budget {} has an unknown scope `{}` or period `{}`; ignored", b.id, b.scope, b.period);
                continue;
            };
            let limit = Limit {
                budget_id: Some(b.id.clone()),
                scope,
                scope_id: b.scope_id.clone(),
                amount_usd: b.amount_usd,
                period,
            };
            book.add(&b.tenant_id, limit);
        }
        for k in keys {
            if let Some(amount) = k.budget_usd {
                let limit = Limit {
                    budget_id: None,
                    scope: "key",
                    scope_id: k.id.clone(),
                    amount_usd: amount,
                    period: Period::Total,
                };
                book.add(&k.tenant_id, limit);
            }
        }
        for t in teams {
            if let Some(amount) = t.budget_pool_usd {
                let limit = Limit {
                    budget_id: None,
                    scope: "team",
                    scope_id: t.id.clone(),
                    amount_usd: amount,
                    period: Period::Total,
                };
                book.add(&t.tenant_id, limit);
            }
        }
        book
    }

    fn add(&mut self, tenant_id: &str, limit: Limit) {
        let map = match limit.scope {
            "key" => &mut self.keys,
            "team" => &mut self.teams,
            _ => &mut self.tenants,
        };
        map.entry(limit.scope_id.clone()).or_default().push((tenant_id.to_string(), limit));
    }

    /// Every limit in the book (the shared state loads their spend: `cluster`).
    pub fn all(&self) -> impl Iterator<Item = &Limit> {
        [&self.keys, &self.teams, &self.tenants].into_iter().flat_map(|m| m.values()).flatten().map(|(_, l)| l)
    }

    /// Every limit a request of this key counts against: the key's, its team's and its
    /// tenant's. Empty when no budget applies.
    pub fn limits_for(&self, tenant_id: &str, key_id: &str, team_id: Option<&str>) -> Vec<Limit> {
        let mut out = Vec::new();
        let mut take = |map: &HashMap<String, Vec<(String, Limit)>>, id: &str| {
            if let Some(ls) = map.get(id) {
                out.extend(ls.iter().filter(|(t, _)| t == tenant_id).map(|(_, l)| l.clone()));
            }
        };
        take(&self.keys, key_id);
        if let Some(team) = team_id {
            take(&self.teams, team);
        }
        take(&self.tenants, tenant_id);
        out
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty() && self.teams.is_empty() && self.tenants.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(id: &str, tenant: &str, scope: &str, scope_id: &str, amount: f64, period: &str) -> Budget {
        Budget {
            id: id.into(),
            tenant_id: tenant.into(),
            scope: scope.into(),
            scope_id: scope_id.into(),
            amount_usd: amount,
            period: period.into(),
            created_at: String::new(),
            updated_at: String::new(),
        }
    }

    fn key(id: &str, tenant: &str, team: Option<&str>, budget: Option<f64>) -> KeyRecord {
        KeyRecord { team_id: team.map(Into::into), budget_usd: budget, ..KeyRecord::fixture(id, tenant) }
    }

    fn team(id: &str, tenant: &str, pool: Option<f64>) -> Team {
        Team {
            id: id.into(),
            tenant_id: tenant.into(),
            name: id.into(),
            budget_pool_usd: pool,
            created_at: String::new(),
            updated_at: String::new(),
        }
    }

    #[test]
    fn limits_for_collects_key_team_and_tenant_caps() {
        let budgets = [
            budget("b-key", "t1", "key", "k1", 5.0, "monthly"),
            budget("b-team", "t1", "team", "team1", 50.0, "total"),
            budget("b-tenant", "t1", "tenant", "t1", 500.0, "monthly"),
            budget("b-other-key", "t1", "key", "k2", 1.0, "total"),
            budget("b-bad", "t1", "galaxy", "k1", 1.0, "total"),
        ];
        let keys = [key("k1", "t1", Some("team1"), Some(2.0)), key("k2", "t1", None, None)];
        let teams = [team("team1", "t1", Some(20.0)), team("team2", "t1", None)];
        let book = BudgetBook::build(&budgets, &keys, &teams);

        let got = book.limits_for("t1", "k1", Some("team1"));
        let summary: Vec<(Option<&str>, &str, &str, f64, Period)> = got
            .iter()
            .map(|l| (l.budget_id.as_deref(), l.scope, l.scope_id.as_str(), l.amount_usd, l.period))
            .collect();
        assert_eq!(
            summary,
            vec![
                (Some("b-key"), "key", "k1", 5.0, Period::Monthly),
                (None, "key", "k1", 2.0, Period::Total),
                (Some("b-team"), "team", "team1", 50.0, Period::Total),
                (None, "team", "team1", 20.0, Period::Total),
                (Some("b-tenant"), "tenant", "t1", 500.0, Period::Monthly),
            ]
        );

        // No team: only the key's own and the tenant's.
        let ids: Vec<_> = book.limits_for("t1", "k2", None).into_iter().map(|l| l.budget_id).collect();
        assert_eq!(ids, vec![Some("b-other-key".to_string()), Some("b-tenant".to_string())]);
        // A team with no pool and no budget adds nothing.
        assert_eq!(book.limits_for("t1", "k2", Some("team2")).len(), 2);
        // Nothing applies to another tenant, even when it names the same ids.
        assert!(book.limits_for("t2", "k1", Some("team1")).is_empty());
        assert!(BudgetBook::default().limits_for("t1", "k1", None).is_empty());
        assert!(!book.is_empty());
    }
}
