//! Tenant policies: the YAML language (`document`), compiled per tenant into the snapshot.

pub mod document;
