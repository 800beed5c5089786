//! `TOLLGATE_*` environment overrides. Each error names the variable.

use super::{Config, ConfigError, ListenAddr};

type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Every variable, in this order (the first bad one is the error).
pub(super) fn apply(cfg: &mut Config, var: Lookup) -> Result<(), ConfigError> {
    server(cfg, var)?;
    receipts_and_cluster(cfg, var)?;
    webhooks_and_billing(cfg, var)?;
    console(cfg, var);
    telemetry(cfg, var)
}

/// `TOLLGATE_CONSOLE_PUBLIC_URL` and `TOLLGATE_CONSOLE_OIDC_*` (API.md "Console"); the issuer
/// turns single sign-on on when the file did not.
fn console(cfg: &mut Config, var: Lookup) {
    text(var, "TOLLGATE_CONSOLE_PUBLIC_URL", &mut cfg.console.public_url);
    if let Some(issuer) = var("TOLLGATE_CONSOLE_OIDC_ISSUER").filter(|v| !v.trim().is_empty()) {
        let o = cfg.console.oidc.get_or_insert_with(|| super::console::OidcConfig {
            issuer: String::new(),
            client_id: String::new(),
            client_secret: String::new(),
            public_url: String::new(),
            claims: Default::default(),
            scopes: Vec::new(),
        });
        o.issuer = issuer.trim().to_string();
    }
    let Some(o) = cfg.console.oidc.as_mut() else { return };
    text(var, "TOLLGATE_CONSOLE_OIDC_CLIENT_ID", &mut o.client_id);
    text(var, "TOLLGATE_CONSOLE_OIDC_CLIENT_SECRET", &mut o.client_secret);
    text(var, "TOLLGATE_CONSOLE_OIDC_CLAIMS_TENANT", &mut o.claims.tenant);
    text(var, "TOLLGATE_CONSOLE_OIDC_CLAIMS_ROLE", &mut o.claims.role);
    if let Some(v) = var("TOLLGATE_CONSOLE_OIDC_SCOPES") {
        o.scopes = v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect();
    }
}

fn server(cfg: &mut Config, var: Lookup) -> Result<(), ConfigError> {
    if let Some(v) = var("TOLLGATE_DATA_DIR") {
        cfg.storage.data_dir = v.into();
    }
    if let Some(v) = var("TOLLGATE_DATABASE_URL") {
        if !(v.starts_with("sqlite:") || v.starts_with("postgres://") || v.starts_with("postgresql://")) {
            return Err(invalid("TOLLGATE_DATABASE_URL", "must start with sqlite: or postgres://"));
        }
        cfg.storage.database_url = v;
    }
    listen(var, "TOLLGATE_GATEWAY_LISTEN", &mut cfg.listen.gateway)?;
    listen(var, "TOLLGATE_MANAGEMENT_LISTEN", &mut cfg.listen.management)?;
    listen(var, "TOLLGATE_METRICS_LISTEN", &mut cfg.listen.metrics)?;
    number(var, "TOLLGATE_UPSTREAM_CONNECT_TIMEOUT_MS", &mut cfg.upstream.connect_timeout_ms)?;
    number(var, "TOLLGATE_UPSTREAM_READ_TIMEOUT_MS", &mut cfg.upstream.read_timeout_ms)?;
    number(var, "TOLLGATE_MAX_BODY_BYTES", &mut cfg.limits.max_body_bytes)?;
    number(var, "TOLLGATE_COUNT_TOKENS_RPM", &mut cfg.limits.count_tokens_rpm)?;
    number(var, "TOLLGATE_THREADS", &mut cfg.server.threads)?;
    text(var, "TOLLGATE_TLS_CERT_FILE", &mut cfg.listen.tls_cert_file);
    text(var, "TOLLGATE_TLS_KEY_FILE", &mut cfg.listen.tls_key_file);
    text(var, "TOLLGATE_UPSTREAM_CA_FILE", &mut cfg.upstream.ca_file);
    number(var, "TOLLGATE_GRACE_PERIOD_SECONDS", &mut cfg.server.grace_period_seconds)?;
    number(var, "TOLLGATE_SNAPSHOT_REFRESH_MS", &mut cfg.storage.snapshot_refresh_ms)?;
    number(var, "TOLLGATE_CHAIN_AUDIT_SECONDS", &mut cfg.storage.chain_audit_seconds)?;
    if let Some(v) = var("TOLLGATE_POLICY_DIR") {
        cfg.policies.dir = v.into();
    }
    number(var, "TOLLGATE_POLICY_WATCH_MS", &mut cfg.policies.watch_ms)?;
    flag(var, "TOLLGATE_STAMP_PACK_VERSION", &mut cfg.compliance.stamp_pack_version)
}

fn receipts_and_cluster(cfg: &mut Config, var: Lookup) -> Result<(), ConfigError> {
    if let Some(v) = var("TOLLGATE_RECEIPTS_COMMIT") {
        cfg.receipts.commit = match v.trim() {
            "before_answer" => super::CommitMode::BeforeAnswer,
            "after_answer" => super::CommitMode::AfterAnswer,
            _ => return Err(invalid("TOLLGATE_RECEIPTS_COMMIT", "must be before_answer or after_answer")),
        };
    }
    text(var, "TOLLGATE_REDIS_URL", &mut cfg.cluster.redis_url);
    text(var, "TOLLGATE_REDIS_PREFIX", &mut cfg.cluster.redis_prefix);
    if let Some(v) = var("TOLLGATE_REDIS_ON_DOWN") {
        cfg.cluster.on_redis_down = match v.trim() {
            "open" => super::OnRedisDown::Open,
            "closed" => super::OnRedisDown::Closed,
            _ => return Err(invalid("TOLLGATE_REDIS_ON_DOWN", "must be open or closed")),
        };
    }
    number(var, "TOLLGATE_REDIS_TIMEOUT_MS", &mut cfg.cluster.redis_timeout_ms)?;
    flag(var, "TOLLGATE_REDIS_SHARED_CACHE", &mut cfg.cluster.shared_cache)?;
    number(var, "TOLLGATE_RECEIPTS_COMMIT_TIMEOUT_MS", &mut cfg.receipts.commit_timeout_ms)?;
    number(var, "TOLLGATE_WAL_CHECKPOINT_MS", &mut cfg.receipts.wal_checkpoint_ms)?;
    flag(var, "TOLLGATE_RECEIPTS_JOURNAL", &mut cfg.receipts.journal)?;
    if let Some(v) = var("TOLLGATE_RECEIPTS_DURABILITY") {
        cfg.receipts.durability = match v.trim() {
            "page-cache" => super::Durability::PageCache,
            "fsync" => super::Durability::Fsync,
            _ => return Err(invalid("TOLLGATE_RECEIPTS_DURABILITY", "must be page-cache or fsync")),
        };
    }
    number(var, "TOLLGATE_RECEIPTS_JOURNAL_APPLY_MS", &mut cfg.receipts.journal_apply_ms)?;
    log(cfg, var)
}

fn log(cfg: &mut Config, var: Lookup) -> Result<(), ConfigError> {
    text(var, "TOLLGATE_LOG_ORIGIN_PREFIX", &mut cfg.log.origin_prefix);
    number(var, "TOLLGATE_LOG_WITNESS_STALE_SECONDS", &mut cfg.log.witness_stale_seconds)?;
    if let Some(v) = var("TOLLGATE_LOG_WITNESSES") {
        cfg.log.witnesses = witnesses(&v)?;
    }
    number(var, "TOLLGATE_LOG_PUBLISH_INTERVAL_SECONDS", &mut cfg.log.publish_interval_seconds)?;
    // A URL turns timestamping on (or moves it); the other two refine a section that is on.
    if let Some(url) = var("TOLLGATE_LOG_TIMESTAMPING_URL").filter(|v| !v.trim().is_empty()) {
        let t = cfg.log.timestamping.get_or_insert_with(|| super::tenant_log::Timestamping {
            url: String::new(),
            interval_seconds: super::tenant_log::DEFAULT_TIMESTAMP_INTERVAL_SECONDS,
            ca_file: String::new(),
        });
        t.url = url.trim().to_string();
    }
    if let Some(t) = cfg.log.timestamping.as_mut() {
        number(var, "TOLLGATE_LOG_TIMESTAMPING_INTERVAL_SECONDS", &mut t.interval_seconds)?;
        text(var, "TOLLGATE_LOG_TIMESTAMPING_CA_FILE", &mut t.ca_file);
    }
    number(var, "TOLLGATE_LOG_RETENTION_FLOOR_DAYS", &mut cfg.log.retention_floor_days)?;
    Ok(())
}

/// `name|url|verifier_key`, several separated by `,` (empty: none).
fn witnesses(v: &str) -> Result<Vec<super::tenant_log::WitnessConfig>, ConfigError> {
    v.split(',')
        .filter(|w| !w.trim().is_empty())
        .map(|w| match w.trim().split('|').collect::<Vec<_>>()[..] {
            [name, url, key] => {
                Ok(super::tenant_log::WitnessConfig { name: name.into(), url: url.into(), verifier_key: key.into() })
            }
            _ => Err(invalid("TOLLGATE_LOG_WITNESSES", "must be name|url|verifier_key, several separated by commas")),
        })
        .collect()
}

fn webhooks_and_billing(cfg: &mut Config, var: Lookup) -> Result<(), ConfigError> {
    number(var, "TOLLGATE_WEBHOOK_RETRY_BASE_MS", &mut cfg.webhooks.retry_base_ms)?;
    number(var, "TOLLGATE_WEBHOOK_RETRY_MAX_MS", &mut cfg.webhooks.retry_max_ms)?;
    number(var, "TOLLGATE_WEBHOOK_MAX_ATTEMPTS", &mut cfg.webhooks.max_attempts)?;
    number(var, "TOLLGATE_WEBHOOK_POLL_MS", &mut cfg.webhooks.poll_ms)?;
    number(var, "TOLLGATE_WEBHOOK_TIMEOUT_MS", &mut cfg.webhooks.timeout_ms)?;
    flag(var, "TOLLGATE_WEBHOOK_ALLOW_PRIVATE_URLS", &mut cfg.webhooks.allow_private_urls)?;
    text(var, "TOLLGATE_STRIPE_PRICE_ID", &mut cfg.billing.stripe_price_id);
    text(var, "TOLLGATE_STRIPE_API_BASE", &mut cfg.billing.stripe_api_base);
    if let Some(v) = var("TOLLGATE_STRIPE_SECRET_KEY").filter(|v| !v.trim().is_empty()) {
        cfg.billing.stripe_secret_key = Some(crate::secrets::Secret::new(v.trim()));
    }
    Ok(())
}

/// Tollgate's own variables first; the standard OpenTelemetry ones are honoured where an
/// OpenTelemetry-aware deployment (an operator, a compose file) sets them for every service:
/// `OTEL_EXPORTER_OTLP_ENDPOINT` only when nothing of Tollgate's names an endpoint,
/// `OTEL_SDK_DISABLED=true` turns tracing off whatever else says.
fn telemetry(cfg: &mut Config, var: Lookup) -> Result<(), ConfigError> {
    let t = &mut cfg.telemetry;
    text(var, "TOLLGATE_OTLP_ENDPOINT", &mut t.otlp_endpoint);
    if t.otlp_endpoint.trim().is_empty() {
        text(var, "OTEL_EXPORTER_OTLP_ENDPOINT", &mut t.otlp_endpoint);
    }
    t.otlp_endpoint = t.otlp_endpoint.trim().to_string();
    if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        t.otlp_endpoint.clear();
    }
    if let Some(v) = var("OTEL_SERVICE_NAME").filter(|v| !v.trim().is_empty()) {
        t.service_name = v.trim().to_string();
    }
    flag(var, "TOLLGATE_OTLP_CAPTURE_PROMPTS", &mut t.capture_prompts)
}

fn invalid(name: &str, msg: &str) -> ConfigError {
    ConfigError::Invalid(format!("environment variable {name}: {msg}"))
}

fn listen(var: Lookup, name: &str, slot: &mut ListenAddr) -> Result<(), ConfigError> {
    if let Some(v) = var(name) {
        *slot = ListenAddr::parse(&v).map_err(|e| invalid(name, &e))?;
    }
    Ok(())
}

fn number<T: std::str::FromStr>(var: Lookup, name: &str, slot: &mut T) -> Result<(), ConfigError> {
    if let Some(v) = var(name) {
        *slot = v.trim().parse().map_err(|_| invalid(name, &format!("`{v}` is not a whole number")))?;
    }
    Ok(())
}

fn flag(var: Lookup, name: &str, slot: &mut bool) -> Result<(), ConfigError> {
    if let Some(v) = var(name) {
        *slot = match v.trim() {
            "true" | "1" => true,
            "false" | "0" => false,
            _ => return Err(invalid(name, "must be true, false, 1 or 0")),
        };
    }
    Ok(())
}

fn text(var: Lookup, name: &str, slot: &mut String) {
    if let Some(v) = var(name) {
        *slot = v;
    }
}
