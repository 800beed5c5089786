//! The error envelope in the shape the client's SDK reads ([`Flavor`]): the contract's
//! `{"error": {type, message, code}}`, reshaped per route for the dialect the client speaks.
//! Every error that reaches a client, on either port, passes through [`ApiError::envelope`].

use serde_json::json;

use super::{bedrock, vertex};
use crate::error::{ApiError, ErrorDetail};

/// The shape an error body takes, chosen by the route the client called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// Management API: `{"error": {type, message, code}}`.
    Plain,
    /// OpenAI-shaped gateway routes: adds `"param": null` so the openai SDK parses it.
    OpenAi,
    /// Anthropic route: `{"type": "error", "error": {...}}`, as the anthropic SDK expects.
    Anthropic,
    /// Bedrock routes: AWS's `{"message", "__type"}` (botocore reads the error code from
    /// `__type`), with the gateway's `error` object beside them.
    Bedrock,
    /// Vertex routes: Google's `{"error": {code, message, status}}`, with the gateway's `type`.
    Google,
}

impl Flavor {
    /// Whether an upstream status is passed on as it is rather than as the gateway's 502:
    /// Anthropic's 529 "overloaded" on the Anthropic route, on which the anthropic SDK raises
    /// its OverloadedError (and retries).
    pub fn keeps_upstream_status(self, status: u16) -> bool {
        status == 529 && self == Flavor::Anthropic
    }
}

impl ApiError {
    pub fn envelope(&self, flavor: Flavor) -> serde_json::Value {
        let detail = ErrorDetail { kind: self.kind.type_name(), message: &self.message, code: self.status() };
        let inner = serde_json::to_value(detail).unwrap_or_default();
        let mut body = self.flavored(flavor, inner);
        // Members that ride along (`ApiError::with_members`), beside `error`.
        for (name, value) in &self.members {
            body[*name] = value.clone();
        }
        body
    }

    /// The envelope of `flavor` around the contract's `{type, message, code}`.
    fn flavored(&self, flavor: Flavor, mut inner: serde_json::Value) -> serde_json::Value {
        match flavor {
            Flavor::Plain => json!({ "error": inner }),
            Flavor::OpenAi => {
                inner["param"] = serde_json::Value::Null;
                json!({ "error": inner })
            }
            Flavor::Anthropic => json!({ "type": "error", "error": inner }),
            Flavor::Bedrock => {
                json!({ "message": self.message, "__type": bedrock::aws_error_code(self.status()), "error": inner })
            }
            Flavor::Google => {
                inner["status"] = vertex::google_status(self.status()).into();
                json!({ "error": inner })
            }
        }
    }

    pub fn body(&self, flavor: Flavor) -> Vec<u8> {
        serde_json::to_vec(&self.envelope(flavor)).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 410 `receipt_pruned` (docs/log.md §7): what is left of the receipt rides beside `error`.
    #[test]
    fn extra_members_ride_beside_the_error() {
        let e = ApiError::pruned(7, "ab");
        assert_eq!(e.status(), 410);
        let body = e.envelope(Flavor::Plain);
        assert_eq!(body["error"]["type"], "receipt_pruned");
        assert_eq!(body["error"]["code"], 410);
        assert_eq!((body["seq"].clone(), body["thisHash"].clone()), (json!(7), json!("ab")));
        assert_eq!(body.as_object().unwrap().len(), 3);
        let plain = ApiError::not_found("receipt").envelope(Flavor::Plain);
        assert_eq!(plain.as_object().unwrap().keys().collect::<Vec<_>>(), ["error"]);
    }
}
