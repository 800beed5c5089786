//! The parts of the OpenAPI document that the handlers' annotations name: the error answers
//! every operation shares, as named responses (`components.responses`) that each operation
//! lists as it can return them: [`Authenticated`] (400, 401, 413, 503: any `/v1` call),
//! [`Manager`] (403), [`Missing`] (404), [`Conflicting`] (409) and [`BadGateway`] (502), all
//! carrying the one envelope of `src/error.rs`; the paging parameters ([`PageQuery`]); and
//! schema helpers.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;
use utoipa::openapi::response::{Response, ResponseBuilder};
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr};
use utoipa::{IntoParams, IntoResponses, Modify, ToSchema};

/// The bearer scheme and the shared error responses.
pub struct SharedParts;

impl Modify for SharedParts {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        let bearer = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .bearer_format("tollgate_sk_...")
            .description(Some("A Tollgate API key; `tollgate tenant create` prints the first manager key."))
            .build();
        components.add_security_scheme("bearer", SecurityScheme::Http(bearer));
        for (name, _, description) in ERRORS {
            let content = ContentBuilder::new().schema(Some(Ref::from_schema_name("Error"))).build();
            let response = ResponseBuilder::new().description(*description).content("application/json", content);
            components.responses.insert(name.to_string(), RefOr::T(response.build()));
        }
    }
}

/// The named error responses: name, status, when.
const ERRORS: &[(&str, u16, &str)] = &[
    ("InvalidRequest", 400, "invalid_request: a malformed body, a wrong field or query value, a NUL character"),
    ("Unauthorized", 401, "unauthorized: the key is missing, unknown or revoked"),
    ("Forbidden", 403, "forbidden: this operation needs a manager key"),
    ("NotFound", 404, "not_found: no such id in this tenant (also for another tenant's ids)"),
    ("Conflict", 409, "conflict: the state does not allow this change"),
    ("PayloadTooLarge", 413, "payload_too_large: the body is over the management limit"),
    ("BadGateway", 502, "upstream_error: the payment provider refused or failed; its message is included"),
    ("Unavailable", 503, "unavailable: the database does not answer; retry shortly (not_configured: a feature such as billing is not set up)"),
];

fn refs(names: &[&str]) -> BTreeMap<String, RefOr<Response>> {
    ERRORS
        .iter()
        .filter(|(name, _, _)| names.contains(name))
        .map(|(name, status, _)| (status.to_string(), RefOr::Ref(Ref::from_response_name(*name))))
        .collect()
}

/// 400, 401, 413 and 503: what any `/v1` call can answer. Every request is checked for NUL
/// characters and its body read before routing (400, 413), and every handler reads the
/// database (503); most also check a body or query of their own (400).
pub struct Authenticated;

impl IntoResponses for Authenticated {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        refs(&["InvalidRequest", "Unauthorized", "PayloadTooLarge", "Unavailable"])
    }
}

/// 403: a manager-only operation called with another key.
pub struct Manager;

impl IntoResponses for Manager {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        refs(&["Forbidden"])
    }
}

/// 404: the id in the path is not the tenant's.
pub struct Missing;

impl IntoResponses for Missing {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        refs(&["NotFound"])
    }
}

/// 409: the change is not allowed in the current state.
pub struct Conflicting;

impl IntoResponses for Conflicting {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        refs(&["Conflict"])
    }
}

/// 502: an outside service (the payment provider) failed.
pub struct BadGateway;

impl IntoResponses for BadGateway {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        refs(&["BadGateway"])
    }
}

/// `?limit=&cursor=` of the `{data, nextCursor}` lists.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // describes the query string; `page_limit` and the handlers read it
pub struct PageQuery {
    /// Page size, default 50.
    #[param(minimum = 1, maximum = 200)]
    limit: Option<u32>,
    /// `nextCursor` of the previous page.
    cursor: Option<String>,
}

/// A string schema that takes exactly `values`, for words the code keeps as `&str`.
pub fn string_enum<'a>(values: impl IntoIterator<Item = &'a str>) -> RefOr<Schema> {
    ObjectBuilder::new().schema_type(Type::String).enum_values(Some(values)).into()
}

/// A JSON object of any shape: the body of `/openapi.json` itself.
#[derive(Serialize, ToSchema)]
#[schema(as = Object)]
#[allow(dead_code)] // names a schema; never built
pub struct Object(BTreeMap<String, Value>);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shared_error_response_is_listed_once() {
        let mut statuses: Vec<u16> = ERRORS.iter().map(|(_, s, _)| *s).collect();
        statuses.dedup();
        assert_eq!(statuses.len(), ERRORS.len());
    }
}
