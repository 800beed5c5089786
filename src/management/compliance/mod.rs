//! `/v1/compliance/...`: signing keys, attestation, inclusion proofs, evidence bundles, packs,
//! coverage maps and receipt controls.

mod attestation;
pub mod controls;
pub mod coverage;
pub mod packs;

use serde::Serialize;
use utoipa::ToSchema;

#[allow(unused_imports)] // the OpenAPI derive names each operation through its module
pub(super) use attestation::{__path_attestation, __path_evidence_bundle, __path_inclusion};
pub use attestation::{attestation, evidence_bundle, inclusion};

use super::openapi::Authenticated;
use super::{Caller, Handled, Reply};
use crate::app::App;
use crate::compliance::{DISCLAIMER, SCOPE};
use crate::receipts::signer::{self, RegisteredKey};

/// The signing-key registry: every key that ever signed a receipt of this deployment.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct SigningKeys<'a> {
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
