//! The management listener's route table: the one list of what it serves, each route with the
//! handler that answers it. The router looks every request up here, and `tests/openapi.rs`
//! compares this table with `/openapi.json` both ways, so a route cannot be served without
//! being documented (and fuzzed), nor documented without being served. A handler that no
//! entry names is dead code, which the lint (`-D warnings`) turns into a build error.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use super::handler::{Caller, Handled, Req};
use super::{
    analytics, audit_events, billing, budget_requests, budgets, compliance, end_users, keys, log, members,
    model_routes, openapi, policies, prompts, providers, receipts, retention, status, teams, tool_servers, webhooks,
};
use crate::app::App;
use Serve::{Keyed, Public};

/// A handler's answer, still to come.
pub(super) type Answer<'a> = Pin<Box<dyn Future<Output = Handled> + Send + 'a>>;

/// What a keyed handler is called with.
pub(super) struct Call<'a> {
    pub app: &'a App,
    pub caller: &'a Caller,
    pub req: &'a Req,
    /// The values of the route's `{...}` segments, in order.
    pub params: Vec<&'a str>,
}

/// How a route is served.
#[derive(Clone, Copy)]
pub(super) enum Serve {
    /// Without a key: the paths outside `/v1`.
    Public(for<'a> fn(&'a App) -> Answer<'a>),
    /// For the caller of an authenticated `/v1` path.
    Keyed(KeyedHandler),
}

/// A keyed route's handler.
pub(super) type KeyedHandler = for<'a> fn(Call<'a>) -> Answer<'a>;

/// One method on one path template, and its handler. `{name}` matches one path segment
/// (percent-decoded); on a route made with [`rest`], the last `{name}` matches one or more
/// (the log's tile paths, `tile/0/x001/234.p/5`), and the handler reads them from the request.
#[derive(Clone, Copy)]
pub struct Route {
    pub method: &'static str,
    pub path: &'static str,
    pub(super) serve: Serve,
    /// The last `{name}` matches every remaining segment.
    pub rest: bool,
}

/// A route is known by its method and path (the table holds each pair once).
impl PartialEq for Route {
    fn eq(&self, other: &Route) -> bool {
        self.method == other.method && self.path == other.path
    }
}

impl Eq for Route {}

impl fmt::Debug for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.method, self.path)
    }
}

const fn r(method: &'static str, path: &'static str, serve: Serve) -> Route {
    Route { method, path, serve, rest: false }
}

/// A route whose last `{name}` takes the rest of the path.
const fn rest(method: &'static str, path: &'static str, serve: Serve) -> Route {
    Route { method, path, serve, rest: true }
}

/// Every route of the management listener. Paths without `/v1` answer without a key.
pub const ROUTES: &[Route] = &[
    r("GET", "/status", Public(|app| Box::pin(status::get(app)))),
    r("GET", "/openapi.json", Public(|_| Box::pin(async { Ok(openapi::openapi_json()) }))),
    r("GET", "/v1/keys", Keyed(|c| Box::pin(keys::list(c.app, c.caller, c.req)))),
    r("POST", "/v1/keys", Keyed(|c| Box::pin(keys::create(c.app, c.caller, c.req)))),
    r("DELETE", "/v1/keys/{id}", Keyed(|c| Box::pin(keys::delete(c.app, c.caller, c.params[0])))),
    r("PATCH", "/v1/keys/{id}/limits", Keyed(|c| Box::pin(keys::set_limits(c.app, c.caller, c.params[0], c.req)))),
    r("GET", "/v1/end-users", Keyed(|c| Box::pin(end_users::list(c.app, c.caller, c.req)))),
    r("GET", "/v1/providers", Keyed(|c| Box::pin(providers::list(c.app, c.caller)))),
    r("PUT", "/v1/providers/{provider}", Keyed(|c| Box::pin(providers::put(c.app, c.caller, c.params[0], c.req)))),
    r("POST", "/v1/providers/{provider}/test", Keyed(|c| Box::pin(providers::test(c.app, c.caller, c.params[0])))),
    r(
        "GET",
        "/v1/providers/{provider}/credentials",
        Keyed(|c| Box::pin(providers::list_named(c.app, c.caller, c.params[0]))),
    ),
    r(
        "PUT",
        "/v1/providers/{provider}/credentials/{name}",
        Keyed(|c| Box::pin(providers::put_named(c.app, c.caller, c.params[0], c.params[1], c.req))),
    ),
    r(
        "DELETE",
        "/v1/providers/{provider}/credentials/{name}",
        Keyed(|c| Box::pin(providers::delete_named(c.app, c.caller, c.params[0], c.params[1]))),
    ),
    r("GET", "/v1/routes", Keyed(|c| Box::pin(model_routes::list(c.app, c.caller)))),
    r("GET", "/v1/routes/{model}", Keyed(|c| Box::pin(model_routes::get(c.app, c.caller, c.params[0])))),
    r("PUT", "/v1/routes/{model}", Keyed(|c| Box::pin(model_routes::put(c.app, c.caller, c.params[0], c.req)))),
    r("DELETE", "/v1/routes/{model}", Keyed(|c| Box::pin(model_routes::delete(c.app, c.caller, c.params[0])))),
    r("GET", "/v1/policies", Keyed(|c| Box::pin(policies::list(c.app, c.caller, c.req)))),
    r("POST", "/v1/policies", Keyed(|c| Box::pin(policies::create(c.app, c.caller, c.req)))),
    r("POST", "/v1/policies/validate", Keyed(|c| Box::pin(policies::validate(c.req)))),
    r("GET", "/v1/policies/{id}", Keyed(|c| Box::pin(policies::get(c.app, c.caller, c.params[0])))),
    r("PUT", "/v1/policies/{id}", Keyed(|c| Box::pin(policies::replace(c.app, c.caller, c.params[0], c.req)))),
    r("DELETE", "/v1/policies/{id}", Keyed(|c| Box::pin(policies::delete(c.app, c.caller, c.params[0])))),
    r("GET", "/v1/receipts", Keyed(|c| Box::pin(receipts::list(c.app, c.caller, c.req)))),
    r("GET", "/v1/receipts/export", Keyed(|c| Box::pin(receipts::export(c.app, c.caller, c.req)))),
    r("GET", "/v1/receipts/{id}", Keyed(|c| Box::pin(receipts::get(c.app, c.caller, c.params[0])))),
    r(
        "GET",
        "/v1/receipts/{id}/verify-chain",
        Keyed(|c| Box::pin(receipts::verify_chain(c.app, c.caller, c.params[0], c.req))),
    ),
    r("GET", "/v1/audit-events", Keyed(|c| Box::pin(audit_events::list(c.app, c.caller, c.req)))),
    r("GET", "/v1/anomalies", Keyed(|c| Box::pin(analytics::anomalies(c.app, c.caller, c.req)))),
    r("GET", "/v1/cache", Keyed(|c| Box::pin(analytics::cache(c.app, c.caller, c.req)))),
    r("GET", "/v1/latency", Keyed(|c| Box::pin(analytics::latency(c.app, c.caller, c.req)))),
    r("GET", "/v1/team/teams", Keyed(|c| Box::pin(teams::list(c.app, c.caller, c.req)))),
    r("POST", "/v1/team/teams", Keyed(|c| Box::pin(teams::create(c.app, c.caller, c.req)))),
    r("GET", "/v1/team/teams/{id}", Keyed(|c| Box::pin(teams::get(c.app, c.caller, c.params[0])))),
    r("PATCH", "/v1/team/teams/{id}", Keyed(|c| Box::pin(teams::update(c.app, c.caller, c.params[0], c.req)))),
    r("DELETE", "/v1/team/teams/{id}", Keyed(|c| Box::pin(teams::delete(c.app, c.caller, c.params[0])))),
    r("GET", "/v1/team/members", Keyed(|c| Box::pin(members::list(c.app, c.caller)))),
    r("POST", "/v1/team/members", Keyed(|c| Box::pin(members::create(c.app, c.caller, c.req)))),
    r("PATCH", "/v1/team/members/{id}", Keyed(|c| Box::pin(members::update(c.app, c.caller, c.params[0], c.req)))),
    r("DELETE", "/v1/team/members/{id}", Keyed(|c| Box::pin(members::delete(c.app, c.caller, c.params[0])))),
    r("GET", "/v1/budgets", Keyed(|c| Box::pin(budgets::list(c.app, c.caller, c.req)))),
    r("POST", "/v1/budgets", Keyed(|c| Box::pin(budgets::create(c.app, c.caller, c.req)))),
    r("GET", "/v1/budgets/{id}", Keyed(|c| Box::pin(budgets::get(c.app, c.caller, c.params[0])))),
    r("PATCH", "/v1/budgets/{id}", Keyed(|c| Box::pin(budgets::update(c.app, c.caller, c.params[0], c.req)))),
    r("DELETE", "/v1/budgets/{id}", Keyed(|c| Box::pin(budgets::delete(c.app, c.caller, c.params[0])))),
    r("GET", "/v1/budgets/requests", Keyed(|c| Box::pin(budget_requests::list(c.app, c.caller, c.req)))),
    r("POST", "/v1/budgets/requests", Keyed(|c| Box::pin(budget_requests::create(c.app, c.caller, c.req)))),
    r(
        "POST",
        "/v1/budgets/requests/{id}/approve",
        Keyed(|c| Box::pin(budget_requests::approve(c.app, c.caller, c.params[0]))),
    ),
    r(
        "POST",
        "/v1/budgets/requests/{id}/deny",
        Keyed(|c| Box::pin(budget_requests::deny(c.app, c.caller, c.params[0]))),
    ),
    r(
        "GET",
        "/v1/compliance/attestation",
        Keyed(|c| Box::pin(compliance::attestation::attestation(c.app, c.caller, c.req))),
    ),
    r(
        "GET",
        "/v1/compliance/attestation/receipts/{id}/inclusion",
        Keyed(|c| Box::pin(compliance::attestation::inclusion(c.app, c.caller, c.params[0], c.req))),
    ),
    r(
        "GET",
        "/v1/compliance/evidence-bundle",
        Keyed(|c| Box::pin(compliance::attestation::evidence_bundle(c.app, c.caller, c.req))),
    ),
    r(
        "GET",
        "/v1/compliance/signing-keys",
        Keyed(|c| Box::pin(compliance::signing_keys::signing_keys(c.app, c.caller))),
    ),
    r("GET", "/v1/compliance/packs", Keyed(|c| Box::pin(compliance::packs::list(c.app, c.caller)))),
    r(
        "PUT",
        "/v1/compliance/packs/{framework}",
        Keyed(|c| Box::pin(compliance::packs::put(c.app, c.caller, c.params[0], c.req))),
    ),
    r(
        "DELETE",
        "/v1/compliance/packs/{framework}",
        Keyed(|c| Box::pin(compliance::packs::delete(c.app, c.caller, c.params[0]))),
    ),
    r(
        "GET",
        "/v1/compliance/coverage/{framework}",
        Keyed(|c| Box::pin(compliance::coverage::coverage(c.app, c.caller, c.params[0]))),
    ),
    r(
        "GET",
        "/v1/compliance/coverage/{framework}/controls/{controlId}/receipts",
        Keyed(|c| Box::pin(compliance::coverage::control_receipts(c.app, c.caller, c.params[0], c.params[1], c.req))),
    ),
    r(
        "GET",
        "/v1/compliance/receipts/{id}/controls",
        Keyed(|c| Box::pin(compliance::controls::receipt_controls(c.app, c.caller, c.params[0], c.req))),
    ),
    r("GET", "/v1/prompts", Keyed(|c| Box::pin(prompts::list(c.app, c.caller, c.req)))),
    r("POST", "/v1/prompts", Keyed(|c| Box::pin(prompts::create(c.app, c.caller, c.req)))),
    r("POST", "/v1/prompts/run", Keyed(|c| Box::pin(prompts::run(c.app, c.caller, c.req)))),
    r("GET", "/v1/prompts/{id}", Keyed(|c| Box::pin(prompts::get(c.app, c.caller, c.params[0])))),
    r("GET", "/v1/prompts/{id}/versions", Keyed(|c| Box::pin(prompts::versions(c.app, c.caller, c.params[0])))),
    r(
        "POST",
        "/v1/prompts/{id}/versions",
        Keyed(|c| Box::pin(prompts::add_version(c.app, c.caller, c.params[0], c.req))),
    ),
    r("GET", "/v1/tool-servers", Keyed(|c| Box::pin(tool_servers::list(c.app, c.caller)))),
    r("POST", "/v1/tool-servers", Keyed(|c| Box::pin(tool_servers::create(c.app, c.caller, c.req)))),
    r("DELETE", "/v1/tool-servers/{name}", Keyed(|c| Box::pin(tool_servers::delete(c.app, c.caller, c.params[0])))),
    r("GET", "/v1/webhook-endpoints", Keyed(|c| Box::pin(webhooks::list(c.app, c.caller, c.req)))),
    r("POST", "/v1/webhook-endpoints", Keyed(|c| Box::pin(webhooks::create(c.app, c.caller, c.req)))),
    r("DELETE", "/v1/webhook-endpoints/{id}", Keyed(|c| Box::pin(webhooks::delete(c.app, c.caller, c.params[0])))),
    r(
        "GET",
        "/v1/webhook-endpoints/{id}/deliveries",
        Keyed(|c| Box::pin(webhooks::deliveries(c.app, c.caller, c.params[0], c.req))),
    ),
    r("POST", "/v1/billing/checkout", Keyed(|c| Box::pin(billing::checkout(c.app, c.caller, c.req)))),
    r("GET", "/v1/log/checkpoint", Keyed(|c| Box::pin(log::checkpoint(c.app, c.caller)))),
    r("GET", "/v1/log/checkpoints", Keyed(|c| Box::pin(log::checkpoints(c.app, c.caller, c.req)))),
    r("GET", "/v1/log/timestamps", Keyed(|c| Box::pin(log::timestamps(c.app, c.caller, c.req)))),
    r("GET", "/v1/log/verifier-keys", Keyed(|c| Box::pin(log::verifier_keys(c.app, c.caller)))),
    r("GET", "/v1/log/inclusion", Keyed(|c| Box::pin(log::inclusion(c.app, c.caller, c.req)))),
    r("GET", "/v1/log/consistency", Keyed(|c| Box::pin(log::consistency(c.app, c.caller, c.req)))),
    rest("GET", "/v1/log/tile/{tilePath}", Keyed(|c| Box::pin(log::tile(c.app, c.caller, c.req)))),
    r("GET", "/v1/log/retention", Keyed(|c| Box::pin(retention::get(c.app, c.caller)))),
    r("PUT", "/v1/log/retention", Keyed(|c| Box::pin(retention::put(c.app, c.caller, c.req)))),
    r("GET", "/v1/log/holds", Keyed(|c| Box::pin(retention::list_holds(c.app, c.caller, c.req)))),
    r("POST", "/v1/log/holds", Keyed(|c| Box::pin(retention::create_hold(c.app, c.caller, c.req)))),
    r("DELETE", "/v1/log/holds/{id}", Keyed(|c| Box::pin(retention::delete_hold(c.app, c.caller, c.params[0])))),
];

/// The paths an auditor key may `GET` (docs/log.md §8): receipts, the log, compliance
/// evidence, analytics and audit events. Everything else answers it 403.
const AUDITOR_READS: &[&str] =
    &["/v1/receipts", "/v1/log/", "/v1/compliance/", "/v1/anomalies", "/v1/cache", "/v1/latency", "/v1/audit-events"];

/// Whether an auditor key may call `route`.
pub fn auditor_may(route: &Route) -> bool {
    route.method == "GET" && AUDITOR_READS.iter().any(|p| route.path.starts_with(p))
}

/// Routes that take a body by `POST` but change nothing (a policy checked as it is typed): not
/// writes, so no admin receipt records them (docs/log.md §8 records writes and evidence reads).
const READS_BY_POST: &[(&str, &str)] = &[("POST", "/v1/policies/validate")];

/// The action an `admin` receipt names (docs/log.md §8: `<resource>.<verb>`, the resource as
/// the route names it) for every write and every evidence read; a unit test holds that every
/// write has one.
const ACTIONS: &[(&str, &str, &str)] = &[
    ("POST", "/v1/keys", "keys.create"),
    ("DELETE", "/v1/keys/{id}", "keys.delete"),
    ("PATCH", "/v1/keys/{id}/limits", "keys.update"),
    ("PUT", "/v1/providers/{provider}", "providers.update"),
    ("POST", "/v1/providers/{provider}/test", "providers.test"),
    ("PUT", "/v1/providers/{provider}/credentials/{name}", "credentials.update"),
    ("DELETE", "/v1/providers/{provider}/credentials/{name}", "credentials.delete"),
    ("PUT", "/v1/routes/{model}", "routes.update"),
    ("DELETE", "/v1/routes/{model}", "routes.delete"),
    ("POST", "/v1/policies", "policies.create"),
    ("PUT", "/v1/policies/{id}", "policies.update"),
    ("DELETE", "/v1/policies/{id}", "policies.delete"),
    ("GET", "/v1/receipts/export", "receipts.export"),
    ("POST", "/v1/team/teams", "teams.create"),
    ("PATCH", "/v1/team/teams/{id}", "teams.update"),
    ("DELETE", "/v1/team/teams/{id}", "teams.delete"),
    ("POST", "/v1/team/members", "members.create"),
    ("PATCH", "/v1/team/members/{id}", "members.update"),
    ("DELETE", "/v1/team/members/{id}", "members.delete"),
    ("POST", "/v1/budgets", "budgets.create"),
    ("PATCH", "/v1/budgets/{id}", "budgets.update"),
    ("DELETE", "/v1/budgets/{id}", "budgets.delete"),
    ("POST", "/v1/budgets/requests", "budget-requests.create"),
    ("POST", "/v1/budgets/requests/{id}/approve", "budget-requests.approve"),
    ("POST", "/v1/budgets/requests/{id}/deny", "budget-requests.deny"),
    ("GET", "/v1/compliance/attestation", "compliance.attestation"),
    ("GET", "/v1/compliance/evidence-bundle", "compliance.evidence-bundle"),
    ("PUT", "/v1/compliance/packs/{framework}", "packs.update"),
    ("DELETE", "/v1/compliance/packs/{framework}", "packs.delete"),
    ("POST", "/v1/prompts", "prompts.create"),
    ("POST", "/v1/prompts/run", "prompts.run"),
    ("POST", "/v1/prompts/{id}/versions", "prompts.update"),
    ("POST", "/v1/tool-servers", "tool-servers.create"),
    ("DELETE", "/v1/tool-servers/{name}", "tool-servers.delete"),
    ("POST", "/v1/webhook-endpoints", "webhook-endpoints.create"),
    ("DELETE", "/v1/webhook-endpoints/{id}", "webhook-endpoints.delete"),
    ("POST", "/v1/billing/checkout", "billing.checkout"),
    ("PUT", "/v1/log/retention", "retention.update"),
    ("POST", "/v1/log/holds", "holds.create"),
    ("DELETE", "/v1/log/holds/{id}", "holds.delete"),
];

/// The action of `route` when a call of it is recorded as an `admin` receipt.
pub fn action(route: &Route) -> Option<&'static str> {
    ACTIONS.iter().find(|(m, p, _)| *m == route.method && *p == route.path).map(|&(_, _, a)| a)
}

/// Whether `route` changes something: every method but `GET`, except [`READS_BY_POST`].
pub fn is_write(route: &Route) -> bool {
    route.method != "GET" && !READS_BY_POST.iter().any(|(m, p)| *m == route.method && *p == route.path)
}

/// The outcome of looking a request up.
#[derive(Debug, PartialEq, Eq)]
pub enum Found<'a> {
    /// The route and the values of its `{...}` segments, in order.
    Route(&'static Route, Vec<&'a str>),
    /// The path exists, not with this method.
    MethodNotAllowed,
    NotFound,
}

/// How many literal segments `route`'s template has when it matches `segments`, else None.
fn literals(route: &Route, segments: &[&str]) -> Option<usize> {
    let parts: Vec<&str> = route.path.trim_start_matches('/').split('/').collect();
    let fits = if route.rest { segments.len() >= parts.len() } else { segments.len() == parts.len() };
    if !fits {
        return None;
    }
    let mut n = 0;
    for (p, s) in parts.iter().zip(segments) {
        if p.starts_with('{') {
            continue;
        }
        if p != s {
            return None;
        }
        n += 1;
    }
    Some(n)
}

/// The route for `method` on `segments`. The template with the most literal segments wins
/// (`/v1/receipts/export` over `/v1/receipts/{id}`), whatever the method; only then is the
/// method checked, so `PATCH /v1/budgets/requests` is 405, not a budget called `requests`.
pub fn find<'a>(method: &str, segments: &[&'a str]) -> Found<'a> {
    let best = ROUTES.iter().filter_map(|r| literals(r, segments).map(|n| (n, r.path))).max_by_key(|(n, _)| *n);
    let Some((_, path)) = best else { return Found::NotFound };
    let Some(route) = ROUTES.iter().find(|r| r.path == path && r.method == method) else {
        return Found::MethodNotAllowed;
    };
    let parts = path.trim_start_matches('/').split('/');
    let params = parts.zip(segments).filter(|(p, _)| p.starts_with('{')).map(|(_, s)| *s).collect();
    Found::Route(route, params)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The path template of the route found, and the values of its `{...}` segments.
    fn op(method: &str, path: &str) -> Option<(&'static str, Vec<String>)> {
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        match find(method, &segs) {
            Found::Route(r, p) => Some((r.path, p.into_iter().map(String::from).collect())),
            _ => None,
        }
    }

    #[test]
    fn literal_segments_win_over_parameters() {
        assert_eq!(op("GET", "/v1/receipts/export"), Some(("/v1/receipts/export", vec![])));
        assert_eq!(op("GET", "/v1/receipts/r1"), Some(("/v1/receipts/{id}", vec!["r1".into()])));
        assert_eq!(op("GET", "/v1/budgets/requests"), Some(("/v1/budgets/requests", vec![])));
        assert_eq!(
            op("POST", "/v1/budgets/requests/q/deny"),
            Some(("/v1/budgets/requests/{id}/deny", vec!["q".into()]))
        );
        let segs = ["v1", "budgets", "requests"];
        assert_eq!(find("PATCH", &segs), Found::MethodNotAllowed);
        assert_eq!(find("GET", &["v1", "nope"]), Found::NotFound);
        assert_eq!(
            op("GET", "/v1/compliance/coverage/f/controls/f:c/receipts"),
            Some(("/v1/compliance/coverage/{framework}/controls/{controlId}/receipts", vec!["f".into(), "f:c".into()]))
        );
    }

    /// Every write, and only a route of the table, names an admin action; no two share one.
    #[test]
    fn every_write_names_its_admin_action() {
        for route in ROUTES.iter().filter(|r| is_write(r)) {
            assert!(super::action(route).is_some(), "{route:?} has no admin action");
        }
        for (m, p) in READS_BY_POST {
            let route = ROUTES.iter().find(|r| r.method == *m && r.path == *p).expect("a route of the table");
            assert!(super::action(route).is_none(), "{route:?} changes nothing: no admin action");
        }
        for (m, p, a) in super::ACTIONS {
            assert!(ROUTES.iter().any(|r| r.method == *m && r.path == *p), "{m} {p} ({a}) is not a route");
            assert_eq!(super::ACTIONS.iter().filter(|x| x.2 == *a).count(), 1, "{a} twice");
        }
    }

    #[test]
    fn every_route_is_reachable_and_listed_once() {
        for (i, r) in ROUTES.iter().enumerate() {
            assert!(!ROUTES[..i].iter().any(|o| o.method == r.method && o.path == r.path), "{r:?} twice");
            let path = r.path.replace('{', "x").replace('}', "");
            assert_eq!(op(r.method, &path).map(|(p, _)| p), Some(r.path), "{r:?} is shadowed");
        }
    }

    /// `/v1` paths need a key; the others answer without one.
    #[test]
    fn only_paths_outside_v1_are_public() {
        for r in ROUTES {
            let public = matches!(r.serve, Serve::Public(_));
            assert_eq!(public, !r.path.starts_with("/v1/"), "{r:?}");
        }
    }
}
