//! Single sign-on with OpenID Connect (`console.oidc`): the authorization code flow with PKCE,
//! by the `openidconnect` crate. The ID token is verified there (signature against the issuer's
//! JWKS, `iss`, `aud`, `exp`, `nonce`); its claims then name the tenant and the role
//! (`console.oidc.claims`), and the session acts as that role with no virtual key.
//!
//! The flow's state, nonce and PKCE verifier wait here, in memory, for ten minutes, bound to the
//! browser by a cookie of the flow's own (`SameSite=Lax`: the identity provider sends the
//! browser back with a cross-site navigation, which a `Strict` cookie would miss).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openidconnect::core::{CoreAuthenticationFlow, CoreClient, CoreProviderMetadata};
use openidconnect::{
    AuthorizationCode, ClientId, ClientSecret, CsrfToken, EndpointMaybeSet, EndpointNotSet, EndpointSet, HttpRequest,
    HttpResponse, IssuerUrl, Nonce, PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, Scope, TokenResponse,
};
use serde_json::Value;

use crate::config::console::OidcConfig;

/// The client as discovery makes it: an authorization endpoint, and a token and userinfo
/// endpoint the document may or may not name.
type Client =
    CoreClient<EndpointSet, EndpointNotSet, EndpointNotSet, EndpointNotSet, EndpointMaybeSet, EndpointMaybeSet>;

/// The flow's cookie (path `/console/auth`).
pub const FLOW_COOKIE: &str = "tollgate_console_oidc";
/// How long a started sign-in may take at the identity provider.
const FLOW_TTL: Duration = Duration::from_secs(600);
/// Started sign-ins kept at once; past this the expired ones are dropped first, then the rest.
const MAX_PENDING: usize = 10_000;

/// An HTTP failure talking to the identity provider.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct HttpError(String);

struct Pending {
    nonce: String,
    verifier: String,
    redirect: String,
    started: Instant,
}

/// Who the identity provider says signed in.
pub struct Identity {
    pub tenant: String,
    pub subject: String,
    pub role: String,
}

pub struct Sso {
    cfg: OidcConfig,
    http: Arc<reqwest::blocking::Client>,
    pending: Mutex<HashMap<String, Pending>>,
}

/// One request to the identity provider on reqwest's blocking client, off the async workers.
async fn send(client: Arc<reqwest::blocking::Client>, req: HttpRequest) -> Result<HttpResponse, HttpError> {
    let work = move || -> Result<HttpResponse, HttpError> {
        let (parts, body) = req.into_parts();
        let mut rb = client.request(parts.method, parts.uri.to_string()).body(body);
        for (k, v) in parts.headers.iter() {
            rb = rb.header(k, v);
        }
        let resp = rb.send().map_err(|e| HttpError(format!("identity provider: {e}")))?;
        let mut out = http::Response::builder().status(resp.status());
        for (k, v) in resp.headers() {
            out = out.header(k, v);
        }
        let body = resp.bytes().map_err(|e| HttpError(format!("identity provider: {e}")))?.to_vec();
        out.body(body).map_err(|e| HttpError(e.to_string()))
    };
    tokio::task::spawn_blocking(work).await.map_err(|e| HttpError(e.to_string()))?
}

impl Sso {
    pub fn new(cfg: OidcConfig) -> Result<Sso, String> {
        let http = crate::upstream::blocking_client(Duration::from_secs(10), cfg.issuer.starts_with("https:"))?;
        Ok(Sso { cfg, http: Arc::new(http), pending: Mutex::new(HashMap::new()) })
    }

    /// The callback URL: `public_url`, else this request's own origin.
    pub fn redirect_uri(&self, own_origin: &str) -> String {
        let base = if self.cfg.public_url.is_empty() { own_origin } else { self.cfg.public_url.trim_end_matches('/') };
        format!("{base}/console/auth/callback")
    }

    /// The identity provider's client, from its discovery document (read on every sign-in: a
    /// rotated JWKS is seen at once; two small requests per sign-in).
    async fn client(&self, redirect: &str) -> Result<Client, String> {
        let http = |req: HttpRequest| send(self.http.clone(), req);
        let issuer = IssuerUrl::new(self.cfg.issuer.clone()).map_err(|e| format!("console.oidc.issuer: {e}"))?;
        let meta = CoreProviderMetadata::discover_async(issuer, &http)
            .await
            .map_err(|e| format!("the identity provider's discovery failed: {e}"))?;
        let secret = Some(self.cfg.client_secret.clone()).filter(|s| !s.is_empty()).map(ClientSecret::new);
        let redirect = RedirectUrl::new(redirect.to_string()).map_err(|e| format!("redirect URI: {e}"))?;
        Ok(CoreClient::from_provider_metadata(meta, ClientId::new(self.cfg.client_id.clone()), secret)
            .set_redirect_uri(redirect))
    }

    /// Starts a sign-in: the identity provider's URL to send the browser to, and the flow's
    /// cookie value (its `state`).
    pub async fn start(&self, own_origin: &str) -> Result<(String, String), String> {
        let redirect = self.redirect_uri(own_origin);
        let client = self.client(&redirect).await?;
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let mut request = client
            .authorize_url(CoreAuthenticationFlow::AuthorizationCode, CsrfToken::new_random, Nonce::new_random)
            .set_pkce_challenge(challenge);
        for s in self.cfg.scopes.iter().filter(|s| s.as_str() != "openid") {
            request = request.add_scope(Scope::new(s.clone()));
        }
        let (url, state, nonce) = request.url();
        let pending = Pending {
            nonce: nonce.secret().clone(),
            verifier: verifier.secret().clone(),
            redirect,
            started: Instant::now(),
        };
        let mut map = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= MAX_PENDING {
            map.retain(|_, p| p.started.elapsed() < FLOW_TTL);
            if map.len() >= MAX_PENDING {
                map.clear();
            }
        }
        map.insert(state.secret().clone(), pending);
        Ok((url.to_string(), state.secret().clone()))
    }

    /// Finishes a sign-in: the code exchanged (with the PKCE verifier), the ID token verified,
    /// its claims read. `state` must be the flow cookie's.
    pub async fn finish(&self, state: &str, cookie_state: &str, code: &str) -> Result<Identity, String> {
        if state.is_empty() || !super::session::same(state, cookie_state) {
            return Err("this sign-in was not started in this browser (state mismatch)".into());
        }
        let pending = self.pending.lock().unwrap_or_else(|e| e.into_inner()).remove(state);
        let p = pending.filter(|p| p.started.elapsed() < FLOW_TTL).ok_or("this sign-in expired; start again")?;
        let client = self.client(&p.redirect).await?;
        let http = |req: HttpRequest| send(self.http.clone(), req);
        let token = client
            .exchange_code(AuthorizationCode::new(code.to_string()))
            .map_err(|e| format!("the identity provider has no token endpoint: {e}"))?
            .set_pkce_verifier(PkceCodeVerifier::new(p.verifier))
            .request_async(&http)
            .await
            .map_err(|e| format!("the code exchange failed: {e}"))?;
        let id_token = token.id_token().ok_or("the identity provider sent no ID token")?;
        let claims = id_token
            .claims(&client.id_token_verifier(), &Nonce::new(p.nonce))
            .map_err(|e| format!("the ID token was refused: {e}"))?;
        let subject = claims.subject().as_str().to_string();
        self.identity(&id_token.to_string(), subject)
    }

    /// The tenant and role claims of a verified ID token (its payload, read again as JSON so any
    /// claim name can be configured).
    fn identity(&self, jwt: &str, subject: String) -> Result<Identity, String> {
        use base64::Engine;
        let payload = jwt.split('.').nth(1).ok_or("the ID token is not a JWS")?;
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload).map_err(|e| e.to_string())?;
        let claims: Value = serde_json::from_slice(&raw).map_err(|e| e.to_string())?;
        let names = &self.cfg.claims;
        let text = |name: &str| claims.get(name).and_then(Value::as_str).map(str::to_string);
        let tenant = text(&names.tenant).ok_or_else(|| format!("the ID token has no `{}` claim", names.tenant))?;
        let given = text(&names.role).ok_or_else(|| format!("the ID token has no `{}` claim", names.role))?;
        let role = names.roles.get(&given).cloned().unwrap_or(given);
        if !["manager", "developer", "auditor"].contains(&role.as_str()) {
            return Err(format!("the role `{role}` maps to none of manager, developer, auditor"));
        }
        Ok(Identity { tenant, subject, role })
    }
}
