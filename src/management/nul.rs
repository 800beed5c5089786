//! NUL characters (U+0000) in client text. PostgreSQL cannot store them in `text` columns nor
//! compare them in a query, so a NUL that reached the store would fail the statement (a 500):
//! every path segment, query value and JSON string of a management request is checked first,
//! on both backends alike, and a NUL is a 400 naming where it was.

use serde_json::Value;

use crate::error::ApiError;

fn nul_in(what: &str) -> ApiError {
    ApiError::invalid(format!("{what} must not contain a NUL character (U+0000, `%00`, `\\u0000`)"))
}

/// The decoded path segments and query pairs.
pub fn check_request(segments: &[String], query: &[(String, String)]) -> Result<(), ApiError> {
    if segments.iter().any(|s| s.contains('\0')) {
        return Err(nul_in("the path"));
    }
    match query.iter().find(|(k, v)| k.contains('\0') || v.contains('\0')) {
        Some((k, _)) => Err(nul_in(&format!("query `{}`", k.replace('\0', "%00")))),
        None => Ok(()),
    }
}

/// A raw text body (pack YAML).
pub fn check_text(what: &str, text: &str) -> Result<(), ApiError> {
    if text.contains('\0') {
        Err(nul_in(what))
    } else {
        Ok(())
    }
}

/// A JSON body that parsed: JSON text cannot hold a raw NUL in a string (control characters
/// must be escaped), so only a `\u0000` escape can put one there, and most bodies skip the walk.
pub fn check_json(body: &[u8]) -> Result<(), ApiError> {
    if !body.windows(6).any(|w| w == b"\\u0000") {
        return Ok(());
    }
    let Ok(value) = serde_json::from_slice::<Value>(body) else { return Ok(()) };
    match nul_at(&value, String::new()) {
        Some(path) if path.is_empty() => Err(nul_in("the body")),
        Some(path) => Err(nul_in(&format!("field `{path}`"))),
        None => Ok(()),
    }
}

/// Where in `v` (found at `path`) a string or an object key holds a NUL, as `a.b[2]`.
fn nul_at(v: &Value, path: String) -> Option<String> {
    match v {
        Value::String(s) => s.contains('\0').then_some(path),
        Value::Array(items) => items.iter().enumerate().find_map(|(i, x)| nul_at(x, format!("{path}[{i}]"))),
        Value::Object(m) => m.iter().find_map(|(k, x)| {
            let at = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
            if k.contains('\0') {
                Some(at.replace('\0', "\\u0000"))
            } else {
                nul_at(x, at)
            }
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(body: &str) -> Option<String> {
        check_json(body.as_bytes()).err().map(|e| e.message)
    }

    #[test]
    fn names_the_field_that_holds_a_nul() {
        assert_eq!(field(r#"{"label": "ok"}"#), None);
        assert_eq!(field(r#"{"label": "a\\u0000b"}"#), None, "an escaped backslash, not a NUL");
        assert!(field(r#"{"label": "a\u0000b"}"#).unwrap().contains("field `label`"));
        assert!(field(r#"{"a": {"b": ["x", "\u0000"]}}"#).unwrap().contains("field `a.b[1]`"));
        assert!(field(r#""\u0000""#).unwrap().contains("the body"));
        let q = vec![("actor".to_string(), "a\0".to_string())];
        assert!(check_request(&[], &q).unwrap_err().message.contains("query `actor`"));
        assert!(check_request(&["v1".into(), "keys".into(), "\0".into()], &[]).is_err());
    }
}
