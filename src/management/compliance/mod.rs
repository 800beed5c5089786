//! `/v1/compliance/...`: signing keys, attestation, inclusion proofs, evidence bundles, packs,
//! coverage maps and receipt controls.

mod attestation;
pub mod controls;
pub mod coverage;
pub mod packs;

use serde_json::json;

pub use attestation::{attestation, evidence_bundle, inclusion};

use super::{Caller, Handled, Reply};
use crate::app::App;
use crate::compliance::{DISCLAIMER, SCOPE};
use crate::receipts::signer;

pub async fn signing_keys(app: &App, _caller: &Caller) -> Handled {
    let keys = signer::registry(&app.store).await?;
    Ok(Reply::Json(
        200,
        json!({
            "keys": keys,
            "activeKeyId": app.signer.key_id,
            "scope": SCOPE,
            "disclaimer": DISCLAIMER,
        }),
    ))
}
