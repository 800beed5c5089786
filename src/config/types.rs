//! Config value types that validate themselves while being deserialized, so a bad value is
//! reported with its exact position in the file.

use std::fmt;
use std::net::SocketAddr;

use serde::{Deserialize, Deserializer};

/// A `host:port` listen address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenAddr(pub SocketAddr);

impl ListenAddr {
    pub fn parse(s: &str) -> Result<Self, String> {
        s.parse::<SocketAddr>()
            .map(ListenAddr)
            .map_err(|_| format!("`{s}` is not a host:port address such as 127.0.0.1:8080"))
    }
}

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl<'de> Deserialize<'de> for ListenAddr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        ListenAddr::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// A pattern where `*` matches any run of characters (and nothing else is special).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob(String);

impl Glob {
    pub fn new(p: impl Into<String>) -> Self {
        Glob(p.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn matches(&self, s: &str) -> bool {
        glob_match(self.0.as_bytes(), s.as_bytes())
    }
}

fn glob_match(p: &[u8], s: &[u8]) -> bool {
    // Iterative matcher with single-star backtracking: linear for the patterns we use.
    let (mut pi, mut si) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while si < s.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some(pi);
            mark = si;
            pi += 1;
        } else if pi < p.len() && p[pi] == s[si] {
            pi += 1;
            si += 1;
        } else if let Some(st) = star {
            pi = st + 1;
            mark += 1;
            si = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

impl<'de> Deserialize<'de> for Glob {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s.is_empty() {
            return Err(serde::de::Error::custom("pattern must not be empty"));
        }
        Ok(Glob(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(Glob::new("gpt-*").matches("gpt-4o-mini"));
        assert!(!Glob::new("gpt-*").matches("claude-3"));
        assert!(Glob::new("*").matches(""));
        assert!(Glob::new("a*b*c").matches("aXXbYYc"));
        assert!(!Glob::new("a*b*c").matches("aXXbYY"));
        assert!(Glob::new("exact").matches("exact"));
        assert!(!Glob::new("exact").matches("exactly"));
        assert!(Glob::new("shell.*").matches("shell.exec"));
    }
}
