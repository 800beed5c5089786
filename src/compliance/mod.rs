//! Compliance evidence: attestation periods, the walk that re-verifies them, inclusion proofs
//! and the offline bundle verifier.
//!
//! The fixed statements every compliance response carries. Clients must display them
//! verbatim; changing a word here changes what customers show their auditors.

pub mod attestation;
pub mod auditor;
pub mod bundle;
pub mod inclusion;
pub mod key_ring;
pub mod memo;
pub mod pack;
pub mod pack_sets;
pub mod period;
pub mod verify;
pub mod walk;

/// What the evidence covers.
pub const SCOPE: &str = "This evidence covers requests routed through this Tollgate gateway for the stated tenant \
     and period only: model and tool calls that did not pass through the gateway are not covered.";

/// What the evidence is not.
pub const DISCLAIMER: &str = "Tollgate produces technical evidence of controls applied to gateway-routed traffic. \
     It is not a compliance certification, legal advice or an audit opinion; conformity with any framework must be \
     assessed by qualified parties.";
