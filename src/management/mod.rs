//! The management API (`/v1/...`, `/status`, `/openapi.json`): a Pingora HTTP app in the
//! gateway's process.
//!
//! Imports go one way: [`listener`] (the app: authentication, dispatch) looks requests up in
//! [`routes`] (the route table, each route with its handler); the handler files use the
//! vocabulary of [`handler`] and [`fields`] and name the shared OpenAPI parts of
//! [`openapi_parts`]; [`openapi`] (the document) lists every handler's annotation.

mod analytics;
mod answer;
mod audit_events;
mod billing;
mod budget_requests;
mod budgets;
mod compliance;
mod console;
mod end_users;
mod fields;
mod handler;
mod keys;
mod listener;
mod log;
mod members;
mod model_routes;
mod nul;
mod openapi;
mod openapi_parts;
mod policies;
mod prompts;
mod providers;
mod query;
mod receipts;
mod retention;
pub mod routes;
mod status;
mod teams;
mod tool_servers;
mod webhooks;

pub use listener::{ManagementApp, SessionSweep};
pub use query::percent_decode;
