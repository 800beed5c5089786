//! The OTLP endpoint setting (`telemetry.otlp_endpoint`): checked with the config, used by
//! the exporter.

/// The OTLP/HTTP path for traces, appended to a base endpoint.
const TRACES_PATH: &str = "/v1/traces";

/// The URL spans are POSTed to: `endpoint` plus `/v1/traces`, unless it already ends with it
/// (the rule of `OTEL_EXPORTER_OTLP_ENDPOINT`, lenient to a pasted full URL).
pub fn traces_url(endpoint: &str) -> Result<String, String> {
    let endpoint = endpoint.trim();
    let uri: http::Uri = endpoint.parse().map_err(|_| format!("`{endpoint}` is not a URL"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
        return Err(format!("`{endpoint}` must be an http:// or https:// URL with a host"));
    }
    if uri.query().is_some() {
        return Err(format!("`{endpoint}` must not have a query string"));
    }
    let base = endpoint.trim_end_matches('/');
    Ok(if base.ends_with(TRACES_PATH) { base.to_string() } else { format!("{base}{TRACES_PATH}") })
}
