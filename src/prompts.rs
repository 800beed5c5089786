//! Prompt templates: `{{name}}` placeholders, replaced by text. Nothing is evaluated: a name is
//! `[A-Za-z_][A-Za-z0-9_]*` (spaces inside the braces allowed), and a `{{` that does not open
//! such a placeholder stays as it is.

use std::collections::BTreeMap;

use serde_json::Value;

/// One placeholder found in a template: where it is and its name.
struct Placeholder<'a> {
    start: usize,
    end: usize,
    name: &'a str,
}

fn placeholders(template: &str) -> Vec<Placeholder<'_>> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = template[from..].find("{{") {
        let start = from + i;
        match parse_at(template, start) {
            Some((end, name)) => {
                out.push(Placeholder { start, end, name });
                from = end;
            }
            None => from = start + 1,
        }
    }
    out
}

/// A placeholder opening at `start`: its end and its name.
fn parse_at(t: &str, start: usize) -> Option<(usize, &str)> {
    let inner_start = start + 2;
    let close = t[inner_start..].find("}}")? + inner_start;
    let name = t[inner_start..close].trim_matches(' ');
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    (first_ok && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')).then_some((close + 2, name))
}

/// The names a template uses, each once, in order of first use.
pub fn names(template: &str) -> Vec<&str> {
    let mut seen: Vec<&str> = Vec::new();
    for p in placeholders(template) {
        if !seen.contains(&p.name) {
            seen.push(p.name);
        }
    }
    seen
}

/// The template with every placeholder replaced by its variable (a string as it is, any other
/// JSON value as its JSON text), or the names that have no variable.
pub fn render(template: &str, variables: &BTreeMap<String, Value>) -> Result<String, Vec<String>> {
    let missing: Vec<String> =
        names(template).into_iter().filter(|n| !variables.contains_key(*n)).map(str::to_string).collect();
    if !missing.is_empty() {
        return Err(missing);
    }
    let mut out = String::with_capacity(template.len());
    let mut at = 0;
    for p in placeholders(template) {
        out.push_str(&template[at..p.start]);
        match &variables[p.name] {
            Value::String(s) => out.push_str(s),
            other => out.push_str(&other.to_string()),
        }
        at = p.end;
    }
    out.push_str(&template[at..]);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vars(v: Value) -> BTreeMap<String, Value> {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn placeholders_are_text_substitution_only() {
        let t = "Hi {{name}}, {{ name }} is {{age}} ({{_x1}}).";
        assert_eq!(names(t), vec!["name", "age", "_x1"]);
        let out = render(t, &vars(json!({"name": "Ada", "age": 36, "_x1": true}))).unwrap();
        assert_eq!(out, "Hi Ada, Ada is 36 (true).");
        // Values are never re-expanded, and `{{` without a name stays literal.
        let out = render("{{a}} {{}} {{ 1x }} {{a-b}} {{", &vars(json!({"a": "{{a}}"}))).unwrap();
        assert_eq!(out, "{{a}} {{}} {{ 1x }} {{a-b}} {{");
        assert_eq!(render("{{{a}}}", &vars(json!({"a": "x"}))).unwrap(), "{x}");
        assert_eq!(render("no placeholders", &BTreeMap::new()).unwrap(), "no placeholders");
    }

    #[test]
    fn every_missing_variable_is_named() {
        let e = render("{{a}} {{b}} {{a}} {{c}}", &vars(json!({"b": "x"}))).unwrap_err();
        assert_eq!(e, vec!["a", "c"]);
    }

    #[test]
    fn multibyte_text_around_placeholders() {
        let out = render("é{{x}}ü {{ x }}…", &vars(json!({"x": "ß"}))).unwrap();
        assert_eq!(out, "éßü ß…");
    }
}
