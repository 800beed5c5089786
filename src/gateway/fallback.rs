//! A model call whose model has a route (docs/decisions/routes.md): its targets in the order
//! the route's strategy gives, each try with the target's provider, credential and model id,
//! moving on after a connect error, a timeout or a 408/429/5xx answer, within
//! `retries.attempts` tries and `retries.totalTimeoutMs`. A failure moves on only before the
//! answer's head: once one is relayed, the client has its first byte and the answer is final.
//! Every try is recorded ([`Attempt`]) and stored beside the one receipt.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pingora::proxy::Session;
use serde_json::Value;

use super::context::Ctx;
use super::ending::Ending;
use super::model_call::ModelCall;
use super::relay::UpstreamOutcome;
use super::request::{serves, target_allowed, upstream_model};
use super::state::Gateway;
use crate::error::{ApiError, ErrorKind};
use crate::metrics::METRICS;
use crate::providers::{self, Provider, Target};
use crate::receipts::Attempt;
use crate::routing::retry::{backoff, retry_after, retryable_status};
use crate::routing::{Admission, ModelRoute, RouteTarget};
use crate::upstream::UpstreamResponse;

/// One routed request's progress over its targets.
struct Run<'r> {
    route: &'r ModelRoute,
    /// Target indexes in the order tried (cycled when attempts outnumber them).
    order: Vec<usize>,
    next: usize,
    made: u32,
    deadline: Option<Instant>,
}

/// What one try gave: an answer (any status), or no answer (the error says why).
enum Tried<'a> {
    Answer(UpstreamResponse<'a>, &'static dyn Provider, String, bool),
    NoAnswer(ApiError),
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

impl<'r> Run<'r> {
    /// The next target this request may try now (taking the half-open probe when due).
    fn admit(&mut self) -> Option<(usize, Admission)> {
        if self.made >= self.route.retries.attempts || self.order.is_empty() {
            return None;
        }
        let now = now_ms();
        for k in 0..self.order.len() {
            let i = self.order[(self.next + k) % self.order.len()];
            if let Some(a) = self.route.targets[i].health.admit(now) {
                self.next = (self.next + k + 1) % self.order.len();
                self.made += 1;
                return Some((i, a));
            }
        }
        None
    }

    /// Whether another try follows the failed try of target `last`, and the wait before it:
    /// none when it goes to another target; the backoff, or the upstream's `Retry-After` when
    /// longer, when it retries the same one. None when no try is left or the wait would pass
    /// the total deadline.
    fn go_on(&self, last: usize, asked: Option<Duration>) -> Option<Duration> {
        if self.made >= self.route.retries.attempts {
            return None;
        }
        let now = now_ms();
        let len = self.order.len();
        let next = (0..len)
            .map(|k| self.order[(self.next + k) % len])
            .find(|&i| self.route.targets[i].health.available(now))?;
        let wait = match next == last {
            true => backoff(self.route.retries.backoff_ms, self.made).max(asked.unwrap_or_default()),
            false => Duration::ZERO,
        };
        let fits = match self.deadline {
            Some(d) => Instant::now() + wait < d,
            // Without a total deadline, no wait longer than a minute.
            None => wait <= Duration::from_secs(60),
        };
        fits.then_some(wait)
    }

    /// How long the next try may take to answer: the per-attempt timeout within the total one.
    fn attempt_timeout(&self) -> Option<Duration> {
        let per = self.route.retries.per_attempt_timeout_ms.map(Duration::from_millis);
        let left = self.deadline.map(|d| d.saturating_duration_since(Instant::now()));
        match (per, left) {
            (Some(p), Some(l)) => Some(p.min(l)),
            (p, l) => p.or(l),
        }
    }
}

impl Gateway {
    /// Forwards a routed model call: tries its targets until one answers for good.
    pub(super) async fn forward_routed(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        mut call: ModelCall,
        json: Option<Value>,
        route: Arc<ModelRoute>,
    ) -> Result<Ending, ApiError> {
        let json = json.unwrap_or_default();
        let mut run = self.plan_run(ctx, &call, &route)?;
        let mut last_error = None;
        while let Some((i, admission)) = run.admit() {
            let t = &route.targets[i];
            let _busy = t.health.enter();
            let _probe = (admission == Admission::Probe).then(|| ProbeGuard(&t.health));
            let sent = Instant::now();
            let tried = self.try_target(session, ctx, &mut call, t, &json, run.attempt_timeout()).await?;
            let ms = sent.elapsed().as_millis() as u64;
            let (resp, wire) = match tried {
                Tried::NoAnswer(e) => {
                    t.health.failed(&route.breaker, admission, now_ms());
                    let wait = run.go_on(i, None);
                    record(ctx, &route, t, 0, if wait.is_some() { "retry" } else { "failed" }, ms);
                    last_error = Some(e);
                    match wait {
                        Some(w) => tokio::time::sleep(w).await,
                        None => break,
                    }
                    continue;
                }
                Tried::Answer(resp, provider, model, hide) => (resp, (provider, model, hide)),
            };
            let status = resp.header().status.as_u16();
            if let Some(until) = wire.0.requests_exhausted_until(&resp.header().headers, now_ms()) {
                t.health.limited_until(until);
            }
            if !retryable_status(status) {
                t.health.succeeded();
                record(ctx, &route, t, status, if status < 400 { "ok" } else { "refused" }, ms);
                return Ok(self.relay_answer(session, ctx, &call, wire, resp).await);
            }
            t.health.failed(&route.breaker, admission, now_ms());
            let wait = run.go_on(i, retry_after(&resp.header().headers, chrono::Utc::now()));
            let Some(wait) = wait else {
                // The last try: its error answer is the client's, as without a route.
                record(ctx, &route, t, status, "failed", ms);
                return Ok(self.relay_answer(session, ctx, &call, wire, resp).await);
            };
            record(ctx, &route, t, status, "retry", ms);
            drop(resp);
            tokio::time::sleep(wait).await;
        }
        Err(last_error.unwrap_or_else(|| skipped(&route)))
    }

    /// The targets this request may use (they serve its route and the tenant has their
    /// credential) in the strategy's order, without the ones skipped right now.
    fn plan_run<'r>(&self, ctx: &Ctx, call: &ModelCall, route: &'r ModelRoute) -> Result<Run<'r>, ApiError> {
        let tenant = call.key.tenant_id();
        let policy = ctx.snap.policy(tenant);
        let configured = |t: &RouteTarget| {
            serves(call.route, t.provider) && ctx.snap.credential(tenant, t.provider, &t.credential).is_some()
        };
        let allowed = |t: &RouteTarget| ctx.exchange.as_ref().is_none_or(|ex| target_allowed(ex, &policy, t));
        let usable = |t: &RouteTarget| configured(t) && allowed(t);
        if !route.targets.iter().any(configured) {
            let why = format!("route `{}`: no target has its credential set for this tenant", route.model);
            return Err(ApiError::new(ErrorKind::NotConfigured, why));
        }
        if !route.targets.iter().any(usable) {
            let why = format!("route `{}`: the tenant's policies allow none of its targets", route.model);
            return Err(ApiError::new(ErrorKind::PolicyDenied, why));
        }
        let mut order = route.order(now_ms());
        order.retain(|&i| usable(&route.targets[i]));
        let deadline = route.retries.total_timeout_ms.map(|ms| Instant::now() + Duration::from_millis(ms));
        Ok(Run { route, order, next: 0, made: 0, deadline })
    }

    /// One try: the target's provider, credential and model, its body, the call, and its
    /// answer's head within `timeout`. `Err` only for a failure no other target can mend
    /// (the request cannot be put into the target's API).
    async fn try_target(
        &self,
        session: &Session,
        ctx: &mut Ctx,
        call: &mut ModelCall,
        t: &RouteTarget,
        json: &Value,
        timeout: Option<Duration>,
    ) -> Result<Tried<'_>, ApiError> {
        let cred = ctx.snap.credential(call.key.tenant_id(), t.provider, &t.credential).cloned();
        let cred = cred.ok_or_else(|| ApiError::new(ErrorKind::NotConfigured, "credential removed"))?;
        call.parsed.provider = t.provider;
        ctx.provider = Some(t.provider);
        ctx.model.clear();
        ctx.model.push_str(&t.model);
        ctx.body_changed = true;
        let provider = providers::provider(t.provider);
        // A native path names its model in the path: the target's goes into the provider's own
        // (Bedrock's against the credential's region, Vertex's with its project and region).
        let native = call.route.native_provider().is_some();
        let model = match native {
            true => upstream_model(t.provider, &t.model).to_string(),
            false => call.upstream_model(ctx),
        };
        let mut j = json.clone();
        if let (false, Some(o)) = (native, j.as_object_mut()) {
            o.insert("model".into(), Value::String(t.model.to_string()));
        }
        let (body, hide) = call.upstream_body(ctx, provider, &model, Some(j))?;
        let target = match native {
            true => Target::Model { model: &model, stream: call.parsed.stream },
            false => call.target(None, &model),
        };
        let mut up = self.prepare_call(session, ctx, provider, &cred, target, body).await?;
        if let Some(tr) = &ctx.trace {
            tr.propagate(&mut up.headers);
        }
        let send = self.send_upstream(ctx, t.provider, &cred, up);
        let answered = match timeout {
            Some(d) => tokio::time::timeout(d, send).await.ok(),
            None => Some(send.await),
        };
        let Some(answered) = answered else {
            ctx.upstream = UpstreamOutcome::Timeout;
            return Ok(Tried::NoAnswer(timed_out(t)));
        };
        Ok(match answered {
            Ok(resp) => Tried::Answer(resp, provider, model, hide),
            Err(e) => Tried::NoAnswer(e),
        })
    }

    async fn relay_answer(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        call: &ModelCall,
        wire: (&'static dyn Provider, String, bool),
        resp: UpstreamResponse<'_>,
    ) -> Ending {
        let relayed = self.relay_model_call(session, ctx, call, wire, resp).await;
        self.relayed(ctx, relayed)
    }
}

/// Frees a half-open probe however its try ends (an outcome recorded already freed it).
struct ProbeGuard<'h>(&'h crate::routing::Health);

impl Drop for ProbeGuard<'_> {
    fn drop(&mut self) {
        self.0.release_probe();
    }
}

fn timed_out(t: &RouteTarget) -> ApiError {
    ApiError::new(ErrorKind::UpstreamTimeout, format!("{} did not answer within the attempt's timeout", t.provider))
}

/// The answer when every target is skipped (breaker open, rate limit used up).
fn skipped(route: &ModelRoute) -> ApiError {
    ApiError::new(
        ErrorKind::Unavailable,
        format!(
            "every target of route `{}` is cooling down (breaker open or rate limit used up); retry later",
            route.model
        ),
    )
}

/// Records one try on the request (for its receipt), in the metrics and in the target's gauge.
fn record(ctx: &mut Ctx, route: &ModelRoute, t: &RouteTarget, status: u16, outcome: &'static str, ms: u64) {
    let provider = t.provider.as_str();
    METRICS.upstream_attempts.with_label_values(&[provider, &t.label(), outcome]).inc();
    let state = t.health.state(now_ms()).gauge();
    METRICS.target_state.with_label_values(&[&route.model, provider, &t.credential, &t.model]).set(state);
    ctx.attempts.push(Attempt {
        provider,
        credential: t.credential.clone(),
        model: t.model.clone(),
        status,
        outcome,
        ms,
    });
}
