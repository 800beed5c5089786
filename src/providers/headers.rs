//! The headers an upstream call starts with. The client's credentials never pass through: the
//! upstream header set is built from an allowlist plus the provider's own credential.

use super::provider::ClientHeader;

/// The headers every JSON call starts with, plus the client's `accept` and whichever of the
/// client's headers `forward` allows.
pub(crate) fn base_headers(forward: &[&'static str], client_header: &ClientHeader<'_>) -> Vec<(&'static str, String)> {
    let mut headers: Vec<(&'static str, String)> = vec![
        ("content-type", "application/json".into()),
        // Identity encoding so the gateway can read usage from the answer.
        ("accept-encoding", "identity".into()),
    ];
    if let Some(a) = client_header("accept") {
        headers.push(("accept", a));
    }
    for &h in forward {
        if let Some(v) = client_header(h) {
            headers.push((h, v));
        }
    }
    headers
}
