//! When a failed attempt moves on, and how long it waits first: the failures that move on,
//! jittered exponential backoff, and the upstream's `Retry-After` / `retry-after-ms`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Whether an upstream status moves on to the next attempt: 408, 429 and every 5xx (529 is
/// Anthropic's "overloaded"). Other 4xx are the request's own fault and are relayed.
pub fn retryable_status(status: u16) -> bool {
    matches!(status, 408 | 429 | 500..=599)
}

/// The wait before attempt `n + 1` (n ≥ 1 attempts made): `backoff_ms · 2^(n-1)`, with full
/// jitter over its upper half (so simultaneous clients do not retry in step).
pub fn backoff(backoff_ms: u64, attempts_made: u32) -> Duration {
    if backoff_ms == 0 {
        return Duration::ZERO;
    }
    let base = backoff_ms.saturating_mul(1 << attempts_made.saturating_sub(1).min(16));
    let half = base / 2;
    Duration::from_millis(half + random() % (base - half + 1))
}

/// The wait an answer asks for: `retry-after-ms` (milliseconds), else `retry-after` (seconds
/// or an HTTP date).
pub fn retry_after(headers: &http::HeaderMap, now: chrono::DateTime<chrono::Utc>) -> Option<Duration> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    if let Some(ms) = text("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        return (ms.is_finite() && ms >= 0.0).then(|| Duration::from_micros((ms * 1000.0) as u64));
    }
    let v = text("retry-after")?;
    if let Ok(s) = v.parse::<u64>() {
        return Some(Duration::from_secs(s));
    }
    let at = chrono::DateTime::parse_from_rfc2822(v).ok()?;
    Some((at.with_timezone(&chrono::Utc) - now).to_std().unwrap_or_default())
}

/// A pseudo-random number (splitmix64 over a shared counter): for jitter only.
fn random() -> u64 {
    static STATE: AtomicU64 = AtomicU64::new(0);
    let mut z = STATE.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
    if z == 0 {
        let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        z = STATE.fetch_add(seed as u64 | 1, Ordering::Relaxed);
    }
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_statuses_move_on() {
        for s in [408, 429, 500, 502, 503, 529] {
            assert!(retryable_status(s), "{s}");
        }
        for s in [200, 400, 401, 403, 404, 413, 422] {
            assert!(!retryable_status(s), "{s}");
        }
    }

    #[test]
    fn backoff_doubles_with_jitter() {
        for n in 1..5u32 {
            let d = backoff(100, n).as_millis() as u64;
            let base = 100 << (n - 1);
            assert!(d >= base / 2 && d <= base, "{n}: {d}");
        }
        assert_eq!(backoff(0, 3), Duration::ZERO);
    }

    #[test]
    fn retry_after_in_its_forms() {
        let now = chrono::DateTime::parse_from_rfc3339("2025-01-01T00:00:00Z").unwrap().with_timezone(&chrono::Utc);
        let mut h = http::HeaderMap::new();
        h.insert("retry-after", "7".parse().unwrap());
        assert_eq!(retry_after(&h, now), Some(Duration::from_secs(7)));
        h.insert("retry-after", "Wed, 01 Jan 2025 00:00:03 GMT".parse().unwrap());
        assert_eq!(retry_after(&h, now), Some(Duration::from_secs(3)));
        h.insert("retry-after-ms", "250".parse().unwrap());
        assert_eq!(retry_after(&h, now), Some(Duration::from_millis(250)));
    }
}
