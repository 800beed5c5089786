//! `POST /v1/billing/checkout`: a Stripe Checkout Session to upgrade the tenant's plan, made
//! through Stripe's REST API (form-encoded `POST /v1/checkout/sessions`). The secret key is
//! sent to Stripe as a bearer token and nowhere else: not in an answer, not in a log line.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::handler::{Caller, Handled, Reply, Req};
use super::openapi_parts::{Authenticated, BadGateway, Manager};
use crate::app::App;
use crate::config::BillingSection;
use crate::error::{ApiError, ErrorKind};
use crate::secrets::Secret;
use crate::upstream::BaseUrl;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct Checkout {
    /// Where Stripe sends the customer after paying (`http(s)` URL).
    #[schema(min_length = 1, max_length = 2048)]
    success_url: String,
    /// Where Stripe sends the customer who cancels (`http(s)` URL).
    #[schema(min_length = 1, max_length = 2048)]
    cancel_url: String,
}

/// The session the customer is sent to.
#[derive(Serialize, ToSchema)]
pub(super) struct Session {
    /// Stripe's Checkout Session id (`cs_...`).
    id: String,
    /// The hosted checkout page.
    url: String,
}

fn redirect_url(field: &str, v: &str) -> Result<(), ApiError> {
    let ok = v.len() <= 2048
        && (v.starts_with("https://") || v.starts_with("http://"))
        && v.parse::<http::Uri>().is_ok_and(|u| u.host().is_some_and(|h| !h.is_empty()));
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(format!("field `{field}` must be an absolute http(s) URL of at most 2048 characters")))
    }
}

/// Start a checkout session to upgrade the plan (manager)
///
/// 503 `not_configured` when no Stripe secret key and price are configured; 502 with Stripe's
/// message when Stripe refuses.
#[utoipa::path(post, path = "/v1/billing/checkout", operation_id = "createCheckoutSession", tag = "billing",
    request_body = Checkout,
    responses((status = 201, description = "The Stripe Checkout Session", body = Session), Manager, BadGateway,
        Authenticated))]
pub async fn checkout(app: &App, caller: &Caller, req: &Req) -> Handled {
    caller.require_manager()?;
    let body: Checkout = req.json()?;
    redirect_url("successUrl", &body.success_url)?;
    redirect_url("cancelUrl", &body.cancel_url)?;
    let billing = &app.config.billing;
    let (secret, base) = stripe(billing)?;
    let form = form_encode(&[
        ("mode", "subscription"),
        ("line_items[0][price]", billing.stripe_price_id.trim()),
        ("line_items[0][quantity]", "1"),
        ("success_url", &body.success_url),
        ("cancel_url", &body.cancel_url),
        ("client_reference_id", caller.tenant()),
    ]);
    let (status, text) = create_session(app, &base, secret, form).await?;
    let v: serde_json::Value = serde_json::from_slice(&text).unwrap_or_default();
    if !(200..300).contains(&status) {
        let msg = v["error"]["message"].as_str().unwrap_or("no message").to_string();
        log::warn!("billing checkout for tenant {}: Stripe answered HTTP {status}", caller.tenant());
        return Err(stripe_err(format!(
            "Stripe refused the checkout session (HTTP {status}): {}",
            scrub(&msg, secret.expose())
        )));
    }
    match (v["id"].as_str(), v["url"].as_str()) {
        (Some(id), Some(url)) => Ok(Reply::json(201, &Session { id: id.to_string(), url: url.to_string() })),
        _ => Err(stripe_err("Stripe's answer has no session id and url".into())),
    }
}

/// The secret key and API base, or 503 `not_configured`.
fn stripe(billing: &BillingSection) -> Result<(&Secret, BaseUrl), ApiError> {
    let (Some(secret), false) = (billing.stripe_secret_key.as_ref(), billing.stripe_price_id.trim().is_empty()) else {
        return Err(ApiError::new(
            ErrorKind::NotConfigured,
            "billing is not configured: set TOLLGATE_STRIPE_SECRET_KEY and TOLLGATE_STRIPE_PRICE_ID",
        ));
    };
    let base = BaseUrl::parse(&billing.stripe_api_base)
        .map_err(|e| ApiError::new(ErrorKind::NotConfigured, format!("billing.stripe_api_base {e}")))?;
    Ok((secret, base))
}

fn stripe_err(m: String) -> ApiError {
    ApiError::new(ErrorKind::UpstreamError, m)
}

/// `POST /v1/checkout/sessions` with the form: Stripe's status and body, within 30 s.
async fn create_session(app: &App, base: &BaseUrl, secret: &Secret, form: String) -> Result<(u16, Bytes), ApiError> {
    let headers = [
        ("authorization", format!("Bearer {}", secret.expose())),
        ("content-type", "application/x-www-form-urlencoded".to_string()),
        // A fresh key per call: a retry of this request inside Stripe's client is deduplicated,
        // a new checkout call makes a new session.
        ("idempotency-key", uuid::Uuid::new_v4().to_string()),
        ("accept", "application/json".to_string()),
    ];
    let call = async {
        let mut resp =
            app.upstream.send(base, "POST", "/v1/checkout/sessions", &headers, Bytes::from(form)).await.map_err(
                |e| stripe_err(format!("could not reach Stripe: {}", scrub(&e.to_string(), secret.expose()))),
            )?;
        let status = resp.header().status.as_u16();
        let text = resp.read_all(1 << 20).await.map_err(|e| stripe_err(format!("reading Stripe's answer: {e}")))?;
        resp.release().await;
        Ok::<_, ApiError>((status, text))
    };
    tokio::time::timeout(std::time::Duration::from_secs(30), call)
        .await
        .map_err(|_| ApiError::new(ErrorKind::UpstreamTimeout, "Stripe did not answer within 30 s"))?
}

/// Stripe may quote a key it rejects: never pass the secret on.
fn scrub(msg: &str, secret: &str) -> String {
    if secret.len() >= 4 {
        msg.replace(secret, "***")
    } else {
        msg.to_string()
    }
}

/// `application/x-www-form-urlencoded`, as Stripe reads it (brackets encoded too).
fn form_encode(pairs: &[(&str, &str)]) -> String {
    use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
    const SET: &percent_encoding::AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", utf8_percent_encode(k, SET), utf8_percent_encode(v, SET)))
        .collect::<Vec<_>>()
        .join("&")
}

#[cfg(test)]
mod tests {
    #[test]
    fn form_encoding_and_scrubbing() {
        assert_eq!(
            super::form_encode(&[("line_items[0][price]", "price_1"), ("u", "https://a/b?c=d e")]),
            "line_items%5B0%5D%5Bprice%5D=price_1&u=https%3A%2F%2Fa%2Fb%3Fc%3Dd%20e"
        );
        assert_eq!(super::scrub("bad key sk_test_123456", "sk_test_123456"), "bad key ***");
    }
}
