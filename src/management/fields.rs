//! Checks of request-body fields that several handlers share.

use serde::{Deserialize, Deserializer};

use super::handler::Caller;
use crate::app::App;
use crate::error::ApiError;

/// Distinguishes an absent field (outer None: leave unchanged) from `null` (clear it).
pub fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// A money amount from a body: finite and not negative.
pub fn usd(field: &str, v: f64) -> Result<f64, ApiError> {
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(ApiError::invalid(format!("field `{field}` must be a non-negative number")))
    }
}

/// A team id from a body must name a team of the caller's tenant.
pub async fn tenant_team(app: &App, caller: &Caller, field: &str, id: &str) -> Result<(), ApiError> {
    match crate::store::teams::get(&app.store, caller.tenant(), id).await? {
        Some(_) => Ok(()),
        None => Err(ApiError::invalid(format!("field `{field}`: unknown team `{id}`"))),
    }
}
