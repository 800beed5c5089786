//! A string that never prints, never serializes and never reaches a log line.

pub mod at_rest;

use std::fmt;

#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }

    /// The clear value, for the one place that must send it (an upstream header).
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// `...` and the last four characters: enough for a human to tell keys apart.
    pub fn hint(&self) -> String {
        let n = self.0.chars().count();
        if n <= 8 {
            return "...".to_string();
        }
        let tail: String = self.0.chars().skip(n - 4).collect();
        format!("...{tail}")
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// A URL as logs and error messages may show it: no user-info (`user:password@`), no query and no
/// fragment (a token may ride in either). Database, Redis and OTLP URLs all pass through here.
pub fn url_shown(url: &str) -> String {
    let url = url.split(['?', '#']).next().unwrap_or_default();
    match userinfo(url) {
        Some((start, end)) => format!("{}{}", &url[..start], &url[end + 1..]),
        None => url.to_string(),
    }
}

/// `msg` with the credentials of `url` replaced by `***`: drivers quote the URL in their errors.
pub fn redact_credentials(url: &str, msg: &str) -> String {
    let Some((start, end)) = userinfo(url) else { return msg.to_string() };
    let creds = &url[start..end];
    let mut out = msg.replace(creds, "***");
    // The password alone too (some messages quote it without the user).
    if let Some((_, password)) = creds.split_once(':') {
        if password.len() >= 4 {
            out = out.replace(password, "***");
        }
    }
    out
}

/// The byte range of `url`'s user-info (before the `@` of its authority), if it has any.
fn userinfo(url: &str) -> Option<(usize, usize)> {
    let start = url.find("://")? + 3;
    let authority_end = url[start..].find(['/', '?', '#']).map_or(url.len(), |i| start + i);
    let at = url[start..authority_end].rfind('@')? + start;
    Some((start, at)).filter(|(s, a)| a > s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_prints() {
        let s = Secret::new("sk-very-secret-value-1234");
        assert_eq!(format!("{s} {s:?}"), "*** Secret(***)");
        assert_eq!(s.hint(), "...1234");
        assert_eq!(Secret::new("short").hint(), "...");
    }

    #[test]
    fn urls_lose_their_credentials() {
        assert_eq!(url_shown("redis://:hunter22@10.0.0.1:6379/0"), "redis://10.0.0.1:6379/0");
        assert_eq!(url_shown("redis://u:p@h:1"), "redis://h:1");
        assert_eq!(url_shown("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(url_shown("postgres://u:p@db/x?password=q"), "postgres://db/x");
        assert_eq!(url_shown("http://collector:4318/v1/traces"), "http://collector:4318/v1/traces");
        assert_eq!(url_shown("http://h/a@b"), "http://h/a@b", "an @ in the path is not user-info");
        assert_eq!(url_shown("sqlite://tollgate.db"), "sqlite://tollgate.db");
        let url = "postgres://app:s3cret-pw@db:5432/t";
        let msg = "connect to postgres://app:s3cret-pw@db:5432/t failed; password s3cret-pw refused";
        let out = redact_credentials(url, msg);
        assert!(!out.contains("s3cret"), "{out}");
        assert_eq!(redact_credentials("sqlite://x.db", "as is"), "as is");
    }
}
