//! Receipts: one Ed25519-signed, hash-chained record per request that presented a valid key.
//!
//! - `admin`: the `admin` receipt of a management write or evidence read (docs/log.md §8)
//! - `canonical`: the signed members, JCS bytes, hash, signature, key id (docs/receipts.md §1)
//! - `signer`: the signing key file and the signing-key registry
//! - `draft`: what the request path hands the writer (a receipt but its chain fields)
//! - `seal`: a batch of drafts after their tenants' chain heads → chained, signed rows (pure)
//! - `rows`: a sealed batch → the plain rows every store backend writes (the one write path)
//! - `stored`: stored receipts as the API and the compliance walks read them
//! - `writer`: the background service that hands queued drafts to the store in batches
//! - `chain`: re-deriving hashes and links over a range (verify-chain)
//! - `merkle`: RFC 6962 / RFC 9162 roots and inclusion proofs over a period (docs/receipts.md §3)
//! - `vocabulary`: check names, check results and `upstreamStatus` (docs/API.md §Checks)

pub mod admin;
pub mod canonical;
pub mod chain;
pub mod draft;
pub mod merkle;
pub mod rows;
pub mod seal;
pub mod signer;
pub mod stored;
pub mod vocabulary;
pub mod writer;

pub use canonical::Receipt;
pub use draft::{receipt_ts, Attempt, CacheSide, Draft, GuardEvent, Kind};
pub use stored::StoredReceipt;
pub use vocabulary::{Check, CheckName, CheckResult, Severity, Term, UpstreamStatus};
