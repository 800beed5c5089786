//! `POST /v1/billing/checkout` over real sockets against a stand-in for Stripe's REST API: the
//! form fields and the bearer secret arrive, the secret is in neither the answer nor the logs,
//! Stripe's refusals are 502 with Stripe's message, and without configuration it is 503.

mod support;

use std::time::Duration;

use serde_json::json;
use support::receiver::Receiver;
use support::{Backend, Gateway};

const SECRET: &str = "sk_test_51TollgateStandinSecretKey0123456789";

fn form(body: &[u8]) -> Vec<(String, String)> {
    let text = String::from_utf8_lossy(body).into_owned();
    text.split('&')
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (tollgate::management::percent_decode(k), tollgate::management::percent_decode(v))
        })
        .collect()
}

fn stripe_env(rx: &Receiver) -> Vec<(&'static str, String)> {
    vec![
        ("TOLLGATE_STRIPE_SECRET_KEY", SECRET.to_string()),
        ("TOLLGATE_STRIPE_PRICE_ID", "price_1TollgatePro".to_string()),
        ("TOLLGATE_STRIPE_API_BASE", rx.url("")),
    ]
}

fn start(env: &[(&'static str, String)]) -> Gateway {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Gateway::start(&Backend::Sqlite, &env)
}

const BODY: &str = r#"{"successUrl": "https://app.example.com/billing/done?s={CHECKOUT_SESSION_ID}", "cancelUrl": "https://app.example.com/billing"}"#;

#[test]
fn checkout_creates_a_stripe_session_with_the_form_and_the_bearer_secret() {
    let rx = Receiver::start(Box::new(|_, _| {
        (200, json!({"id": "cs_test_a1", "object": "checkout.session", "url": "https://checkout.stripe.com/c/pay/cs_test_a1"}).to_string())
    }));
    let g = start(&stripe_env(&rx));
    let r = g.mgmt_raw("POST", "/v1/billing/checkout", &g.key, BODY.as_bytes());
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(r.json(), json!({"id": "cs_test_a1", "url": "https://checkout.stripe.com/c/pay/cs_test_a1"}));
    assert!(!r.text().contains(SECRET));

    let got = rx.received();
    assert_eq!(got.len(), 1);
    let call = &got[0];
    assert_eq!((call.method.as_str(), call.path.as_str()), ("POST", "/v1/checkout/sessions"));
    assert_eq!(call.header("authorization"), Some(format!("Bearer {SECRET}").as_str()));
    assert_eq!(call.header("content-type"), Some("application/x-www-form-urlencoded"));
    let idem = call.header("idempotency-key").expect("an Idempotency-Key").to_string();
    let fields = form(&call.body);
    let field = |k: &str| fields.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(field("mode"), Some("subscription"));
    assert_eq!(field("line_items[0][price]"), Some("price_1TollgatePro"));
    assert_eq!(field("line_items[0][quantity]"), Some("1"));
    assert_eq!(field("success_url"), Some("https://app.example.com/billing/done?s={CHECKOUT_SESSION_ID}"));
    assert_eq!(field("cancel_url"), Some("https://app.example.com/billing"));
    assert_eq!(field("client_reference_id"), Some(g.tenant_id.as_str()));

    // A second call is a new session: a new idempotency key.
    assert_eq!(g.mgmt_raw("POST", "/v1/billing/checkout", &g.key, BODY.as_bytes()).status, 201);
    let again = rx.received();
    assert_ne!(again[1].header("idempotency-key"), Some(idem.as_str()));

    // Managers only; bad bodies name the field.
    let (_, dev) = g.create_key("dev");
    assert_eq!(g.mgmt_raw("POST", "/v1/billing/checkout", &dev, BODY.as_bytes()).status, 403);
    let cases: [(&str, &str); 5] = [
        ("{\"successUrl\": ", "not valid JSON"),
        (r#"{"successUrl": 1, "cancelUrl": "https://a.example/"}"#, "`successUrl`"),
        (r#"{"successUrl": "https://a.example/"}"#, "cancelUrl"),
        (r#"{"successUrl": "https://a.example/", "cancelUrl": "javascript:alert(1)"}"#, "`cancelUrl`"),
        (r#"{"successUrl": "https://a.example/", "cancelUrl": "https://a.example/", "plan": "pro"}"#, "`plan`"),
    ];
    for (body, name) in cases {
        let r = g.mgmt_raw("POST", "/v1/billing/checkout", &g.key, body.as_bytes());
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        assert!(r.json()["error"]["message"].as_str().unwrap().contains(name), "{name}: {}", r.text());
    }
    assert_eq!(rx.received().len(), 2, "nothing invalid reached Stripe");
    assert!(!g.logs().contains(SECRET), "the Stripe secret reached the logs");
}

#[test]
fn stripe_refusals_are_502_with_stripes_message_and_never_the_secret() {
    let rx = Receiver::start(Box::new(|_, _| {
        let msg = format!("No such price: 'price_1TollgatePro'; key {SECRET} is in test mode");
        (400, json!({"error": {"type": "invalid_request_error", "message": msg}}).to_string())
    }));
    let g = start(&stripe_env(&rx));
    let r = g.mgmt_raw("POST", "/v1/billing/checkout", &g.key, BODY.as_bytes());
    assert_eq!(r.status, 502, "{}", r.text());
    let e = r.json();
    assert_eq!(e["error"]["type"], "upstream_error");
    assert!(e["error"]["message"].as_str().unwrap().contains("No such price: 'price_1TollgatePro'"), "{e}");
    assert!(!r.text().contains(SECRET), "{}", r.text());

    // Stripe unreachable: 502 too.
    let down = vec![
        ("TOLLGATE_STRIPE_SECRET_KEY", SECRET.to_string()),
        ("TOLLGATE_STRIPE_PRICE_ID", "price_1".to_string()),
        ("TOLLGATE_STRIPE_API_BASE", format!("http://127.0.0.1:{}", support::free_port())),
    ];
    let g2 = start(&down);
    let r = g2.mgmt_raw("POST", "/v1/billing/checkout", &g2.key, BODY.as_bytes());
    assert_eq!(r.status, 502, "{}", r.text());
    std::thread::sleep(Duration::from_millis(100));
    assert!(!g.logs().contains(SECRET) && !g2.logs().contains(SECRET), "the Stripe secret reached the logs");
}

#[test]
fn checkout_without_configuration_is_503_not_configured() {
    let g = Gateway::start(&Backend::Sqlite, &[]);
    let r = g.mgmt_raw("POST", "/v1/billing/checkout", &g.key, BODY.as_bytes());
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.json()["error"]["type"], "not_configured");
    assert!(r.text().contains("TOLLGATE_STRIPE_SECRET_KEY"), "{}", r.text());
    // A price without a key is not configured either.
    let g = Gateway::start(&Backend::Sqlite, &[("TOLLGATE_STRIPE_PRICE_ID", "price_1")]);
    assert_eq!(g.mgmt_raw("POST", "/v1/billing/checkout", &g.key, BODY.as_bytes()).status, 503);
}
