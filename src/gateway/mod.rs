//! The gateway: the one service clients call, its answers relayed from the providers and
//! tool servers with one receipt each (docs/architecture.md, "The request path").

mod account;
mod aside;
mod aside_calls;
mod body;
mod catalog;
mod checked;
mod client;
mod context;
mod ending;
mod fallback;
mod header;
mod lifecycle;
mod mcp;
mod model_call;
mod proxy;
mod relay;
mod request;
mod responses;
mod span;
mod sse;
mod state;
mod stored;

pub use relay::UpstreamOutcome;
pub use state::Gateway;
