//! Per-key requests and tokens per minute: sliding windows in memory, reserve then settle.
//!
//! Two aligned one-minute windows per key; the estimate at time `t` is the previous window's
//! count weighted by how much of it still overlaps the last 60 s, plus the current count
//! (the approach of Cloudflare's and nginx's sliding limiters: O(1) memory, smooth edges).
//! A request reserves one request and an estimate of its tokens (prompt estimate plus its
//! answer cap); when it ends, the reservation is corrected to the tokens it really used.
//! The lock is per key and held for a few arithmetic operations, never across I/O.

use std::sync::{Arc, Mutex};

const WINDOW_MS: i64 = 60_000;

#[derive(Debug, Default)]
pub struct Windows {
    state: Mutex<State>,
}

#[derive(Debug, Default, Clone, Copy)]
struct State {
    start_ms: i64,
    req: Pair,
    tok: Pair,
}

#[derive(Debug, Default, Clone, Copy)]
struct Pair {
    prev: f64,
    cur: f64,
}

impl Pair {
    fn estimate(&self, elapsed_frac: f64) -> f64 {
        self.prev * (1.0 - elapsed_frac) + self.cur
    }

    /// Milliseconds from `elapsed_ms` into the window until `need` more fit under `limit`.
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
        let x = if self.cur > 0.0 { (w * (1.0 - (limit - need) / self.cur)).max(0.0) } else { 0.0 };
        (WINDOW_MS - elapsed_ms) + x.ceil() as i64
    }
}

impl State {
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

/// Tokens held for a request until it settles.
#[derive(Debug)]
pub struct Reservation {
    windows: Arc<Windows>,
    tokens: u64,
    start_ms: i64,
}

/// A refused request: which limit, how long to wait, and the headers to send.
#[derive(Debug)]
pub struct Limited {
    pub what: &'static str,
    pub message: String,
    pub retry_after_s: u64,
    pub headers: Vec<(&'static str, String)>,
}

fn secs(ms: i64) -> u64 {
    (ms.max(0) as u64).div_ceil(1000)
}

/// OpenAI-style headers for the limits that are set.
fn headers(
    rpm: Option<u64>,
    tpm: Option<u64>,
    used_req: f64,
    used_tok: f64,
    elapsed_ms: i64,
) -> Vec<(&'static str, String)> {
    let reset = format!("{}s", secs(WINDOW_MS - elapsed_ms));
    let mut h = Vec::new();
    if let Some(l) = rpm {
        h.push(("x-ratelimit-limit-requests", l.to_string()));
        h.push(("x-ratelimit-remaining-requests", (l as f64 - used_req).floor().max(0.0).to_string()));
        h.push(("x-ratelimit-reset-requests", reset.clone()));
    }
    if let Some(l) = tpm {
        h.push(("x-ratelimit-limit-tokens", l.to_string()));
        h.push(("x-ratelimit-remaining-tokens", (l as f64 - used_tok).floor().max(0.0).to_string()));
        h.push(("x-ratelimit-reset-tokens", reset));
    }
    h
}

/// Reserves one request and `tokens` against the key's limits, or says why not.
pub fn acquire(
    windows: &Arc<Windows>,
    rpm: Option<u64>,
    tpm: Option<u64>,
    tokens: u64,
    now_ms: i64,
) -> Result<(Reservation, Headers), Limited> {
    let mut s = windows.state.lock().unwrap_or_else(|e| e.into_inner());
    s.roll(now_ms);
    let elapsed = now_ms - s.start_ms;
    let frac = elapsed as f64 / WINDOW_MS as f64;
    let (req_used, tok_used) = (s.req.estimate(frac), s.tok.estimate(frac));
    let refuse = |what, message: String, wait_ms: i64| {
        let retry_after_s = secs(wait_ms).max(1);
        let mut h = headers(rpm, tpm, req_used, tok_used, elapsed);
        h.push(("retry-after", retry_after_s.to_string()));
        Limited { what, message, retry_after_s, headers: h }
    };
    if let Some(l) = rpm {
        if req_used + 1.0 > l as f64 {
            let wait = s.req.wait_ms(1.0, l as f64, elapsed);
            return Err(refuse(
                "requests",
                format!("rate limit of {l} requests per minute reached for this key"),
                wait,
            ));
        }
    }
    if let Some(l) = tpm {
        if tokens > l {
            return Err(refuse(
                "tokens",
                format!(
                    "this request may use up to {tokens} tokens, more than the key's limit of {l} tokens per minute; \
                     lower max_tokens or shorten the prompt"
                ),
                WINDOW_MS,
            ));
        }
        if tok_used + tokens as f64 > l as f64 {
            let wait = s.tok.wait_ms(tokens as f64, l as f64, elapsed);
            return Err(refuse("tokens", format!("rate limit of {l} tokens per minute reached for this key"), wait));
        }
    }
    s.req.cur += 1.0;
    s.tok.cur += tokens as f64;
    let h = headers(rpm, tpm, req_used + 1.0, tok_used + tokens as f64, elapsed);
    Ok((Reservation { windows: windows.clone(), tokens, start_ms: s.start_ms }, h))
}

/// Replaces the reserved token estimate by what the request really used.
pub fn settle(r: Reservation, actual_tokens: u64, now_ms: i64) {
    let mut s = r.windows.state.lock().unwrap_or_else(|e| e.into_inner());
    s.roll(now_ms);
    let delta = actual_tokens as f64 - r.tokens as f64;
    let slot = if s.start_ms == r.start_ms {
        &mut s.tok.cur
    } else if s.start_ms - r.start_ms == WINDOW_MS {
        &mut s.tok.prev
    } else {
        return;
    };
    *slot = (*slot + delta).max(0.0);
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_700_000_040_000; // a window boundary (multiple of 60 000)

    fn w() -> Arc<Windows> {
        Arc::new(Windows::default())
    }

    #[test]
    fn requests_per_minute_and_headers() {
        let w = w();
        for i in 0..3 {
            let (_, h) = acquire(&w, Some(3), None, 0, T0 + i).unwrap();
            let remaining = h.iter().find(|(k, _)| *k == "x-ratelimit-remaining-requests").unwrap();
            assert_eq!(remaining.1, (2 - i).to_string());
        }
        let e = acquire(&w, Some(3), None, 0, T0 + 10).unwrap_err();
        assert_eq!(e.what, "requests");
        assert!(e.retry_after_s >= 1 && e.retry_after_s <= 120, "{}", e.retry_after_s);
        let names: Vec<_> = e.headers.iter().map(|(k, _)| *k).collect();
        for n in [
            "retry-after",
            "x-ratelimit-limit-requests",
            "x-ratelimit-remaining-requests",
            "x-ratelimit-reset-requests",
        ] {
            assert!(names.contains(&n), "{names:?}");
        }
    }

    #[test]
    fn the_previous_window_decays() {
        let w = w();
        for i in 0..10 {
            acquire(&w, Some(10), None, 0, T0 + i).unwrap();
        }
        // Early in the next window most of the previous ten still count...
        assert!(acquire(&w, Some(10), None, 0, T0 + WINDOW_MS + 1_000).is_err());
        // ...half-way through, half of them do: five more fit.
        for _ in 0..5 {
            acquire(&w, Some(10), None, 0, T0 + WINDOW_MS + 30_000).unwrap();
        }
        assert!(acquire(&w, Some(10), None, 0, T0 + WINDOW_MS + 30_000).is_err());
        // Two windows later nothing is left.
        for _ in 0..10 {
            acquire(&w, Some(10), None, 0, T0 + 3 * WINDOW_MS).unwrap();
        }
    }

    #[test]
    fn tokens_reserve_then_settle() {
        let w = w();
        let (r, _) = acquire(&w, None, Some(1000), 600, T0).unwrap();
        // The estimate holds 600 of 1000: a second 600-token request must wait...
        let e = acquire(&w, None, Some(1000), 600, T0 + 1).unwrap_err();
        assert_eq!(e.what, "tokens");
        // ...until the first settles at what it really used.
        settle(r, 100, T0 + 2);
        let (_r2, _) = acquire(&w, None, Some(1000), 600, T0 + 3).unwrap();
        // A request larger than the whole limit can never pass.
        let e = acquire(&w, None, Some(1000), 5000, T0 + 4).unwrap_err();
        assert!(e.message.contains("lower max_tokens"), "{}", e.message);
    }

    #[test]
    fn concurrent_acquires_never_exceed_the_limit() {
        let w = w();
        let ok = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..50 {
                        if acquire(&w, Some(100), None, 0, T0 + 5).is_ok() {
                            ok.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(ok.into_inner(), 100);
    }
}
