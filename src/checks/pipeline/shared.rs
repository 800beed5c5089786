//! What a check may ask of the state several gateway processes share (`cluster`), as values.
//!
//! Checks do no I/O. A check that keeps its counters in the shared store answers
//! [`super::Verdict::Ask`] with one of these; the pipeline sends it (one round trip) and hands
//! the [`Answer`] back to the same check ([`super::Check::on_answer`]), which decides.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::Cached;
use crate::checks::rate_limit::{State, TokenAsk};

/// One round trip to the shared store.
#[derive(Debug, Clone)]
pub enum Ask {
    /// Count one request and what fits of `ask` against the key's windows, all limits at once.
    Rate { key_id: Arc<str>, rpm: Option<u64>, tpm: Option<u64>, ask: TokenAsk },
    /// Reserve `amount_usd` against every budget entry, all or nothing.
    Budget { entries: Vec<BudgetEntry>, amount_usd: f64 },
    /// The cached answer under this key, if any.
    Cache { key: [u8; 32] },
}

/// One scope's spend in one period, with the smallest limit on it.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetEntry {
    /// `key`, `team` or `tenant`.
    pub scope: &'static str,
    pub scope_id: String,
    /// `total` or `YYYY-MM`.
    pub period_key: String,
    pub limit_usd: f64,
}

/// The store's answer to an [`Ask`].
#[derive(Debug, Clone)]
pub enum Answer {
    Rate(RateCounts),
    /// `Ok(bucket)`: reserved everywhere, in that time bucket. `Err((i, used))`: entry `i` has
    /// `used` USD (spent + held) and the amount does not fit; nothing was reserved.
    Budget(Result<i64, (usize, f64)>),
    Cache(Option<Cached>),
    /// Not decided: an ask before it in the same round trip was refused. The check lets go of
    /// what it prepared; its verdict is not recorded.
    NotAsked,
    /// The store could not answer (unreachable, timed out, not yet loaded): the check applies
    /// the configured fault behaviour. The text says why, for logs and the client's message.
    Unavailable(String),
}

/// The key's windows as the store found them (rolled to `now_ms`, before this request), and
/// what it decided: the same arithmetic as [`crate::checks::rate_limit::admit`], which replays it for
/// the headers.
#[derive(Debug, Clone, Copy)]
pub struct RateCounts {
    pub admitted: bool,
    /// The store's clock, in Unix ms (one clock for every instance).
    pub now_ms: i64,
    pub before: State,
    /// Tokens held when admitted.
    pub tokens: u64,
}

/// The shared store, as the pipeline sees it.
pub trait SharedStore: Send + Sync + 'static {
    /// Decides `asks` in order in one round trip, stopping after the first refusal: the answers
    /// are as many as were decided (all of them when it could not answer: `Unavailable` each).
    fn ask(&self, asks: Vec<Ask>) -> Pin<Box<dyn Future<Output = Vec<Answer>> + Send + '_>>;
}
