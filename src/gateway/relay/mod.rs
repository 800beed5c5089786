//! The upstream leg's answer: relay it to the client, read usage, and let the answer-side checks
//! see it (response guardrails) when one asked to. The relay never ends an answer: it hands
//! back the [`Ending`](super::ending::Ending) (the answer's last bytes, or the whole of it) for
//! the gateway to send once the receipt is committed.

mod events;
mod frames;

mod passthrough;
mod plan;
mod translating;
mod whole;

use pingora::proxy::Session;

use crate::upstream::UpstreamResponse;

pub use crate::checks::pipeline::UpstreamOutcome;
use plan::content_type;
pub use plan::{RelayPlan, Relayed, Translation};

pub async fn relay(session: &mut Session, resp: UpstreamResponse<'_>, plan: RelayPlan<'_>) -> Relayed {
    if !resp.header().status.is_success() {
        return whole::relay_refusal(resp, plan).await;
    }
    let content_type = content_type(&resp);
    if content_type.starts_with("text/event-stream") || (plan.stream && plan.translation.is_some()) {
        events::relay_events(session, resp, plan).await
    } else if content_type.starts_with(EVENT_STREAM) {
        frames::relay_frames(session, resp, plan).await
    } else {
        whole::relay_body(session, resp, plan).await
    }
}

/// AWS event-stream framing (Bedrock's `converse-stream`).
const EVENT_STREAM: &str = "application/vnd.amazon.eventstream";
