//! The lifecycle every gateway route goes through: admit → decide → forward, then `end`
//! (`account.rs`), which commits the receipt before the answer's ending leaves. The stages are
//! the same for every route kind; what differs is data: each kind's admit and forward
//! (`model_call.rs`, `mcp.rs`, `aside_calls.rs`) and, for the kinds the checks see, its
//! [`Checked`] answers.

use pingora::proxy::Session;
use serde_json::Value;

use super::aside::Aside;
use super::aside_calls::SideCall;
use super::checked::Checked;
use super::context::Ctx;
use super::ending::Ending;
use super::mcp::{McpAdmitted, ToolCall};
use super::model_call::ModelCall;
use super::state::Gateway;
use crate::checks::pipeline::Step;
use crate::error::ApiError;

/// What the admit stage let in, by route kind.
enum Admitted {
    /// Chat completions, messages, embeddings, a Responses create, a native provider path.
    Model(ModelCall),
    /// An MCP `tools/call`.
    Tool(ToolCall),
    /// A call the checks don't see and no receipt records (`aside_calls.rs`).
    Side(SideCall),
}

/// How the decide stage ended: on to the upstream (with the edited body, when there is one),
/// or answered by a check.
enum Decided {
    Forward(Option<Value>),
    Answered(Result<Ending, ApiError>),
}

impl Gateway {
    /// Runs one request up to its ending; an `Err` is answered as an envelope.
    pub(super) async fn handle(&self, session: &mut Session, ctx: &mut Ctx) -> Result<Ending, ApiError> {
        match self.admit(session, ctx).await? {
            Admitted::Model(mut call) => match self.decide(session, ctx, &mut call).await {
                Decided::Forward(json) => self.forward_model_call(session, ctx, call, json).await,
                Decided::Answered(answer) => answer,
            },
            // Boxed, as the side calls: inlined, they would grow every model call's future.
            Admitted::Tool(mut call) => match self.decide(session, ctx, &mut call).await {
                Decided::Forward(json) => Box::pin(self.forward_tool_call(session, ctx, call, json)).await,
                Decided::Answered(answer) => answer,
            },
            Admitted::Side(call) => Box::pin(self.forward_side_call(session, ctx, call)).await,
        }
    }

    /// Admit: who asks, for what, with which body; by the route kind the path names.
    async fn admit(&self, session: &mut Session, ctx: &mut Ctx) -> Result<Admitted, ApiError> {
        let aside = match &ctx.aside {
            None => return self.admit_model_call(session, ctx).await.map(Admitted::Model),
            Some(a) => a.clone(),
        };
        Ok(match aside {
            Aside::Mcp(name) => match Box::pin(self.admit_mcp(session, ctx, &name)).await? {
                McpAdmitted::Call(call) => Admitted::Tool(call),
                McpAdmitted::Pass(pass) => Admitted::Side(SideCall::Mcp(pass)),
                McpAdmitted::Answered(ending) => Admitted::Side(SideCall::Answered(ending)),
            },
            aside => Admitted::Side(Box::pin(self.admit_side_call(session, ctx, aside)).await?),
        })
    }

    /// Decide: the checks, in table order. The request's body moves into the exchange the
    /// checks see, and on to the upstream as JSON when the gateway must edit it.
    async fn decide<C: Checked>(&self, session: &Session, ctx: &mut Ctx, call: &mut C) -> Decided {
        let mut ex = call.exchange(session, ctx);
        let step = self.pipeline.on_request(&mut ex, &mut ctx.cx).await;
        ctx.body_changed = ex.body_changed;
        let json = call.edits_body(&ex).then(|| ex.body.take_json());
        ctx.exchange = Some(ex);
        match step {
            Step::Continue => Decided::Forward(json),
            Step::Block(e) => Decided::Answered(call.refused(ctx, e)),
            Step::Serve(hit) => Decided::Answered(call.served(ctx, hit)),
        }
    }
}
