//! The console's pages: each GET draws from the API's answers, each POST sends one API call
//! and either redirects (success) or draws the form again with the API's error at its field.

mod ctx;
mod evidence;
mod keys;
mod money;
mod overview;
mod policies;
mod receipts;
mod resources;
mod webhooks;

use super::render::message;
use crate::management::handler::Reply;
pub use ctx::{notice, Ctx};

/// GET pages.
pub async fn get(c: &Ctx<'_>) -> Reply {
    let segs: Vec<&str> = c.req.path.iter().map(String::as_str).collect();
    let out = match segs.as_slice() {
        [] => overview::page(c).await,
        ["receipts"] => receipts::list(c).await,
        ["receipts", id] => receipts::one(c, id).await,
        ["evidence"] => evidence::page(c).await,
        ["evidence", "coverage", fw, control] => evidence::control(c, fw, control).await,
        ["evidence", "bundle"] => evidence::download(c, "/v1/compliance/evidence-bundle").await,
        ["evidence", "export"] => evidence::download(c, "/v1/receipts/export").await,
        ["keys"] => keys::page(c, None).await,
        ["budgets"] => money::page(c, None).await,
        ["policies"] => policies::list(c, None).await,
        ["policies", id] => policies::one(c, id, None).await,
        ["webhooks", id] => webhooks::deliveries(c, id).await,
        [name] => resources::page(c, name, None).await,
        _ => return message(404, "Not found", "There is no such page in the console."),
    };
    out.unwrap_or_else(|e| notice(c, &e))
}

/// POSTed forms.
pub async fn post(c: &Ctx<'_>) -> Reply {
    let segs: Vec<&str> = c.req.path.iter().map(String::as_str).collect();
    let out = match segs.as_slice() {
        ["keys"] => keys::create(c).await,
        ["keys", id, "revoke"] => keys::revoke(c, id).await,
        ["keys", id, "limits"] => keys::limits(c, id).await,
        ["budgets", "requests"] => money::request(c).await,
        ["budgets", "requests", id, verb] => money::decide(c, id, verb).await,
        ["policies"] => policies::create(c).await,
        ["policies", "validate"] => policies::check(c).await,
        ["policies", id] => policies::save(c, id).await,
        [name, rest @ ..] => resources::post(c, name, rest).await,
        _ => return message(404, "Not found", "There is no such form in the console."),
    };
    out.unwrap_or_else(|e| notice(c, &e))
}
