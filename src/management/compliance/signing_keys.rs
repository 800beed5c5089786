//! `GET /v1/compliance/signing-keys`: every key that ever signed a receipt of this deployment.

use serde::Serialize;
use utoipa::ToSchema;

use super::super::handler::{Caller, Handled, Reply};
use super::super::openapi_parts::Authenticated;
use crate::app::App;
use crate::compliance::{DISCLAIMER, SCOPE};
use crate::receipts::signer::{self, RegisteredKey};

/// The signing-key registry: every key that ever signed a receipt of this deployment.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(in super::super) struct SigningKeys<'a> {
    keys: Vec<RegisteredKey>,
    /// The key signing new receipts now.
    active_key_id: &'a str,
    scope: &'static str,
    disclaimer: &'static str,
}

/// The signing-key registry
#[utoipa::path(get, path = "/v1/compliance/signing-keys", operation_id = "listSigningKeys", tag = "compliance",
    responses((status = 200, description = "The registry", body = SigningKeys), Authenticated))]
pub async fn signing_keys(app: &App, _caller: &Caller) -> Handled {
    let keys = signer::registry(&app.store).await?;
    let body = SigningKeys { keys, active_key_id: &app.signer.key_id, scope: SCOPE, disclaimer: DISCLAIMER };
    Ok(Reply::json(200, &body))
}
