//! What every page handler gets ([`Ctx`]) and the helpers they share.

use http::Method;
use serde_json::{Map, Value};

use super::super::api::{self, Api};
use super::super::render::{page, redirect, who};
use super::super::request::Request;
use super::super::session::Session;
use crate::error::ApiError;
use crate::management::handler::Reply;

/// One signed-in request.
pub struct Ctx<'a> {
    pub api: &'a dyn Api,
    pub s: &'a Session,
    pub req: &'a Request,
    /// The posted form (empty on GET).
    pub form: Vec<(String, String)>,
}

impl Ctx<'_> {
    /// A posted field, trimmed ("" when absent).
    pub fn field(&self, name: &str) -> &str {
        self.raw(name).trim()
    }

    /// A posted field as typed: a policy's YAML keeps its leading lines and indentation, so the
    /// line and column of an error are where the editor shows them.
    pub fn raw(&self, name: &str) -> &str {
        self.form.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str()).unwrap_or("")
    }

    pub async fn get(&self, path: &str, query: &[(String, String)]) -> Result<Value, ApiError> {
        api::get(self.api, &self.s.caller, path, query).await
    }

    pub async fn send(&self, method: Method, path: &str, body: &Value) -> Result<Value, ApiError> {
        api::send(self.api, &self.s.caller, method, path, body).await
    }

    /// `template` with the session, the current section and `data`.
    pub fn render(&self, status: u16, template: &str, section: &str, data: Value) -> Reply {
        let mut ctx = match data {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        ctx.insert("me".into(), who(self.s));
        ctx.insert("section".into(), Value::String(section.into()));
        page(status, template, Value::Object(ctx), Vec::new())
    }
}

/// The query pairs of `names` that the request has, for passing filters on to the API.
pub fn pass(req: &Request, names: &[&str]) -> Vec<(String, String)> {
    names.iter().filter_map(|n| req.query(n).map(|v| (n.to_string(), v.to_string()))).collect()
}

/// An API error as `{field, message}`: the field named in its message (`field \`x\``), so the
/// form shows it next to that field; else no field (shown at the top of the form).
pub fn form_error(e: &ApiError) -> Value {
    let field = e.message.split('`').nth(1).filter(|_| e.message.contains('`')).map(|f| {
        // `limits.rpm` → `rpm`; `yaml` stays.
        f.rsplit('.').next().unwrap_or(f).to_string()
    });
    serde_json::json!({"field": field, "message": e.message, "type": e.kind.type_name(), "status": e.status()})
}

/// An API error inside the console's layout (a page this key may not read says so, with the
/// API's own words and status).
pub fn notice(c: &Ctx<'_>, e: &ApiError) -> Reply {
    let section = c.req.path.first().map_or("overview", String::as_str);
    let title = if e.status() == 403 { "Not for this key" } else { "Error" };
    let text = format!("{} ({})", e.message, e.kind.type_name());
    c.render(e.status(), "notice.html", section, serde_json::json!({"title": title, "text": text}))
}

/// After a successful form: back to `to` (post/redirect/get, so a reload sends nothing again).
pub fn done(to: &str) -> Result<Reply, ApiError> {
    Ok(redirect(to, Vec::new()))
}

/// A number typed into a form, as JSON: an integer when it is one, else a decimal, else the text
/// as it is (so the API names the field that is not a number).
pub fn number_value(v: &str) -> Value {
    if let Ok(n) = v.parse::<i64>() {
        return Value::from(n);
    }
    v.parse::<f64>().ok().filter(|n| n.is_finite()).map(Value::from).unwrap_or_else(|| Value::from(v))
}
