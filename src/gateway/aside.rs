//! Gateway routes that are not model calls: the model list, Anthropic's token counting, MCP to
//! a tenant's tool server, and the OpenAI Responses calls on stored responses. Which one a
//! request is, its metric label and its error envelope are here; `aside_calls.rs` answers them.

use crate::providers::catalog::ListShape;
use crate::providers::route::{self as routes, NativeOp};
use crate::providers::Flavor;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Aside {
    /// `GET /v1/models`.
    Models,
    /// `GET /v1/models/{id}` (an id may hold `/`: `bedrock/amazon.nova-micro-v1:0`).
    Model(String),
    /// `POST /v1/messages/count_tokens`.
    CountTokens,
    /// `/mcp/{server}` (POST, GET, DELETE): MCP to a tenant's tool server (`mcp.rs`).
    Mcp(String),
    /// `GET /v1/responses/{id}`.
    ResponseRetrieve(String),
    /// `DELETE /v1/responses/{id}`.
    ResponseDelete(String),
    /// `GET /v1/responses/{id}/input_items`.
    ResponseInputItems(String),
    /// `POST /v1/responses/input_tokens`.
    ResponseInputTokens,
}

impl Aside {
    pub fn resolve(method: &http::Method, path: &str) -> Option<Aside> {
        if let Some(name) = server_name(path) {
            return Some(Aside::Mcp(name));
        }
        let path = routes::normalize(path);
        if let Some(rest) = path.trim_end_matches('/').strip_prefix("/v1/responses/") {
            return responses_aside(method, rest);
        }
        match (method.as_str(), path) {
            ("GET", "/v1/models") => Some(Aside::Models),
            ("GET", p) => {
                let id = p.strip_prefix("/v1/models/")?;
                let id = percent_encoding::percent_decode_str(id).decode_utf8().ok()?;
                (!id.is_empty()).then(|| Aside::Model(id.into_owned()))
            }
            ("POST", "/v1/messages/count_tokens") => Some(Aside::CountTokens),
            _ => None,
        }
    }

    /// Metric label.
    pub fn label(&self) -> &'static str {
        match self {
            Aside::Models | Aside::Model(_) => "models",
            Aside::CountTokens => "count_tokens",
            Aside::Mcp(_) => "mcp",
            Aside::ResponseRetrieve(_) => "responses_retrieve",
            Aside::ResponseDelete(_) => "responses_delete",
            Aside::ResponseInputItems(_) => "responses_input_items",
            Aside::ResponseInputTokens => "responses_input_tokens",
        }
    }

    /// The error envelope its client reads: the native operation's, or the list client's.
    pub fn flavor(&self, headers: &http::HeaderMap) -> Flavor {
        match self {
            Aside::CountTokens => NativeOp::COUNT_TOKENS.flavor,
            Aside::Mcp(_) => Flavor::Plain,
            Aside::ResponseRetrieve(_)
            | Aside::ResponseDelete(_)
            | Aside::ResponseInputItems(_)
            | Aside::ResponseInputTokens => NativeOp::STORED_RESPONSES.flavor,
            _ => ListShape::of(headers).flavor(),
        }
    }
}

/// The calls on stored responses, by method and the path after `/v1/responses/`.
/// `input_tokens` is a name on POST only; on GET or DELETE it is an id like any other.
fn responses_aside(method: &http::Method, rest: &str) -> Option<Aside> {
    let id = |s: &str| (!s.is_empty() && !s.contains('/')).then(|| s.to_string());
    match method.as_str() {
        "POST" => (rest == "input_tokens").then_some(Aside::ResponseInputTokens),
        "GET" => match rest.strip_suffix("/input_items") {
            Some(i) => id(i).map(Aside::ResponseInputItems),
            None => id(rest).map(Aside::ResponseRetrieve),
        },
        "DELETE" => id(rest).map(Aside::ResponseDelete),
        _ => None,
    }
}

/// The server name of an `/mcp/{server}` path.
pub fn server_name(path: &str) -> Option<String> {
    let rest = path.strip_prefix("/mcp/")?;
    let name = percent_encoding::percent_decode_str(rest.trim_end_matches('/')).decode_utf8().ok()?;
    (!name.is_empty() && !name.contains('/')).then(|| name.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aside_paths() {
        let get = http::Method::GET;
        assert_eq!(Aside::resolve(&get, "/v1/models"), Some(Aside::Models));
        assert_eq!(Aside::resolve(&get, "/v1/v1/models"), Some(Aside::Models));
        assert_eq!(
            Aside::resolve(&get, "/v1/models/bedrock/amazon.nova-micro-v1%3A0"),
            Some(Aside::Model("bedrock/amazon.nova-micro-v1:0".into()))
        );
        assert_eq!(Aside::resolve(&get, "/v1/models/"), None);
        assert_eq!(Aside::resolve(&http::Method::POST, "/v1/messages/count_tokens"), Some(Aside::CountTokens));
        assert_eq!(Aside::resolve(&http::Method::POST, "/v1/v1/messages/count_tokens"), Some(Aside::CountTokens));
        assert_eq!(Aside::resolve(&http::Method::POST, "/v1/models"), None);
        assert_eq!(Aside::resolve(&get, "/v1/messages/count_tokens"), None);
    }

    #[test]
    fn stored_response_paths() {
        use http::Method;
        let r = |m: Method, p: &str| Aside::resolve(&m, p);
        assert_eq!(r(Method::POST, "/v1/responses/input_tokens"), Some(Aside::ResponseInputTokens));
        assert_eq!(r(Method::GET, "/v1/responses/resp_1"), Some(Aside::ResponseRetrieve("resp_1".into())));
        assert_eq!(r(Method::GET, "/v1/responses/resp_1/"), Some(Aside::ResponseRetrieve("resp_1".into())));
        assert_eq!(r(Method::DELETE, "/v1/responses/resp_1"), Some(Aside::ResponseDelete("resp_1".into())));
        assert_eq!(
            r(Method::GET, "/v1/v1/responses/resp_1/input_items"),
            Some(Aside::ResponseInputItems("resp_1".into()))
        );
        for (m, p) in [
            (Method::GET, "/v1/responses"),
            (Method::POST, "/v1/responses"),
            (Method::PUT, "/v1/responses/resp_1"),
            (Method::POST, "/v1/responses/resp_1"),
            (Method::GET, "/v1/responses//input_items"),
            (Method::GET, "/v1/responses/a/b"),
            (Method::DELETE, "/v1/responses/a/input_items"),
        ] {
            assert_eq!(r(m.clone(), p), None, "{m} {p}");
        }
    }

    #[test]
    fn server_names_from_paths() {
        assert_eq!(server_name("/mcp/search").as_deref(), Some("search"));
        assert_eq!(server_name("/mcp/search/").as_deref(), Some("search"));
        assert_eq!(server_name("/mcp/a%2Eb").as_deref(), Some("a.b"));
        assert_eq!(server_name("/mcp/"), None);
        assert_eq!(server_name("/mcp/a/b"), None);
        assert_eq!(server_name("/v1/mcp/a"), None);
    }
}
