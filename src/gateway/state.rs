//! What every request of the gateway shares: the application, the pooled upstream client, the
//! checks' pipeline and the owners of stored responses; and the upstream call every route
//! kind makes with them.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use pingora::proxy::Session;

use crate::app::App;
use crate::checks::pipeline::Pipeline;
use crate::error::{ApiError, ErrorKind};
use crate::metrics;
use crate::providers::ProviderCred;
use crate::providers::ProviderName;
use crate::providers::{self, Provider, Target, UpstreamCall};
use crate::snapshot::KeyEntry;
use crate::upstream::{UpstreamClient, UpstreamError, UpstreamResponse};

use super::context::Ctx;
use super::relay::UpstreamOutcome;
use super::stored::Owners;

pub struct Gateway {
    pub(super) app: Arc<App>,
    pub(super) upstream: UpstreamClient,
    pub(super) pipeline: Pipeline,
    /// Which tenant created which stored OpenAI response.
    pub(super) owners: Owners,
}

impl Gateway {
    pub fn new(app: Arc<App>) -> Self {
        let upstream = UpstreamClient::new(App::upstream_timeouts(&app.config), &app.config.upstream.ca_file);
        let mut pipeline =
            Pipeline::new(crate::checks::table(app.ledger.clone(), app.cache.clone(), app.cluster.clone()));
        if let Some(c) = app.cluster.clone() {
            pipeline = pipeline.with_shared(c);
        }
        let owners = Owners::new(app.store.clone());
        Gateway { app, upstream, pipeline, owners }
    }
}

impl Gateway {
    /// The tenant's credential for `provider`, or the error that says how to set one.
    pub(super) fn credential(
        &self,
        ctx: &Ctx,
        key: &KeyEntry,
        provider: ProviderName,
    ) -> Result<Arc<ProviderCred>, ApiError> {
        ctx.snap.provider(key.tenant_id(), provider).cloned().ok_or_else(|| {
            ApiError::new(
                ErrorKind::NotConfigured,
                format!("provider {provider} has no credentials for this tenant: set them with PUT /v1/providers/{provider}"),
            )
        })
    }

    /// Sends the upstream call; a failure to get an answer is the client's 502 or 504.
    pub(super) async fn send_upstream(
        &self,
        ctx: &mut Ctx,
        provider: ProviderName,
        cred: &ProviderCred,
        call: providers::UpstreamCall,
    ) -> Result<UpstreamResponse<'_>, ApiError> {
        let sent_at = Instant::now();
        // The upstream leg's futures are boxed: inlined, they made this future ~12 KiB, which
        // Pingora's boxed `request_filter` copied (and allocated) whole for every request.
        match Box::pin(self.upstream.send(&cred.base_url, call.method, &call.path, &call.headers, call.body)).await {
            Ok(r) => {
                metrics::local::upstream_latency(provider.as_str(), sent_at.elapsed().as_secs_f64());
                Ok(r)
            }
            Err(e) => {
                ctx.upstream = UpstreamOutcome::from_error(&e);
                log::warn!("request {}: {e}", ctx.request_id);
                Err(match e {
                    UpstreamError::Timeout(_) => {
                        ApiError::new(ErrorKind::UpstreamTimeout, format!("{provider} did not answer in time"))
                    }
                    UpstreamError::Failed(_) => {
                        ApiError::new(ErrorKind::UpstreamError, format!("could not reach {provider}; retry later"))
                    }
                })
            }
        }
    }

    /// The provider's call: authenticated and addressed by the provider, with the client's
    /// headers it forwards.
    pub(super) async fn prepare_call(
        &self,
        session: &Session,
        ctx: &Ctx,
        provider: &dyn Provider,
        cred: &ProviderCred,
        target: Target<'_>,
        body: Bytes,
    ) -> Result<UpstreamCall, ApiError> {
        let headers = &session.req_header().headers;
        let client_header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
        let env = providers::Env { config: &ctx.snap.config, tokens: &self.app.tokens };
        provider.prepare(&env, cred, target, body, &client_header).await
    }
}
