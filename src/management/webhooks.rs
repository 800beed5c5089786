//! `/v1/webhook-endpoints`: where a tenant's events are POSTed. The signing secret is shown once,
//! in the create answer; it is stored sealed under the master key (the sender must sign with
//! it, so a hash would not do) and never shown, listed or logged again. An endpoint's deliveries
//! (the durable outbox's rows, newest first) show where each event stands, never its payload.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::handler::{page_limit, paginate, Caller, Handled, Page, Reply, Req};
use super::openapi_parts::{Authenticated, Manager, Missing, PageQuery};
use crate::app::App;
use crate::error::ApiError;
use crate::store;
use crate::store::webhooks::{Delivery, DeliveryStatus, Endpoint};
use crate::webhooks::{self as hooks, EVENTS};

/// An event type an endpoint subscribes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
pub(super) enum EventType {
    #[serde(rename = "budget.threshold_reached")]
    BudgetThresholdReached,
    #[serde(rename = "budget.exceeded")]
    BudgetExceeded,
    #[serde(rename = "budget_request.created")]
    BudgetRequestCreated,
    #[serde(rename = "budget_request.approved")]
    BudgetRequestApproved,
    #[serde(rename = "budget_request.denied")]
    BudgetRequestDenied,
    #[serde(rename = "guardrail.blocked")]
    GuardrailBlocked,
    #[serde(rename = "key.created")]
    KeyCreated,
    #[serde(rename = "key.revoked")]
    KeyRevoked,
    #[serde(rename = "provider.test_failed")]
    ProviderTestFailed,
    #[serde(rename = "chain.verification_failed")]
    ChainVerificationFailed,
}

impl EventType {
    fn as_str(self) -> &'static str {
        use EventType::*;
        let i = match self {
            BudgetThresholdReached => 0,
            BudgetExceeded => 1,
            BudgetRequestCreated => 2,
            BudgetRequestApproved => 3,
            BudgetRequestDenied => 4,
            GuardrailBlocked => 5,
            KeyCreated => 6,
            KeyRevoked => 7,
            ProviderTestFailed => 8,
            ChainVerificationFailed => 9,
        };
        EVENTS[i]
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct CreateEndpoint {
    /// Where events are POSTed: an `http(s)` URL. Loopback and private addresses only when the
    /// operator allows them (`webhooks.allow_private_urls`).
    #[schema(min_length = 1, max_length = 2048)]
    url: String,
    /// The event types to receive (at least one).
    #[schema(min_items = 1)]
    events: Vec<EventType>,
}

/// A new endpoint: the record and its signing secret, shown this once.
#[derive(Serialize, ToSchema)]
pub(super) struct CreatedEndpoint {
    #[serde(flatten)]
    record: Endpoint,
    /// `whsec_` + base64 of the 32-byte HMAC key (Standard Webhooks). Not shown again.
    secret: String,
}

/// Create a webhook endpoint (manager)
///
/// Deliveries follow the Standard Webhooks spec: headers `webhook-id`, `webhook-timestamp`,
/// `webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">` keyed with the secret;
/// body `{type, timestamp, data}`.
#[utoipa::path(post, path = "/v1/webhook-endpoints", operation_id = "createWebhookEndpoint", tag = "webhooks",
    request_body = CreateEndpoint,
    responses((status = 201, description = "The endpoint, with its signing secret (shown once)", body = CreatedEndpoint),
        Manager, Authenticated))]
pub async fn create(app: &App, caller: &Caller, req: &Req) -> Handled {
    caller.require_manager()?;
    let body: CreateEndpoint = req.json()?;
    if body.events.is_empty() {
        return Err(ApiError::invalid(format!("field `events` must name at least one of: {}", EVENTS.join(", "))));
    }
    let url = hooks::parse_url(body.url.trim()).map_err(|e| ApiError::invalid(format!("field `url` {e}")))?;
    hooks::check_host(&url.base.host, url.base.port, app.config.webhooks.allow_private_urls, false)
        .await
        .map_err(|e| ApiError::invalid(format!("field `url`: {e}")))?;
    let mut events: Vec<String> = Vec::new();
    for e in &body.events {
        if !events.iter().any(|x| x == e.as_str()) {
            events.push(e.as_str().to_string());
        }
    }
    let id = uuid::Uuid::now_v7().to_string();
    let (secret, key) = hooks::new_secret();
    let sealed = app.master.encrypt(&key, &hooks::secret_context(caller.tenant(), &id));
    let record = store::webhooks::insert(&app.store, caller.tenant(), &id, body.url.trim(), &events, &sealed).await?;
    log::info!("webhook endpoint {id} of tenant {} created for {} event types", caller.tenant(), events.len());
    Ok(Reply::json(201, &CreatedEndpoint { record, secret }))
}

/// List webhook endpoints (manager; secrets are never shown)
#[utoipa::path(get, path = "/v1/webhook-endpoints", operation_id = "listWebhookEndpoints", tag = "webhooks",
    params(PageQuery),
    responses((status = 200, description = "A page of endpoints", body = Page<Endpoint>), Manager, Authenticated))]
pub async fn list(app: &App, caller: &Caller, req: &Req) -> Handled {
    caller.require_manager()?;
    let limit = page_limit(req)?;
    let rows = store::webhooks::list(&app.store, caller.tenant(), req.query("cursor"), limit + 1).await?;
    let (page, next) = paginate(rows, limit, |e| &e.id);
    Ok(Reply::json(200, &Page { data: page, next_cursor: next }))
}

/// Delete a webhook endpoint (manager)
///
/// Its undelivered events are dropped with it: nothing more is sent to it.
#[utoipa::path(delete, path = "/v1/webhook-endpoints/{id}", operation_id = "deleteWebhookEndpoint",
    tag = "webhooks", params(("id" = String, Path, description = "Webhook endpoint id")),
    responses((status = 204, description = "Deleted"), Manager, Missing, Authenticated))]
pub async fn delete(app: &App, caller: &Caller, id: &str) -> Handled {
    caller.require_manager()?;
    if !store::webhooks::delete(&app.store, caller.tenant(), id).await? {
        return Err(ApiError::not_found("webhook endpoint"));
    }
    log::info!("webhook endpoint {id} of tenant {} deleted", caller.tenant());
    Ok(Reply::NoContent)
}

/// List an endpoint's deliveries, newest first (manager)
///
/// The durable outbox as it stands: one row per event sent (or to be sent) to this endpoint,
/// with its attempts and the last answer or error. The payload is not shown (the receiver has
/// it; its `webhook-id` is `eventId`), nor anything of the signing secret. Rows go with their
/// endpoint when it is deleted.
#[utoipa::path(get, path = "/v1/webhook-endpoints/{id}/deliveries", operation_id = "listWebhookDeliveries",
    tag = "webhooks",
    params(("id" = String, Path, description = "Webhook endpoint id"), PageQuery,
        ("status" = inline(Option<DeliveryStatus>), Query, description = "Only deliveries in this state")),
    responses((status = 200, description = "A page of deliveries, newest first", body = Page<Delivery>),
        Manager, Missing, Authenticated))]
pub async fn deliveries(app: &App, caller: &Caller, id: &str, req: &Req) -> Handled {
    caller.require_manager()?;
    let limit = page_limit(req)?;
    let status = match req.query("status").filter(|s| !s.is_empty()) {
        None => None,
        Some(s) => Some(
            DeliveryStatus::parse(s)
                .ok_or_else(|| ApiError::invalid("query `status` must be one of: pending, delivered, failed"))?,
        ),
    };
    let cursor = req.query("cursor").filter(|c| !c.is_empty());
    let rows = store::webhooks::deliveries(&app.store, caller.tenant(), id, status, cursor, limit + 1)
        .await?
        .ok_or_else(|| ApiError::not_found("webhook endpoint"))?;
    let (page, next) = paginate(rows, limit, |d| &d.event_id);
    Ok(Reply::json(200, &Page { data: page, next_cursor: next }))
}
