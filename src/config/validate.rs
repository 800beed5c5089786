//! The checks that span fields or need more than a value's own type, run once after the file
//! and the environment are read. Each error names the dotted field.

use super::tool_server::{check_headers, check_name, ServerUrl};
use super::{Config, ConfigError, Vocabulary};
use crate::upstream::BaseUrl;

type Checked = Result<(), ConfigError>;

fn bad(field: &str, msg: &str) -> Checked {
    Err(ConfigError::Invalid(format!("field `{field}`: {msg}")))
}

impl Config {
    pub(super) fn validate(&self, vocab: &Vocabulary) -> Checked {
        self.check_sizes()?;
        self.check_base_urls(vocab)?;
        self.check_tool_servers()?;
        self.check_listeners()?;
        self.check_files()?;
        self.check_outbound()?;
        self.check_log()?;
        self.routes.check(vocab).map_err(ConfigError::Invalid)?;
        self.check_prices()
    }

    fn check_sizes(&self) -> Checked {
        if self.server.threads == 0 {
            return bad("server.threads", "must be at least 1");
        }
        if self.limits.max_body_bytes == 0 {
            return bad("limits.max_body_bytes", "must be greater than 0");
        }
        if self.upstream.connect_timeout_ms == 0 || self.upstream.read_timeout_ms == 0 {
            return bad("upstream", "timeouts must be greater than 0");
        }
        Ok(())
    }

    /// The base URL of every provider whose calls go to it (a credential may name its own).
    fn check_base_urls(&self, vocab: &Vocabulary) -> Checked {
        for spec in vocab.providers.iter().filter(|p| p.needs_base_url) {
            if let Err(e) = BaseUrl::parse(&self.provider_defaults(spec.name).base_url) {
                return bad(&format!("providers.{}.base_url", spec.name), &e);
            }
        }
        Ok(())
    }

    fn check_tool_servers(&self) -> Checked {
        for (i, t) in self.tool_servers.iter().enumerate() {
            let field = format!("tool_servers[{i}]");
            if t.tenant.trim().is_empty() {
                return bad(&format!("{field}.tenant"), "must name a tenant id");
            }
            if let Err(e) = check_name(&t.name) {
                return bad(&format!("{field}.name"), &e);
            }
            if let Err(e) = ServerUrl::parse(&t.url) {
                return bad(&format!("{field}.url"), &e);
            }
            if let Err(e) = check_headers(t.headers.iter()) {
                return bad(&format!("{field}.headers"), &e);
            }
            if self.tool_servers[..i].iter().any(|o| o.tenant == t.tenant && o.name == t.name) {
                return bad(&format!("{field}.name"), "is listed twice for this tenant");
            }
        }
        Ok(())
    }

    /// Pingora binds with SO_REUSEPORT, so two services on one address would both start and
    /// the kernel would split connections between them (seen: a management call answered by
    /// the gateway). Refuse it at start instead.
    fn check_listeners(&self) -> Checked {
        let l = &self.listen;
        let addrs =
            [("listen.gateway", l.gateway.0), ("listen.management", l.management.0), ("listen.metrics", l.metrics.0)];
        for (i, (a_name, a)) in addrs.iter().enumerate() {
            for (b_name, b) in &addrs[i + 1..] {
                let same_ip = a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified();
                if a.port() == b.port() && same_ip {
                    return bad(
                        b_name,
                        &format!("`{b}` is already the address of `{a_name}`; each listener needs its own"),
                    );
                }
            }
        }
        Ok(())
    }

    fn check_files(&self) -> Checked {
        let (cert, key) = (&self.listen.tls_cert_file, &self.listen.tls_key_file);
        if cert.is_empty() != key.is_empty() {
            return bad("listen.tls_cert_file", "set both tls_cert_file and tls_key_file, or neither");
        }
        for (field, path) in
            [("listen.tls_cert_file", cert), ("listen.tls_key_file", key), ("upstream.ca_file", &self.upstream.ca_file)]
        {
            if !path.is_empty() && std::fs::metadata(path).is_err() {
                return bad(field, &format!("cannot read `{path}`"));
            }
        }
        if self.policies.watch_ms == 0 {
            return bad("policies.watch_ms", "must be greater than 0");
        }
        Ok(())
    }

    /// Where the gateway sends things: traces, webhooks, Stripe.
    fn check_outbound(&self) -> Checked {
        if !self.telemetry.otlp_endpoint.is_empty() {
            if let Err(e) = super::otlp::traces_url(&self.telemetry.otlp_endpoint) {
                return bad("telemetry.otlp_endpoint", &e);
            }
        }
        let w = &self.webhooks;
        if w.max_attempts == 0 || w.poll_ms == 0 || w.timeout_ms == 0 || w.retry_base_ms == 0 {
            return bad("webhooks", "max_attempts, poll_ms, timeout_ms and retry_base_ms must be greater than 0");
        }
        if w.retry_max_ms < w.retry_base_ms {
            return bad("webhooks.retry_max_ms", "must be at least retry_base_ms");
        }
        if !(1..=100).contains(&w.budget_threshold_percent) {
            return bad("webhooks.budget_threshold_percent", "must be from 1 to 100");
        }
        if let Err(e) = BaseUrl::parse(&self.billing.stripe_api_base) {
            return bad("billing.stripe_api_base", &e);
        }
        Ok(())
    }

    fn check_log(&self) -> Checked {
        if self.log.publish_interval_seconds == 0 {
            return bad("log.publish_interval_seconds", "must be at least 1");
        }
        let Some(t) = &self.log.timestamping else { return Ok(()) };
        if let Err(e) = BaseUrl::parse(&t.url) {
            return bad("log.timestamping.url", &e);
        }
        if t.interval_seconds == 0 {
            return bad("log.timestamping.interval_seconds", "must be at least 1");
        }
        if !t.ca_file.is_empty() && std::fs::metadata(&t.ca_file).is_err() {
            return bad("log.timestamping.ca_file", &format!("cannot read `{}`", t.ca_file));
        }
        Ok(())
    }

    fn check_prices(&self) -> Checked {
        for (model, price) in &self.pricing {
            let cached = [price.cache_read, price.cache_write, price.cache_write_1h];
            if !(price.input >= 0.0 && price.output >= 0.0 && cached.iter().flatten().all(|p| *p >= 0.0)) {
                return bad(&format!("pricing.{model}"), "prices must be non-negative numbers");
            }
        }
        Ok(())
    }
}
