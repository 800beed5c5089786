//! Budgets on the hot path: which limits apply to a request ([`BudgetBook`], immutable, rebuilt
//! with the snapshot) and how much has been spent and reserved against them ([`Ledger`],
//! long-lived, in memory, seeded from `key_spend` and caught up from it in the background).
//!
//! Neither touches the database on the request path: the gateway asks the book for the limits,
//! reserves an estimate in the ledger before the upstream call, and settles the actual cost after.

mod book;
mod ledger;
mod period;
pub mod plugin;
pub mod shared;

pub use book::{end_user_of, end_user_scope_id, BudgetBook, EndUserRule, Limit};
pub use ledger::{Crossing, Exceeded, Ledger, Reservation};
pub use period::{month_key, Period, TOTAL};
