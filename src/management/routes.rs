//! The management listener's route table: the one list of what it serves. The router looks
//! every request up here, and `tests/openapi.rs` compares this table with `/openapi.json` both
//! ways, so a route cannot be served without being documented (and fuzzed), nor documented
//! without being served.

/// What a route does; [`super::ManagementApp::route`] maps each to its handler. A variant that
/// no [`ROUTES`] entry names is never constructed, which the dead-code lint (`-D warnings`) turns
/// into a build error: an operation cannot be wired up without a table entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Status,
    OpenApi,
    KeysList,
    KeyCreate,
    KeyRevoke,
    KeyLimits,
    ProvidersList,
    ProviderPut,
    ProviderTest,
    PoliciesList,
    PolicyCreate,
    PolicyGet,
    PolicyReplace,
    PolicyDelete,
    ReceiptsList,
    ReceiptsExport,
    ReceiptGet,
    ReceiptVerifyChain,
    Anomalies,
    Cache,
    TeamsList,
    TeamCreate,
    TeamGet,
    TeamUpdate,
    TeamDelete,
    MembersList,
    MemberCreate,
    MemberUpdate,
    MemberDelete,
    BudgetsList,
    BudgetCreate,
    BudgetGet,
    BudgetUpdate,
    BudgetDelete,
    BudgetRequestsList,
    BudgetRequestCreate,
    BudgetRequestApprove,
    BudgetRequestDeny,
    Attestation,
    Inclusion,
    EvidenceBundle,
    SigningKeys,
    PacksList,
    PackPut,
    PackDelete,
    Coverage,
    ControlReceipts,
    ReceiptControls,
    PromptsList,
    PromptCreate,
    PromptGet,
    PromptVersionsList,
    PromptVersionCreate,
    PromptRun,
    ToolServersList,
    ToolServerCreate,
    ToolServerDelete,
    WebhooksList,
    WebhookCreate,
    WebhookDelete,
    BillingCheckout,
}

/// One method on one path template. `{name}` matches one path segment (percent-decoded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub method: &'static str,
    pub path: &'static str,
    pub op: Op,
}

const fn r(method: &'static str, path: &'static str, op: Op) -> Route {
    Route { method, path, op }
}

/// Every route of the management listener. Paths without `/v1` answer without a key.
pub const ROUTES: &[Route] = &[
    r("GET", "/status", Op::Status),
    r("GET", "/openapi.json", Op::OpenApi),
    r("GET", "/v1/keys", Op::KeysList),
    r("POST", "/v1/keys", Op::KeyCreate),
    r("DELETE", "/v1/keys/{id}", Op::KeyRevoke),
    r("PATCH", "/v1/keys/{id}/limits", Op::KeyLimits),
    r("GET", "/v1/providers", Op::ProvidersList),
    r("PUT", "/v1/providers/{provider}", Op::ProviderPut),
    r("POST", "/v1/providers/{provider}/test", Op::ProviderTest),
    r("GET", "/v1/policies", Op::PoliciesList),
    r("POST", "/v1/policies", Op::PolicyCreate),
    r("GET", "/v1/policies/{id}", Op::PolicyGet),
    r("PUT", "/v1/policies/{id}", Op::PolicyReplace),
    r("DELETE", "/v1/policies/{id}", Op::PolicyDelete),
    r("GET", "/v1/receipts", Op::ReceiptsList),
    r("GET", "/v1/receipts/export", Op::ReceiptsExport),
    r("GET", "/v1/receipts/{id}", Op::ReceiptGet),
    r("GET", "/v1/receipts/{id}/verify-chain", Op::ReceiptVerifyChain),
    r("GET", "/v1/anomalies", Op::Anomalies),
    r("GET", "/v1/cache", Op::Cache),
    r("GET", "/v1/team/teams", Op::TeamsList),
    r("POST", "/v1/team/teams", Op::TeamCreate),
    r("GET", "/v1/team/teams/{id}", Op::TeamGet),
    r("PATCH", "/v1/team/teams/{id}", Op::TeamUpdate),
    r("DELETE", "/v1/team/teams/{id}", Op::TeamDelete),
    r("GET", "/v1/team/members", Op::MembersList),
    r("POST", "/v1/team/members", Op::MemberCreate),
    r("PATCH", "/v1/team/members/{id}", Op::MemberUpdate),
    r("DELETE", "/v1/team/members/{id}", Op::MemberDelete),
    r("GET", "/v1/budgets", Op::BudgetsList),
    r("POST", "/v1/budgets", Op::BudgetCreate),
    r("GET", "/v1/budgets/{id}", Op::BudgetGet),
    r("PATCH", "/v1/budgets/{id}", Op::BudgetUpdate),
    r("DELETE", "/v1/budgets/{id}", Op::BudgetDelete),
    r("GET", "/v1/budgets/requests", Op::BudgetRequestsList),
    r("POST", "/v1/budgets/requests", Op::BudgetRequestCreate),
    r("POST", "/v1/budgets/requests/{id}/approve", Op::BudgetRequestApprove),
    r("POST", "/v1/budgets/requests/{id}/deny", Op::BudgetRequestDeny),
    r("GET", "/v1/compliance/attestation", Op::Attestation),
    r("GET", "/v1/compliance/attestation/receipts/{id}/inclusion", Op::Inclusion),
    r("GET", "/v1/compliance/evidence-bundle", Op::EvidenceBundle),
    r("GET", "/v1/compliance/signing-keys", Op::SigningKeys),
    r("GET", "/v1/compliance/packs", Op::PacksList),
    r("PUT", "/v1/compliance/packs/{framework}", Op::PackPut),
    r("DELETE", "/v1/compliance/packs/{framework}", Op::PackDelete),
    r("GET", "/v1/compliance/coverage/{framework}", Op::Coverage),
    r("GET", "/v1/compliance/coverage/{framework}/controls/{controlId}/receipts", Op::ControlReceipts),
    r("GET", "/v1/compliance/receipts/{id}/controls", Op::ReceiptControls),
    r("GET", "/v1/prompts", Op::PromptsList),
    r("POST", "/v1/prompts", Op::PromptCreate),
    r("POST", "/v1/prompts/run", Op::PromptRun),
    r("GET", "/v1/prompts/{id}", Op::PromptGet),
    r("GET", "/v1/prompts/{id}/versions", Op::PromptVersionsList),
    r("POST", "/v1/prompts/{id}/versions", Op::PromptVersionCreate),
    r("GET", "/v1/tool-servers", Op::ToolServersList),
    r("POST", "/v1/tool-servers", Op::ToolServerCreate),
    r("DELETE", "/v1/tool-servers/{name}", Op::ToolServerDelete),
    r("GET", "/v1/webhook-endpoints", Op::WebhooksList),
    r("POST", "/v1/webhook-endpoints", Op::WebhookCreate),
    r("DELETE", "/v1/webhook-endpoints/{id}", Op::WebhookDelete),
    r("POST", "/v1/billing/checkout", Op::BillingCheckout),
];

/// The outcome of looking a request up.
#[derive(Debug, PartialEq, Eq)]
pub enum Found<'a> {
    /// The route and the values of its `{...}` segments, in order.
    Route(&'static Route, Vec<&'a str>),
    /// The path exists, not with this method.
    MethodNotAllowed,
    NotFound,
}

/// How many literal segments `template` has when it matches `segments`, else None.
fn literals(template: &str, segments: &[&str]) -> Option<usize> {
    let parts: Vec<&str> = template.trim_start_matches('/').split('/').collect();
    if parts.len() != segments.len() {
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
    let best = ROUTES.iter().filter_map(|r| literals(r.path, segments).map(|n| (n, r.path))).max_by_key(|(n, _)| *n);
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

    fn op(method: &str, path: &str) -> Option<(Op, Vec<String>)> {
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        match find(method, &segs) {
            Found::Route(r, p) => Some((r.op, p.into_iter().map(String::from).collect())),
            _ => None,
        }
    }

    #[test]
    fn literal_segments_win_over_parameters() {
        assert_eq!(op("GET", "/v1/receipts/export"), Some((Op::ReceiptsExport, vec![])));
        assert_eq!(op("GET", "/v1/receipts/r1"), Some((Op::ReceiptGet, vec!["r1".into()])));
        assert_eq!(op("GET", "/v1/budgets/requests"), Some((Op::BudgetRequestsList, vec![])));
        assert_eq!(op("POST", "/v1/budgets/requests/q/deny"), Some((Op::BudgetRequestDeny, vec!["q".into()])));
        let segs = ["v1", "budgets", "requests"];
        assert_eq!(find("PATCH", &segs), Found::MethodNotAllowed);
        assert_eq!(find("GET", &["v1", "nope"]), Found::NotFound);
        assert_eq!(
            op("GET", "/v1/compliance/coverage/f/controls/f:c/receipts"),
            Some((Op::ControlReceipts, vec!["f".into(), "f:c".into()]))
        );
    }

    #[test]
    fn every_route_is_reachable_and_listed_once() {
        for (i, r) in ROUTES.iter().enumerate() {
            assert!(!ROUTES[..i].iter().any(|o| o.method == r.method && o.path == r.path), "{r:?} twice");
            assert!(!ROUTES[..i].iter().any(|o| o.op == r.op), "{:?} on two routes", r.op);
            let path = r.path.replace('{', "x").replace('}', "");
            assert_eq!(op(r.method, &path).map(|(o, _)| o), Some(r.op), "{r:?} is shadowed");
        }
    }
}
