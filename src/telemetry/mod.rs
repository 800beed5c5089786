//! OpenTelemetry traces (opt-in), exported over OTLP/HTTP (protobuf) to a collector. What a
//! span says is its caller's business (the gateway's request span, `gateway::span`); here are
//! the tracer and its exporter.
//!
//! An ended span is handed to the SDK's batch span processor through a bounded channel (dropped
//! when full, never waited on), and the processor's own thread encodes and sends batches with
//! reqwest's blocking client. With tracing off the gateway holds `None` and pays one branch per
//! hook.

mod export;

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;

use crate::config::TelemetrySection;

pub use crate::config::otlp::traces_url;

/// The tracer of a running gateway and what each request's span needs from it.
pub struct Tracing {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    capture_prompts: bool,
}

impl Tracing {
    /// The tracer when `telemetry.otlp_endpoint` is set, else `None` (tracing off). Starts the
    /// batch processor's thread; nothing is sent until a span ends.
    pub fn from_config(cfg: &TelemetrySection) -> Result<Option<Tracing>, String> {
        if cfg.otlp_endpoint.is_empty() {
            return Ok(None);
        }
        let url = traces_url(&cfg.otlp_endpoint)?;
        let exporter = export::exporter(&url, crate::secrets::url_shown(&url))?;
        // `builder()` also reads `OTEL_RESOURCE_ATTRIBUTES` (e.g. `deployment.environment=prod`).
        let resource = Resource::builder().with_service_name(cfg.service_name.clone()).build();
        let provider = SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource).build();
        let tracer = provider.tracer("tollgate");
        log::info!(
            "tracing: spans go to {} (OTLP/HTTP protobuf), prompts captured: {}",
            crate::secrets::url_shown(&url),
            cfg.capture_prompts
        );
        Ok(Some(Tracing { provider, tracer, capture_prompts: cfg.capture_prompts }))
    }

    /// The tracer spans are started with.
    pub fn tracer(&self) -> &SdkTracer {
        &self.tracer
    }

    /// Whether spans may carry the prompt (`telemetry.capture_prompts`).
    pub fn captures_prompts(&self) -> bool {
        self.capture_prompts
    }

    /// Exports what is still queued, waiting at most `limit`. Blocks: call it once, at exit.
    pub fn shutdown(&self, limit: Duration) {
        match self.provider.shutdown_with_timeout(limit) {
            Ok(()) => log::info!("tracing: queued spans exported"),
            Err(e) => log::warn!("tracing: spans may be lost at shutdown: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::traces_url;
    use crate::secrets::url_shown as shown;

    #[test]
    fn the_log_shows_no_credentials_of_the_endpoint() {
        assert_eq!(
            shown("https://user:s3cret@otel.example.com:4318/v1/traces"),
            "https://otel.example.com:4318/v1/traces"
        );
        assert_eq!(shown("http://127.0.0.1:4318/v1/traces"), "http://127.0.0.1:4318/v1/traces");
    }

    #[test]
    fn the_traces_path_is_appended_once() {
        assert_eq!(traces_url("http://127.0.0.1:4318").unwrap(), "http://127.0.0.1:4318/v1/traces");
        assert_eq!(traces_url("https://otel.example.com/").unwrap(), "https://otel.example.com/v1/traces");
        assert_eq!(traces_url("https://otel.example.com/otlp").unwrap(), "https://otel.example.com/otlp/v1/traces");
        assert_eq!(traces_url(" http://c:4318/v1/traces ").unwrap(), "http://c:4318/v1/traces");
        for bad in ["collector:4318", "grpc://c:4317", "http://", "http://c:4318/?x=1", "not a url"] {
            assert!(traces_url(bad).is_err(), "{bad}");
        }
    }
}
