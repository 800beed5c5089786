//! A string that never prints, never serializes and never reaches a log line.

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
}
