//! Per-key requests and tokens per minute: sliding windows in memory, reserve then settle.
//!
//! Two aligned one-minute windows per key; the estimate at time `t` is the previous window's
//! count weighted by how much of it still overlaps the last 60 s, plus the current count
//! (the approach of Cloudflare's and nginx's sliding limiters: O(1) memory, smooth edges).
//! A request reserves one request and the tokens it may use ([`TokenAsk`]); when it ends, the
//! reservation is corrected to the tokens it really used.
//! The lock is per key and held for a few arithmetic operations, never across I/O.

pub mod end_user;
pub mod plugin;
pub mod shared;

use std::sync::{Arc, Mutex};

pub const WINDOW_MS: i64 = 60_000;

#[derive(Debug, Default)]
pub struct Windows {
    state: Mutex<State>,
}

impl Windows {
    /// Nothing counted in the last two windows before `now_ms`: the estimate is zero.
    fn idle(&self, now_ms: i64) -> bool {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        now_ms - s.start_ms >= 2 * WINDOW_MS
    }
}

/// The windows of each end user of one key (`endUserRpmLimit` / `endUserTpmLimit`), in this
/// process. Entries whose windows are idle are dropped when the map grows past [`PRUNE_AT`].
#[derive(Debug, Default)]
pub struct EndUserWindows {
    map: Mutex<std::collections::HashMap<Arc<str>, Arc<Windows>>>,
}

/// How many end users of one key are kept before idle ones are dropped (a sweep of this many
/// entries under the lock is a few tens of microseconds, once per this many new end users).
pub const PRUNE_AT: usize = 4096;

impl EndUserWindows {
    /// The end user's windows, made on first use.
    pub fn get(&self, end_user: &str, now_ms: i64) -> Arc<Windows> {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(w) = map.get(end_user) {
            return w.clone();
        }
        if map.len() >= PRUNE_AT {
            map.retain(|_, w| Arc::strong_count(w) > 1 || !w.idle(now_ms));
        }
        map.entry(end_user.into()).or_default().clone()
    }

    /// End users with windows kept.
    pub fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One key's two windows: when the current one started, and each one's requests and tokens.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct State {
    pub start_ms: i64,
    pub req: Pair,
    pub tok: Pair,
}

#[derive(Debug, Default, Clone, Copy, PartialEq)]
/// A count in the previous and the current window.
pub struct Pair {
    pub prev: f64,
    pub cur: f64,
}

impl Pair {
    fn estimate(&self, elapsed_frac: f64) -> f64 {
        self.prev * (1.0 - elapsed_frac) + self.cur
    }

    /// Milliseconds from `elapsed_ms` into the window until `need` more fit under `limit`
    /// (`need <= limit`).
    fn wait_ms(&self, need: f64, limit: f64, elapsed_ms: i64) -> i64 {
        let w = WINDOW_MS as f64;
        if self.cur + need <= limit {
            // The previous window's weight must decay: prev * (1 - x/W) + cur + need <= limit.
            if self.prev <= 0.0 {
                return 0;
            }
            let x = w * (1.0 - (limit - self.cur - need) / self.prev);
            return (x.ceil() as i64 - elapsed_ms).max(0);
        }
        // Not before the next window, where the current count becomes the decaying one.
        let x = if self.cur > 0.0 { (w * (1.0 - (limit - need) / self.cur)).clamp(0.0, w) } else { 0.0 };
        (WINDOW_MS - elapsed_ms) + x.ceil() as i64
    }

    /// Milliseconds until the estimate is back to zero (OpenAI's "reset to its initial
    /// state"): what the current window holds decays through the whole next window.
    fn reset_ms(&self, elapsed_ms: i64) -> i64 {
        if self.cur > 0.0 {
            2 * WINDOW_MS - elapsed_ms
        } else if self.prev > 0.0 {
            WINDOW_MS - elapsed_ms
        } else {
            0
        }
    }
}

impl State {
    /// [`State::roll`], for the equivalence test of the shared limiter.
    #[cfg(test)]
    pub(crate) fn roll_for_test(&mut self, now_ms: i64) {
        self.roll(now_ms)
    }

    /// Moves the windows forward to the one holding `now_ms`.
    fn roll(&mut self, now_ms: i64) {
        let start = now_ms - now_ms.rem_euclid(WINDOW_MS);
        if start == self.start_ms {
            return;
        }
        let adjacent = start - self.start_ms == WINDOW_MS;
        for p in [&mut self.req, &mut self.tok] {
            p.prev = if adjacent { p.cur } else { 0.0 };
            p.cur = 0.0;
        }
        self.start_ms = start;
    }
}

/// Answer headers: `(name, value)`.
pub type Headers = Vec<(&'static str, String)>;

/// The tokens a request asks to hold while it runs: at least `min`, at most `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenAsk {
    pub min: u64,
    pub max: u64,
    /// Whether `min` includes the request's own answer cap.
    pub own_cap: bool,
}

impl TokenAsk {
    /// A request with its own answer cap (`max_tokens` / `max_completion_tokens`) holds its
    /// prompt estimate plus that cap, all or nothing. Without one it needs only room for its
    /// prompt, and holds up to the configured default answer reservation on top: a small
    /// `tpmLimit` must not refuse a small request for an answer size it never asked for.
    pub fn new(prompt_est: u64, own_cap: Option<u64>, default_cap: u64) -> TokenAsk {
        match own_cap {
            Some(cap) => {
                let all = prompt_est.saturating_add(cap);
                TokenAsk { min: all, max: all, own_cap: true }
            }
            None => TokenAsk { min: prompt_est, max: prompt_est.saturating_add(default_cap), own_cap: false },
        }
    }

    /// What to hold when `room` tokens are left under the limit (`room >= min`).
    fn fit(self, room: u64) -> u64 {
        self.max.min(room).max(self.min)
    }
}

/// Tokens held for a request until it settles.
#[derive(Debug)]
pub struct Reservation {
    place: Place,
    tokens: u64,
    /// The window the request was counted in.
    start_ms: i64,
}

/// Where the windows live.
#[derive(Debug)]
enum Place {
    Local(Arc<Windows>),
    /// In the shared store (`cluster::rate`), under this key id.
    Shared(Arc<str>),
}

impl Reservation {
    /// The tokens held.
    pub fn tokens(&self) -> u64 {
        self.tokens
    }

    /// A reservation the shared store made for key `key_id` in the window starting `start_ms`.
    pub fn shared(key_id: Arc<str>, tokens: u64, start_ms: i64) -> Reservation {
        Reservation { place: Place::Shared(key_id), tokens, start_ms }
    }

    /// The key id of a shared reservation, with the window it was counted in.
    pub fn shared_key(&self) -> Option<(&Arc<str>, i64)> {
        match &self.place {
            Place::Shared(k) => Some((k, self.start_ms)),
            Place::Local(_) => None,
        }
    }
}

/// A refused request: which limit, how long to wait, and the headers to send.
#[derive(Debug)]
pub struct Limited {
    pub what: &'static str,
    pub message: String,
    /// Honest wait until the request would fit (`Retry-After` is this rounded up to seconds).
    pub retry_after_ms: u64,
    pub headers: Headers,
}

fn secs(ms: i64) -> u64 {
    (ms.max(0) as u64).div_ceil(1000)
}

fn num(n: u64) -> String {
    itoa::Buffer::new().format(n).to_owned()
}

/// `"{n}s"`, OpenAI's duration format for whole seconds.
fn secs_str(ms: i64) -> String {
    let mut b = itoa::Buffer::new();
    let n = b.format(secs(ms));
    let mut s = String::with_capacity(n.len() + 1);
    s.push_str(n);
    s.push('s');
    s
}

fn remaining(limit: u64, used: f64) -> u64 {
    (limit as f64 - used).floor().max(0.0) as u64
}

/// OpenAI's `x-ratelimit-{limit,remaining,reset}-{requests|tokens}` triple for each limit
/// that is set, appended to `out`.
fn push_headers(out: &mut Headers, rpm: Option<u64>, tpm: Option<u64>, s: &State, used: (f64, f64), elapsed_ms: i64) {
    out.reserve(3 * (rpm.is_some() as usize + tpm.is_some() as usize));
    if let Some(l) = rpm {
        out.push(("x-ratelimit-limit-requests", num(l)));
        out.push(("x-ratelimit-remaining-requests", num(remaining(l, used.0))));
        out.push(("x-ratelimit-reset-requests", secs_str(s.req.reset_ms(elapsed_ms))));
    }
    if let Some(l) = tpm {
        out.push(("x-ratelimit-limit-tokens", num(l)));
        out.push(("x-ratelimit-remaining-tokens", num(remaining(l, used.1))));
        out.push(("x-ratelimit-reset-tokens", secs_str(s.tok.reset_ms(elapsed_ms))));
    }
}

/// Which limit refused, and its value.
enum Why {
    Requests(u64),
    Tokens(u64),
    /// The request alone is over the token limit.
    TooBig(u64),
}

/// Reserves one request and what fits of `ask` against the key's limits, appending the
/// rate-limit headers to `out`; or says why not (with its own headers, `Retry-After` included).
pub fn acquire(
    windows: &Arc<Windows>,
    rpm: Option<u64>,
    tpm: Option<u64>,
    ask: TokenAsk,
    now_ms: i64,
    out: &mut Headers,
) -> Result<Reservation, Limited> {
    let mut s = windows.state.lock().unwrap_or_else(|e| e.into_inner());
    let tokens = admit(&mut s, rpm, tpm, ask, now_ms, out)?;
    Ok(Reservation { place: Place::Local(windows.clone()), tokens, start_ms: s.start_ms })
}

/// The decision itself, on one key's windows: rolls them to `now_ms`, then either counts one
/// request and the tokens it holds (returned) and appends the headers, or refuses. Pure: the
/// in-process limiter runs it under the key's lock, and the shared limiter
/// (`cluster::rate`) runs the same arithmetic in Redis and replays it here for the headers.
pub fn admit(
    s: &mut State,
    rpm: Option<u64>,
    tpm: Option<u64>,
    ask: TokenAsk,
    now_ms: i64,
    out: &mut Headers,
) -> Result<u64, Limited> {
    s.roll(now_ms);
    let elapsed = now_ms - s.start_ms;
    let frac = elapsed as f64 / WINDOW_MS as f64;
    let used = (s.req.estimate(frac), s.tok.estimate(frac));

    // Every limit that refuses is waited for: the honest wait is the longest.
    let mut refused = None;
    let mut wait_ms = 0i64;
    if let Some(l) = rpm {
        if used.0 + 1.0 > l as f64 {
            wait_ms = s.req.wait_ms(1.0, l as f64, elapsed);
            refused = Some(Why::Requests(l));
        }
    }
    let mut tokens = 0;
    if let Some(l) = tpm {
        if ask.min > l {
            // Its own cap (or its prompt) alone is over the limit: it can never pass.
            wait_ms = WINDOW_MS;
            refused = Some(Why::TooBig(l));
        } else if used.1 + ask.min as f64 > l as f64 {
            wait_ms = wait_ms.max(s.tok.wait_ms(ask.min as f64, l as f64, elapsed));
            refused.get_or_insert(Why::Tokens(l));
        } else {
            tokens = ask.fit(remaining(l, used.1));
        }
    }
    if let Some(why) = refused {
        return Err(refusal(why, s, rpm, tpm, ask, used, elapsed, wait_ms));
    }
    s.req.cur += 1.0;
    s.tok.cur += tokens as f64;
    push_headers(out, rpm, tpm, s, (used.0 + 1.0, used.1 + tokens as f64), elapsed);
    Ok(tokens)
}

#[allow(clippy::too_many_arguments)]
fn refusal(
    why: Why,
    s: &State,
    rpm: Option<u64>,
    tpm: Option<u64>,
    ask: TokenAsk,
    used: (f64, f64),
    elapsed: i64,
    wait_ms: i64,
) -> Limited {
    let retry_after_ms = wait_ms.max(1) as u64;
    let retry_s = secs(retry_after_ms as i64);
    let mut headers = Vec::with_capacity(9);
    push_headers(&mut headers, rpm, tpm, s, used, elapsed);
    headers.push(("retry-after", num(retry_s)));
    headers.push(("retry-after-ms", num(retry_after_ms)));
    let (what, message) = match why {
        Why::Requests(l) => {
            ("requests", format!("rate limit of {l} requests per minute reached for this key; retry in {retry_s} s"))
        }
        Why::Tokens(l) => {
            ("tokens", format!("rate limit of {l} tokens per minute reached for this key; retry in {retry_s} s"))
        }
        Why::TooBig(l) => {
            // The OpenAI and Anthropic SDKs honour this over their own retry rules.
            headers.push(("x-should-retry", "false".to_owned()));
            let m = if ask.own_cap {
                format!(
                    "this request may use up to {} tokens (prompt estimate + max_tokens), more than the \
                     key's limit of {l} tokens per minute; lower max_tokens or shorten the prompt",
                    ask.min
                )
            } else {
                format!(
                    "this request's prompt is about {} tokens, more than the key's limit of {l} tokens per \
                     minute; shorten the prompt",
                    ask.min
                )
            };
            ("tokens", m)
        }
    };
    Limited { what, message, retry_after_ms, headers }
}

/// Replaces the reserved token estimate by what the request really used (in-process windows;
/// a shared reservation is settled by `cluster::Cluster::settle_rate`).
pub fn settle(r: Reservation, actual_tokens: u64, now_ms: i64) {
    let Place::Local(windows) = &r.place else { return };
    let mut s = windows.state.lock().unwrap_or_else(|e| e.into_inner());
    settle_on(&mut s, r.start_ms, actual_tokens as i64 - r.tokens as i64, now_ms);
}

/// Moves `delta` tokens on the window the reservation was taken in, if it is still one of the
/// two the estimate reads. Pure, like [`admit`]; `cluster::rate` runs the same steps in Redis.
pub fn settle_on(s: &mut State, start_ms: i64, delta: i64, now_ms: i64) {
    s.roll(now_ms);
    let slot = if s.start_ms == start_ms {
        &mut s.tok.cur
    } else if s.start_ms - start_ms == WINDOW_MS {
        &mut s.tok.prev
    } else {
        return;
    };
    *slot = (*slot + delta as f64).max(0.0);
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_700_000_040_000; // a window boundary (multiple of 60 000)
    const DEFAULT: u64 = 1024;

    fn w() -> Arc<Windows> {
        Arc::new(Windows::default())
    }

    /// `acquire` with its headers returned.
    fn go(
        w: &Arc<Windows>,
        rpm: Option<u64>,
        tpm: Option<u64>,
        ask: TokenAsk,
        t: i64,
    ) -> Result<(Reservation, Headers), Limited> {
        let mut h = Vec::new();
        acquire(w, rpm, tpm, ask, t, &mut h).map(|r| (r, h))
    }

    /// A request of `prompt` estimated tokens without `max_tokens`.
    fn small(prompt: u64) -> TokenAsk {
        TokenAsk::new(prompt, None, DEFAULT)
    }

    fn capped(prompt: u64, cap: u64) -> TokenAsk {
        TokenAsk::new(prompt, Some(cap), DEFAULT)
    }

    const NONE: TokenAsk = TokenAsk { min: 0, max: 0, own_cap: false };

    fn get<'a>(h: &'a Headers, name: &str) -> Option<&'a str> {
        h.iter().find(|(k, _)| *k == name).map(|(_, v)| v.as_str())
    }

    fn names(h: &Headers) -> Vec<&'static str> {
        let mut v: Vec<_> = h.iter().map(|(k, _)| *k).collect();
        v.sort_unstable();
        v
    }

    const REQUESTS: [&str; 3] =
        ["x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests"];
    const TOKENS: [&str; 3] = ["x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"];

    fn sorted<const N: usize>(parts: &[&[&'static str]]) -> Vec<&'static str> {
        let mut v: Vec<_> = parts.iter().flat_map(|p| p.iter().copied()).collect();
        v.sort_unstable();
        assert!(N == 0 || v.len() == N);
        v
    }

    #[test]
    fn requests_per_minute_and_headers() {
        let w = w();
        for i in 0..3 {
            let (_, h) = go(&w, Some(3), None, NONE, T0 + i).unwrap();
            assert_eq!(get(&h, "x-ratelimit-remaining-requests"), Some((2 - i).to_string().as_str()));
            // Only the limit the key has.
            assert_eq!(names(&h), sorted::<3>(&[&REQUESTS]));
        }
        let e = go(&w, Some(3), None, NONE, T0 + 10).unwrap_err();
        assert_eq!(e.what, "requests");
        assert!(e.retry_after_ms >= 1 && e.retry_after_ms <= 120_000, "{}", e.retry_after_ms);
        assert_eq!(names(&e.headers), sorted::<5>(&[&REQUESTS, &["retry-after", "retry-after-ms"]]));
        assert_eq!(get(&e.headers, "retry-after-ms"), Some(e.retry_after_ms.to_string().as_str()));
        assert_eq!(get(&e.headers, "retry-after"), Some(e.retry_after_ms.div_ceil(1000).to_string().as_str()));
        assert!(e.message.contains("retry in"), "{}", e.message);
    }

    #[test]
    fn every_limit_the_key_has_gets_its_triple_on_success_and_on_429() {
        let w = w();
        let (rpm, tpm) = (Some(2), Some(10_000));
        for i in 0..2 {
            let (_, h) = go(&w, rpm, tpm, capped(10, 90), T0 + 10_000 + i).unwrap();
            assert_eq!(names(&h), sorted::<6>(&[&REQUESTS, &TOKENS]));
            assert_eq!(get(&h, "x-ratelimit-limit-tokens"), Some("10000"));
            assert_eq!(
                get(&h, "x-ratelimit-remaining-tokens"),
                Some(((10_000 - 100 * (i + 1)) as u64).to_string().as_str())
            );
            // What this window holds decays through the whole next one.
            assert_eq!(get(&h, "x-ratelimit-reset-requests"), Some("110s"));
        }
        // Refused by the request limit alone: the tokens triple is there too.
        let e = go(&w, rpm, tpm, capped(10, 90), T0 + 10_002).unwrap_err();
        assert_eq!(e.what, "requests");
        let with_retry = sorted::<8>(&[&REQUESTS, &TOKENS, &["retry-after", "retry-after-ms"]]);
        assert_eq!(names(&e.headers), with_retry);
        assert_eq!(get(&e.headers, "x-ratelimit-remaining-requests"), Some("0"));
        assert_eq!(get(&e.headers, "x-ratelimit-remaining-tokens"), Some("9800"));
        // Refused by the token limit alone: the requests triple is there too.
        let w2 = self::w();
        go(&w2, Some(100), tpm, capped(10, 9_990), T0).unwrap();
        let e = go(&w2, Some(100), tpm, small(10), T0 + 1).unwrap_err();
        assert_eq!(e.what, "tokens");
        assert_eq!(names(&e.headers), with_retry);
        assert_eq!(get(&e.headers, "x-ratelimit-remaining-requests"), Some("99"));
    }

    #[test]
    fn retry_after_is_the_honest_wait() {
        // Requests: ten in the previous window decay until one more fits.
        let w = w();
        for i in 0..10 {
            go(&w, Some(10), None, NONE, T0 + i).unwrap();
        }
        let now = T0 + WINDOW_MS + 1_000;
        let e = go(&w, Some(10), None, NONE, now).unwrap_err();
        let wait = e.retry_after_ms as i64;
        assert_eq!(wait, 6_000 - 1_000, "one of ten frees up a tenth into the window");
        assert!(go(&w, Some(10), None, NONE, now + wait - 1).is_err());
        go(&w, Some(10), None, NONE, now + wait).unwrap();

        // Both limits refuse: the wait is the longer of the two.
        let w = self::w();
        go(&w, Some(1), Some(1000), capped(0, 1000), T0 + 30_000).unwrap();
        let e = go(&w, Some(1), Some(1000), capped(0, 500), T0 + 30_000).unwrap_err();
        assert_eq!(e.what, "requests");
        // Requests: one fits once the previous window's one has decayed to 0 (end of next
        // window); tokens: 500 fit half-way through the next window.
        assert_eq!(e.retry_after_ms, 90_000);
        let w = self::w();
        go(&w, Some(2), Some(1000), capped(0, 1000), T0 + 30_000).unwrap();
        let e = go(&w, Some(2), Some(1000), capped(0, 500), T0 + 30_000).unwrap_err();
        assert_eq!(e.what, "tokens");
        assert_eq!(e.retry_after_ms, 60_000);
        assert!(go(&w, Some(2), Some(1000), capped(0, 500), T0 + 90_000 - 1).is_err());
        go(&w, Some(2), Some(1000), capped(0, 500), T0 + 90_000).unwrap();
    }

    #[test]
    fn the_previous_window_decays() {
        let w = w();
        for i in 0..10 {
            go(&w, Some(10), None, NONE, T0 + i).unwrap();
        }
        // Early in the next window most of the previous ten still count...
        assert!(go(&w, Some(10), None, NONE, T0 + WINDOW_MS + 1_000).is_err());
        // ...half-way through, half of them do: five more fit.
        for _ in 0..5 {
            go(&w, Some(10), None, NONE, T0 + WINDOW_MS + 30_000).unwrap();
        }
        assert!(go(&w, Some(10), None, NONE, T0 + WINDOW_MS + 30_000).is_err());
        // Two windows later nothing is left.
        for _ in 0..10 {
            go(&w, Some(10), None, NONE, T0 + 3 * WINDOW_MS).unwrap();
        }
    }

    #[test]
    fn tokens_reserve_then_settle() {
        let w = w();
        let (r, _) = go(&w, None, Some(1000), capped(100, 500), T0).unwrap();
        // The estimate holds 600 of 1000: a second 600-token request must wait...
        let e = go(&w, None, Some(1000), capped(100, 500), T0 + 1).unwrap_err();
        assert_eq!(e.what, "tokens");
        // ...until the first settles at what it really used.
        settle(r, 100, T0 + 2);
        let (_r2, _) = go(&w, None, Some(1000), capped(100, 500), T0 + 3).unwrap();
        // A request whose own cap is larger than the whole limit can never pass, and says so.
        let e = go(&w, None, Some(1000), capped(10, 5000), T0 + 4).unwrap_err();
        assert!(e.message.contains("lower max_tokens"), "{}", e.message);
        assert_eq!(get(&e.headers, "x-should-retry"), Some("false"));
        assert!(get(&e.headers, "retry-after").is_some());
        // So can a prompt alone over the limit; there is no max_tokens to blame.
        let e = go(&w, None, Some(1000), small(1001), T0 + 5).unwrap_err();
        assert!(e.message.contains("shorten the prompt") && !e.message.contains("max_tokens"), "{}", e.message);
        assert_eq!(get(&e.headers, "x-should-retry"), Some("false"));
    }

    /// Issue 16: with `tpmLimit: 1000` the first small request passes although the default
    /// answer reservation (1024) alone is over the limit; once 1500 tokens were used, the
    /// next one waits.
    #[test]
    fn a_small_token_limit_takes_a_first_request_without_max_tokens() {
        let w = w();
        let (r, h) = go(&w, None, Some(1000), small(18), T0).unwrap();
        assert_eq!(r.tokens(), 1000, "the prompt and what is left of the window");
        assert_eq!(get(&h, "x-ratelimit-remaining-tokens"), Some("0"));
        settle(r, 1500, T0 + 10);
        let e = go(&w, None, Some(1000), small(18), T0 + 20).unwrap_err();
        assert_eq!(e.what, "tokens");
        assert!(get(&e.headers, "x-should-retry").is_none(), "it will fit later");
        assert_eq!(get(&e.headers, "x-ratelimit-remaining-tokens"), Some("0"));
        // 1500 used in the previous window decay to 982 (+ 18 = 1000) at 20 720 ms into the
        // next one (the float rounding may add a millisecond).
        let due = WINDOW_MS - 20 + 20_720;
        assert!((due..=due + 1).contains(&(e.retry_after_ms as i64)), "{}", e.retry_after_ms);
        assert!(go(&w, None, Some(1000), small(18), T0 + 20 + due - 1).is_err());
        let (r, _) = go(&w, None, Some(1000), small(18), T0 + 20 + e.retry_after_ms as i64).unwrap();
        assert_eq!(r.tokens(), 18, "nothing is left for the answer beyond the prompt");
    }

    /// The reservation rule against its plain statement, over a grid of windows and requests:
    /// an own cap is all or nothing; without one, the prompt must fit and the answer gets the
    /// smaller of the default and what is left.
    #[test]
    fn the_reservation_is_what_fits() {
        let limits = [1u64, 100, 1000, 1042, 100_000];
        let amounts = [0u64, 1, 17, 18, 99, 500, 982, 1000, 1024, 1500, 99_000];
        for &limit in &limits {
            for &used in &amounts {
                for &prompt in &amounts {
                    for own in [None, Some(0), Some(1), Some(500), Some(2000)] {
                        for default in [0, DEFAULT] {
                            let w = w();
                            if used > 0 {
                                let (r, _) = go(&w, None, None, NONE, T0).unwrap();
                                settle(r, used, T0);
                            }
                            let ask = TokenAsk::new(prompt, own, default);
                            let got = go(&w, None, Some(limit), ask, T0 + 1);
                            let need = prompt + own.unwrap_or(0);
                            let case =
                                format!("limit {limit} used {used} prompt {prompt} own {own:?} default {default}");
                            if need > limit {
                                let e = got.expect_err(&case);
                                assert_eq!(get(&e.headers, "x-should-retry"), Some("false"), "{case}");
                            } else if used + need > limit {
                                let e = got.expect_err(&case);
                                assert!(get(&e.headers, "x-should-retry").is_none(), "{case}");
                            } else {
                                let (r, _) = got.expect(&case);
                                let want = match own {
                                    Some(cap) => prompt + cap,
                                    None => prompt + default.min(limit - used - prompt),
                                };
                                assert_eq!(r.tokens(), want, "{case}");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn concurrent_acquires_never_exceed_the_limit() {
        let w = w();
        let ok = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..50 {
                        if go(&w, Some(100), None, NONE, T0 + 5).is_ok() {
                            ok.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(ok.into_inner(), 100);
    }
}
