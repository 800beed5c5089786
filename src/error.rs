//! The one table that maps an error kind to an HTTP status and the contract's envelope.
//!
//! Every error that reaches a client, on either port, passes through `ApiError::envelope`
//! (in `providers::envelope`, which reshapes it for the SDK of the route's dialect).

use serde_json::json;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    InvalidRequest,
    GuardrailBlocked,
    Unauthorized,
    BudgetExceeded,
    Forbidden,
    PolicyDenied,
    NotFound,
    MethodNotAllowed,
    Conflict,
    /// A receipt whose contents retention deleted (docs/log.md §7).
    ReceiptPruned,
    PayloadTooLarge,
    RateLimited,
    Internal,
    UpstreamError,
    NotConfigured,
    Unavailable,
    UpstreamTimeout,
    /// A provider's own 4xx, answered with the provider's status (docs/API.md §Errors).
    ProviderRefused(u16),
}

impl ErrorKind {
    pub fn status(self) -> u16 {
        use ErrorKind::*;
        match self {
            InvalidRequest | GuardrailBlocked => 400,
            Unauthorized => 401,
            BudgetExceeded => 402,
            Forbidden | PolicyDenied => 403,
            NotFound => 404,
            MethodNotAllowed => 405,
            Conflict => 409,
            ReceiptPruned => 410,
            PayloadTooLarge => 413,
            RateLimited => 429,
            Internal => 500,
            UpstreamError => 502,
            NotConfigured | Unavailable => 503,
            UpstreamTimeout => 504,
            ProviderRefused(status) => status,
        }
    }

    pub fn type_name(self) -> &'static str {
        use ErrorKind::*;
        match self {
            InvalidRequest => "invalid_request",
            GuardrailBlocked => "guardrail_blocked",
            Unauthorized => "unauthorized",
            BudgetExceeded => "budget_exceeded",
            Forbidden => "forbidden",
            PolicyDenied => "policy_denied",
            NotFound => "not_found",
            MethodNotAllowed => "method_not_allowed",
            Conflict => "conflict",
            ReceiptPruned => "receipt_pruned",
            PayloadTooLarge => "payload_too_large",
            RateLimited => "rate_limited",
            Internal => "internal_error",
            UpstreamError => "upstream_error",
            NotConfigured => "not_configured",
            Unavailable => "unavailable",
            UpstreamTimeout => "upstream_timeout",
            ProviderRefused(status) => match status {
                400 | 422 => "invalid_request",
                401 => "unauthorized",
                403 => "forbidden",
                404 => "not_found",
                409 => "conflict",
                413 => "payload_too_large",
                429 => "rate_limited",
                // Anthropic's "overloaded", passed through as such on its own route.
                529 => "overloaded_error",
                _ => "upstream_error",
            },
        }
    }
}

impl ErrorKind {
    /// The kind an error envelope of ours names (`error.type`), for an answer the gateway gave
    /// to a call the management API made through it; an unknown type keeps its status.
    pub fn from_answer(type_name: &str, status: u16) -> ErrorKind {
        use ErrorKind::*;
        let known = [
            InvalidRequest,
            GuardrailBlocked,
            Unauthorized,
            BudgetExceeded,
            Forbidden,
            PolicyDenied,
            NotFound,
            PayloadTooLarge,
            RateLimited,
            UpstreamError,
            NotConfigured,
            Unavailable,
            UpstreamTimeout,
        ];
        match known.into_iter().find(|k| k.type_name() == type_name && k.status() == status) {
            Some(k) => k,
            None if status >= 500 => UpstreamError,
            None => ProviderRefused(status),
        }
    }
}

/// The management API's error body (`Flavor::Plain` in `providers::envelope`), as the OpenAPI
/// document describes it.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
#[schema(as = Error)]
pub struct ErrorEnvelope<'a> {
    pub error: ErrorDetail<'a>,
}

/// 410 `receipt_pruned` (docs/log.md §7): the envelope, and what is left of the receipt.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PrunedEnvelope<'a> {
    pub error: ErrorDetail<'a>,
    pub seq: u64,
    /// The receipt's kept hash: still its leaf in the tenant log.
    pub this_hash: &'a str,
}

/// What went wrong: `type` is one of a fixed set of names, `code` the HTTP status.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct ErrorDetail<'a> {
    #[serde(rename = "type")]
    #[schema(value_type = ErrorType)]
    pub kind: &'static str,
    /// What was wrong and how to fix it; never a secret.
    pub message: &'a str,
    #[schema(minimum = 400, maximum = 599)]
    pub code: u16,
}

/// Every `type` an error can have, from [`ErrorKind::type_name`].
pub struct ErrorType;

impl utoipa::PartialSchema for ErrorType {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        use ErrorKind::*;
        let kinds = [
            InvalidRequest,
            GuardrailBlocked,
            Unauthorized,
            BudgetExceeded,
            Forbidden,
            PolicyDenied,
            NotFound,
            MethodNotAllowed,
            Conflict,
            ReceiptPruned,
            PayloadTooLarge,
            RateLimited,
            Internal,
            UpstreamError,
            NotConfigured,
            Unavailable,
            UpstreamTimeout,
        ];
        ObjectBuilder::new().schema_type(Type::String).enum_values(Some(kinds.map(ErrorKind::type_name))).into()
    }
}

impl utoipa::ToSchema for ErrorType {}

#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub kind: ErrorKind,
    pub message: String,
    /// Extra answer headers (429: `Retry-After` and OpenAI's `x-ratelimit-*`).
    pub headers: Vec<(&'static str, String)>,
    /// Extra top-level members of the envelope, beside `error` (410 `receipt_pruned`: `seq` and
    /// `thisHash`, what is left of the receipt).
    pub members: Vec<(&'static str, serde_json::Value)>,
}

impl ApiError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ApiError { kind, message: message.into(), headers: Vec::new(), members: Vec::new() }
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidRequest, message)
    }
    pub fn unauthorized() -> Self {
        Self::new(ErrorKind::Unauthorized, "missing or invalid API key: send `Authorization: Bearer tollgate_sk_...`")
    }
    pub fn forbidden() -> Self {
        Self::new(ErrorKind::Forbidden, "this operation needs a manager key")
    }
    /// What an auditor key may not do (docs/log.md §8).
    pub fn auditor_refused(what: &str) -> Self {
        Self::new(
            ErrorKind::Forbidden,
            format!(
                "{what}: auditor keys only read (GET the receipt, log, compliance, analytics and audit-event routes)"
            ),
        )
    }
    pub fn not_found(what: &str) -> Self {
        Self::new(ErrorKind::NotFound, format!("{what} not found"))
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }
    pub fn status(&self) -> u16 {
        self.kind.status()
    }
    pub fn with_headers(mut self, headers: Vec<(&'static str, String)>) -> Self {
        self.headers.extend(headers);
        self
    }
    /// Adds top-level members to the envelope (`providers::envelope` puts them beside `error`).
    pub fn with_members(mut self, members: Vec<(&'static str, serde_json::Value)>) -> Self {
        self.members.extend(members);
        self
    }
    /// 410: the receipt `seq` was pruned by retention; its `thisHash` is all that is left.
    pub fn pruned(seq: u64, this_hash: &str) -> Self {
        Self::new(
            ErrorKind::ReceiptPruned,
            format!(
                "receipt seq {seq} was pruned by the tenant's log retention: its contents are deleted; its thisHash \
                 stays in the log (GET /v1/log/inclusion?seq={seq} proves it)"
            ),
        )
        .with_members(vec![("seq", json!(seq)), ("thisHash", json!(this_hash))])
    }

    /// The JSON-RPC 2.0 code of this error on `/mcp/{server}`, where a refusal is an error
    /// object the MCP client reads, not an HTTP status. JSON-RPC's own codes for malformed
    /// messages; the implementation-defined range (-32000 to -32099) for the gateway's checks and
    /// the tool server's failures, one code per kind so a client can tell them apart.
    pub fn jsonrpc_code(&self) -> i64 {
        use ErrorKind::*;
        match self.kind {
            InvalidRequest => -32602,
            PolicyDenied | Forbidden => -32001,
            GuardrailBlocked => -32002,
            RateLimited => -32003,
            BudgetExceeded => -32004,
            UpstreamError | ProviderRefused(_) => -32005,
            UpstreamTimeout => -32006,
            Unauthorized => -32007,
            NotFound => -32008,
            ReceiptPruned => -32011,
            PayloadTooLarge => -32009,
            Unavailable | NotConfigured => -32010,
            MethodNotAllowed | Conflict => -32600,
            Internal => -32603,
        }
    }

    /// The JSON-RPC error response to the request `id`: `data` carries the contract's error type
    /// and the HTTP status the same refusal has on the other routes.
    pub fn jsonrpc(&self, id: &serde_json::Value) -> serde_json::Value {
        json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {
                "code": self.jsonrpc_code(),
                "message": self.message,
                "data": {"type": self.kind.type_name(), "status": self.status()},
            },
        })
    }
}

impl From<crate::store::StoreError> for ApiError {
    fn from(e: crate::store::StoreError) -> Self {
        log::error!("storage error: {e}");
        match e {
            crate::store::StoreError::Unavailable(_) => {
                ApiError::new(ErrorKind::Unavailable, "the database is unavailable; retry shortly")
            }
            _ => ApiError::internal("internal storage error"),
        }
    }
}
