//! The OTLP/HTTP exporter: its HTTP client, and a log line when exports start or stop failing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use opentelemetry_sdk::Resource;

/// How long one export may take, retries included (OTLP's own default).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The OTLP span exporter for `url`, protobuf over HTTP. The standard `OTEL_EXPORTER_OTLP_HEADERS`
/// (e.g. a vendor's API key) are read by the exporter itself.
pub(super) fn exporter(url: &str, shown: String) -> Result<Logged, String> {
    let inner = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(http_client(url.starts_with("https:"))?)
        .with_endpoint(url)
        .with_protocol(Protocol::HttpBinary)
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|e| format!("OTLP exporter for {shown}: {e}"))?;
    Ok(Logged { inner, shown, failing: AtomicBool::new(false) })
}

fn http_client(https: bool) -> Result<reqwest::blocking::Client, String> {
    crate::upstream::blocking_client(EXPORT_TIMEOUT, https).map_err(|e| format!("the OTLP exporter's {e}"))
}

/// The OTLP exporter, logging when exports begin to fail and when they recover (not every
/// failed batch: a collector that is down would otherwise write a line every few seconds).
#[derive(Debug)]
pub(super) struct Logged {
    inner: opentelemetry_otlp::SpanExporter,
    /// The endpoint as logged (no credentials).
    shown: String,
    failing: AtomicBool,
}

impl SpanExporter for Logged {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len();
        let result = self.inner.export(batch).await;
        match &result {
            Err(e) if !self.failing.swap(true, Ordering::Relaxed) => {
                log::warn!(
                    "tracing: exporting {n} spans to {} failed (not logged again until it works): {e}",
                    self.shown
                )
            }
            Ok(()) if self.failing.swap(false, Ordering::Relaxed) => log::info!("tracing: exports work again"),
            _ => {}
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}
