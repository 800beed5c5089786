//! Pages as HTML: the templates (minijinja, HTML-escaped by default), the headers every console
//! answer carries (a strict Content-Security-Policy: scripts and styles from our own origin only,
//! no inline script, no `eval`), redirects, and the vendored assets embedded in the binary.

use std::sync::OnceLock;

use minijinja::Environment;
use serde::Serialize;

use serde_json::{json, Value};

use super::super::handler::Reply;
use super::session::Session;
use crate::error::ApiError;

/// Scripts, styles, images and fetches from this origin only; no inline script or style, no
/// `eval`, no frames, forms post only here.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                       connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

const TEMPLATES: &[(&str, &str)] = &[
    ("base.html", include_str!("templates/base.html")),
    ("macros.html", include_str!("templates/macros.html")),
    ("sign_in.html", include_str!("templates/sign_in.html")),
    ("message.html", include_str!("templates/message.html")),
    ("notice.html", include_str!("templates/notice.html")),
    ("sso_done.html", include_str!("templates/sso_done.html")),
    ("overview.html", include_str!("templates/overview.html")),
    ("receipts.html", include_str!("templates/receipts.html")),
    ("receipt.html", include_str!("templates/receipt.html")),
    ("evidence.html", include_str!("templates/evidence.html")),
    ("coverage.html", include_str!("templates/coverage.html")),
    ("keys.html", include_str!("templates/keys.html")),
    ("key_created.html", include_str!("templates/key_created.html")),
    ("budgets.html", include_str!("templates/budgets.html")),
    ("policies.html", include_str!("templates/policies.html")),
    ("policy.html", include_str!("templates/policy.html")),
    ("policy_check.html", include_str!("templates/policy_check.html")),
    ("providers.html", include_str!("templates/providers.html")),
    ("teams.html", include_str!("templates/teams.html")),
    ("prompts.html", include_str!("templates/prompts.html")),
    ("webhooks.html", include_str!("templates/webhooks.html")),
    ("deliveries.html", include_str!("templates/deliveries.html")),
    ("tool_servers.html", include_str!("templates/tool_servers.html")),
];

/// The vendored and own assets: name, content type, bytes (assets/console/, see its README).
const ASSETS: &[(&str, &str, &[u8])] = &[
    ("console.css", "text/css; charset=utf-8", include_bytes!("../../../assets/console/console.css")),
    ("htmx.min.js", "text/javascript; charset=utf-8", include_bytes!("../../../assets/console/htmx.min.js")),
    ("verify.js", "text/javascript; charset=utf-8", include_bytes!("../../../assets/console/verify.js")),
    ("console.js", "text/javascript; charset=utf-8", include_bytes!("../../../assets/console/console.js")),
];

fn env() -> &'static Environment<'static> {
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Environment::new();
        for (name, source) in TEMPLATES {
            env.add_template(name, source).expect("console templates parse (unit-tested)");
        }
        env
    })
}

/// The headers of every console answer.
fn headers(content_type: &str) -> Vec<(&'static str, String)> {
    vec![
        ("content-type", content_type.to_string()),
        ("content-security-policy", CSP.to_string()),
        ("x-content-type-options", "nosniff".into()),
        ("x-frame-options", "DENY".into()),
        ("referrer-policy", "same-origin".into()),
    ]
}

/// `template` rendered with `ctx`; a template error is a plain 500 page, never a blank one.
pub fn page<S: Serialize>(status: u16, template: &str, ctx: S, cookies: Vec<String>) -> Reply {
    let (status, body) = match env().get_template(template).and_then(|t| t.render(ctx)) {
        Ok(html) => (status, html),
        Err(e) => {
            log::error!("console: template {template}: {e:#}");
            (500, "<!doctype html><title>Error</title><p>The page could not be drawn.</p>".to_string())
        }
    };
    let mut h = headers("text/html; charset=utf-8");
    // A signed-out browser must not show a page again from its cache (back button).
    h.push(("cache-control", "no-store".into()));
    h.extend(cookies.into_iter().map(|c| ("set-cookie", c)));
    Reply::Page { status, headers: h, body: body.into_bytes() }
}

/// `303 See Other` to `location` (a path of this console), setting `cookies`.
pub fn redirect(location: &str, cookies: Vec<String>) -> Reply {
    let mut h = headers("text/plain; charset=utf-8");
    h.push(("location", location.to_string()));
    h.push(("cache-control", "no-store".into()));
    h.extend(cookies.into_iter().map(|c| ("set-cookie", c)));
    Reply::Page { status: 303, headers: h, body: Vec::new() }
}

/// An embedded asset, cacheable for a day (they change only with the binary).
pub fn asset(name: &str) -> Option<Reply> {
    let (_, ctype, bytes) = ASSETS.iter().find(|(n, _, _)| *n == name)?;
    let mut h = headers(ctype);
    h.push(("cache-control", "public, max-age=86400".into()));
    Some(Reply::Page { status: 200, headers: h, body: bytes.to_vec() })
}

// ---- pages of one message, and the session as pages see it ----

/// A page with only a title and a message (errors, refusals).
pub fn message(status: u16, title: &str, text: &str) -> Reply {
    page(status, "message.html", json!({"title": title, "text": text, "status": status}), Vec::new())
}

/// An API error as a message page (its status kept: a refused write stays a 403).
pub fn api_error(e: &ApiError) -> Reply {
    message(e.status(), "Error", &format!("{} ({})", e.message, e.kind.type_name()))
}

/// What every signed-in page knows of its session.
pub fn who(s: &Session) -> Value {
    let role = s.row.role.as_str();
    json!({
        "subject": s.row.subject,
        "tenant": s.row.tenant_id,
        "role": role,
        "csrf": s.row.csrf,
        "manager": role == "manager",
        "auditor": role == "auditor",
        "sso": s.row.key_hash.is_none(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_template_parses_and_escapes() {
        let env = env();
        for (name, _) in TEMPLATES {
            env.get_template(name).unwrap();
        }
        let t = env.template_from_str("{{ x }}").unwrap();
        let _ = t;
        let html =
            env.render_str("{% autoescape true %}{{ x }}{% endautoescape %}", minijinja::context! { x => "<script>" });
        assert_eq!(html.unwrap(), "&lt;script&gt;");
    }
}
