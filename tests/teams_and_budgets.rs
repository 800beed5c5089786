//! Teams, members, budgets, budget requests and spend, over real sockets against the built
//! binary, on every database backend.

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{backends, Backend, Gateway, Resp};

fn create(g: &Gateway, key: &str, path: &str, body: Value) -> Value {
    let r = g.mgmt("POST", path, Some(key), Some(&body));
    assert_eq!(r.status, 201, "POST {path} {body}: {}", r.text());
    r.json()
}

fn id(v: &Value) -> String {
    v["id"].as_str().expect("an id").to_string()
}

/// A 400 `invalid_request` envelope whose message names `field`.
#[track_caller]
fn assert_400_naming(r: &Resp, field: &str) {
    assert_eq!(r.status, 400, "{}", r.text());
    let v = r.json();
    assert_eq!(v["error"]["type"], "invalid_request");
    assert_eq!(v["error"]["code"], 400);
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains(&format!("`{field}`")), "message should name `{field}`: {msg}");
}

#[track_caller]
fn assert_error(r: &Resp, status: u16, kind: &str) {
    assert_eq!(r.status, status, "{}", r.text());
    assert_eq!(r.json()["error"]["type"], kind, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], status);
}

#[test]
fn teams_crud_names_pools_and_deletion() {
    for b in backends() {
        let g = Gateway::start(&b, &[]);
        let m = g.key.as_str();
        let (_, dev) = g.new_key(m, &json!({"label": "dev"}));

        let eng = create(&g, m, "/v1/team/teams", json!({"name": "eng", "budgetPoolUsd": 100.5}));
        assert_eq!(eng["name"], "eng");
        assert_eq!(eng["tenantId"], g.tenant_id.as_str());
        assert_eq!(eng["budgetPoolUsd"], 100.5);
        assert!(eng["createdAt"].is_string() && eng["updatedAt"].is_string());
        assert_eq!(uuid::Uuid::parse_str(eng["id"].as_str().unwrap()).unwrap().get_version_num(), 7);
        let ops = create(&g, m, "/v1/team/teams", json!({"name": "ops"}));
        assert!(ops.get("budgetPoolUsd").is_some_and(Value::is_null), "budgetPoolUsd is always present: {ops}");
        let (eng_id, ops_id) = (id(&eng), id(&ops));

        // Names are unique in the tenant, on create and on rename.
        assert_error(&g.mgmt("POST", "/v1/team/teams", Some(m), Some(&json!({"name": "eng"}))), 409, "conflict");
        let r = g.mgmt("PATCH", &format!("/v1/team/teams/{ops_id}"), Some(m), Some(&json!({"name": "eng"})));
        assert_error(&r, 409, "conflict");

        // Bad bodies name the field.
        assert_400_naming(&g.mgmt("POST", "/v1/team/teams", Some(m), Some(&json!({}))), "name");
        assert_400_naming(&g.mgmt("POST", "/v1/team/teams", Some(m), Some(&json!({"name": "  "}))), "name");
        assert_400_naming(&g.mgmt("POST", "/v1/team/teams", Some(m), Some(&json!({"name": 5}))), "name");
        let r = g.mgmt("POST", "/v1/team/teams", Some(m), Some(&json!({"name": "x", "budgetPoolUsd": -1})));
        assert_400_naming(&r, "budgetPoolUsd");
        let r = g.mgmt("POST", "/v1/team/teams", Some(m), Some(&json!({"name": "x", "budgetPoolUsd": "10"})));
        assert_400_naming(&r, "budgetPoolUsd");
        assert_400_naming(&g.mgmt("POST", "/v1/team/teams", Some(m), Some(&json!({"name": "x", "color": 1}))), "color");
        let r = g.mgmt("PATCH", &format!("/v1/team/teams/{eng_id}"), Some(m), Some(&json!({"budgetPoolUsd": 1})));
        assert_400_naming(&r, "name");

        // PATCH: name required; an omitted pool is unchanged, null clears it.
        let path = format!("/v1/team/teams/{eng_id}");
        let r = g.mgmt("PATCH", &path, Some(m), Some(&json!({"name": "engineering"})));
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!((r.json()["name"].clone(), r.json()["budgetPoolUsd"].clone()), (json!("engineering"), json!(100.5)));
        assert_eq!(r.json()["createdAt"], eng["createdAt"]);
        let r = g.mgmt("PATCH", &path, Some(m), Some(&json!({"name": "engineering", "budgetPoolUsd": 7})));
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["budgetPoolUsd"], 7.0);
        let r = g.mgmt("PATCH", &path, Some(m), Some(&json!({"name": "engineering", "budgetPoolUsd": null})));
        assert_eq!(r.status, 200);
        assert!(r.json()["budgetPoolUsd"].is_null());
        let got = g.mgmt("GET", &path, Some(&dev), None);
        assert_eq!(got.status, 200);
        assert_eq!(got.json()["name"], "engineering");
        assert!(got.json()["budgetPoolUsd"].is_null());
        // The old name is free again.
        create(&g, m, "/v1/team/teams", json!({"name": "eng"}));

        // Lists page by cursor in creation order; any key may read.
        let p1 = g.mgmt("GET", "/v1/team/teams?limit=2", Some(&dev), None).json();
        let names: Vec<&str> = p1["data"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(names, vec!["engineering", "ops"]);
        let cursor = p1["nextCursor"].as_str().unwrap();
        let p2 = g.mgmt("GET", &format!("/v1/team/teams?limit=2&cursor={cursor}"), Some(m), None).json();
        assert_eq!(p2["data"].as_array().unwrap().len(), 1);
        assert_eq!(p2["data"][0]["name"], "eng");
        assert!(p2["nextCursor"].is_null());
        assert_400_naming(&g.mgmt("GET", "/v1/team/teams?limit=0", Some(m), None), "limit");

        // Writes need a manager.
        for r in [
            g.mgmt("POST", "/v1/team/teams", Some(&dev), Some(&json!({"name": "devs"}))),
            g.mgmt("PATCH", &path, Some(&dev), Some(&json!({"name": "devs"}))),
            g.mgmt("DELETE", &path, Some(&dev), None),
        ] {
            assert_error(&r, 403, "forbidden");
        }

        // A key can join a team of its tenant; a team with keys cannot be deleted.
        // A NULL money bind must not break later non-NULL ones on the same pooled connection
        // (sqlx 0.9 Any binds a NULL f64 as float4 on PostgreSQL): cycle every connection.
        for i in 0..12 {
            g.new_key(m, &json!({"label": format!("no-budget-{i}")}));
            create(&g, m, "/v1/team/teams", json!({"name": format!("no-pool-{i}")}));
        }
        for i in 0..12 {
            g.new_key(m, &json!({"label": format!("budget-{i}"), "budgetUsd": i}));
            create(&g, m, "/v1/team/teams", json!({"name": format!("pool-{i}"), "budgetPoolUsd": i}));
        }
        let (k, _) = g.new_key(m, &json!({"label": "in-team", "teamId": eng_id, "budgetUsd": 2.5}));
        let keys = g.mgmt("GET", "/v1/keys", Some(m), None).json();
        let rec = keys["data"].as_array().unwrap().iter().find(|x| x["id"] == k.as_str()).unwrap().clone();
        assert_eq!(rec["teamId"], eng_id.as_str());
        assert_eq!(rec["budgetUsd"], 2.5);
        assert_400_naming(&g.mgmt("POST", "/v1/keys", Some(m), Some(&json!({"teamId": "nope"}))), "teamId");
        let r = g.mgmt("DELETE", &path, Some(m), None);
        assert_error(&r, 409, "conflict");
        assert!(r.json()["error"]["message"].as_str().unwrap().contains("key"), "{}", r.text());
        assert_eq!(g.mgmt("DELETE", &format!("/v1/keys/{k}"), Some(m), None).status, 204);
        assert_eq!(g.mgmt("DELETE", &path, Some(m), None).status, 204);
        assert_error(&g.mgmt("GET", &path, Some(m), None), 404, "not_found");
        assert_error(&g.mgmt("DELETE", &path, Some(m), None), 404, "not_found");
        assert_error(&g.mgmt("PATCH", &path, Some(m), Some(&json!({"name": "z"}))), 404, "not_found");
        assert_eq!(g.mgmt("DELETE", &format!("/v1/team/teams/{ops_id}"), Some(m), None).status, 204);
    }
}

#[test]
fn members_crud_and_validation() {
    for b in backends() {
        let g = Gateway::start(&b, &[]);
        let m = g.key.as_str();
        let (_, dev) = g.new_key(m, &json!({"label": "dev"}));
        let team = id(&create(&g, m, "/v1/team/teams", json!({"name": "eng"})));

        let ada = create(
            &g,
            m,
            "/v1/team/members",
            json!({"email": "ada@example.com", "role": "developer", "name": "Ada", "idpUserId": "okta|1",
                   "imageUrl": "https://img.example.com/ada.png", "teamId": team}),
        );
        assert_eq!(ada["email"], "ada@example.com");
        assert_eq!(ada["role"], "developer");
        assert_eq!(ada["name"], "Ada");
        assert_eq!(ada["idpUserId"], "okta|1");
        assert_eq!(ada["imageUrl"], "https://img.example.com/ada.png");
        assert_eq!(ada["teamId"], team.as_str());
        assert!(ada["joinedAt"].is_string());
        let bob = create(&g, m, "/v1/team/members", json!({"email": "bob@example.org", "role": "viewer"}));
        assert_eq!((bob["name"].clone(), bob["idpUserId"].clone()), (json!(""), json!("")));
        assert!(bob["teamId"].is_null());
        for role in ["owner", "manager"] {
            create(&g, m, "/v1/team/members", json!({"email": format!("{role}@example.org"), "role": role}));
        }

        // The list is a plain array, oldest first, readable by any key.
        let r = g.mgmt("GET", "/v1/team/members", Some(&dev), None);
        assert_eq!(r.status, 200);
        let emails: Vec<String> =
            r.json().as_array().unwrap().iter().map(|x| x["email"].as_str().unwrap().to_string()).collect();
        assert_eq!(emails, vec!["ada@example.com", "bob@example.org", "owner@example.org", "manager@example.org"]);

        // Bad bodies.
        let post = |body: Value| g.mgmt("POST", "/v1/team/members", Some(m), Some(&body));
        assert_400_naming(&post(json!({"email": "c@example.com", "role": "boss"})), "role");
        assert_400_naming(&post(json!({"email": "c@example.com"})), "role");
        assert_400_naming(&post(json!({"email": "not-an-email", "role": "viewer"})), "email");
        assert_400_naming(&post(json!({"email": "a@b", "role": "viewer"})), "email");
        assert_400_naming(&post(json!({"role": "viewer"})), "email");
        assert_400_naming(&post(json!({"email": "c@example.com", "role": "viewer", "teamId": "nope"})), "teamId");
        assert_400_naming(&post(json!({"email": "c@example.com", "role": "viewer", "age": 3})), "age");

        // PATCH changes only what it names; teamId null leaves the team.
        let path = format!("/v1/team/members/{}", id(&ada));
        let r = g.mgmt("PATCH", &path, Some(m), Some(&json!({"role": "manager", "teamId": null})));
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        assert_eq!(
            (v["role"].clone(), v["name"].clone(), v["email"].clone()),
            (json!("manager"), json!("Ada"), json!("ada@example.com"))
        );
        assert!(v["teamId"].is_null());
        assert_eq!(v["joinedAt"], ada["joinedAt"]);
        assert_400_naming(&g.mgmt("PATCH", &path, Some(m), Some(&json!({"role": "king"}))), "role");
        assert_400_naming(&g.mgmt("PATCH", &path, Some(m), Some(&json!({"email": "x"}))), "email");
        let r = g.mgmt("PATCH", &path, Some(m), Some(&json!({"teamId": team, "name": "Ada L."})));
        assert_eq!((r.json()["teamId"].clone(), r.json()["name"].clone()), (json!(team), json!("Ada L.")));

        // Writes need a manager.
        for r in [
            g.mgmt("POST", "/v1/team/members", Some(&dev), Some(&json!({"email": "d@example.com", "role": "viewer"}))),
            g.mgmt("PATCH", &path, Some(&dev), Some(&json!({"role": "owner"}))),
            g.mgmt("DELETE", &path, Some(&dev), None),
        ] {
            assert_error(&r, 403, "forbidden");
        }

        // Deleting the team keeps its members, without the team.
        assert_eq!(g.mgmt("DELETE", &format!("/v1/team/teams/{team}"), Some(m), None).status, 204);
        let list = g.mgmt("GET", "/v1/team/members", Some(m), None).json();
        assert!(list[0]["teamId"].is_null(), "{list}");

        assert_eq!(g.mgmt("DELETE", &path, Some(m), None).status, 204);
        assert_error(&g.mgmt("DELETE", &path, Some(m), None), 404, "not_found");
        assert_error(&g.mgmt("PATCH", &path, Some(m), Some(&json!({"name": "x"}))), 404, "not_found");
        assert_eq!(g.mgmt("GET", "/v1/team/members", Some(m), None).json().as_array().unwrap().len(), 3);
    }
}

/// The first instant of the next UTC month, as the API writes it.
fn next_month() -> String {
    use chrono::Datelike;
    let now = chrono::Utc::now();
    let (y, mo) = if now.month() == 12 { (now.year() + 1, 1) } else { (now.year(), now.month() + 1) };
    format!("{y:04}-{mo:02}-01T00:00:00.000Z")
}

#[test]
fn budgets_crud_and_validation() {
    for b in backends() {
        let g = Gateway::start(&b, &[]);
        let m = g.key.as_str();
        let (key_id, dev) = g.new_key(m, &json!({"label": "dev"}));
        let team = id(&create(&g, m, "/v1/team/teams", json!({"name": "eng"})));

        let kb = create(
            &g,
            m,
            "/v1/budgets",
            json!({"scope": "key", "scopeId": key_id, "amountUsd": 25, "period": "monthly"}),
        );
        assert_eq!(kb["scope"], "key");
        assert_eq!(kb["scopeId"], key_id.as_str());
        assert_eq!(kb["amountUsd"], 25.0);
        assert_eq!(kb["period"], "monthly");
        assert_eq!(kb["spentUsd"], 0.0);
        assert_eq!(kb["remainingUsd"], 25.0);
        assert_eq!(kb["resetsAt"], next_month().as_str());
        assert!(kb["createdAt"].is_string() && kb["updatedAt"].is_string());
        let tb =
            create(&g, m, "/v1/budgets", json!({"scope": "team", "scopeId": team, "amountUsd": 0, "period": "total"}));
        assert!(tb["resetsAt"].is_null());
        assert_eq!(tb["remainingUsd"], 0.0);
        let nb = create(&g, m, "/v1/budgets", json!({"scope": "tenant", "amountUsd": 1000.25, "period": "monthly"}));
        assert_eq!(nb["scopeId"], g.tenant_id.as_str());
        let explicit = json!({"scope": "tenant", "scopeId": g.tenant_id, "amountUsd": 5, "period": "total"});
        let explicit = create(&g, m, "/v1/budgets", explicit);

        // Validation names the field.
        let post = |body: Value| g.mgmt("POST", "/v1/budgets", Some(m), Some(&body));
        assert_400_naming(&post(json!({"scope": "key", "amountUsd": 1, "period": "total"})), "scopeId");
        assert_400_naming(
            &post(json!({"scope": "key", "scopeId": "nope", "amountUsd": 1, "period": "total"})),
            "scopeId",
        );
        assert_400_naming(
            &post(json!({"scope": "team", "scopeId": key_id, "amountUsd": 1, "period": "total"})),
            "scopeId",
        );
        assert_400_naming(
            &post(json!({"scope": "tenant", "scopeId": "other", "amountUsd": 1, "period": "total"})),
            "scopeId",
        );
        assert_400_naming(&post(json!({"scope": "galaxy", "amountUsd": 1, "period": "total"})), "scope");
        assert_400_naming(&post(json!({"scope": "tenant", "amountUsd": -1, "period": "total"})), "amountUsd");
        assert_400_naming(&post(json!({"scope": "tenant", "amountUsd": "1", "period": "total"})), "amountUsd");
        assert_400_naming(&post(json!({"scope": "tenant", "period": "total"})), "amountUsd");
        assert_400_naming(&post(json!({"scope": "tenant", "amountUsd": 1, "period": "weekly"})), "period");
        assert_400_naming(&post(json!({"scope": "tenant", "amountUsd": 1, "period": "total", "x": 1})), "x");
        let r = g.mgmt_raw("POST", "/v1/budgets", m, b"{\"scope\": ");
        assert_error(&r, 400, "invalid_request");
        // A revoked key can no longer carry a budget.
        let (gone, _) = g.new_key(m, &json!({"label": "gone"}));
        assert_eq!(g.mgmt("DELETE", &format!("/v1/keys/{gone}"), Some(m), None).status, 204);
        assert_400_naming(
            &post(json!({"scope": "key", "scopeId": gone, "amountUsd": 1, "period": "total"})),
            "scopeId",
        );

        // PATCH: omitted fields stay.
        let path = format!("/v1/budgets/{}", id(&kb));
        let r = g.mgmt("PATCH", &path, Some(m), Some(&json!({"amountUsd": 30})));
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!((r.json()["amountUsd"].clone(), r.json()["period"].clone()), (json!(30.0), json!("monthly")));
        let r = g.mgmt("PATCH", &path, Some(m), Some(&json!({"period": "total"})));
        assert_eq!((r.json()["amountUsd"].clone(), r.json()["period"].clone()), (json!(30.0), json!("total")));
        assert!(r.json()["resetsAt"].is_null());
        assert_400_naming(&g.mgmt("PATCH", &path, Some(m), Some(&json!({"amountUsd": -3}))), "amountUsd");
        assert_400_naming(&g.mgmt("PATCH", &path, Some(m), Some(&json!({"period": "daily"}))), "period");
        assert_400_naming(&g.mgmt("PATCH", &path, Some(m), Some(&json!({"scope": "team"}))), "scope");
        assert_eq!(g.mgmt("GET", &path, Some(&dev), None).json()["amountUsd"], 30.0);

        // List in creation order with a cursor; any key reads.
        let p1 = g.mgmt("GET", "/v1/budgets?limit=3", Some(&dev), None).json();
        let ids: Vec<&str> = p1["data"].as_array().unwrap().iter().map(|x| x["id"].as_str().unwrap()).collect();
        assert_eq!(ids, vec![kb["id"].as_str().unwrap(), tb["id"].as_str().unwrap(), nb["id"].as_str().unwrap()]);
        let next = p1["nextCursor"].as_str().unwrap();
        let p2 = g.mgmt("GET", &format!("/v1/budgets?cursor={next}"), Some(m), None).json();
        assert_eq!(p2["data"][0]["id"], explicit["id"]);
        assert!(p2["nextCursor"].is_null());

        // Writes need a manager.
        for r in [
            g.mgmt(
                "POST",
                "/v1/budgets",
                Some(&dev),
                Some(&json!({"scope": "tenant", "amountUsd": 1, "period": "total"})),
            ),
            g.mgmt("PATCH", &path, Some(&dev), Some(&json!({"amountUsd": 1}))),
            g.mgmt("DELETE", &path, Some(&dev), None),
        ] {
            assert_error(&r, 403, "forbidden");
        }

        // Deleting a team takes its budgets with it.
        assert_eq!(g.mgmt("DELETE", &format!("/v1/team/teams/{team}"), Some(m), None).status, 204);
        assert_error(&g.mgmt("GET", &format!("/v1/budgets/{}", id(&tb)), Some(m), None), 404, "not_found");

        assert_eq!(g.mgmt("DELETE", &path, Some(m), None).status, 204);
        for r in [
            g.mgmt("GET", &path, Some(m), None),
            g.mgmt("PATCH", &path, Some(m), Some(&json!({"amountUsd": 1}))),
            g.mgmt("DELETE", &path, Some(m), None),
        ] {
            assert_error(&r, 404, "not_found");
        }
        assert_eq!(g.mgmt("GET", "/v1/budgets", Some(m), None).json()["data"].as_array().unwrap().len(), 2);
    }
}

#[test]
fn budget_request_flow() {
    for b in backends() {
        let g = Gateway::start(&b, &[]);
        let m = g.key.as_str();
        let (dev_id, dev) = g.new_key(m, &json!({"label": "dev"}));
        let (_, dev2) = g.new_key(m, &json!({"label": "dev2"}));
        let budget = create(
            &g,
            m,
            "/v1/budgets",
            json!({"scope": "key", "scopeId": dev_id, "amountUsd": 10, "period": "monthly"}),
        );
        let budget_id = id(&budget);

        let r1 = create(
            &g,
            &dev,
            "/v1/budgets/requests",
            json!({"budgetId": budget_id, "amountUsd": 5.5, "reason": "load test"}),
        );
        assert_eq!(r1["budgetId"], budget_id.as_str());
        assert_eq!(r1["amountUsd"], 5.5);
        assert_eq!(r1["reason"], "load test");
        assert_eq!(r1["status"], "pending");
        assert_eq!(r1["requestedBy"], dev_id.as_str());
        assert!(r1["createdAt"].is_string());
        assert!(r1["decidedAt"].is_null() && r1["decidedBy"].is_null());
        let r2 = create(
            &g,
            &dev2,
            "/v1/budgets/requests",
            json!({"budgetId": budget_id, "amountUsd": 100, "reason": "more"}),
        );

        // Bad bodies.
        let post = |body: Value| g.mgmt("POST", "/v1/budgets/requests", Some(&dev), Some(&body));
        assert_400_naming(&post(json!({"budgetId": "nope", "amountUsd": 1, "reason": "x"})), "budgetId");
        assert_400_naming(&post(json!({"budgetId": budget_id, "amountUsd": 0, "reason": "x"})), "amountUsd");
        assert_400_naming(&post(json!({"budgetId": budget_id, "amountUsd": 1, "reason": ""})), "reason");
        assert_400_naming(&post(json!({"budgetId": budget_id, "amountUsd": 1})), "reason");
        assert_400_naming(&post(json!({"amountUsd": 1, "reason": "x"})), "budgetId");

        // A manager sees all of the tenant's requests, others only their own.
        let ids = |key: &str| -> Vec<String> {
            let v = g.mgmt("GET", "/v1/budgets/requests", Some(key), None).json();
            v["data"].as_array().unwrap().iter().map(|x| x["id"].as_str().unwrap().to_string()).collect()
        };
        assert_eq!(ids(m), vec![id(&r1), id(&r2)]);
        assert_eq!(ids(&dev), vec![id(&r1)]);
        assert_eq!(ids(&dev2), vec![id(&r2)]);

        // Only a manager decides.
        let approve = format!("/v1/budgets/requests/{}/approve", id(&r1));
        assert_error(&g.mgmt("POST", &approve, Some(&dev), None), 403, "forbidden");
        assert_error(
            &g.mgmt("POST", &format!("/v1/budgets/requests/{}/deny", id(&r1)), Some(&dev2), None),
            403,
            "forbidden",
        );

        let r = g.mgmt("POST", &approve, Some(m), None);
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        assert_eq!(v["status"], "approved");
        assert!(v["decidedAt"].is_string());
        let manager_id = g.mgmt("GET", "/v1/keys", Some(m), None).json()["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["role"] == "manager")
            .unwrap()["id"]
            .clone();
        assert_eq!(v["decidedBy"], manager_id);
        let raised = g.mgmt("GET", &format!("/v1/budgets/{budget_id}"), Some(m), None).json();
        assert_eq!(raised["amountUsd"], 15.5);
        assert_eq!(raised["remainingUsd"], 15.5);

        // Deciding twice conflicts, whichever way.
        assert_error(&g.mgmt("POST", &approve, Some(m), None), 409, "conflict");
        assert_error(
            &g.mgmt("POST", &format!("/v1/budgets/requests/{}/deny", id(&r1)), Some(m), None),
            409,
            "conflict",
        );

        // Deny leaves the budget alone.
        let deny = format!("/v1/budgets/requests/{}/deny", id(&r2));
        let r = g.mgmt("POST", &deny, Some(m), None);
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["status"], "denied");
        assert_error(&g.mgmt("POST", &deny, Some(m), None), 409, "conflict");
        assert_error(
            &g.mgmt("POST", &format!("/v1/budgets/requests/{}/approve", id(&r2)), Some(m), None),
            409,
            "conflict",
        );
        assert_eq!(g.mgmt("GET", &format!("/v1/budgets/{budget_id}"), Some(m), None).json()["amountUsd"], 15.5);
        let statuses: Vec<Value> = g.mgmt("GET", "/v1/budgets/requests", Some(m), None).json()["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["status"].clone())
            .collect();
        assert_eq!(statuses, vec![json!("approved"), json!("denied")]);

        // A request whose budget was deleted cannot be approved.
        let r3 =
            create(&g, &dev, "/v1/budgets/requests", json!({"budgetId": budget_id, "amountUsd": 1, "reason": "x"}));
        assert_eq!(g.mgmt("DELETE", &format!("/v1/budgets/{budget_id}"), Some(m), None).status, 204);
        let r = g.mgmt("POST", &format!("/v1/budgets/requests/{}/approve", id(&r3)), Some(m), None);
        assert_error(&r, 409, "conflict");
        assert_eq!(ids(&dev).len(), 2, "the failed approval left the request pending, not gone");
        assert_error(&g.mgmt("POST", "/v1/budgets/requests/nope/approve", Some(m), None), 404, "not_found");
    }
}

#[test]
fn another_tenants_ids_answer_404_and_are_refused_in_bodies() {
    for b in backends() {
        let g = Gateway::start(&b, &[]);
        let a = g.key.as_str();
        let (_, bk) = g.create_tenant_live("globex");
        let (b_key_id, _) = g.new_key(&bk, &json!({"label": "b-dev"}));
        let b_team = id(&create(&g, &bk, "/v1/team/teams", json!({"name": "eng"})));
        let b_member = id(&create(&g, &bk, "/v1/team/members", json!({"email": "x@globex.com", "role": "viewer"})));
        let b_budget =
            id(&create(&g, &bk, "/v1/budgets", json!({"scope": "tenant", "amountUsd": 5, "period": "total"})));
        let b_req =
            id(&create(&g, &bk, "/v1/budgets/requests", json!({"budgetId": b_budget, "amountUsd": 1, "reason": "x"})));

        // The same team name is fine in another tenant.
        create(&g, a, "/v1/team/teams", json!({"name": "eng"}));

        for (method, path, body) in [
            ("GET", format!("/v1/team/teams/{b_team}"), None),
            ("PATCH", format!("/v1/team/teams/{b_team}"), Some(json!({"name": "mine"}))),
            ("DELETE", format!("/v1/team/teams/{b_team}"), None),
            ("PATCH", format!("/v1/team/members/{b_member}"), Some(json!({"role": "owner"}))),
            ("DELETE", format!("/v1/team/members/{b_member}"), None),
            ("GET", format!("/v1/budgets/{b_budget}"), None),
            ("PATCH", format!("/v1/budgets/{b_budget}"), Some(json!({"amountUsd": 1000}))),
            ("DELETE", format!("/v1/budgets/{b_budget}"), None),
            ("POST", format!("/v1/budgets/requests/{b_req}/approve"), None),
            ("POST", format!("/v1/budgets/requests/{b_req}/deny"), None),
        ] {
            let r = g.mgmt(method, &path, Some(a), body.as_ref());
            assert_eq!(r.status, 404, "{method} {path}: {}", r.text());
            assert_eq!(r.json()["error"]["type"], "not_found");
        }
        // References in bodies to another tenant's objects are unknown ids.
        assert_400_naming(&g.mgmt("POST", "/v1/keys", Some(a), Some(&json!({"teamId": b_team}))), "teamId");
        let r = g.mgmt(
            "POST",
            "/v1/team/members",
            Some(a),
            Some(&json!({"email": "y@acme.com", "role": "viewer", "teamId": b_team})),
        );
        assert_400_naming(&r, "teamId");
        let r = g.mgmt(
            "POST",
            "/v1/budgets",
            Some(a),
            Some(&json!({"scope": "key", "scopeId": b_key_id, "amountUsd": 1, "period": "total"})),
        );
        assert_400_naming(&r, "scopeId");
        let r = g.mgmt(
            "POST",
            "/v1/budgets",
            Some(a),
            Some(&json!({"scope": "team", "scopeId": b_team, "amountUsd": 1, "period": "total"})),
        );
        assert_400_naming(&r, "scopeId");
        let r = g.mgmt(
            "POST",
            "/v1/budgets/requests",
            Some(a),
            Some(&json!({"budgetId": b_budget, "amountUsd": 1, "reason": "x"})),
        );
        assert_400_naming(&r, "budgetId");

        // Lists show only the caller's tenant, and B's objects are untouched.
        assert_eq!(g.mgmt("GET", "/v1/team/teams", Some(a), None).json()["data"].as_array().unwrap().len(), 1);
        assert_eq!(g.mgmt("GET", "/v1/team/members", Some(a), None).json(), json!([]));
        assert_eq!(g.mgmt("GET", "/v1/budgets", Some(a), None).json()["data"], json!([]));
        assert_eq!(g.mgmt("GET", "/v1/budgets/requests", Some(a), None).json()["data"], json!([]));
        assert_eq!(g.mgmt("GET", &format!("/v1/budgets/{b_budget}"), Some(&bk), None).json()["amountUsd"], 5.0);
        assert_eq!(g.mgmt("GET", &format!("/v1/team/teams/{b_team}"), Some(&bk), None).json()["name"], "eng");
        assert_eq!(g.mgmt("GET", "/v1/budgets/requests", Some(&bk), None).json()["data"][0]["status"], "pending");
    }
}

fn db_url(g: &Gateway, b: &Backend) -> String {
    match b {
        Backend::Sqlite => format!("sqlite://{}", g.dir.join("tollgate.db").display()),
        Backend::Postgres(url) => url.clone(),
    }
}

fn add_spend(url: &str, deltas: Vec<(String, String, String, f64)>) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let store = tollgate::store::Store::connect(url).await.unwrap();
        store
            .run(|pool, _| async move {
                let mut tx = pool.begin().await?;
                tollgate::store::spend::add_in_tx(&mut tx, &deltas).await?;
                tx.commit().await?;
                Ok(())
            })
            .await
            .unwrap();
    });
}

fn spend_rows(url: &str) -> Vec<tollgate::store::spend::SpendRow> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let store = tollgate::store::Store::connect(url).await.unwrap();
        let month = chrono::Utc::now().format("%Y-%m").to_string();
        let mut rows = tollgate::store::spend::current(&store, &["total".to_string(), month]).await.unwrap();
        rows.sort_by(|a, b| (&a.key_id, &a.period).cmp(&(&b.key_id, &b.period)));
        rows
    })
}

/// Spend the receipt writer books in `key_spend` (here: another process writing to the same
/// database) reaches the ledger through the background refresh and shows in budgets and keys.
#[test]
fn spend_in_the_database_reaches_budgets_and_keys() {
    for b in backends() {
        let mut g = Gateway::start(&b, &[("TOLLGATE_SNAPSHOT_REFRESH_MS", "200")]);
        let manager = g.key.clone();
        let m = manager.as_str();
        let url = db_url(&g, &b);
        let team = id(&create(&g, m, "/v1/team/teams", json!({"name": "eng", "budgetPoolUsd": 50})));
        let (k1, _) = g.new_key(m, &json!({"label": "k1", "teamId": team, "budgetUsd": 20}));
        let (k2, _) = g.new_key(m, &json!({"label": "k2", "teamId": team}));
        let month = chrono::Utc::now().format("%Y-%m").to_string();
        let t = g.tenant_id.clone();
        let row = |k: &str, p: &str, c: f64| (t.clone(), k.to_string(), p.to_string(), c);
        add_spend(
            &url,
            vec![
                row(&k1, "total", 1.25),
                row(&k1, &month, 1.25),
                row(&k1, "total", 0.5),
                row(&k2, "total", 2.0),
                row(&k1, "2020-01", 9.0),
            ],
        );
        // A second batch adds to the same rows.
        add_spend(&url, vec![row(&k1, &month, 0.5), row(&k2, &month, 2.0), row(&k2, "total", 0.0)]);

        let rows: Vec<(String, String, f64)> =
            spend_rows(&url).into_iter().map(|r| (r.key_id, r.period, r.cost_usd)).collect();
        let mut want = vec![
            (k1.clone(), month.clone(), 1.75),
            (k1.clone(), "total".to_string(), 1.75),
            (k2.clone(), month.clone(), 2.0),
            (k2.clone(), "total".to_string(), 2.0),
        ];
        want.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        assert_eq!(rows, want);
        assert!(spend_rows(&url).iter().all(|r| r.team_id.as_deref() == Some(team.as_str()) && r.tenant_id == t));

        let team_budget = id(&create(
            &g,
            m,
            "/v1/budgets",
            json!({"scope": "team", "scopeId": team, "amountUsd": 10, "period": "monthly"}),
        ));
        let tenant_budget =
            id(&create(&g, m, "/v1/budgets", json!({"scope": "tenant", "amountUsd": 3, "period": "total"})));
        let key_budget = id(&create(
            &g,
            m,
            "/v1/budgets",
            json!({"scope": "key", "scopeId": k1, "amountUsd": 1, "period": "total"}),
        ));
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let get = |bid: &str| g.mgmt("GET", &format!("/v1/budgets/{bid}"), Some(m), None).json();
            let (tb, nb, kb) = (get(&team_budget), get(&tenant_budget), get(&key_budget));
            if tb["spentUsd"] == 3.75 && nb["spentUsd"] == 3.75 && kb["spentUsd"] == 1.75 {
                assert_eq!(tb["remainingUsd"], 6.25);
                assert_eq!(nb["remainingUsd"], 0.0, "remaining never goes below zero");
                assert_eq!(kb["remainingUsd"], 0.0);
                break;
            }
            assert!(Instant::now() < deadline, "the ledger never caught up: {tb} {nb} {kb}");
            std::thread::sleep(Duration::from_millis(100));
        }
        let keys = g.mgmt("GET", "/v1/keys", Some(m), None).json();
        let spent =
            |k: &str| keys["data"].as_array().unwrap().iter().find(|x| x["id"] == k).unwrap()["spentUsd"].clone();
        assert_eq!((spent(&k1), spent(&k2)), (json!(1.75), json!(2.0)));

        // After a restart the ledger is seeded from the database.
        g.stop();
        g.spawn();
        let keys = g.mgmt("GET", "/v1/keys", Some(m), None).json();
        let spent =
            |k: &str| keys["data"].as_array().unwrap().iter().find(|x| x["id"] == k).unwrap()["spentUsd"].clone();
        assert_eq!((spent(&k1), spent(&k2)), (json!(1.75), json!(2.0)));
    }
}
