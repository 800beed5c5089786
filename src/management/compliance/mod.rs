//! `/v1/compliance/...`: signing keys, attestation, inclusion proofs, evidence bundles, packs,
//! coverage maps and receipt controls.

pub mod attestation;
pub mod controls;
pub mod coverage;
pub mod packs;
pub mod signing_keys;
