//! Provider adapters: how a client request becomes an upstream request for each provider,
//! and how usage is read back. The client's credentials never pass through: the upstream
//! header set is built from an allowlist plus the provider's own credential.

pub mod credentials;
pub mod usage;

use serde_json::Value;

use crate::config::ProviderName;
use crate::secret::Secret;
pub use usage::{Dialect, Usage};

/// Client headers worth forwarding, per provider. Everything else (auth, cookies, SDK
/// telemetry, hop-by-hop) stays at the gateway.
const OPENAI_FORWARD: &[&str] = &["openai-organization", "openai-project", "openai-beta", "idempotency-key"];
const ANTHROPIC_FORWARD: &[&str] = &["anthropic-beta"];

/// The upstream request the gateway will send.
pub struct UpstreamCall {
    pub path: &'static str,
    pub headers: Vec<(&'static str, String)>,
    pub dialect: Dialect,
}

/// Builds the upstream header set for `provider` on `path`.
pub fn upstream_call(
    provider: ProviderName,
    path: &'static str,
    api_key: &Secret,
    client_header: &dyn Fn(&str) -> Option<String>,
    anthropic_version: &str,
) -> UpstreamCall {
    let mut headers: Vec<(&'static str, String)> = vec![
        ("content-type", "application/json".into()),
        // Identity encoding so the gateway can read usage from the answer.
        ("accept-encoding", "identity".into()),
    ];
    if let Some(a) = client_header("accept") {
        headers.push(("accept", a));
    }
    let forward = match provider {
        ProviderName::Anthropic => ANTHROPIC_FORWARD,
        _ => OPENAI_FORWARD,
    };
    for &h in forward {
        if let Some(v) = client_header(h) {
            headers.push((h, v));
        }
    }
    let dialect = if path == "/v1/messages" { Dialect::Anthropic } else { Dialect::OpenAi };
    match provider {
        ProviderName::Anthropic => {
            headers.push(("x-api-key", api_key.expose().to_string()));
            if dialect == Dialect::OpenAi {
                // Anthropic's OpenAI-compatible endpoint reads the bearer token.
                headers.push(("authorization", format!("Bearer {}", api_key.expose())));
            }
            let version = client_header("anthropic-version").unwrap_or_else(|| anthropic_version.to_string());
            headers.push(("anthropic-version", version));
        }
        _ => headers.push(("authorization", format!("Bearer {}", api_key.expose()))),
    }
    UpstreamCall { path, headers, dialect }
}

/// Makes a streamed OpenAI-dialect chat request report usage. Returns true when the gateway
/// added the option (so the extra usage-only chunk is not shown to a client that never asked).
pub fn ensure_stream_usage(body: &mut Value) -> bool {
    let Some(obj) = body.as_object_mut() else { return false };
    let opts = obj.entry("stream_options").or_insert_with(|| Value::Object(Default::default()));
    let Some(opts) = opts.as_object_mut() else { return false };
    if opts.get("include_usage").and_then(Value::as_bool) == Some(true) {
        return false;
    }
    opts.insert("include_usage".into(), Value::Bool(true));
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn client_auth_never_forwarded() {
        let client = |h: &str| match h {
            "authorization" => Some("Bearer tollgate_sk_x".to_string()),
            "x-api-key" => Some("tollgate_sk_x".to_string()),
            "openai-organization" => Some("org-1".to_string()),
            _ => None,
        };
        let key = Secret::new("sk-provider");
        for (p, path) in [
            (ProviderName::OpenAi, "/v1/chat/completions"),
            (ProviderName::Anthropic, "/v1/messages"),
            (ProviderName::Anthropic, "/v1/chat/completions"),
        ] {
            let call = upstream_call(p, path, &key, &client, "2023-06-01");
            assert!(call.headers.iter().all(|(_, v)| !v.contains("tollgate_sk_")));
            assert!(call.headers.iter().any(|(_, v)| v.contains("sk-provider")));
        }
        let call = upstream_call(ProviderName::OpenAi, "/v1/chat/completions", &key, &client, "");
        assert!(call.headers.contains(&("openai-organization", "org-1".to_string())));
        let call = upstream_call(ProviderName::Anthropic, "/v1/messages", &key, &client, "2023-06-01");
        assert!(call.headers.contains(&("anthropic-version", "2023-06-01".to_string())));
        assert_eq!(call.dialect, Dialect::Anthropic);
    }

    #[test]
    fn stream_usage_option() {
        let mut b = json!({"model": "m", "stream": true});
        assert!(ensure_stream_usage(&mut b));
        assert_eq!(b["stream_options"]["include_usage"], true);
        assert!(!ensure_stream_usage(&mut b), "already on");
        let mut b = json!({"stream_options": {"include_usage": false, "x": 1}});
        assert!(ensure_stream_usage(&mut b));
        assert_eq!(b["stream_options"]["x"], 1);
    }
}
