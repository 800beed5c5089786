//! One target's health, shared by every request of every snapshot: its circuit breaker
//! (closed → open after `breaker.failures` failures in a row → half-open after the cool-down,
//! when exactly one probe request goes through → closed on its success, open again on its
//! failure), the time its rate limit is used up until, and its requests in flight. All atomics:
//! no lock on the request path. Each process keeps its own (docs/decisions/routes.md).

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, Ordering};

use crate::config::Breaker;

#[derive(Debug, Default)]
pub struct Health {
    /// Failures in a row.
    failures: AtomicU32,
    /// 0 = closed; else open until this Unix ms, half-open after it.
    open_until_ms: AtomicI64,
    /// The half-open probe is under way.
    probing: AtomicBool,
    /// The target's rate limit is used up until this Unix ms (0 = not known to be).
    limited_until_ms: AtomicI64,
    in_flight: AtomicU32,
}

/// How `/status` shows a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetState {
    Operational,
    /// Half-open: the cool-down is over, the next request probes it.
    Degraded,
    /// Open: skipped until the cool-down ends.
    Outage,
}

impl TargetState {
    pub fn as_str(self) -> &'static str {
        match self {
            TargetState::Operational => "operational",
            TargetState::Degraded => "degraded",
            TargetState::Outage => "outage",
        }
    }

    /// The `tollgate_target_state` gauge: 0 closed, 1 half-open, 2 open.
    pub fn gauge(self) -> i64 {
        self as i64
    }

    /// The worse of two states.
    pub fn max_by_gauge(self, other: TargetState) -> TargetState {
        if other.gauge() > self.gauge() {
            other
        } else {
            self
        }
    }
}

/// Why a target may be tried now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// The breaker is closed.
    Closed,
    /// This request is the half-open probe.
    Probe,
}

/// Counts a request in flight until dropped.
pub struct InFlight<'a>(&'a AtomicU32);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Health {
    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Relaxed)
    }

    pub fn enter(&self) -> InFlight<'_> {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(&self.in_flight)
    }

    /// Whether a request would try it now (no side effect: [`Health::admit`] decides).
    pub fn available(&self, now_ms: i64) -> bool {
        if self.limited_until_ms.load(Ordering::Relaxed) > now_ms {
            return false;
        }
        match self.open_until_ms.load(Ordering::Acquire) {
            0 => true,
            until if now_ms < until => false,
            _ => !self.probing.load(Ordering::Acquire),
        }
    }

    /// Lets a request try the target, taking the half-open probe when that is due; None when
    /// it is skipped. An admitted request must [`Health::succeeded`] or [`Health::failed`].
    pub fn admit(&self, now_ms: i64) -> Option<Admission> {
        if self.limited_until_ms.load(Ordering::Relaxed) > now_ms {
            return None;
        }
        match self.open_until_ms.load(Ordering::Acquire) {
            0 => Some(Admission::Closed),
            until if now_ms < until => None,
            _ => self
                .probing
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .ok()
                .map(|_| Admission::Probe),
        }
    }

    /// The target answered (any answer but a retryable failure): the breaker closes.
    pub fn succeeded(&self) {
        self.failures.store(0, Ordering::Relaxed);
        if self.open_until_ms.load(Ordering::Acquire) != 0 {
            self.open_until_ms.store(0, Ordering::Release);
        }
        self.probing.store(false, Ordering::Release);
    }

    /// The target failed (connect error, timeout, 408/429/5xx): `breaker.failures` in a row,
    /// or a failed probe, open the breaker for the cool-down.
    pub fn failed(&self, breaker: &Breaker, admission: Admission, now_ms: i64) {
        let n = self.failures.fetch_add(1, Ordering::Relaxed).saturating_add(1);
        if admission == Admission::Probe || n >= breaker.failures {
            let until = now_ms.saturating_add((breaker.cooldown_seconds as i64).saturating_mul(1000)).max(1);
            self.open_until_ms.store(until, Ordering::Release);
        }
        self.probing.store(false, Ordering::Release);
    }

    /// A probe that ended without an outcome (the request could not be put into the target's
    /// API, or its client left): the next request may probe instead.
    pub fn release_probe(&self) {
        self.probing.store(false, Ordering::Release);
    }

    /// An answer said the target's request limit is used up until `until_ms`.
    pub fn limited_until(&self, until_ms: i64) {
        self.limited_until_ms.fetch_max(until_ms, Ordering::Relaxed);
    }

    pub fn state(&self, now_ms: i64) -> TargetState {
        match self.open_until_ms.load(Ordering::Acquire) {
            0 => TargetState::Operational,
            until if now_ms < until => TargetState::Outage,
            _ => TargetState::Degraded,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_breaker_opens_cools_down_and_probes_once() {
        let h = Health::default();
        let b = Breaker { failures: 2, cooldown_seconds: 1 };
        h.failed(&b, h.admit(0).unwrap(), 0);
        assert_eq!(h.state(0), TargetState::Operational);
        h.failed(&b, h.admit(0).unwrap(), 0);
        assert_eq!((h.state(10), h.admit(10)), (TargetState::Outage, None));
        assert_eq!(h.state(1000), TargetState::Degraded);
        assert_eq!(h.admit(1000), Some(Admission::Probe));
        assert_eq!(h.admit(1000), None, "one probe at a time");
        h.failed(&b, Admission::Probe, 1000);
        assert_eq!(h.state(1500), TargetState::Outage, "a failed probe opens it again");
        assert_eq!(h.admit(2000), Some(Admission::Probe));
        h.succeeded();
        assert_eq!((h.state(2000), h.admit(2000)), (TargetState::Operational, Some(Admission::Closed)));
    }

    #[test]
    fn a_used_up_rate_limit_skips_until_its_reset() {
        let h = Health::default();
        h.limited_until(500);
        assert!(!h.available(499) && h.admit(499).is_none());
        assert!(h.available(500) && h.admit(500).is_some());
    }
}
