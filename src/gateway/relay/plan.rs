//! What a relay is told (its plan) and what it hands back (the relayed answer).

use http::header::{HeaderMap, HeaderValue};

use crate::checks::pipeline::UpstreamOutcome;
use crate::checks::pipeline::{Cached, Ctx, Pipeline};
use crate::gateway::ending::Ending;
use crate::gateway::header;
use crate::providers::usage::{Dialect, Usage};
use crate::providers::Flavor;
use crate::providers::Provider;
use crate::upstream::UpstreamResponse;

/// What the relay learnt on the way, and how the answer is to end.
pub struct Relayed {
    pub status: u16,
    pub usage: Option<Usage>,
    pub outcome: UpstreamOutcome,
    /// The answer as the client gets it, when it was asked for (cache) and complete.
    pub captured: Option<Cached>,
    /// The model the provider says answered, when [`RelayPlan::read_model`] asked for it.
    pub model: Option<String>,
    pub ending: Ending,
}

impl Relayed {
    /// An answer the relay has not finished: failed and cut off unless it gets further.
    pub(super) fn unfinished(status: u16) -> Relayed {
        Relayed {
            status,
            usage: None,
            outcome: UpstreamOutcome::Fail,
            captured: None,
            model: None,
            ending: Ending::Abort,
        }
    }
}

/// An answer to put into OpenAI's shape: the provider that gives it, and what the translated
/// answer says of itself.
pub struct Translation {
    pub provider: &'static dyn Provider,
    /// The model id the provider served.
    pub model: String,
    pub id: String,
    pub created: i64,
}

/// How the answer is to be relayed.
pub struct RelayPlan<'a> {
    /// What the client speaks.
    pub dialect: Dialect,
    /// What the upstream speaks (the client's dialect unless the answer is translated).
    pub wire: Dialect,
    /// The client asked for a stream.
    pub stream: bool,
    pub translation: Option<Translation>,
    pub flavor: Flavor,
    /// The provider's name, for error messages.
    pub provider: &'static str,
    /// Drop OpenAI's usage-only chunk the gateway asked for on the client's behalf.
    pub hide_usage_chunk: bool,
    /// Headers every answer carries (request and receipt ids, rate-limit state).
    pub headers: &'a [(&'static str, String)],
    pub pipeline: &'a Pipeline,
    pub cx: &'a mut Ctx,
    /// Keep a copy of the answer up to this size (for the cache).
    pub capture_limit: Option<usize>,
    /// Read the answering model from the answer (for the trace; off, it costs nothing).
    pub read_model: bool,
    /// Told the id of each stored object the answer creates (a Responses create: the response
    /// and its output items), as soon as the answer names it.
    pub stored: Option<&'a (dyn Fn(&str) + Sync)>,
}

/// The answer's header fields: the provider's end-to-end ones, then ours (see `header`).
pub(super) fn answer_fields(resp: &UpstreamResponse<'_>, plan: &RelayPlan<'_>) -> HeaderMap {
    let upstream = &resp.header().headers;
    let mut map = HeaderMap::with_capacity(upstream.len() + plan.headers.len() + 1);
    header::copy_end_to_end(&mut map, upstream);
    if plan.translation.is_some() {
        // The answer is the client's format now, not the provider's.
        let content_type = if plan.stream { "text/event-stream" } else { "application/json" };
        map.insert(http::header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    }
    header::set_ours(&mut map, plan.headers);
    map
}

pub(super) fn content_type(resp: &UpstreamResponse<'_>) -> String {
    resp.header().headers.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_string()
}
