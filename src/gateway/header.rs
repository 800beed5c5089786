//! Answer headers, built on `http`'s header map and handed to Pingora whole.
//!
//! Pingora's `ResponseHeader::build` keeps a second map of every name's original case, and each
//! `insert_header`/`append_header` turns the name into bytes (title-casing a `HeaderName`),
//! parses it back and inserts it in both maps. An answer carries the provider's headers plus
//! ours (ids, rate-limit state). Here the provider's names are moved over as they are and ours
//! parsed once, and the upstream request is built without the case map too
//! (`upstream::UpstreamClient::send`). Measured in the load benchmark with every check on,
//! same binary, A/B interleaved (session 33, a slowed VM): the Pingora threads' CPU a request
//! fell by 4–12 µs (75–87 → 62–82 µs), throughput 0.45–0.55x → 0.48–0.62x bare Pingora's.
//! Without a case map Pingora writes standard names title-cased (`Content-Type`) and others as
//! they are (`x-request-id`): the bytes the case-map path wrote for an answer, where the
//! provider's names came in as `HeaderName`s (title-cased) and ours in lower case.

use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::StatusCode;
use pingora::http::ResponseHeader;

/// Response headers that describe the upstream hop, not the answer.
const HOP_HEADERS: &[&str] =
    &["connection", "keep-alive", "transfer-encoding", "content-length", "set-cookie", "alt-svc", "proxy-connection"];

/// Sets each of `ours` on `map` (replacing what the provider sent under that name). A name or
/// value that is not a valid header is skipped and logged: ours are fixed names and values we
/// format, so it does not happen.
pub(super) fn set_ours(map: &mut HeaderMap, ours: &[(&'static str, String)]) {
    for (k, v) in ours {
        match (our_name(k), HeaderValue::from_str(v)) {
            (Ok(name), Ok(value)) => {
                map.insert(name, value);
            }
            _ => log::error!("answer header {k} not sent: not a valid header"),
        }
    }
}

/// Names already made, by the address and length of their static text (ours are a dozen
/// literals), on each thread.
const NAMES_KEPT: usize = 32;

thread_local! {
    static NAMES: std::cell::RefCell<Vec<(usize, usize, HeaderName)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The header name `k`: made once per thread by `from_bytes` (which refuses invalid names and
/// lower-cases), then cloned, as ours are the same static texts answer after answer. Making it
/// each time cost ~310 instructions and an allocation a name, eight names an answer with every
/// check on. Callgrind, 2 000 answers at one client, every check on (session 53): the relay
/// 62.10 M instructions → 58.03 M with this cache (−2 000 an answer); `from_static` instead of
/// the cache cost as much as `from_bytes` in its lookup of the standard names (63.18 M).
fn our_name(k: &'static str) -> Result<HeaderName, http::header::InvalidHeaderName> {
    let id = (k.as_ptr() as usize, k.len());
    NAMES.with_borrow_mut(|kept| {
        if let Some((_, _, name)) = kept.iter().find(|(p, l, _)| (*p, *l) == id) {
            return Ok(name.clone());
        }
        let name = HeaderName::from_bytes(k.as_bytes())?;
        if kept.len() < NAMES_KEPT {
            kept.push((id.0, id.1, name.clone()));
        }
        Ok(name)
    })
}

/// The provider's answer headers, except those that describe its hop.
pub(super) fn copy_end_to_end(map: &mut HeaderMap, from: &HeaderMap) {
    for (name, value) in from {
        if !HOP_HEADERS.contains(&name.as_str()) {
            map.append(name.clone(), value.clone());
        }
    }
}

/// The response header Pingora writes: `status` and `map`, no case map. An invalid status
/// (outside 100–999) becomes 502.
pub(super) fn response(status: u16, map: HeaderMap) -> ResponseHeader {
    let (mut parts, ()) = http::Response::new(()).into_parts();
    parts.status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    parts.headers = map;
    ResponseHeader::from(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fast build writes the same header block, byte for byte, as Pingora's own builder
    /// with its case map (the path it replaced): the reference pins it.
    #[test]
    fn the_fast_build_writes_what_pingoras_builder_writes() {
        let mut upstream = HeaderMap::new();
        upstream.insert("content-type", HeaderValue::from_static("application/json"));
        upstream.insert("connection", HeaderValue::from_static("keep-alive"));
        upstream.append("x-provider", HeaderValue::from_static("a"));
        upstream.append("x-provider", HeaderValue::from_static("b"));
        upstream.insert("x-request-id", HeaderValue::from_static("theirs"));
        let ours = [("x-request-id", "req-1".to_string()), ("x-ratelimit-limit-requests", "60".to_string())];

        let mut reference = ResponseHeader::build(200, None).unwrap();
        for (name, value) in &upstream {
            if !HOP_HEADERS.contains(&name.as_str()) {
                reference.append_header(name.clone(), value.clone()).unwrap();
            }
        }
        for (k, v) in &ours {
            reference.insert_header(*k, v.as_str()).unwrap();
        }

        let mut m = HeaderMap::with_capacity(8);
        copy_end_to_end(&mut m, &upstream);
        set_ours(&mut m, &ours);
        let fast = response(200, m);

        let wire = |h: &ResponseHeader| {
            let mut buf = Vec::new();
            h.header_to_h1_wire(&mut buf);
            let mut lines: Vec<String> = String::from_utf8(buf).unwrap().lines().map(str::to_string).collect();
            lines.sort();
            lines
        };
        assert_eq!(wire(&fast), wire(&reference));
        assert_eq!(fast.status, 200);
        assert!(wire(&fast).contains(&"x-request-id: req-1".to_string()), "ours replace the provider's");
        assert!(wire(&fast).contains(&"Content-Type: application/json".to_string()), "standard names title-cased");
        assert_eq!(fast.headers.get_all("x-provider").iter().count(), 2);
        assert_eq!(response(42, HeaderMap::new()).status, 502);
    }

    /// The kept names are the names `from_bytes` makes, the second time as the first; invalid
    /// names are refused every time, and the cache stops growing at its bound.
    #[test]
    fn our_names_equal_the_parsed_ones_and_bad_names_are_refused() {
        for _ in 0..2 {
            for k in ["x-request-id", "content-type", "retry-after", "x-ratelimit-reset-tokens", "x-9", "a"] {
                assert_eq!(our_name(k).unwrap(), HeaderName::from_bytes(k.as_bytes()).unwrap(), "{k}");
            }
        }
        let many: Vec<&'static str> =
            (0..2 * NAMES_KEPT).map(|i| &*Box::leak(format!("x-many-{i}").into_boxed_str())).collect();
        for k in &many {
            assert_eq!(our_name(k).unwrap().as_str(), *k);
        }
        assert!(NAMES.with_borrow(Vec::len) <= NAMES_KEPT);
        assert_eq!(our_name("X-Upper").unwrap().as_str(), "x-upper");
        for bad in ["", "a b", "x\n", "é"] {
            assert!(our_name(bad).is_err(), "{bad:?}");
        }
        let mut m = HeaderMap::with_capacity(2);
        set_ours(&mut m, &[("x-a", "1".into()), ("bad name", "2".into()), ("Retry-After", "3".into())]);
        assert_eq!(m.len(), 2);
        assert_eq!(m.get("retry-after").unwrap(), "3");
    }

    #[test]
    fn an_invalid_value_of_ours_is_skipped() {
        let mut m = HeaderMap::with_capacity(2);
        set_ours(&mut m, &[("x-a", "ok".into()), ("x-b", "bad\nvalue".into())]);
        assert_eq!(m.len(), 1);
    }
}
