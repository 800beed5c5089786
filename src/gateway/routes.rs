//! The gateway's routes and what each one speaks.

use crate::error::Flavor;
use crate::providers::Dialect;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    ChatCompletions,
    Embeddings,
    Messages,
}

impl Route {
    pub fn resolve(method: &http::Method, path: &str) -> Option<Route> {
        if method != http::Method::POST {
            return None;
        }
        match path.trim_end_matches('/') {
            "/v1/chat/completions" => Some(Route::ChatCompletions),
            "/v1/embeddings" => Some(Route::Embeddings),
            "/v1/messages" => Some(Route::Messages),
            _ => None,
        }
    }

    /// The upstream path for this route (the same on every provider we route it to).
    pub fn upstream_path(self) -> &'static str {
        match self {
            Route::ChatCompletions => "/v1/chat/completions",
            Route::Embeddings => "/v1/embeddings",
            Route::Messages => "/v1/messages",
        }
    }

    /// The API dialect the client speaks on this route.
    pub fn dialect(self) -> Dialect {
        match self {
            Route::Messages => Dialect::Anthropic,
            _ => Dialect::OpenAi,
        }
    }

    pub fn flavor(self) -> Flavor {
        match self {
            Route::Messages => Flavor::Anthropic,
            _ => Flavor::OpenAi,
        }
    }

    /// Metric label.
    pub fn label(self) -> &'static str {
        match self {
            Route::ChatCompletions => "chat_completions",
            Route::Embeddings => "embeddings",
            Route::Messages => "messages",
        }
    }
}
