//! `GET /openapi.json` against the built binary: the document lists exactly the routes of the
//! router's table (`tollgate::management::routes::ROUTES`), the router serves exactly that
//! table, and each operation carries its security, path parameters and error envelope.
//! Validation with openapi-spec-validator and the schemathesis fuzzing run in tests/sdk
//! (`test_openapi.py`).

mod support;

use std::collections::BTreeSet;

use serde_json::Value;
use support::{Backend, Gateway};
use tollgate::management::routes::ROUTES;

const METHODS: [&str; 5] = ["GET", "POST", "PUT", "PATCH", "DELETE"];

fn document(g: &Gateway) -> Value {
    let r = g.mgmt("GET", "/openapi.json", None, None);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    r.json()
}

/// `(METHOD, path)` of every operation in the document.
fn operations(doc: &Value) -> BTreeSet<(String, String)> {
    let paths = doc["paths"].as_object().expect("paths");
    paths
        .iter()
        .flat_map(|(path, item)| {
            let methods = item.as_object().expect("a path item").keys();
            methods.map(move |m| (m.to_uppercase(), path.clone()))
        })
        .collect()
}

fn table() -> BTreeSet<(String, String)> {
    ROUTES.iter().map(|r| (r.method.to_string(), r.path.to_string())).collect()
}

#[test]
fn the_document_lists_exactly_the_routes_the_router_serves() {
    let g = Gateway::start(&Backend::Sqlite, &[]);
    let doc = document(&g);
    assert_eq!(doc["openapi"], "3.1.0");
    let (documented, served) = (operations(&doc), table());
    let undocumented: Vec<_> = served.difference(&documented).collect();
    let unserved: Vec<_> = documented.difference(&served).collect();
    assert!(undocumented.is_empty(), "routes missing from /openapi.json: {undocumented:?}");
    assert!(unserved.is_empty(), "documented but not in the route table: {unserved:?}");
}

/// A route of the table answers from its handler (never 405, never "route ... not found"),
/// and the methods the table does not list on its path answer 405.
#[test]
fn the_router_serves_exactly_the_route_table() {
    let g = Gateway::start(&Backend::Sqlite, &[]);
    let paths: BTreeSet<&str> = ROUTES.iter().map(|r| r.path).collect();
    for path in paths {
        let concrete = path.replace('{', "no-such-").replace('}', "");
        for method in METHODS {
            let listed = ROUTES.iter().any(|r| r.path == path && r.method == method);
            let r = g.mgmt(method, &concrete, Some(&g.key), None);
            let message = if r.status >= 400 { r.json()["error"]["message"].to_string() } else { String::new() };
            if listed {
                assert_ne!(r.status, 405, "{method} {concrete}: {}", r.text());
                assert!(!message.contains("route "), "{method} {concrete} is not routed: {message}");
                assert!(r.status < 500, "{method} {concrete}: {}", r.text());
            } else {
                assert_eq!(r.status, 405, "{method} {concrete} is not in the table: {}", r.text());
            }
        }
    }
    let r = g.mgmt("GET", "/v1/no-such-route", Some(&g.key), None);
    assert_eq!(r.status, 404, "{}", r.text());
}

#[test]
fn every_operation_has_security_parameters_and_error_envelopes() {
    let g = Gateway::start(&Backend::Sqlite, &[]);
    let doc = document(&g);
    assert_eq!(doc["components"]["securitySchemes"]["bearer"]["scheme"], "bearer");
    assert_eq!(doc["security"], serde_json::json!([{ "bearer": [] }]));
    for (name, response) in doc["components"]["responses"].as_object().expect("shared responses") {
        let schema = &response["content"]["application/json"]["schema"]["$ref"];
        assert_eq!(schema, "#/components/schemas/Error", "response {name}");
    }
    let error = &doc["components"]["schemas"]["ErrorDetail"]["properties"];
    assert!(error["type"].is_object() && error["message"].is_object() && error["code"].is_object());

    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let what = format!("{method} {path}");
            assert!(op["operationId"].is_string() && op["summary"].is_string(), "{what}: id and summary");
            let public = !path.starts_with("/v1/");
            if public {
                assert_eq!(op["security"], serde_json::json!([{}]), "{what} needs no key");
            } else {
                assert!(op.get("security").is_none(), "{what} takes the document's bearer security");
                for status in ["400", "401", "413", "503"] {
                    assert!(op["responses"][status]["$ref"].is_string(), "{what} lacks {status}");
                }
            }
            let params = op["parameters"].as_array().cloned().unwrap_or_default();
            for segment in path.split('/').filter(|s| s.starts_with('{')) {
                let name = segment.trim_matches(|c| c == '{' || c == '}');
                let declared = params.iter().any(|p| p["name"] == name && p["in"] == "path" && p["required"] == true);
                assert!(declared, "{what} does not declare path parameter {name}");
            }
            let ok = op["responses"].as_object().unwrap().keys().any(|s| s.starts_with('2'));
            assert!(ok, "{what} has no success response");
        }
    }
}

/// Every `$ref` in the document resolves: a schema named only in a parameter is easy to lose.
#[test]
fn every_reference_resolves() {
    let g = Gateway::start(&Backend::Sqlite, &[]);
    let doc = document(&g);
    let mut refs = Vec::new();
    collect_refs(&doc, &mut refs);
    assert!(refs.len() > 100, "expected a document built on shared schemas");
    for r in refs {
        let target = r.strip_prefix('#').and_then(|p| doc.pointer(p));
        assert!(target.is_some(), "dangling $ref {r}");
    }
}

fn collect_refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(r)) = m.get("$ref") {
                out.push(r.clone());
            }
            m.values().for_each(|v| collect_refs(v, out));
        }
        Value::Array(a) => a.iter().for_each(|v| collect_refs(v, out)),
        _ => {}
    }
}
