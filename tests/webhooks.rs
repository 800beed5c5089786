//! Webhooks over real sockets: endpoints through the management API, events from the durable
//! outbox POSTed to a stand-in receiver, signed per the Standard Webhooks spec (verified here
//! with an independent HMAC; tests/sdk/test_webhooks_sdk.py verifies with the official
//! `standardwebhooks` package), retried with growing delays, surviving a restart, delivered once
//! by two processes on one PostgreSQL, and never again after the endpoint is deleted.

mod support;

use std::time::Duration;

use base64::Engine;
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use support::receiver::{Received, Receiver};
use support::{backends, Backend, Gateway};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// Private receivers allowed (the stand-in is on 127.0.0.1), a fast sender and short retries.
fn env(base_ms: &'static str) -> Vec<(&'static str, &'static str)> {
    vec![
        ("TOLLGATE_WEBHOOK_ALLOW_PRIVATE_URLS", "true"),
        ("TOLLGATE_WEBHOOK_POLL_MS", "25"),
        ("TOLLGATE_WEBHOOK_RETRY_BASE_MS", base_ms),
        ("TOLLGATE_SNAPSHOT_REFRESH_MS", "200"),
    ]
}

fn endpoint(g: &Gateway, url: &str, events: &[&str]) -> (String, String) {
    let r = g.mgmt("POST", "/v1/webhook-endpoints", Some(&g.key), Some(&json!({"url": url, "events": events})));
    assert_eq!(r.status, 201, "{}", r.text());
    let v = r.json();
    (v["id"].as_str().unwrap().to_string(), v["secret"].as_str().unwrap().to_string())
}

/// Checks the Standard Webhooks signature of `r` with `secret` (`whsec_<base64 key>`).
fn verify(r: &Received, secret: &str) -> Value {
    let key = B64.decode(secret.strip_prefix("whsec_").expect("whsec_ prefix")).unwrap();
    let (id, ts) = (r.header("webhook-id").expect("webhook-id"), r.header("webhook-timestamp").expect("timestamp"));
    let ts_n: i64 = ts.parse().expect("unix seconds");
    assert!((chrono::Utc::now().timestamp() - ts_n).abs() < 300, "timestamp of the attempt: {ts}");
    let mut mac = <Hmac<sha2::Sha256> as Mac>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{ts}.").as_bytes());
    mac.update(&r.body);
    let want = format!("v1,{}", B64.encode(mac.finalize().into_bytes()));
    let sig = r.header("webhook-signature").expect("webhook-signature");
    assert!(sig.split(' ').any(|s| s == want), "signature {sig} != {want}");
    r.json()
}

/// The `webhooks` component of `/status` once `ready` holds for it (or after 20 s).
fn webhooks_status(g: &Gateway, ready: impl Fn(&Value) -> bool) -> Value {
    let until = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let s = g.mgmt("GET", "/status", None, None).json();
        let hooks = s["components"].as_array().unwrap().iter().find(|c| c["name"] == "webhooks").unwrap().clone();
        if ready(&hooks) || std::time::Instant::now() > until {
            return hooks;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn of_type<'a>(got: &'a [Received], kind: &str) -> Vec<&'a Received> {
    got.iter().filter(|r| r.json()["type"] == kind).collect()
}

#[test]
fn key_events_arrive_signed_and_carry_no_secret() {
    for b in backends() {
        let rx = Receiver::ok();
        let g = Gateway::start(&b, &env("1000"));
        let (ep, secret) = endpoint(&g, &rx.url("/hooks/in?src=tollgate"), &["key.created", "key.revoked"]);
        assert!(secret.starts_with("whsec_") && B64.decode(&secret[6..]).unwrap().len() == 32, "{secret}");

        // The secret is shown once: never in the list.
        let list = g.mgmt("GET", "/v1/webhook-endpoints", Some(&g.key), None);
        assert_eq!(list.status, 200, "{}", list.text());
        let listed = list.json();
        assert_eq!(listed["data"][0]["id"], ep.as_str(), "{listed}");
        assert_eq!(listed["data"][0]["events"], json!(["key.created", "key.revoked"]));
        assert!(!list.text().contains(&secret[6..]) && listed["data"][0].get("secret").is_none(), "{listed}");

        let (key_id, key_secret) = g.create_key("ci");
        let got = rx.wait_for(Duration::from_secs(20), |r| !r.is_empty());
        assert_eq!(got.len(), 1, "one event, one delivery: {got:?}");
        let r = &got[0];
        assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/hooks/in?src=tollgate"));
        assert_eq!(r.header("content-type"), Some("application/json"));
        let body = verify(r, &secret);
        assert_eq!(body["type"], "key.created");
        assert_eq!(body["data"]["keyId"], key_id.as_str(), "{body}");
        assert!(body["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')), "{body}");
        assert!(!r.text().contains(&key_secret), "the key's secret is never in an event: {}", r.text());
        assert!(!r.text().contains(&key_secret[key_secret.len() - 4..]) || !r.text().contains("keyHint"));

        let del = g.mgmt("DELETE", &format!("/v1/keys/{key_id}"), Some(&g.key), None);
        assert_eq!(del.status, 204);
        let got = rx.wait_for(Duration::from_secs(20), |r| r.len() >= 2);
        let revoked = verify(&got[1], &secret);
        assert_eq!(
            (revoked["type"].as_str(), revoked["data"]["keyId"].as_str()),
            (Some("key.revoked"), Some(&*key_id))
        );
        assert_ne!(got[0].header("webhook-id"), got[1].header("webhook-id"));

        // /status: the endpoint exists and, once the outcome is recorded, nothing is pending.
        let hooks = webhooks_status(&g, |h| h["detail"].as_str().unwrap().contains("pending 0"));
        assert_eq!(hooks["status"], "operational", "{hooks}");
        assert!(g.metric("tollgate_webhook_deliveries_total", &["result=\"delivered\""]) >= 2.0);
        // Neither the signing secret nor the key's secret reaches a log line.
        let logs = g.logs();
        assert!(!logs.contains(&secret[6..]) && !logs.contains(&key_secret), "a secret in the logs");
        if let Backend::Postgres(url) = &b {
            support::drop_postgres(url);
        }
    }
}

#[test]
fn a_receiver_failing_twice_gets_three_attempts_with_growing_delays() {
    let rx = Receiver::start(Box::new(|n, _| if n < 2 { (500, "{\"err\":1}".into()) } else { (200, "{}".into()) }));
    let g = Gateway::start(&Backend::Sqlite, &env("400"));
    let (_, secret) = endpoint(&g, &rx.url("/h"), &["key.created"]);
    g.create_key("retried");
    let got = rx.wait_for(Duration::from_secs(30), |r| r.len() >= 3);
    assert_eq!(got.len(), 3, "{got:?}");
    let ids: Vec<_> = got.iter().map(|r| r.header("webhook-id").unwrap().to_string()).collect();
    assert!(ids.iter().all(|i| *i == ids[0]), "the same webhook-id on every attempt: {ids:?}");
    for r in &got {
        verify(r, &secret);
    }
    let (d1, d2) = (got[1].at - got[0].at, got[2].at - got[1].at);
    // Nominal 400 ms then 800 ms, each 75-100% of it: the second wait is the longer.
    assert!(d1 >= Duration::from_millis(290) && d2 > d1, "delays {d1:?} then {d2:?}");
    // Delivered: no fourth attempt, and /status shows nothing pending.
    let hooks = webhooks_status(&g, |h| h["detail"].as_str().unwrap().contains("pending 0"));
    assert_eq!(hooks["status"], "operational", "{hooks}");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(rx.received().len(), 3);
    assert!(g.metric("tollgate_webhook_deliveries_total", &["result=\"retry\""]) >= 2.0);
}

#[test]
fn an_undelivered_event_is_delivered_after_a_restart() {
    for b in backends() {
        // Down at first: the first attempt fails, the retry is due after the restart.
        let rx = Receiver::start(Box::new(|_, _| (503, "{}".into())));
        let mut g = Gateway::start(&b, &env("1500"));
        let (_, secret) = endpoint(&g, &rx.url("/h"), &["key.created"]);
        let (key_id, _) = g.create_key("survivor");
        let first = rx.wait_for(Duration::from_secs(20), |r| !r.is_empty());
        assert_eq!(first.len(), 1);
        // Failing: /status is degraded for the webhooks, with the pending count.
        let hooks = webhooks_status(&g, |h| h["status"] == "degraded");
        assert!(hooks["detail"].as_str().unwrap().contains("pending 1, failing endpoints 1"), "{hooks}");
        g.stop();
        rx.set_script(Box::new(|_, _| (204, String::new())));
        g.spawn();
        let got = rx.wait_for(Duration::from_secs(30), |r| r.len() >= 2);
        assert!(got.len() >= 2, "delivered after the restart: {got:?}");
        let body = verify(&got[1], &secret);
        assert_eq!(body["data"]["keyId"], key_id.as_str());
        assert_eq!(got[0].header("webhook-id"), got[1].header("webhook-id"));
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(rx.received().len(), 2, "delivered once it succeeded");
        g.stop();
        if let Backend::Postgres(url) = &b {
            support::drop_postgres(url);
        }
    }
}

#[test]
fn two_processes_on_one_postgres_deliver_each_event_once() {
    let Some(url) = support::fresh_postgres() else { return };
    let b = Backend::Postgres(url.clone());
    // A slow receiver widens the window in which both senders look at the same rows.
    let rx = Receiver::start(Box::new(|_, _| {
        std::thread::sleep(Duration::from_millis(30));
        (200, "{}".into())
    }));
    // Processes sharing a database share the master key (it opens the endpoints' secrets).
    let mut shared = env("1000");
    shared.push(("TOLLGATE_MASTER_KEY", "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="));
    let g1 = Gateway::start(&b, &shared);
    let mut g2 = Gateway::start_with(&b, &shared, false);
    g2.key = g1.key.clone();
    endpoint(&g1, &rx.url("/h"), &["key.created"]);
    let n = 40;
    for i in 0..n {
        let g = if i % 2 == 0 { &g1 } else { &g2 };
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        loop {
            let r = g.mgmt("POST", "/v1/keys", Some(&g1.key), Some(&json!({"label": format!("k{i}")})));
            // g2 learns the manager key through its snapshot refresh.
            if r.status == 201 {
                break;
            }
            assert!(r.status == 401 && std::time::Instant::now() < deadline, "{}", r.text());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let got = rx.wait_for(Duration::from_secs(60), |r| r.len() >= n);
    std::thread::sleep(Duration::from_millis(1500));
    let got_all = rx.received();
    let mut ids: Vec<String> = got_all.iter().map(|r| r.header("webhook-id").unwrap().to_string()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n, "every event arrived: {}", got.len());
    assert_eq!(got_all.len(), n, "and each exactly once");
    let delivered = |g: &Gateway| g.metric("tollgate_webhook_deliveries_total", &["result=\"delivered\""]);
    let (d1, d2) = (delivered(&g1), delivered(&g2));
    eprintln!("deliveries by process: {d1} and {d2}");
    assert_eq!(d1 + d2, n as f64, "the two senders' counts add up to one delivery per event");
    drop(g1);
    drop(g2);
    support::drop_postgres(&url);
}

#[test]
fn a_deleted_endpoint_gets_nothing_more() {
    for b in backends() {
        let (gone, kept) = (Receiver::ok(), Receiver::ok());
        let g = Gateway::start(&b, &env("1000"));
        let (gone_id, _) = endpoint(&g, &gone.url("/h"), &["key.created"]);
        endpoint(&g, &kept.url("/h"), &["key.created"]);
        let del = g.mgmt("DELETE", &format!("/v1/webhook-endpoints/{gone_id}"), Some(&g.key), None);
        assert_eq!(del.status, 204, "{}", del.text());
        let again = g.mgmt("DELETE", &format!("/v1/webhook-endpoints/{gone_id}"), Some(&g.key), None);
        assert_eq!(again.status, 404);
        // Another tenant's id is not found either, and its list is empty.
        let (_, other) = g.create_tenant_live("other");
        let (kept_list, _) = (g.mgmt("GET", "/v1/webhook-endpoints", Some(&g.key), None).json(), ());
        let kept_id = kept_list["data"][0]["id"].as_str().unwrap().to_string();
        assert_eq!(g.mgmt("DELETE", &format!("/v1/webhook-endpoints/{kept_id}"), Some(&other), None).status, 404);
        assert_eq!(g.mgmt("GET", "/v1/webhook-endpoints", Some(&other), None).json()["data"], json!([]));

        g.create_key("after delete");
        let got = kept.wait_for(Duration::from_secs(20), |r| !r.is_empty());
        assert_eq!(got.len(), 1, "the kept endpoint got the event");
        std::thread::sleep(Duration::from_millis(500));
        assert!(gone.received().is_empty(), "the deleted endpoint got {:?}", gone.received());
        if let Backend::Postgres(url) = &b {
            support::drop_postgres(url);
        }
    }
}

/// A gateway on SQLite sending to a fresh receiver, its tenant's `openai` on a stand-in.
fn with_receiver() -> (support::Standin, Receiver, Gateway) {
    let up = support::Standin::start();
    let rx = Receiver::ok();
    let g = Gateway::start(&Backend::Sqlite, &env("1000"));
    g.set_provider(&g.key, "openai", &up.url(), "sk-provider-secret");
    (up, rx, g)
}

#[test]
fn budget_guardrail_and_request_events() {
    let (_up, rx, g) = with_receiver();
    let all = [
        "budget.threshold_reached",
        "budget.exceeded",
        "budget_request.created",
        "budget_request.approved",
        "budget_request.denied",
        "guardrail.blocked",
        "provider.test_failed",
    ];
    let (_, secret) = endpoint(&g, &rx.url("/h"), &all);

    // A guardrail block: the event names the category, never the text.
    let yaml = "guardrails:\n  applyTo: [request]\n  pii:\n    credit_card: block\n";
    let p = g.mgmt("POST", "/v1/policies", Some(&g.key), Some(&json!({"name": "g", "enabled": true, "yaml": yaml})));
    assert_eq!(p.status, 201, "{}", p.text());
    let card = json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "card 4111 1111 1111 1111"}]});
    let r = g.post_gw("/v1/chat/completions", &g.key, card.to_string().as_bytes());
    assert_eq!(r.status, 400, "{}", r.text());
    let got = rx.wait_for(Duration::from_secs(20), |r| !of_type(r, "guardrail.blocked").is_empty());
    let blocked = verify(of_type(&got, "guardrail.blocked")[0], &secret);
    assert_eq!(blocked["data"]["categories"], json!(["credit_card"]), "{blocked}");
    assert_eq!(blocked["data"]["receiptId"], r.header("x-tollgate-receipt-id").unwrap());
    assert!(!blocked.to_string().contains("4111"), "{blocked}");

    // A budget of $0.01 on the tenant; one answer of 100 000 completion tokens costs far more.
    let budget = g.mgmt(
        "POST",
        "/v1/budgets",
        Some(&g.key),
        Some(&json!({"scope": "tenant", "amountUsd": 0.01, "period": "monthly"})),
    );
    assert_eq!(budget.status, 201, "{}", budget.text());
    let budget_id = budget.json()["id"].as_str().unwrap().to_string();
    std::thread::sleep(Duration::from_millis(400));
    let big =
        json!({"model": "gpt-4o-mini", "max_tokens": 1, "messages": [{"role": "user", "content": "USAGE:100000"}]});
    let r = g.post_gw("/v1/chat/completions", &g.key, big.to_string().as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    // Both rows are written with the receipt and delivered concurrently: no order between them.
    let got = rx.wait_for(Duration::from_secs(20), |r| {
        !of_type(r, "budget.exceeded").is_empty() && !of_type(r, "budget.threshold_reached").is_empty()
    });
    let reached = verify(of_type(&got, "budget.threshold_reached")[0], &secret);
    let exceeded = verify(of_type(&got, "budget.exceeded")[0], &secret);
    for e in [&reached, &exceeded] {
        assert_eq!(e["data"]["budgetId"], budget_id.as_str(), "{e}");
        assert_eq!((e["data"]["scope"].as_str(), e["data"]["amountUsd"].as_f64()), (Some("tenant"), Some(0.01)));
        assert!(e["data"]["spentUsd"].as_f64().unwrap() > 0.01, "{e}");
    }
    assert_eq!(reached["data"]["thresholdPercent"], 80);

    // Budget requests: created, approved, denied.
    let ask = |amount: f64| {
        let r = g.mgmt(
            "POST",
            "/v1/budgets/requests",
            Some(&g.key),
            Some(&json!({"budgetId": budget_id, "amountUsd": amount, "reason": "secret project text"})),
        );
        assert_eq!(r.status, 201, "{}", r.text());
        r.json()["id"].as_str().unwrap().to_string()
    };
    let (q1, q2) = (ask(5.0), ask(7.0));
    assert_eq!(g.mgmt("POST", &format!("/v1/budgets/requests/{q1}/approve"), Some(&g.key), None).status, 200);
    assert_eq!(g.mgmt("POST", &format!("/v1/budgets/requests/{q2}/deny"), Some(&g.key), None).status, 200);
    let got = rx.wait_for(Duration::from_secs(20), |r| {
        of_type(r, "budget_request.created").len() == 2
            && of_type(r, "budget_request.denied").len() == 1
            && of_type(r, "budget_request.approved").len() == 1
    });
    let approved = verify(of_type(&got, "budget_request.approved")[0], &secret);
    assert_eq!(
        (approved["data"]["budgetRequestId"].as_str(), approved["data"]["amountUsd"].as_f64()),
        (Some(&*q1), Some(5.0))
    );
    let denied = verify(of_type(&got, "budget_request.denied")[0], &secret);
    assert_eq!(denied["data"]["budgetRequestId"], q2.as_str());
    assert!(got.iter().all(|r| !r.text().contains("secret project text")), "no free text in events");

    // A provider test that fails.
    g.set_provider(&g.key, "anthropic", &format!("http://127.0.0.1:{}", support::free_port()), "sk-ant-x");
    let t = g.mgmt("POST", "/v1/providers/anthropic/test", Some(&g.key), None);
    assert_eq!(t.json()["ok"], false, "{}", t.text());
    let got = rx.wait_for(Duration::from_secs(20), |r| !of_type(r, "provider.test_failed").is_empty());
    let failed = verify(of_type(&got, "provider.test_failed")[0], &secret);
    assert_eq!(failed["data"]["provider"], "anthropic");
    assert!(!failed.to_string().contains("sk-ant-x"), "{failed}");
}

/// Issue 42: an end-user budget sends the budget events too, once per threshold and end user,
/// naming the end user (`endUser`) beside the budget's own scope id.
#[test]
fn end_user_budget_events_name_the_end_user() {
    let (_up, rx, g) = with_receiver();
    let (_, secret) = endpoint(&g, &rx.url("/eu"), &["budget.threshold_reached", "budget.exceeded"]);
    let (key_id, key) = g.create_key("product");
    let body = json!({"scope": "end_user", "keyId": key_id, "amountUsd": 0.01, "period": "monthly"});
    let budget = g.mgmt("POST", "/v1/budgets", Some(&g.key), Some(&body));
    assert_eq!(budget.status, 201, "{}", budget.text());
    let budget_id = budget.json()["id"].as_str().unwrap().to_string();
    std::thread::sleep(Duration::from_millis(400));
    // One answer of 100 000 completion tokens ($0.06) takes an end user past both thresholds.
    let big = |user: Option<&str>| {
        let mut b = json!({"model": "gpt-4o-mini", "max_tokens": 1,
            "messages": [{"role": "user", "content": "USAGE:100000"}]});
        if let Some(u) = user {
            b["user"] = json!(u);
        }
        g.post_gw("/v1/chat/completions", &key, b.to_string().as_bytes())
    };
    assert_eq!(big(None).status, 200, "no end user: no end-user budget");
    assert_eq!(big(Some("alice")).status, 200);
    let of = |got: &[Received], kind: &str, user: &str| -> Vec<Value> {
        of_type(got, kind).iter().map(|r| verify(r, &secret)).filter(|e| e["data"]["endUser"] == user).collect()
    };
    let got = rx.wait_for(Duration::from_secs(20), |r| {
        of_type(r, "budget.exceeded").len() + of_type(r, "budget.threshold_reached").len() >= 2
    });
    let (reached, exceeded) = (of(&got, "budget.threshold_reached", "alice"), of(&got, "budget.exceeded", "alice"));
    assert_eq!((reached.len(), exceeded.len()), (1, 1), "{got:?}");
    for e in [&reached[0], &exceeded[0]] {
        let d = &e["data"];
        assert_eq!((d["budgetId"].as_str(), d["scope"].as_str()), (Some(budget_id.as_str()), Some("end_user")), "{e}");
        assert_eq!((d["scopeId"].as_str(), d["keyId"].as_str()), (Some(key_id.as_str()), Some(key_id.as_str())));
        assert!(d["spentUsd"].as_f64().unwrap() > 0.05, "{e}");
    }
    assert_eq!(reached[0]["data"]["thresholdPercent"], 80);
    // Refused now (spent): nothing more for alice. Bob has a budget of his own to cross.
    assert_eq!(big(Some("alice")).status, 402);
    assert_eq!(big(Some("bob")).status, 200);
    // Both of bob's events (they are delivered independently, in either order).
    let got = rx.wait_for(Duration::from_secs(20), |r| {
        of_type(r, "budget.exceeded").len() >= 2 && of_type(r, "budget.threshold_reached").len() >= 2
    });
    assert_eq!(of(&got, "budget.exceeded", "bob").len(), 1, "{got:?}");
    assert_eq!(of(&got, "budget.threshold_reached", "bob").len(), 1, "{got:?}");
    assert_eq!(of(&got, "budget.exceeded", "alice").len(), 1, "each end user crosses once");
    assert!(got.iter().all(|r| r.json()["data"]["endUser"].is_string()), "events without an end user: {got:?}");
}

#[test]
fn bad_bodies_are_400_naming_the_field() {
    let g = Gateway::start(&Backend::Sqlite, &[]);
    let post = |body: &[u8]| g.mgmt_raw("POST", "/v1/webhook-endpoints", &g.key, body);
    let cases: [(&[u8], &str); 8] = [
        (b"{\"url\": ", "not valid JSON"),
        (br#"{"url": 5, "events": ["key.created"]}"#, "`url`"),
        (br#"{"url": "https://hooks.example.com/x", "events": "key.created"}"#, "`events`"),
        (br#"{"url": "https://hooks.example.com/x", "events": ["key.made"]}"#, "`events[0]`"),
        (br#"{"url": "https://hooks.example.com/x", "events": []}"#, "`events`"),
        (br#"{"events": ["key.created"]}"#, "url"),
        (br#"{"url": "ftp://hooks.example.com/x", "events": ["key.created"]}"#, "`url`"),
        (br#"{"url": "https://hooks.example.com/x", "events": ["key.created"], "x": 1}"#, "`x`"),
    ];
    for (body, field) in cases {
        let r = post(body);
        assert_eq!(r.status, 400, "{} -> {}", String::from_utf8_lossy(body), r.text());
        assert_eq!(r.json()["error"]["type"], "invalid_request");
        assert!(r.json()["error"]["message"].as_str().unwrap().contains(field), "{field}: {}", r.text());
    }
    // Loopback and private addresses are refused unless the operator allows them.
    for url in
        ["http://127.0.0.1:9/h", "http://10.0.0.1/h", "http://[::1]/h", "http://localhost/h", "http://169.254.169.254/"]
    {
        let r = g.mgmt(
            "POST",
            "/v1/webhook-endpoints",
            Some(&g.key),
            Some(&json!({"url": url, "events": ["key.created"]})),
        );
        assert_eq!(r.status, 400, "{url}: {}", r.text());
        assert!(r.text().contains("allow_private_urls"), "{}", r.text());
    }
    // Managers only.
    let (_, dev) = g.create_key("dev");
    let r = g.mgmt(
        "POST",
        "/v1/webhook-endpoints",
        Some(&dev),
        Some(&json!({"url": "https://hooks.example.com/x", "events": ["key.created"]})),
    );
    assert_eq!(r.status, 403);
    assert_eq!(g.mgmt("GET", "/v1/webhook-endpoints", Some(&dev), None).status, 403);
    assert_eq!(g.mgmt("DELETE", "/v1/webhook-endpoints/x", Some(&dev), None).status, 403);
    assert_eq!(g.mgmt("DELETE", "/v1/webhook-endpoints/nope", Some(&g.key), None).status, 404);
}

/// `GET /v1/webhook-endpoints/{id}`/deliveries of `key`, page by page: every row, newest first.
fn deliveries(g: &Gateway, key: &str, id: &str, query: &str) -> Vec<Value> {
    let (mut out, mut cursor) = (Vec::new(), String::new());
    loop {
        let path = format!("/v1/webhook-endpoints/{id}/deliveries?limit=2{query}{cursor}");
        let page = g.get_json(key, &path);
        out.extend(page["data"].as_array().unwrap().iter().cloned());
        match page["nextCursor"].as_str() {
            Some(c) => cursor = format!("&cursor={c}"),
            None => return out,
        }
    }
}

/// Polls the endpoint's newest delivery until `ready` holds for it (bounded, not timed).
fn newest_delivery(g: &Gateway, id: &str, ready: impl Fn(&Value) -> bool) -> Value {
    let until = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let page = g.get_json(&g.key, &format!("/v1/webhook-endpoints/{id}/deliveries?limit=1"));
        let newest = page["data"][0].clone();
        if ready(&newest) {
            return newest;
        }
        assert!(std::time::Instant::now() < until, "the delivery never got there: {newest}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Issue 43: the outbox as the API shows it. A receiver refusing the first delivery then
/// accepting: the row is `pending` with the 500 and its error, then `delivered` with one attempt
/// per request the receiver saw. A receiver that never answers: `pending`, no status, the
/// timeout as its error. Pages walk newest first; other tenants get 404; only managers read it.
#[test]
fn deliveries_show_attempts_answers_and_errors() {
    for b in backends() {
        // Refuses until told to accept: the first state is seen before the second (no race).
        let accept = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let a = accept.clone();
        let rx = Receiver::start(Box::new(move |_, _| {
            if a.load(std::sync::atomic::Ordering::SeqCst) {
                (200, "{}".into())
            } else {
                (500, "{\"err\":1}".into())
            }
        }));
        // Accepts connections into its backlog and never answers them.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut vars = env("300");
        vars.extend([("TOLLGATE_WEBHOOK_TIMEOUT_MS", "500"), ("TOLLGATE_WEBHOOK_RETRY_MAX_MS", "1000")]);
        vars.push(("TOLLGATE_WEBHOOK_MAX_ATTEMPTS", "1000"));
        let g = Gateway::start(&b, &vars);
        let (flaky, secret) = endpoint(&g, &rx.url("/h"), &["key.created"]);
        let (mute, _) = endpoint(&g, &format!("http://{}/h", silent.local_addr().unwrap()), &["key.created"]);
        let empty = g.get_json(&g.key, &format!("/v1/webhook-endpoints/{flaky}/deliveries"));
        assert_eq!(empty, json!({"data": [], "nextCursor": null}));

        g.create_key("first");
        let failing = newest_delivery(&g, &flaky, |d| d["lastStatus"] == 500);
        assert_eq!((failing["status"].as_str(), failing["eventType"].as_str()), (Some("pending"), Some("key.created")));
        assert_eq!(failing["lastError"], "HTTP 500", "{failing}");
        assert!(failing["attempts"].as_i64().unwrap() >= 1 && failing["deliveredAt"].is_null(), "{failing}");
        assert!(failing["nextAttemptAt"].as_str().is_some_and(|t| t.ends_with('Z')), "{failing}");
        let event_id = failing["eventId"].as_str().unwrap().to_string();
        assert_eq!(rx.received()[0].header("webhook-id"), Some(event_id.as_str()));

        accept.store(true, std::sync::atomic::Ordering::SeqCst);
        let done = newest_delivery(&g, &flaky, |d| d["status"] == "delivered");
        let seen = rx.received().len() as i64;
        assert!(seen >= 2, "refused once, then accepted: {seen} requests");
        assert_eq!(done["attempts"].as_i64(), Some(seen), "one attempt per request received: {done}");
        assert_eq!((done["lastStatus"].as_i64(), done["eventId"].as_str()), (Some(200), Some(event_id.as_str())));
        assert!(done["lastError"].is_null() && done["nextAttemptAt"].is_null(), "{done}");
        assert!(done["deliveredAt"].as_str().unwrap() >= done["createdAt"].as_str().unwrap(), "{done}");
        let keys: Vec<&str> = done.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys.len(),
            9,
            "eventId, eventType, status, attempts, lastStatus, lastError, createdAt, deliveredAt, nextAttemptAt: {keys:?}"
        );

        let timed_out = newest_delivery(&g, &mute, |d| !d["lastError"].is_null());
        assert_eq!(timed_out["status"], "pending", "{timed_out}");
        assert!(timed_out["lastStatus"].is_null(), "no answer, no status: {timed_out}");
        assert!(timed_out["lastError"].as_str().unwrap().contains("500 ms"), "{timed_out}");
        assert!(timed_out["nextAttemptAt"].is_string(), "{timed_out}");

        // Two more events: pages of two walk all three, newest first; `status` filters.
        g.create_key("second");
        g.create_key("third");
        newest_delivery(&g, &flaky, |d| d["status"] == "delivered" && d["eventId"] != event_id.as_str());
        let all = deliveries(&g, &g.key, &flaky, "");
        let ids: Vec<&str> = all.iter().map(|d| d["eventId"].as_str().unwrap()).collect();
        assert_eq!(ids.len(), 3, "{all:?}");
        assert!(ids.windows(2).all(|w| w[0] > w[1]) && ids[2] == event_id, "newest first: {ids:?}");
        let pending = deliveries(&g, &g.key, &mute, "&status=pending");
        assert_eq!(pending.len(), 3, "{pending:?}");
        assert!(deliveries(&g, &g.key, &mute, "&status=delivered").is_empty());
        let text = g.mgmt("GET", &format!("/v1/webhook-endpoints/{flaky}/deliveries"), Some(&g.key), None).text();
        assert!(!text.contains(&secret[6..]) && !text.contains("payload") && !text.contains("\"data\":{"), "{text}");

        // Bad queries; ids not the tenant's; who may read.
        let bad = |q: &str| g.mgmt("GET", &format!("/v1/webhook-endpoints/{flaky}/deliveries?{q}"), Some(&g.key), None);
        for q in ["status=lost", "limit=0", "limit=201"] {
            let r = bad(q);
            assert_eq!((r.status, r.json()["error"]["type"].as_str()), (400, Some("invalid_request")), "{q}");
        }
        let missing = g.mgmt("GET", "/v1/webhook-endpoints/no-such/deliveries", Some(&g.key), None);
        assert_eq!(missing.status, 404, "{}", missing.text());
        let (_, other) = g.create_tenant_live("other");
        let r = g.mgmt("GET", &format!("/v1/webhook-endpoints/{flaky}/deliveries"), Some(&other), None);
        assert_eq!((r.status, r.json()["error"]["type"].as_str()), (404, Some("not_found")), "{}", r.text());
        let (_, dev) = g.new_key(&g.key, &json!({"label": "dev"}));
        let (_, auditor) = g.new_key(&g.key, &json!({"label": "audit", "role": "auditor"}));
        for key in [&dev, &auditor] {
            let r = g.mgmt("GET", &format!("/v1/webhook-endpoints/{flaky}/deliveries"), Some(key), None);
            assert_eq!((r.status, r.json()["error"]["type"].as_str()), (403, Some("forbidden")), "{}", r.text());
            let list = g.mgmt("GET", "/v1/webhook-endpoints", Some(key), None);
            assert_eq!(list.status, 403, "the same rule as the endpoint list");
        }
        // Deleting the endpoint takes its deliveries with it.
        assert_eq!(g.mgmt("DELETE", &format!("/v1/webhook-endpoints/{mute}"), Some(&g.key), None).status, 204);
        assert_eq!(g.mgmt("GET", &format!("/v1/webhook-endpoints/{mute}/deliveries"), Some(&g.key), None).status, 404);
        drop(silent);
        if let Backend::Postgres(url) = &b {
            support::drop_postgres(url);
        }
    }
}
