//! The gateway's model-call routes and what each one speaks: the chat dialect's routes and each
//! provider's native API, with the provider that owns it, its dialect and its error shape.

use super::envelope::Flavor;
use super::usage::Dialect;
use crate::providers::ProviderName;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    ChatCompletions,
    Embeddings,
    Messages,
    /// `POST /bedrock/model/{modelId}/converse`.
    Converse,
    /// `POST /bedrock/model/{modelId}/converse-stream`.
    ConverseStream,
    /// `POST /vertex/[v1/]projects/{p}/locations/{l}/publishers/{pub}/models/{m}:generateContent`.
    Generate,
    /// The same path with `:streamGenerateContent`.
    GenerateStream,
    /// `POST /v1/responses`: OpenAI Responses, a model call (the calls on stored responses are
    /// the gateway's asides).
    Responses,
}

impl Route {
    pub fn resolve(method: &http::Method, path: &str) -> Option<Route> {
        if method != http::Method::POST {
            return None;
        }
        match normalize(path).trim_end_matches('/') {
            "/v1/chat/completions" => Some(Route::ChatCompletions),
            "/v1/embeddings" => Some(Route::Embeddings),
            "/v1/messages" => Some(Route::Messages),
            "/v1/responses" => Some(Route::Responses),
            p if p.starts_with("/bedrock/") => bedrock_path(p).map(|(_, route)| route),
            p if p.starts_with("/vertex/") => vertex_path(p).map(|(_, route)| route),
            _ => None,
        }
    }

    /// The model a native route names in its path (percent-decoded), else None.
    pub fn path_model(self, path: &str) -> Option<String> {
        match self {
            Route::Converse | Route::ConverseStream => bedrock_path(path).map(|(m, _)| m),
            Route::Generate | Route::GenerateStream => vertex_path(path).map(|(m, _)| m),
            _ => None,
        }
    }

    /// The provider a native route belongs to.
    pub fn native_provider(self) -> Option<ProviderName> {
        match self {
            Route::Messages => Some(ProviderName::Anthropic),
            Route::Converse | Route::ConverseStream => Some(ProviderName::Bedrock),
            Route::Generate | Route::GenerateStream => Some(ProviderName::Vertex),
            Route::Responses => Some(ProviderName::OpenAi),
            Route::ChatCompletions | Route::Embeddings => None,
        }
    }

    /// The provider a route's requests go to when nothing else says: a native route's owner,
    /// else the chat dialect's own provider (the one that serves embeddings).
    pub fn default_provider(self) -> ProviderName {
        self.native_provider().unwrap_or(ProviderName::OpenAi)
    }

    /// Whether the route itself asks for a stream (the native streaming operations).
    pub fn streams(self) -> bool {
        matches!(self, Route::ConverseStream | Route::GenerateStream)
    }

    /// The route's operation, as the checks and the cache key see it.
    pub fn upstream_path(self) -> &'static str {
        match self {
            Route::ChatCompletions => "/v1/chat/completions",
            Route::Embeddings => "/v1/embeddings",
            Route::Messages => "/v1/messages",
            Route::Converse => "/bedrock/converse",
            Route::ConverseStream => "/bedrock/converse-stream",
            Route::Generate => "/vertex/generateContent",
            Route::GenerateStream => "/vertex/streamGenerateContent",
            Route::Responses => "/v1/responses",
        }
    }

    /// The API dialect the client speaks on this route.
    pub fn dialect(self) -> Dialect {
        match self {
            Route::Messages => Dialect::Anthropic,
            Route::Converse | Route::ConverseStream => Dialect::Converse,
            Route::Generate | Route::GenerateStream => Dialect::Gemini,
            Route::ChatCompletions | Route::Embeddings => Dialect::OpenAi,
            Route::Responses => Dialect::Responses,
        }
    }

    pub fn flavor(self) -> Flavor {
        match self {
            Route::Messages => Flavor::Anthropic,
            Route::Converse | Route::ConverseStream => Flavor::Bedrock,
            Route::Generate | Route::GenerateStream => Flavor::Google,
            Route::ChatCompletions | Route::Embeddings | Route::Responses => Flavor::OpenAi,
        }
    }

    /// The OpenTelemetry GenAI `gen_ai.operation.name` of this route.
    pub fn operation(self) -> &'static str {
        match self {
            Route::Embeddings => "embeddings",
            _ => "chat",
        }
    }

    /// Metric label.
    pub fn label(self) -> &'static str {
        match self {
            Route::ChatCompletions => "chat_completions",
            Route::Embeddings => "embeddings",
            Route::Messages => "messages",
            Route::Converse => "bedrock_converse",
            Route::ConverseStream => "bedrock_converse_stream",
            Route::Generate => "vertex_generate_content",
            Route::GenerateStream => "vertex_stream_generate_content",
            Route::Responses => "responses",
        }
    }
}

/// A provider's native operation the gateway passes on that is not a model call: the provider
/// that owns it, the dialect it answers in and the error envelope its client reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NativeOp {
    pub provider: ProviderName,
    pub dialect: Dialect,
    pub flavor: Flavor,
}

impl NativeOp {
    /// `POST /v1/messages/count_tokens`.
    pub const COUNT_TOKENS: NativeOp =
        NativeOp { provider: ProviderName::Anthropic, dialect: Dialect::Anthropic, flavor: Flavor::Anthropic };
    /// The calls on stored responses (`/v1/responses/{id}`, `/v1/responses/input_tokens`).
    pub const STORED_RESPONSES: NativeOp =
        NativeOp { provider: ProviderName::OpenAi, dialect: Dialect::Responses, flavor: Flavor::OpenAi };
}

/// A client whose base URL already ends in `/v1` (the anthropic SDK appends `/v1/messages` to
/// it) asks for `/v1/v1/...`: one `/v1` is dropped, so both base URLs work.
pub fn normalize(path: &str) -> &str {
    if path.starts_with("/v1/v1/") {
        &path[3..]
    } else {
        path
    }
}

/// `/bedrock/model/{modelId}/converse[-stream]` → the model id and the route.
fn bedrock_path(path: &str) -> Option<(String, Route)> {
    let rest = path.strip_prefix("/bedrock/model/")?;
    let (model, op) = rest.rsplit_once('/')?;
    let route = match op {
        "converse" => Route::Converse,
        "converse-stream" => Route::ConverseStream,
        _ => return None,
    };
    let model = percent_decode(model)?;
    (!model.is_empty() && !model.contains('/')).then_some((model, route))
}

/// `/vertex/[v1/]projects/{p}/locations/{l}/publishers/{pub}/models/{m}:{op}` → the model and
/// the route.
fn vertex_path(path: &str) -> Option<(String, Route)> {
    let rest = path.strip_prefix("/vertex/")?;
    let rest = rest.strip_prefix("v1/").unwrap_or(rest);
    let parts: Vec<&str> = rest.split('/').collect();
    let [projects, p, locations, l, publishers, publisher, models, last] = parts.as_slice() else { return None };
    let named = [*projects, *locations, *publishers, *models] == ["projects", "locations", "publishers", "models"];
    if !named || [p, l, publisher].iter().any(|s| s.is_empty()) {
        return None;
    }
    let (model, op) = last.rsplit_once(':')?;
    let route = match op {
        "generateContent" => Route::Generate,
        "streamGenerateContent" => Route::GenerateStream,
        _ => return None,
    };
    let model = percent_decode(model)?;
    (!model.is_empty()).then_some((model, route))
}

/// A path segment, percent-decoded; None when the bytes are not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    percent_encoding::percent_decode_str(s).decode_utf8().ok().map(|c| c.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_paths_name_their_model() {
        let post = http::Method::POST;
        let p = "/bedrock/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse-stream";
        assert_eq!(Route::resolve(&post, p), Some(Route::ConverseStream));
        assert_eq!(Route::ConverseStream.path_model(p).as_deref(), Some("anthropic.claude-3-haiku-20240307-v1:0"));
        assert_eq!(Route::resolve(&post, "/bedrock/model/x/invoke"), None);
        assert_eq!(Route::resolve(&post, "/bedrock/model//converse"), None);
        let v =
            "/vertex/v1/projects/p1/locations/us-central1/publishers/google/models/gemini-2.0-flash:generateContent";
        assert_eq!(Route::resolve(&post, v), Some(Route::Generate));
        assert_eq!(Route::Generate.path_model(v).as_deref(), Some("gemini-2.0-flash"));
        let short = "/vertex/projects/p1/locations/l/publishers/google/models/m:streamGenerateContent";
        assert_eq!(Route::resolve(&post, short), Some(Route::GenerateStream));
        assert_eq!(
            super::super::vertex::upstream_path(&format!("{short}?alt=sse")),
            "/v1/projects/p1/locations/l/publishers/google/models/m:streamGenerateContent?alt=sse"
        );
        assert_eq!(Route::resolve(&post, "/vertex/projects/p1/models/m:generateContent"), None);
        assert_eq!(Route::resolve(&http::Method::GET, v), None);
        assert_eq!(Route::resolve(&post, "/v1/v1/messages"), Some(Route::Messages));
        assert_eq!(Route::resolve(&post, "/v1/responses/"), Some(Route::Responses));
        assert_eq!(Route::resolve(&http::Method::GET, "/v1/responses"), None);
        assert_eq!(normalize("/v1/v1/messages/count_tokens?beta=true"), "/v1/messages/count_tokens?beta=true");
    }
}
