//! The web console (`/console/`, issue 43) over plain HTTP, on both stores: sign-in with a key,
//! the session cookie and its expiries, CSRF and `Origin` checks, the sign-in rate limit, the
//! auditor's refused writes, the strict Content-Security-Policy on every page (no inline script),
//! page weight, and HTML escaping. The same flows in a real browser: tests/console_browser.rs.

mod support;

use serde_json::json;
use support::http::{self, Resp};
use support::{backends, Gateway};

/// A browser without a browser: one cookie jar, the form's CSRF token, our own Origin.
struct Browser<'a> {
    g: &'a Gateway,
    cookies: Vec<(String, String)>,
}

impl<'a> Browser<'a> {
    fn new(g: &'a Gateway) -> Self {
        Browser { g, cookies: Vec::new() }
    }

    fn origin(&self) -> String {
        format!("http://{}", self.g.mgmt)
    }

    fn cookie_header(&self) -> String {
        self.cookies.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("; ")
    }

    fn keep(&mut self, r: &Resp) {
        for (k, v) in &r.headers {
            if k != "set-cookie" {
                continue;
            }
            let (name, rest) = v.split_once('=').unwrap();
            let value = rest.split(';').next().unwrap().to_string();
            self.cookies.retain(|(n, _)| n != name);
            if !v.contains("Max-Age=0") {
                self.cookies.push((name.to_string(), value));
            }
        }
    }

    fn get(&mut self, path: &str) -> Resp {
        let c = self.cookie_header();
        let r = http::request(self.g.mgmt, "GET", path, &[("Cookie", &c)], b"");
        self.keep(&r);
        r
    }

    fn post_from(&mut self, path: &str, form: &[(&str, &str)], origin: Option<&str>) -> Resp {
        let body: String = form
            .iter()
            .map(|(k, v)| {
                format!("{k}={}", percent_encoding::utf8_percent_encode(v, percent_encoding::NON_ALPHANUMERIC))
            })
            .collect::<Vec<_>>()
            .join("&");
        let c = self.cookie_header();
        let mut h = vec![("Cookie", c.as_str()), ("Content-Type", "application/x-www-form-urlencoded")];
        if let Some(o) = origin {
            h.push(("Origin", o));
        }
        let r = http::request(self.g.mgmt, "POST", path, &h, body.as_bytes());
        self.keep(&r);
        r
    }

    fn post(&mut self, path: &str, form: &[(&str, &str)]) -> Resp {
        let o = self.origin();
        self.post_from(path, form, Some(&o))
    }

    fn sign_in(&mut self, key: &str) -> Resp {
        let page = self.get("/console/sign-in");
        let token = csrf(&page.text());
        self.post("/console/sign-in", &[("_csrf", &token), ("key", key)])
    }

    fn session(&self) -> Option<&str> {
        self.cookies.iter().find(|(k, _)| k == "tollgate_console").map(|(_, v)| v.as_str())
    }
}

/// The CSRF token of the first form in a page.
fn csrf(html: &str) -> String {
    let at = html.find("name=\"_csrf\" value=\"").unwrap_or_else(|| panic!("no CSRF field in {html}"));
    let rest = &html[at + 20..];
    rest[..rest.find('"').unwrap()].to_string()
}

fn assert_strict_page(r: &Resp, path: &str) {
    let csp = r.header("content-security-policy").unwrap_or_else(|| panic!("{path}: no CSP"));
    assert!(csp.contains("script-src 'self'") && !csp.contains("unsafe"), "{path}: {csp}");
    assert_eq!(r.header("cache-control"), Some("no-store"), "{path}");
    let html = r.text();
    // Every <script> either loads a file of ours or is a JSON data block (never run).
    for tag in html.split("<script").skip(1) {
        let open = &tag[..tag.find('>').unwrap()];
        assert!(
            open.contains("src=\"/console/assets/") || open.contains("type=\"application/json\""),
            "{path}: inline script {open}"
        );
    }
    assert!(!html.contains(" style=\"") && !html.contains(" onclick"), "{path}: inline style or handler");
    assert!(r.body.len() < 300 * 1024, "{path}: {} bytes", r.body.len());
}

#[test]
fn console_sessions_forms_and_pages() {
    for b in backends() {
        let g = Gateway::start(&b, &[]);
        sign_in_and_pages(&g);
        refusals(&g);
        forms(&g);
        sessions_end(&g);
        sign_in_limit(&g);
    }
}

/// Failed sign-ins are limited per address (5 a minute by default); last, as it locks out
/// this test's address for a minute.
fn sign_in_limit(g: &Gateway) {
    let mut bad = Browser::new(g);
    let statuses: Vec<u16> = (0..7).map(|_| bad.sign_in("tollgate_sk_wrong").status).collect();
    assert_eq!(&statuses[..5], &[401; 5]);
    assert_eq!(statuses[6], 429, "{statuses:?}");
}

fn sign_in_and_pages(g: &Gateway) {
    let mut br = Browser::new(g);
    // Not signed in: every page redirects to sign-in.
    let r = br.get("/console/keys");
    assert_eq!((r.status, r.header("location")), (303, Some("/console/sign-in")));
    let r = br.sign_in(&g.key);
    assert_eq!(r.status, 303, "{}", r.text());
    let set = r.headers.iter().find(|(k, v)| k == "set-cookie" && v.starts_with("tollgate_console=")).unwrap();
    assert!(set.1.contains("HttpOnly") && set.1.contains("SameSite=Strict") && !set.1.contains("Secure"), "{}", set.1);
    assert_eq!(br.session().unwrap().len(), 43, "256 bits, base64url");
    // The session id is stored only hashed.
    let id = br.session().unwrap().to_string();
    assert_eq!(g.sql(&format!("UPDATE console_sessions SET role = role WHERE id_hash = '{id}'")), 0);
    let pages = [
        "/console/",
        "/console/receipts",
        "/console/evidence",
        "/console/keys",
        "/console/budgets",
        "/console/policies",
        "/console/providers",
        "/console/teams",
        "/console/prompts",
        "/console/webhooks",
        "/console/tool-servers",
    ];
    for p in pages {
        let r = br.get(p);
        assert_eq!(r.status, 200, "{p}: {}", r.text());
        assert_strict_page(&r, p);
    }
    for a in ["verify.js", "htmx.min.js", "console.css", "console.js"] {
        assert_eq!(br.get(&format!("/console/assets/{a}")).status, 200, "{a}");
    }
    // A key made through the console: its secret once, on the form's answer.
    let token = csrf(&br.get("/console/keys").text());
    let r =
        br.post("/console/keys", &[("_csrf", &token), ("label", "<script>alert(1)</script>"), ("role", "developer")]);
    assert_eq!(r.status, 201, "{}", r.text());
    assert!(r.text().contains("tollgate_sk_"), "{}", r.text());
    let list = br.get("/console/keys").text();
    assert!(list.contains("&lt;script&gt;alert(1)") && !list.contains("<script>alert"), "escaped");
    // Bad input: the API's error next to its field, never a blank page.
    let r = br.post("/console/keys", &[("_csrf", &token), ("label", "x"), ("budgetUsd", "lots")]);
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("id=\"err-budgetUsd\""), "{}", r.text());
    let r = br.post("/console/policies", &[("_csrf", &token), ("name", "p"), ("yaml", "rules:\n  - nope: [\n")]);
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("id=\"err-at\"") && r.text().contains("Line "), "{}", r.text());
}

/// The other forms, each one API call: the result on the page, or the API's error at its field.
fn forms(g: &Gateway) {
    let mut br = Browser::new(g);
    br.sign_in(&g.key);
    let token = csrf(&br.get("/console/").text());
    let (kid, _) = g.new_key(&g.key, &json!({"label": "limited"}));
    // Limits and revocation of a key.
    let r = br.post(&format!("/console/keys/{kid}/limits"), &[("_csrf", &token), ("rpmLimit", "7"), ("tpmLimit", "")]);
    assert_eq!(r.status, 303, "{}", r.text());
    let keys = g.get_json(&g.key, "/v1/keys?limit=200");
    let k = keys["data"].as_array().unwrap().iter().find(|k| k["id"] == kid.as_str()).unwrap().clone();
    assert_eq!((k["rpmLimit"].clone(), k["tpmLimit"].clone()), (json!(7), json!(null)));
    let r = br.post(&format!("/console/keys/{kid}/limits"), &[("_csrf", &token), ("rpmLimit", "-3")]);
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("id=\"err-rpmLimit\"") || r.text().contains("class=\"error\""), "{}", r.text());
    assert_eq!(br.post(&format!("/console/keys/{kid}/revoke"), &[("_csrf", &token)]).status, 303);
    let keys = g.get_json(&g.key, "/v1/keys?limit=200");
    assert!(!keys["data"].as_array().unwrap().iter().any(|k| k["id"] == kid.as_str()), "revoked");
    // A team; a provider credential, shown masked, and its test; a prompt.
    assert_eq!(br.post("/console/teams", &[("_csrf", &token), ("name", "console team")]).status, 303);
    assert!(br.get("/console/teams").text().contains("console team"));
    let r = br.post(
        "/console/providers/openai",
        &[("_csrf", &token), ("api_key", "sk-console-secret-1234"), ("base_url", "http://127.0.0.1:9")],
    );
    assert_eq!(r.status, 303, "{}", r.text());
    let page = br.get("/console/providers").text();
    assert!(!page.contains("sk-console-secret-1234") && page.contains("1234"), "masked: {page}");
    let r = br.post("/console/providers/openai/test", &[("_csrf", &token)]);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("id=\"test-result\""), "{}", r.text());
    let r = br.post("/console/prompts", &[("_csrf", &token), ("name", "greeting"), ("content", "Hello {{name}}")]);
    assert_eq!(r.status, 303, "{}", r.text());
    // The playground: a run goes through the gateway with the session's own key (the provider
    // here answers nothing, so the run's error is what the page shows).
    let prompts = g.get_json(&g.key, "/v1/prompts?limit=200");
    let pid = prompts["data"][0]["id"].as_str().unwrap().to_string();
    let page = br.get(&format!("/console/prompts?prompt={pid}")).text();
    let vid = page.split("name=\"versionId\"").nth(1).and_then(|t| t.split("value=\"").nth(1)).unwrap();
    let vid = vid[..vid.find('"').unwrap()].to_string();
    let r = br.post(
        "/console/prompts/run",
        &[
            ("_csrf", &token),
            ("promptId", &pid),
            ("versionId", &vid),
            ("variables", "{\"name\": \"Ada\"}"),
            ("model", "gpt-4o-mini"),
        ],
    );
    eprintln!("prompt run: {} {}", r.status, r.text().split("<main").nth(1).unwrap_or(""));
    assert!(r.text().contains("id=\"run-result\"") || r.text().contains("role=\"alert\""), "{}", r.text());
    let r = br.post(
        "/console/prompts/run",
        &[("_csrf", &token), ("promptId", &pid), ("versionId", &vid), ("variables", "not json")],
    );
    assert_eq!(r.status, 400, "{}", r.text());
    // Bad input: the API's error at its field (a private webhook URL; a team without a name).
    let r = br.post(
        "/console/webhooks",
        &[("_csrf", &token), ("url", "http://127.0.0.1:9/hook"), ("events", "budget.exceeded")],
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("id=\"err-url\""), "{}", r.text());
    let r = br.post("/console/teams", &[("_csrf", &token), ("name", "")]);
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("role=\"alert\""), "{}", r.text());
    // The policy editor's check as the user types (htmx posts the form to the console, which
    // asks POST /v1/policies/validate): a fragment with the place of the error, or the count.
    let policies = || g.get_json(&g.key, "/v1/policies?limit=200")["data"].as_array().unwrap().len();
    let stored = policies();
    let editor = br.get("/console/policies").text();
    assert!(editor.contains("hx-post=\"/console/policies/validate\"") && editor.contains("id=\"yaml-check\""));
    let bad = "rules:\n  - id: a\n    action: deny\n    colour: red\n";
    let r = br.post("/console/policies/validate", &[("_csrf", &token), ("name", ""), ("yaml", bad)]);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("id=\"check-at\">Line 4, column 5: field `rules[0]"), "{}", r.text());
    assert!(!r.text().contains("<html"), "a fragment, not a page: {}", r.text());
    let r =
        br.post("/console/policies/validate", &[("_csrf", &token), ("yaml", "rules:\n  - {id: a, action: deny}\n")]);
    assert!(r.text().contains("Policy is valid (1 rule)"), "{}", r.text());
    assert_eq!(br.post("/console/policies/validate", &[("yaml", bad)]).status, 403, "no CSRF token, no check");
    assert_eq!(policies(), stored, "checking saved nothing");
    // A webhook endpoint's deliveries page; another tenant's (or no) endpoint is the API's 404.
    let r = br.get("/console/webhooks/no-such-endpoint");
    assert_eq!(r.status, 404, "{}", r.text());
    // Evidence: the coverage drill-down of a control, and a bad period named.
    let packs = g.get_json(&g.key, "/v1/compliance/packs");
    let fw = packs["data"][0]["framework"].as_str().unwrap().to_string();
    let cov = g.get_json(&g.key, &format!("/v1/compliance/coverage/{fw}"));
    let control = cov["controls"][0]["id"].as_str().unwrap().to_string();
    let r = br.get(&format!("/console/evidence/coverage/{fw}/{}", control.replace(':', "%3A")));
    assert_eq!(r.status, 200, "{}", r.text());
    let r = br.get("/console/evidence?from=2026-02-01T00:00&to=2026-01-01T00:00");
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("must not be later"), "{}", r.text());
}

fn refusals(g: &Gateway) {
    let mut br = Browser::new(g);
    assert_eq!(br.sign_in(&g.key).status, 303);
    let token = csrf(&br.get("/console/keys").text());
    // A form posted from another site: refused before anything else.
    let r = br.post_from("/console/keys", &[("_csrf", &token), ("label", "evil")], Some("http://evil.example"));
    assert_eq!(r.status, 403, "{}", r.text());
    let r = br.post_from("/console/keys", &[("_csrf", &token), ("label", "evil")], None);
    assert_eq!(r.status, 403);
    // Our origin without the CSRF token: refused too.
    let r = br.post("/console/keys", &[("_csrf", "forged"), ("label", "evil")]);
    assert_eq!(r.status, 403);
    let keys = g.get_json(&g.key, "/v1/keys?limit=200");
    assert!(!keys["data"].as_array().unwrap().iter().any(|k| k["label"] == "evil"));
    // An auditor's session: no write controls, and a forged write is refused by the API (403).
    let (_, auditor) = g.new_key(&g.key, &json!({"label": "audit", "role": "auditor"}));
    let mut au = Browser::new(g);
    assert_eq!(au.sign_in(&auditor).status, 303);
    for p in [
        "/console/",
        "/console/receipts",
        "/console/keys",
        "/console/budgets",
        "/console/policies",
        "/console/providers",
    ] {
        let page = au.get(p).text();
        let forms = page.matches("<form method=\"post\"").count();
        assert_eq!(forms, 1, "{p}: the auditor sees a write control (only sign-out is a form)");
    }
    let token = csrf(&au.get("/console/").text());
    let r = au.post("/console/keys", &[("_csrf", &token), ("label", "forged"), ("role", "manager")]);
    assert_eq!(r.status, 403, "{}", r.text());
}

fn sessions_end(g: &Gateway) {
    // Sign-out ends the session at once: the old cookie opens nothing.
    let mut br = Browser::new(g);
    br.sign_in(&g.key);
    let id = br.session().unwrap().to_string();
    let token = csrf(&br.get("/console/").text());
    assert_eq!(br.post("/console/sign-out", &[("_csrf", &token)]).status, 303);
    let c = format!("tollgate_console={id}");
    let r = http::request(g.mgmt, "GET", "/console/keys", &[("Cookie", &c)], b"");
    assert_eq!((r.status, r.header("location")), (303, Some("/console/sign-in")));
    // A revoked key ends its sessions at the next request.
    let (kid, key) = g.new_key(&g.key, &json!({"label": "soon gone", "role": "manager"}));
    let mut other = Browser::new(g);
    other.sign_in(&key);
    assert_eq!(other.get("/console/keys").status, 200);
    assert_eq!(g.mgmt("DELETE", &format!("/v1/keys/{kid}"), Some(&g.key), None).status, 204);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let r = other.get("/console/keys");
        if r.status == 303 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "revoked key's session still open");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // Idle and absolute expiry: a session last seen 31 minutes ago, or made 13 hours ago.
    for column in ["seen_ms", "created_ms"] {
        let mut br = Browser::new(g);
        br.sign_in(&g.key);
        let age = if column == "seen_ms" { 31 * 60_000 } else { 13 * 3_600_000 };
        g.sql(&format!("UPDATE console_sessions SET {column} = {column} - {age}"));
        let r = br.get("/console/receipts");
        assert_eq!((r.status, r.header("location")), (303, Some("/console/sign-in")), "{column}");
    }
}
