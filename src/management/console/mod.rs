//! The web console (`/console/`, docs/console.md): server-rendered pages on the management
//! listener for managers, developers and auditors.
//!
//! Every page is an ordinary client of the management API ([`api::Api`]: the listener's own
//! dispatch, with the signed-in key), so the console shows nothing its key may not read and
//! writes nothing its key may not write. Receipts, chains and proofs are verified in the
//! browser by `assets/console/verify.js`, code the server does not run.

mod api;
mod limiter;
mod oidc;
mod pages;
mod render;
mod request;
mod run_key;
mod session;

use http::Method;
use serde_json::json;

pub use api::Api;
use limiter::SignInLimiter;
use render::{api_error, message, page, redirect};
pub use request::Request;
use session::{cookie, set_cookie, Session, Who, COOKIE, PRE_COOKIE};

use super::handler::Reply;
use super::query::parse_query;
use crate::app::App;
use crate::config::console::OidcConfig;
use crate::error::ApiError;

/// The console's state in the management app.
pub struct Console {
    limiter: SignInLimiter,
    /// Single sign-on, when `console.oidc` is set.
    sso: Option<oidc::Sso>,
}

impl Console {
    pub fn new(app: &App) -> Console {
        let public_url = app.config.console.public_url.clone();
        let oidc = app.config.console.oidc.clone().map(|cfg| OidcConfig { public_url, ..cfg });
        let sso = oidc.and_then(|cfg| match oidc::Sso::new(cfg) {
            Ok(s) => Some(s),
            Err(e) => {
                log::error!("console: single sign-on is off: {e}");
                None
            }
        });
        Console { limiter: SignInLimiter::new(app.config.console.sign_in_failures_per_minute), sso }
    }

    /// Answers one `/console/...` request.
    pub async fn serve(&self, app: &App, api: &dyn Api, req: Request) -> Reply {
        let segs: Vec<&str> = req.path.iter().map(String::as_str).collect();
        if let (&Method::GET, ["assets", name]) = (&req.method, segs.as_slice()) {
            return render::asset(name).unwrap_or_else(|| message(404, "Not found", "No such file."));
        }
        if req.method == Method::POST && !same_origin(app, &req) {
            return message(
                403,
                "Refused",
                "This form was posted from another site; the console accepts forms from its own pages only.",
            );
        }
        match (&req.method, segs.as_slice()) {
            (&Method::GET, ["sign-in"]) => return sign_in_form(app, &req, None, 200),
            (&Method::POST, ["sign-in"]) => return self.sign_in(app, api, &req).await,
            (&Method::GET, ["auth", "start"]) => return self.sso_start(app, &req).await,
            (&Method::GET, ["auth", "callback"]) => return self.sso_finish(app, api, &req).await,
            _ => {}
        }
        let resumed = match cookie(&req.cookie, COOKIE) {
            Some(id) => session::resume(app, api, &id).await.map(|s| s.map(|s| (id, s))),
            None => Ok(None),
        };
        match resumed {
            Err(e) => message(e.status(), "Error", &e.message),
            Ok(None) => redirect("/console/sign-in", vec![set_cookie(COOKIE, "", Some(0), secure(app))]),
            Ok(Some((id, s))) => signed_in(app, api, &req, &id, &s).await,
        }
    }

    async fn sign_in(&self, app: &App, api: &dyn Api, req: &Request) -> Reply {
        let form = parse_query(Some(&String::from_utf8_lossy(&req.body)));
        let field = |n: &str| form.iter().find(|(k, _)| k == n).map(|(_, v)| v.trim().to_string()).unwrap_or_default();
        let pre = cookie(&req.cookie, PRE_COOKIE).unwrap_or_default();
        if pre.is_empty() || !session::same(&pre, &field("_csrf")) {
            return message(
                403,
                "Refused",
                "The sign-in form expired or came from elsewhere; reload the sign-in page.",
            );
        }
        if let Err(wait) = self.limiter.check(req.client) {
            let mut r = sign_in_form(app, req, Some(format!("Too many failed sign-ins; try again in {wait} s.")), 429);
            if let Reply::Page { headers, .. } = &mut r {
                headers.push(("retry-after", wait.to_string()));
            }
            return r;
        }
        let key = app.snapshot.load().key(&field("key")).cloned();
        let Some(key) = key else {
            self.limiter.failed(req.client);
            return sign_in_form(app, req, Some("That key is not valid (revoked, expired or mistyped).".into()), 401);
        };
        match session::open(app, api, Who::Key(key, field("key"))).await {
            Ok((id, _)) => redirect("/console/", vec![set_cookie(COOKIE, &id, None, secure(app)), clear_pre(app)]),
            Err(e) => message(e.status(), "Error", &e.message),
        }
    }
}

impl Console {
    async fn sso_start(&self, app: &App, req: &Request) -> Reply {
        let Some(sso) = &self.sso else { return message(404, "Not found", "Single sign-on is not configured.") };
        match sso.start(&own_origin(app, req)).await {
            Ok((url, state)) => redirect(&url, vec![flow_cookie(app, &state, 600)]),
            Err(e) => sign_in_form(app, req, Some(format!("Single sign-on is unavailable: {e}")), 502),
        }
    }

    /// The identity provider's answer: a verified identity becomes a session (its cookie is
    /// `Strict`, so the browser goes on to the console from a page of ours, not by redirect).
    async fn sso_finish(&self, app: &App, api: &dyn Api, req: &Request) -> Reply {
        let Some(sso) = &self.sso else { return message(404, "Not found", "Single sign-on is not configured.") };
        if let Some(err) = req.query("error") {
            let why = req.query("error_description").unwrap_or(err);
            return sign_in_form(app, req, Some(format!("The identity provider refused the sign-in: {why}")), 401);
        }
        let state = cookie(&req.cookie, oidc::FLOW_COOKIE).unwrap_or_default();
        let done = sso.finish(req.query("state").unwrap_or(""), &state, req.query("code").unwrap_or("")).await;
        let who = match done {
            Ok(who) => who,
            Err(e) => return sign_in_form(app, req, Some(format!("Single sign-on refused: {e}")), 401),
        };
        let tenant = match tenant_of_claim(app, &who.tenant).await {
            Ok(Some(id)) => id,
            Ok(None) => {
                return sign_in_form(app, req, Some(format!("Single sign-on refused: no tenant `{}`", who.tenant)), 401)
            }
            Err(e) => return message(500, "Error", &e.to_string()),
        };
        let (subject, role) = (who.subject.clone(), who.role.clone());
        match session::open(app, api, Who::Sso { tenant, subject: who.subject, role: who.role }).await {
            Ok((id, _)) => {
                let cookies = vec![set_cookie(COOKIE, &id, None, secure(app)), flow_cookie(app, "", 0)];
                page(200, "sso_done.html", json!({"subject": subject, "role": role}), cookies)
            }
            Err(e) => message(e.status(), "Error", &e.message),
        }
    }
}

/// This listener's origin as the browser sees it.
fn own_origin(app: &App, req: &Request) -> String {
    format!("{}://{}", if secure(app) { "https" } else { "http" }, req.host)
}

/// The single sign-on flow's cookie: `Lax`, so the identity provider's redirect back carries it.
fn flow_cookie(app: &App, state: &str, max_age: u64) -> String {
    let secure = if secure(app) { "; Secure" } else { "" };
    format!("{}={state}; Path=/console/auth; HttpOnly; SameSite=Lax; Max-Age={max_age}{secure}", oidc::FLOW_COOKIE)
}

/// Pages behind a live session: sign-out, then the CSRF check of every form, then the page.
async fn signed_in(app: &App, api: &dyn Api, req: &Request, id: &str, s: &Session) -> Reply {
    if req.method == Method::POST {
        let form = parse_query(Some(&String::from_utf8_lossy(&req.body)));
        let token = form.iter().find(|(k, _)| k == "_csrf").map(|(_, v)| v.as_str()).unwrap_or("");
        if !session::same(token, &s.row.csrf) {
            return message(403, "Refused", "This form carried no valid CSRF token; reload the page and try again.");
        }
        if req.path.len() == 1 && req.path[0] == "sign-out" {
            if let Err(e) = session::end(app, api, id).await {
                return message(e.status(), "Error", &e.message);
            }
            return redirect("/console/sign-in", vec![set_cookie(COOKIE, "", Some(0), secure(app))]);
        }
        if req.path == ["prompts", "run"] && s.row.key_hash.is_none() {
            // A run goes through the gateway, with the SSO session's own key (made now if needed).
            let runner = match run_key::caller(app, api, &s.row).await {
                Ok(caller) => Session { row: s.row.clone(), caller },
                Err(e) => return pages::notice(&pages::Ctx { api, s, req, form }, &e),
            };
            return pages::post(&pages::Ctx { api, s: &runner, req, form }).await;
        }
        let ctx = pages::Ctx { api, s, req, form };
        return pages::post(&ctx).await;
    }
    let ctx = pages::Ctx { api, s, req, form: Vec::new() };
    pages::get(&ctx).await
}

/// The tenant an ID token's tenant claim names: a tenant id, else a tenant name (API.md "Console").
async fn tenant_of_claim(app: &App, claim: &str) -> Result<Option<String>, crate::store::StoreError> {
    if crate::store::tenants::exists(&app.store, claim).await? {
        return Ok(Some(claim.to_string()));
    }
    Ok(crate::store::tenants::by_name(&app.store, claim).await?.map(|t| t.id))
}

/// Whether the management listener serves TLS (then cookies are `Secure`).
fn secure(app: &App) -> bool {
    !app.config.listen.tls_cert_file.is_empty()
}

/// A form post's `Origin` is this listener's own (scheme, host and port), and the browser did
/// not call it cross-site. A post without `Origin` is refused: every browser sends one.
fn same_origin(app: &App, req: &Request) -> bool {
    if req.fetch_site.as_deref().is_some_and(|s| s != "same-origin" && s != "none") {
        return false;
    }
    let own = own_origin(app, req);
    let public = app.config.console.public_url.trim_end_matches('/');
    match req.origin.as_deref() {
        Some(o) => o == own || (!public.is_empty() && public == o),
        None => false,
    }
}

fn clear_pre(app: &App) -> String {
    set_cookie(PRE_COOKIE, "", Some(0), secure(app))
}

/// The sign-in page, with a fresh CSRF cookie for its form.
fn sign_in_form(app: &App, req: &Request, error: Option<String>, status: u16) -> Reply {
    let token = session::token();
    let sso = app.config.console.oidc.is_some();
    let ctx = json!({"csrf": token, "error": error, "sso": sso, "next": req.query("next")});
    page(status, "sign_in.html", ctx, vec![set_cookie(PRE_COOKIE, &token, Some(600), secure(app))])
}

/// Ends the expired sessions, revoking their own keys (the listener's periodic sweep; each
/// sign-in sweeps too).
pub async fn sweep(app: &App, api: &dyn Api) -> Result<(), ApiError> {
    run_key::sweep(app, api).await
}

/// An error met before the console could look at the request (a body too large).
pub fn api_error_reply(e: &ApiError) -> Reply {
    api_error(e)
}
