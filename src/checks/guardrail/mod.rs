//! Guardrails: find PII, secrets, prompt injection and custom patterns in request and response
//! text, and redact or block them. Pure: no I/O, no clock.
//!
//! Settings are the `guardrails` sections of a tenant's enabled policies (docs/API.md "Policy
//! language"). [`Guardrails::compile`] merges them once per snapshot into an immutable value
//! shared by every request; `apply` on text with no finding allocates nothing.
//!
//! - `detectors`: PII and secrets (regex + validator); `luhn_iban`: the checksums
//! - `injection`: prompt-injection heuristics; `resolve`: overlaps and replacement
//! - `stream`: streamed responses, delta by delta; `json_text`: the text fields of provider
//!   bodies and SSE events; `json_scan`: the same fields read from a body's bytes, for the
//!   common clean body that needs no tree

mod detector;
mod detectors;
mod injection;
mod json_scan;
mod json_text;
mod luhn_iban;
pub mod plugin;
mod rails;
mod resolve;
mod scan;
mod stream;

pub use crate::checks::policy::document::{Direction, GuardAction};
pub use json_scan::{request_is_clean, response_is_clean};
pub use json_text::{
    apply_to_request_json, apply_to_response_json, apply_to_tool_call, apply_to_tool_result, event_text,
    set_event_text, JsonOutcome,
};
pub use rails::{Applied, Guardrails};
pub use scan::Finding;
pub use stream::{StreamOut, StreamScanner};

#[cfg(test)]
mod tests;
