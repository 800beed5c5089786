//! What the checks need from a route kind that has them (model calls, MCP tool calls), and how
//! that kind answers their verdicts. The decide stage (`lifecycle.rs`) is the same for all.

use pingora::proxy::Session;

use super::context::Ctx;
use super::ending::Ending;
use crate::checks::pipeline::{Cached, Exchange};
use crate::error::ApiError;

pub(super) trait Checked {
    /// The provider-neutral request the checks see; the request's body moves into it.
    fn exchange(&mut self, session: &Session, ctx: &Ctx) -> Exchange;

    /// Whether the upstream gets the body as the gateway edited it (then the checks hand its
    /// JSON on) rather than the client's bytes.
    fn edits_body(&self, ex: &Exchange) -> bool;

    /// The answer when a check refuses the request.
    fn refused(&self, ctx: &mut Ctx, e: ApiError) -> Result<Ending, ApiError>;

    /// The answer when a check serves the request itself (the cache).
    fn served(&self, ctx: &mut Ctx, hit: Cached) -> Result<Ending, ApiError>;
}
