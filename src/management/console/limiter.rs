//! Failed sign-ins per client address: at most `console.sign_in_failures_per_minute` in any
//! sliding minute, then `429` until the oldest failure is a minute old. A guess of a 256-bit
//! key is hopeless anyway; the limit keeps the log and the database from being flooded.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const WINDOW: Duration = Duration::from_secs(60);
/// Addresses tracked at once; past this the table is cleared of every address whose window
/// has passed (a flood of addresses cannot grow it without bound).
const MAX_ADDRESSES: usize = 10_000;

pub struct SignInLimiter {
    per_minute: usize,
    failures: Mutex<HashMap<Option<IpAddr>, VecDeque<Instant>>>,
}

impl SignInLimiter {
    pub fn new(per_minute: u32) -> Self {
        SignInLimiter { per_minute: per_minute.max(1) as usize, failures: Mutex::new(HashMap::new()) }
    }

    /// Ok, or the seconds until `client` may try again.
    pub fn check(&self, client: Option<IpAddr>) -> Result<(), u64> {
        let now = Instant::now();
        let mut map = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let Some(times) = map.get_mut(&client) else { return Ok(()) };
        while times.front().is_some_and(|t| now.duration_since(*t) >= WINDOW) {
            times.pop_front();
        }
        match times.front() {
            Some(oldest) if times.len() >= self.per_minute => {
                Err((WINDOW - now.duration_since(*oldest)).as_secs().max(1))
            }
            _ => Ok(()),
        }
    }

    /// Records a failed sign-in of `client`.
    pub fn failed(&self, client: Option<IpAddr>) {
        let now = Instant::now();
        let mut map = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= MAX_ADDRESSES {
            map.retain(|_, t| t.back().is_some_and(|last| now.duration_since(*last) < WINDOW));
        }
        map.entry(client).or_default().push_back(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_after_the_limit_and_only_that_address() {
        let l = SignInLimiter::new(3);
        let a = Some("10.0.0.1".parse().unwrap());
        let b = Some("10.0.0.2".parse().unwrap());
        for _ in 0..3 {
            assert!(l.check(a).is_ok());
            l.failed(a);
        }
        let wait = l.check(a).unwrap_err();
        assert!((1..=60).contains(&wait));
        assert!(l.check(b).is_ok());
    }
}
