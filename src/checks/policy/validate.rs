//! Checks on a parsed policy that need the whole document (serde checks single values while
//! parsing: enums, globs, regexes, time windows). Errors name the position like parsing errors
//! do (`path:line:column: field `x`: reason` for a file, `line L, column C: field `x`: reason`
//! for a request body); the line is found in the text, since the parsed document has no positions.

use super::document::{self, PolicyDoc};
use crate::config::Origin;

/// A policy sent to `POST/PUT /v1/policies`: it belongs to the caller's tenant, so `tenant:` is
/// refused rather than silently ignored.
pub fn parse_api(text: &str) -> Result<PolicyDoc, String> {
    let doc = document::parse(text, Origin::Body)?;
    if doc.tenant.is_some() {
        return Err(located(
            Origin::Body,
            find(text, r"(?m)^tenant\s*:", 0),
            "tenant",
            "not allowed in a policy created through the API (it applies to the tenant of the key \
             that creates it); `tenant` is for policy files on disk",
        ));
    }
    check_rules(&doc, text, Origin::Body)?;
    Ok(doc)
}

/// A policy file from the policy directory; `path` names it in messages.
pub fn parse_file(text: &str, path: &str) -> Result<PolicyDoc, String> {
    let origin = Origin::File(path);
    let doc = document::parse(text, origin)?;
    if doc.tenant.as_deref().is_some_and(|t| t.trim().is_empty()) {
        return Err(located(
            origin,
            find(text, r"(?m)^tenant\s*:", 0),
            "tenant",
            "must name a tenant (id or name); leave it out to apply the file to every tenant",
        ));
    }
    check_rules(&doc, text, origin)?;
    Ok(doc)
}

/// Rule ids name the rule in receipts and deny messages: they must be present and unique.
fn check_rules(doc: &PolicyDoc, text: &str, origin: Origin) -> Result<(), String> {
    for (i, rule) in doc.rules.iter().enumerate() {
        let field = format!("rules[{i}].id");
        if rule.id.trim().is_empty() {
            return Err(located(origin, None, &field, "must not be empty"));
        }
        if let Some(first) = doc.rules[..i].iter().position(|r| r.id == rule.id) {
            // The n-th rule carrying this id is the n-th `id: <value>` in the text.
            let nth = doc.rules[..i].iter().filter(|r| r.id == rule.id).count();
            let pattern =
                format!(r#"(?m)(?:^|[\s{{,-])(id\s*:\s*["']?{}["']?\s*(?:[,}}#]|$))"#, regex::escape(&rule.id));
            let at = find(text, &pattern, nth);
            return Err(located(
                origin,
                at,
                &field,
                &format!("duplicate rule id `{}` (rules[{first}] has it too); rule ids must be unique", rule.id),
            ));
        }
    }
    Ok(())
}

/// Line and column (1-based) of the `nth` match of `pattern` (its first group when it has one).
pub(crate) fn find(text: &str, pattern: &str, nth: usize) -> Option<(usize, usize)> {
    let re = regex::Regex::new(pattern).ok()?;
    let caps = re.captures_iter(text).nth(nth)?;
    let start = caps.get(1).or_else(|| caps.get(0))?.start();
    let before = &text[..start];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    Some((line, col))
}

pub(crate) fn located(origin: Origin, at: Option<(usize, usize)>, field: &str, reason: &str) -> String {
    origin.locate(at, &format!("field `{field}`: {reason}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_regex_names_the_pattern_field_and_line() {
        let y = "guardrails:\n  patterns:\n    - {pattern: \"ok\", action: block}\n    - pattern: \"(unclosed\"\n      action: redact\n";
        let e = parse_api(y).unwrap_err();
        assert!(e.starts_with("line 4, column "), "{e}");
        assert!(e.contains("guardrails.patterns[1].pattern"), "{e}");
        assert!(e.contains("not a valid regular expression"), "{e}");
    }

    #[test]
    fn bad_hours_are_refused_with_their_position() {
        for bad in ["25:00-06:00", "22:00", "22-06", "10:00-10:00", "9:00-17:00", "22:60-23:00"] {
            let y = format!("rules:\n  - id: night\n    match:\n      time: {{hours: \"{bad}\"}}\n    action: deny\n");
            let e = parse_api(&y).unwrap_err();
            assert!(e.starts_with("line 4, column "), "{bad}: {e}");
            assert!(e.contains("rules[0].match.time.hours"), "{bad}: {e}");
        }
        let ok =
            "rules:\n  - id: night\n    match:\n      time: {hours: \"22:00-06:00\", days: [sat]}\n    action: deny\n";
        assert!(parse_api(ok).is_ok());
        assert_eq!(document::parse_hours("00:00-24:00"), Ok((0, 1440)));
        assert_eq!(document::parse_hours("22:00-06:30"), Ok((1320, 390)));
    }

    #[test]
    fn duplicate_rule_ids_are_refused_naming_the_second() {
        let y = "rules:\n  - id: a\n    action: deny\n  - id: b\n    action: allow\n  - id: a\n    action: allow\n";
        let e = parse_api(y).unwrap_err();
        assert_eq!(
            e,
            "line 6, column 5: field `rules[2].id`: duplicate rule id `a` (rules[0] has it too); rule ids must be unique"
        );
        let flow = "rules:\n  - {id: \"x\", action: deny}\n  - {id: \"x\", action: deny}\n";
        let e = parse_api(flow).unwrap_err();
        assert!(e.starts_with("line 3, column ") && e.contains("rules[1].id"), "{e}");
        let e = parse_api("rules:\n  - id: \"\"\n    action: deny\n").unwrap_err();
        assert!(e.contains("rules[0].id") && e.contains("empty"), "{e}");
    }

    #[test]
    fn tenant_is_for_files_only() {
        let y = "rules: []\ntenant: acme\n";
        let e = parse_api(y).unwrap_err();
        assert!(e.starts_with("line 2, column 1: field `tenant`"), "{e}");
        let doc = parse_file(y, "conf/policies/acme.yaml").unwrap();
        assert_eq!(doc.tenant.as_deref(), Some("acme"));
        let e = parse_file("tenant: \" \"\n", "f.yaml").unwrap_err();
        assert!(e.starts_with("f.yaml:1:1: field `tenant`"), "{e}");
    }

    #[test]
    fn unknown_fields_keep_line_and_column() {
        let e = parse_api("rules:\n  - id: a\n    action: deny\n    mtach: {model: x}\n").unwrap_err();
        assert!(e.starts_with("line 4, column ") && e.contains("mtach"), "{e}");
    }
}
