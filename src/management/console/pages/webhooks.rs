//! A webhook endpoint's deliveries: `GET /v1/webhook-endpoints/{id}/deliveries` as a table,
//! newest first (status, attempts, the last HTTP status and error), with a status filter and a
//! link to older ones. The webhooks list links here from each endpoint.

use serde_json::{json, Value};

use super::super::api::seg;
use super::ctx::{pass, Ctx};
use crate::error::ApiError;
use crate::management::handler::Reply;

pub async fn deliveries(c: &Ctx<'_>, id: &str) -> Result<Reply, ApiError> {
    let mut query = pass(c.req, &["status", "cursor"]);
    query.push(("limit".into(), "50".into()));
    // First: another tenant's (or no) endpoint is the API's 404, shown as such.
    let page = c.get(&format!("/v1/webhook-endpoints/{}/deliveries", seg(id)), &query).await?;
    let data = json!({
        "id": id,
        "endpoint": endpoint(c, id).await?,
        "items": page["data"],
        "next": page["nextCursor"],
        "status": c.req.query("status"),
    });
    Ok(c.render(200, "deliveries.html", "webhooks", data))
}

/// The endpoint (its URL and events) from the list, page by page: the API serves no single
/// endpoint, and a tenant has few.
async fn endpoint(c: &Ctx<'_>, id: &str) -> Result<Value, ApiError> {
    let mut cursor: Option<String> = None;
    loop {
        let mut query = vec![("limit".to_string(), "200".to_string())];
        query.extend(cursor.take().map(|cur| ("cursor".to_string(), cur)));
        let page = c.get("/v1/webhook-endpoints", &query).await?;
        if let Some(found) = page["data"].as_array().and_then(|a| a.iter().find(|e| e["id"] == id)) {
            return Ok(found.clone());
        }
        match page["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_string()),
            None => return Ok(Value::Null),
        }
    }
}
