//! What an answer's headers say of the credential's request limit.

/// Whether an answer says the credential's request limit is used up
/// (`x-ratelimit-remaining-requests: 0`), and until when (`x-ratelimit-reset-requests`, a
/// duration such as `1s`, `6m0s` or `20ms`): the Unix ms of its reset. A reset it does not give
/// counts as one second; none is believed beyond an hour.
pub(crate) fn x_ratelimit_exhausted(headers: &http::HeaderMap, now_ms: i64) -> Option<i64> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    if text("x-ratelimit-remaining-requests")? != "0" {
        return None;
    }
    let ms = text("x-ratelimit-reset-requests").and_then(duration_ms).unwrap_or(1000);
    Some(now_ms + ms.min(RESET_CAP_MS))
}

/// The longest reset an answer is believed for.
pub(crate) const RESET_CAP_MS: i64 = 3_600_000;

/// `1h2m3.5s`, `6m0s`, `20ms`, `2` (seconds) → milliseconds.
fn duration_ms(s: &str) -> Option<i64> {
    if let Ok(secs) = s.parse::<f64>() {
        return secs.is_finite().then_some((secs * 1000.0) as i64);
    }
    let (mut total, mut rest) = (0f64, s);
    while !rest.is_empty() {
        let n = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let value: f64 = rest[..n].parse().ok()?;
        rest = &rest[n..];
        let (unit, len) = match () {
            _ if rest.starts_with("ms") => (1.0, 2),
            _ if rest.starts_with('h') => (3_600_000.0, 1),
            _ if rest.starts_with('m') => (60_000.0, 1),
            _ if rest.starts_with('s') => (1000.0, 1),
            _ => return None,
        };
        total += value * unit;
        rest = &rest[len..];
    }
    Some(total as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reset_durations() {
        assert_eq!(duration_ms("1s"), Some(1000));
        assert_eq!(duration_ms("6m0s"), Some(360_000));
        assert_eq!(duration_ms("20ms"), Some(20));
        assert_eq!(duration_ms("1h2m3.5s"), Some(3_723_500));
        assert_eq!(duration_ms("2"), Some(2000));
        assert_eq!(duration_ms("soon"), None);
        let mut h = http::HeaderMap::new();
        h.insert("x-ratelimit-remaining-requests", "0".parse().unwrap());
        h.insert("x-ratelimit-reset-requests", "1.5s".parse().unwrap());
        assert_eq!(x_ratelimit_exhausted(&h, 10), Some(1510));
        h.insert("x-ratelimit-remaining-requests", "3".parse().unwrap());
        assert_eq!(x_ratelimit_exhausted(&h, 10), None);
    }

    /// Each provider reads its own headers: Anthropic's reset is a time, OpenAI's a duration.
    #[test]
    fn providers_read_their_own_rate_limit_headers() {
        use crate::providers::{provider, ProviderName};
        let now = chrono::DateTime::parse_from_rfc3339("2025-01-01T00:00:00Z").unwrap().timestamp_millis();
        let mut h = http::HeaderMap::new();
        h.insert("anthropic-ratelimit-requests-remaining", "0".parse().unwrap());
        h.insert("anthropic-ratelimit-requests-reset", "2025-01-01T00:00:05Z".parse().unwrap());
        assert_eq!(provider(ProviderName::Anthropic).requests_exhausted_until(&h, now), Some(now + 5000));
        assert_eq!(provider(ProviderName::OpenAi).requests_exhausted_until(&h, now), None);
        h.insert("anthropic-ratelimit-requests-remaining", "7".parse().unwrap());
        assert_eq!(provider(ProviderName::Anthropic).requests_exhausted_until(&h, now), None);
    }
}
