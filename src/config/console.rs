//! `console:` — the web console at `/console/` on the management listener (docs/console.md):
//! session lifetimes, the sign-in rate limit and optional single sign-on (OpenID Connect).

use std::collections::BTreeMap;

use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConsoleSection {
    /// Serve `/console/` at all.
    pub enabled: bool,
    /// A session ends this long after sign-in, however busy (absolute expiry).
    pub session_hours: u64,
    /// A session ends after this long without a request (idle expiry).
    pub idle_minutes: u64,
    /// Failed sign-ins one client address may make per minute before it gets `429`.
    pub sign_in_failures_per_minute: u32,
    /// The management listener's base URL as the browser sees it, when it differs from the
    /// listen address (behind a proxy): the OIDC redirect URI is
    /// `<public_url>/console/auth/callback`, and a form post from this origin is the console's
    /// own. Empty = the request's own origin.
    pub public_url: String,
    /// Single sign-on with OpenID Connect; absent = sign-in with a virtual key only.
    pub oidc: Option<OidcConfig>,
}

impl Default for ConsoleSection {
    fn default() -> Self {
        ConsoleSection {
            enabled: true,
            session_hours: 12,
            idle_minutes: 30,
            sign_in_failures_per_minute: 5,
            public_url: String::new(),
            oidc: None,
        }
    }
}

/// `console.oidc`: the identity provider and how its ID token's claims name a tenant and a role.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OidcConfig {
    /// The issuer URL (its `/.well-known/openid-configuration` is read at sign-in).
    pub issuer: String,
    pub client_id: String,
    #[serde(default)]
    pub client_secret: String,
    /// `console.public_url`, copied here when the console starts (not read from `oidc:`).
    #[serde(skip)]
    pub public_url: String,
    #[serde(default)]
    pub claims: OidcClaims,
    /// The scopes to ask for (`openid` is always asked for; listing it changes nothing).
    #[serde(default)]
    pub scopes: Vec<String>,
}

/// Which ID-token claims carry the tenant id and the role, and how role values map to ours.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OidcClaims {
    pub tenant: String,
    pub role: String,
    /// Claim value → `manager`, `developer` or `auditor`; a value not listed that is itself
    /// one of the three is taken as it is; anything else refuses the sign-in.
    pub roles: BTreeMap<String, String>,
}

impl Default for OidcClaims {
    fn default() -> Self {
        OidcClaims { tenant: "tenant".into(), role: "role".into(), roles: BTreeMap::new() }
    }
}
