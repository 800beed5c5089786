//! Prompts over real sockets (issue 21 §1): create with version 1, sequential versions under
//! concurrent creates, the playground run through the gateway's own path (checks, receipt),
//! missing variables, bad bodies and tenant isolation, on every backend.

mod support;

use serde_json::{json, Value};
use support::{backends, with_standin, Gateway};

fn create_prompt(g: &Gateway, key: &str, body: Value) -> Value {
    let r = g.mgmt("POST", "/v1/prompts", Some(key), Some(&body));
    assert_eq!(r.status, 201, "{}", r.text());
    r.json()
}

#[test]
fn prompts_and_versions_are_numbered_in_order_even_when_created_at_once() {
    for b in backends() {
        let g = Gateway::start(&b, &[]);
        let p = create_prompt(&g, &g.key, json!({"name": " greet ", "description": "d", "content": "Hi {{name}}"}));
        let keys: Vec<&str> = p.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, vec!["id", "name", "description", "labels", "createdAt"], "the seed's fields: {p}");
        assert_eq!((p["name"].as_str(), &p["labels"]), (Some("greet"), &json!({})));
        let id = p["id"].as_str().unwrap().to_string();
        assert_eq!(g.mgmt("GET", &format!("/v1/prompts/{id}"), Some(&g.key), None).json(), p);

        let versions = g.mgmt("GET", &format!("/v1/prompts/{id}/versions"), Some(&g.key), None).json();
        assert_eq!(versions.as_array().unwrap().len(), 1, "creating a prompt creates version 1: {versions}");
        let v1 = &versions[0];
        assert_eq!((v1["version"].as_i64(), v1["promptId"].as_str()), (Some(1), Some(id.as_str())));
        assert_eq!(v1["content"], "Hi {{name}}");
        assert!(v1["id"].is_string() && v1["createdAt"].is_string());

        // 20 creates at once: 2..=21, no gap, no duplicate.
        let made: Vec<i64> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..20)
                .map(|i| {
                    let (g, id) = (&g, &id);
                    s.spawn(move || {
                        let body = json!({"content": format!("v{i} {{{{name}}}}")});
                        let r = g.mgmt("POST", &format!("/v1/prompts/{id}/versions"), Some(&g.key), Some(&body));
                        assert_eq!(r.status, 201, "{}", r.text());
                        r.json()["version"].as_i64().unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut sorted = made.clone();
        sorted.sort();
        assert_eq!(sorted, (2..=21).collect::<Vec<_>>());
        let versions = g.mgmt("GET", &format!("/v1/prompts/{id}/versions"), Some(&g.key), None).json();
        let numbers: Vec<i64> = versions.as_array().unwrap().iter().map(|v| v["version"].as_i64().unwrap()).collect();
        assert_eq!(numbers, (1..=21).collect::<Vec<_>>());

        // Paginated list.
        create_prompt(&g, &g.key, json!({"name": "second", "content": "x", "labels": {"team": "a"}}));
        let page = g.mgmt("GET", "/v1/prompts?limit=1", Some(&g.key), None).json();
        assert_eq!(page["data"].as_array().unwrap().len(), 1);
        let next = page["nextCursor"].as_str().unwrap();
        let rest = g.mgmt("GET", &format!("/v1/prompts?limit=1&cursor={next}"), Some(&g.key), None).json();
        assert_eq!(rest["data"][0]["labels"], json!({"team": "a"}));
        assert!(rest["nextCursor"].is_null());

        // Bad bodies name the field.
        for (body, field) in [
            (json!({"name": "x"}), "content"),
            (json!({"name": 3, "content": "x"}), "name"),
            (json!({"name": "x", "content": "x", "labels": {"a": 1}}), "labels"),
            (json!({"name": "x", "content": "x", "colour": "red"}), "colour"),
            (json!({"name": "  ", "content": "x"}), "name"),
        ] {
            let r = g.mgmt("POST", "/v1/prompts", Some(&g.key), Some(&body));
            assert_eq!(r.status, 400, "{body}: {}", r.text());
            assert!(r.json()["error"]["message"].as_str().unwrap().contains(field), "{body}: {}", r.text());
        }
        let r = g.mgmt_raw("POST", &format!("/v1/prompts/{id}/versions"), &g.key, b"{\"content\": ");
        assert_eq!(r.status, 400);

        // Another tenant sees none of it.
        let (_, other) = g.create_tenant_live("other");
        let vid = v1["id"].as_str().unwrap();
        for (method, path, body) in [
            ("GET", format!("/v1/prompts/{id}"), None),
            ("GET", format!("/v1/prompts/{id}/versions"), None),
            ("POST", format!("/v1/prompts/{id}/versions"), Some(json!({"content": "mine now"}))),
            (
                "POST",
                "/v1/prompts/run".to_string(),
                Some(json!({"promptId": id, "versionId": vid, "variables": {"name": "x"}, "model": "gpt-4o-mini"})),
            ),
        ] {
            let r = g.mgmt(method, &path, Some(&other), body.as_ref());
            assert_eq!(r.status, 404, "{method} {path}: {}", r.text());
        }
        assert!(g.mgmt("GET", "/v1/prompts", Some(&other), None).json()["data"].as_array().unwrap().is_empty());
    }
}

#[test]
fn a_run_renders_and_goes_through_the_gateway_with_its_checks_and_receipt() {
    for b in backends() {
        let (g, up) = with_standin(&b, &[]);
        let p = create_prompt(
            &g,
            &g.key,
            json!({"name": "greet", "content": "Say hi to {{name}} from {{ place }}; {{name}} again. {{ not a var }}",
                   "labels": {"model": "gpt-4o-mini"}}),
        );
        let id = p["id"].as_str().unwrap();
        let versions = g.mgmt("GET", &format!("/v1/prompts/{id}/versions"), Some(&g.key), None).json();
        let vid = versions[0]["id"].as_str().unwrap();

        // Every missing variable is named, and nothing is sent.
        let run = |body: Value| g.mgmt("POST", "/v1/prompts/run", Some(&g.key), Some(&body));
        let r = run(json!({"promptId": id, "versionId": vid, "variables": {}}));
        assert_eq!(r.status, 400, "{}", r.text());
        let m = r.json()["error"]["message"].as_str().unwrap().to_string();
        assert!(m.contains("`name`") && m.contains("`place`"), "{m}");
        assert_eq!(up.count(), 0);

        let r = run(json!({"promptId": id, "versionId": vid, "variables": {"name": "Ada", "place": 42}}));
        assert_eq!(r.status, 200, "{}", r.text());
        let result = r.json();
        let keys: Vec<&str> = result.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, vec!["output", "inputTokens", "outputTokens", "costUsd"]);
        assert_eq!(result["output"], "Hello from stand-in");
        assert_eq!((result["inputTokens"].as_u64(), result["outputTokens"].as_u64()), (Some(11), Some(7)));
        let cost = (11.0 * 0.15 + 7.0 * 0.60) / 1e6;
        assert!((result["costUsd"].as_f64().unwrap() - cost).abs() < 1e-12, "{result}");

        // The provider got the rendered text, with the tenant's credential.
        let sent = up.requests();
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].path, "/v1/chat/completions");
        assert_eq!(sent[0].json()["messages"][0]["content"], "Say hi to Ada from 42; Ada again. {{ not a var }}");
        assert_eq!(sent[0].header("authorization"), Some("Bearer sk-provider-secret"));

        // One call receipt, of the key that ran it, with the same cost; the run itself is in the
        // admin trail as `prompts.run` (docs/log.md §8), the refused run (400) is not.
        let receipts = g.call_receipts(&g.key);
        assert_eq!(receipts.len(), 1, "{receipts:?}");
        let me = g.mgmt("GET", "/v1/keys", Some(&g.key), None).json()["data"][0]["id"].as_str().unwrap().to_string();
        assert_eq!(receipts[0]["actor"], me.as_str());
        assert_eq!(receipts[0]["model"], "gpt-4o-mini");
        assert!((receipts[0]["costUsd"].as_f64().unwrap() - cost).abs() < 1e-12);
        let runs = g.get_json(&g.key, "/v1/receipts?kind=admin&model=prompts.run")["receipts"].clone();
        assert_eq!(runs.as_array().unwrap().len(), 1, "{runs}");
        assert_eq!((runs[0]["actor"].as_str(), runs[0]["subject"].as_str()), (Some(me.as_str()), Some(id)));

        // The key's checks apply: a policy denial is the run's 403.
        let deny = "rules:\n  - {id: no-mini, match: {model: \"gpt-4o-mini\"}, action: deny}\n";
        let r = g.mgmt("POST", "/v1/policies", Some(&g.key), Some(&json!({"name": "p", "yaml": deny})));
        assert_eq!(r.status, 201);
        let r = run(json!({"promptId": id, "versionId": vid, "variables": {"name": "x", "place": "y"}}));
        assert_eq!(r.status, 403, "{}", r.text());
        assert_eq!(r.json()["error"]["type"], "policy_denied");
        assert_eq!(up.count(), 1);
        // An explicit model overrides the label, and is routed like any call.
        let r = run(
            json!({"promptId": id, "versionId": vid, "variables": {"name": "x", "place": "y"}, "model": "claude-haiku-4-5"}),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(up.requests().last().unwrap().path, "/v1/messages");

        // Unknown ids and bad bodies.
        let r = run(json!({"promptId": id, "versionId": "00000000-0000-7000-8000-000000000000", "variables": {}}));
        assert_eq!(r.status, 404);
        let r = run(json!({"promptId": id, "versionId": vid, "variables": []}));
        assert_eq!(r.status, 400);
        assert!(r.text().contains("variables"), "{}", r.text());
        let r = run(json!({"promptId": id}));
        assert_eq!(r.status, 400);
        assert!(r.text().contains("versionId"), "{}", r.text());
        let no_model = create_prompt(&g, &g.key, json!({"name": "n", "content": "plain"}));
        let nid = no_model["id"].as_str().unwrap();
        let nvid = g.mgmt("GET", &format!("/v1/prompts/{nid}/versions"), Some(&g.key), None).json()[0]["id"]
            .as_str()
            .unwrap()
            .to_string();
        let r = run(json!({"promptId": nid, "versionId": nvid}));
        assert_eq!(r.status, 400);
        assert!(r.text().contains("model"), "{}", r.text());
    }
}
