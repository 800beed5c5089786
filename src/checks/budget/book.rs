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
    /// `key`, `team`, `tenant` or `end_user` (then `scope_id` is `<owner>/<endUser>`, the owner
    /// `key:<id>`, `team:<id>` or `tenant:<id>`: [`end_user_scope_id`]).
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
    /// End-user budgets by owner (`key:<id>`, `team:<id>`, `tenant:<id>`): each rule applies to
    /// every end user of the owner, or to one (`Some(endUser)`).
    end_users: HashMap<String, Vec<(String, EndUserRule)>>,
}

/// An end-user budget: `amount_usd` per `period` for each end user in scope.
#[derive(Debug, Clone, PartialEq)]
pub struct EndUserRule {
    pub budget_id: String,
    pub end_user: Option<String>,
    pub amount_usd: f64,
    pub period: Period,
}

/// The spend entry of `end_user` under `owner` (`key:<id>`, `team:<id>`, `tenant:<id>`).
pub fn end_user_scope_id(owner: &str, end_user: &str) -> String {
    format!("{owner}/{end_user}")
}

/// The end user a scope id of an `end_user` limit names.
pub fn end_user_of(scope_id: &str) -> &str {
    scope_id.split_once('/').map_or(scope_id, |(_, u)| u)
}

/// The scope names the ledger and the API use, as `'static` strings.
pub(crate) fn scope_name(s: &str) -> Option<&'static str> {
    match s {
        "key" => Some("key"),
        "team" => Some("team"),
        "tenant" => Some("tenant"),
        "end_user" => Some("end_user"),
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
            if scope == "end_user" {
                let rule = EndUserRule {
                    budget_id: b.id.clone(),
                    end_user: b.end_user.clone(),
                    amount_usd: b.amount_usd,
                    period,
                };
                book.end_users.entry(b.scope_id.clone()).or_default().push((b.tenant_id.clone(), rule));
                continue;
            }
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

    /// [`BudgetBook::limits_for`] plus the end-user budgets that apply to `end_user` of this
    /// key: those of the key, of its team and of the tenant.
    pub fn limits_with_end_user(
        &self,
        tenant_id: &str,
        key_id: &str,
        team_id: Option<&str>,
        end_user: Option<&str>,
    ) -> Vec<Limit> {
        let mut out = self.limits_for(tenant_id, key_id, team_id);
        let Some(user) = end_user else { return out };
        if self.end_users.is_empty() {
            return out;
        }
        let owners =
            [Some(format!("key:{key_id}")), team_id.map(|t| format!("team:{t}")), Some(format!("tenant:{tenant_id}"))];
        for owner in owners.into_iter().flatten() {
            let Some(rules) = self.end_users.get(&owner) else { continue };
            for (_, r) in
                rules.iter().filter(|(t, r)| t == tenant_id && r.end_user.as_deref().is_none_or(|u| u == user))
            {
                out.push(Limit {
                    budget_id: Some(r.budget_id.clone()),
                    scope: "end_user",
                    scope_id: end_user_scope_id(&owner, user),
                    amount_usd: r.amount_usd,
                    period: r.period,
                });
            }
        }
        out
    }

    /// The end-user budgets, by owner (the shared state loads the spend they cover: `cluster`).
    pub fn end_user_rules(&self) -> impl Iterator<Item = (&str, &EndUserRule)> {
        self.end_users.iter().flat_map(|(owner, rules)| rules.iter().map(move |(_, r)| (owner.as_str(), r)))
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty() && self.teams.is_empty() && self.tenants.is_empty() && self.end_users.is_empty()
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
            end_user: None,
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

    #[test]
    fn end_user_budgets_apply_per_end_user_of_their_owner() {
        let mut every = budget("b1", "t1", "end_user", "key:k1", 1.0, "monthly");
        every.end_user = None;
        let mut one = budget("b2", "t1", "end_user", "team:team1", 0.5, "total");
        one.end_user = Some("alice".into());
        let tenant_wide = budget("b3", "t1", "end_user", "tenant:t1", 2.0, "total");
        let book = BudgetBook::build(&[every, one, tenant_wide], [], []);
        assert!(book.limits_for("t1", "k1", Some("team1")).is_empty(), "no end user, no end-user budget");
        let ids = |user| -> Vec<(Option<String>, String)> {
            book.limits_with_end_user("t1", "k1", Some("team1"), Some(user))
                .into_iter()
                .map(|l| (l.budget_id, l.scope_id))
                .collect()
        };
        assert_eq!(
            ids("alice"),
            [
                (Some("b1".into()), "key:k1/alice".into()),
                (Some("b2".into()), "team:team1/alice".into()),
                (Some("b3".into()), "tenant:t1/alice".into())
            ]
        );
        assert_eq!(ids("bob").len(), 2, "b2 caps alice only");
        assert!(book.limits_with_end_user("t2", "k1", None, Some("alice")).is_empty(), "another tenant");
    }
}
