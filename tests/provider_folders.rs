//! One folder per provider (issue 40): everything that knows a provider lives under
//! `src/providers/`, behind the `Provider` trait and the registry in `src/providers/mod.rs`.
//! This test reads the source outside `src/providers/` and fails on any identifier, path or
//! string literal that names a provider (`openai`, `anthropic`, `bedrock`, `vertex`, `gemini`,
//! `google`, in any case), except in test code (`#[cfg(test)]` items, `tests.rs` files) and in
//! the places listed below. Comments do not count. A listed place that no longer names its
//! provider fails the test too, so the lists only shrink.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

#[path = "support/source.rs"]
mod source;
use source::drop_test_items;

const NAMES: &[&str] = &["openai", "anthropic", "bedrock", "vertex", "gemini", "google"];

/// Places that still name a provider, each with what is to replace it; the test fails on any
/// name outside `src/providers/` not listed here. None is left: config, below providers, reads
/// provider names against the vocabulary the providers hand it (`providers::VOCABULARY`), the
/// guardrails ask `providers::text` where a dialect's text sits, and `/status` asks each
/// provider whether it is keyed by an API key.
const DEBTS: &[(&str, &[&str])] = &[];

#[test]
fn only_the_providers_folder_names_providers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in rust_files(&src) {
        let rel =
            file.strip_prefix(Path::new(env!("CARGO_MANIFEST_DIR"))).unwrap().to_string_lossy().replace('\\', "/");
        if rel.starts_with("src/providers/") || rel.ends_with("/tests.rs") {
            continue;
        }
        let text = drop_test_items(&code_of(&std::fs::read_to_string(&file).unwrap()));
        let named: BTreeSet<String> = tokens(&text).into_iter().filter(|t| names_a_provider(t)).collect();
        if !named.is_empty() {
            found.insert(rel, named);
        }
    }
    let allowed: BTreeMap<String, BTreeSet<String>> =
        DEBTS.iter().map(|(f, toks)| (f.to_string(), toks.iter().map(|t| t.to_string()).collect())).collect();
    let mut new = Vec::new();
    for (file, toks) in &found {
        for t in toks.iter().filter(|t| !allowed.get(file).is_some_and(|a| a.contains(*t))) {
            new.push(format!("  {file}: {t}"));
        }
    }
    let mut gone = Vec::new();
    for (file, toks) in &allowed {
        for t in toks.iter().filter(|t| !found.get(file).is_some_and(|f| f.contains(*t))) {
            gone.push(format!("  {file}: {t}"));
        }
    }
    assert!(new.is_empty(), "provider names outside src/providers/ (move them behind Provider):\n{}", new.join("\n"));
    assert!(gone.is_empty(), "listed places that no longer name a provider (remove them):\n{}", gone.join("\n"));
    assert!(DEBTS.iter().all(|(f, _)| !f.starts_with("src/gateway/")), "src/gateway/ names no provider");
}

#[test]
fn the_reader_sees_names_in_code_and_strings_only() {
    let text = "use crate::providers::bedrock::x;\n// openai in a comment\nfn f() { g(\"vertex/*\", '{', r#\"{\"gemini\": 1}\"#); }\n\
                #[cfg(test)]\nmod tests { const A: &str = \"anthropic\"; }\nfn h(p: ProviderName) { p == ProviderName::OpenAi; }\n";
    let named: Vec<String> =
        tokens(&drop_test_items(&code_of(text))).into_iter().filter(|t| names_a_provider(t)).collect();
    assert_eq!(named, ["crate::providers::bedrock::x", "\"vertex/*\"", "\"('gemini': 1)\"", "ProviderName::OpenAi"]);
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
    out
}

fn names_a_provider(token: &str) -> bool {
    let lower = token.to_ascii_lowercase();
    NAMES.iter().any(|n| lower.contains(n))
}

/// Paths (`a::b::C`, identifiers) and string literals (with their quotes), in order.
fn tokens(text: &str) -> Vec<String> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let start = i;
        if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i = (i + 1).min(b.len());
        } else if b[i].is_ascii_alphanumeric() || b[i] == b'_' {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i..].starts_with(b"::")) {
                i += if b[i] == b':' { 2 } else { 1 };
            }
        } else {
            i += 1;
            continue;
        }
        out.push(text[start..i].to_string());
    }
    out
}

/// The source without comments; braces inside string and char literals become parentheses,
/// so [`drop_test_items`] can count braces, and raw strings become plain ones.
fn code_of(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    let mut in_str = false;
    while let Some(c) = chars.next() {
        if in_str {
            match c {
                '\\' => {
                    out.push(c);
                    out.extend(chars.next());
                }
                '"' => {
                    in_str = false;
                    out.push(c);
                }
                '{' => out.push('('),
                '}' => out.push(')'),
                _ => out.push(c),
            }
        } else if let Some(body) = raw_string(c, &out, &mut chars) {
            // Kept as a plain literal: its quotes become `'`, its braces parentheses.
            out.push('"');
            out.extend(body.chars().map(|n| match n {
                '"' => '\'',
                '{' => '(',
                '}' => ')',
                n => n,
            }));
            out.push('"');
        } else if c == '/' && chars.peek() == Some(&'/') {
            for n in chars.by_ref() {
                if n == '\n' {
                    out.push('\n');
                    break;
                }
            }
        } else if c == '/' && chars.peek() == Some(&'*') {
            chars.next();
            skip_block_comment(&mut chars);
        } else if c == '\'' && chars.peek() == Some(&'\\') {
            // An escaped char literal ('\'', '\"', '\u{..}').
            chars.next();
            chars.next();
            chars.by_ref().find(|&n| n == '\'');
            out.push_str("' '");
        } else if c == '\'' && matches!(chars.clone().nth(1), Some('\'')) {
            chars.next();
            chars.next();
            out.push_str("' '");
        } else {
            in_str = c == '"';
            out.push(c);
        }
    }
    out
}

/// The contents of a raw string (`r"…"`, `r#"…"#`, `br"…"`) when `c` starts one, consumed.
fn raw_string(c: char, before: &str, chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> Option<String> {
    let after_word = before.chars().next_back().is_some_and(|p| p.is_ascii_alphanumeric() || p == '_');
    let mut look = chars.clone();
    let starts = match c {
        'r' => true,
        'b' => look.next() == Some('r'),
        _ => false,
    };
    let hashes = look.clone().take_while(|&n| n == '#').count();
    if after_word || !starts || look.nth(hashes) != Some('"') {
        return None;
    }
    *chars = look;
    let close: String = std::iter::once('"').chain(std::iter::repeat_n('#', hashes)).collect();
    let mut body = String::new();
    for n in chars.by_ref() {
        body.push(n);
        if body.ends_with(&close) {
            body.truncate(body.len() - close.len());
            break;
        }
    }
    Some(body)
}

fn skip_block_comment(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    let mut depth = 1;
    let mut prev = ' ';
    for c in chars.by_ref() {
        match (prev, c) {
            ('/', '*') => {
                depth += 1;
                prev = ' ';
                continue;
            }
            ('*', '/') => {
                depth -= 1;
                if depth == 0 {
                    return;
                }
                prev = ' ';
                continue;
            }
            _ => {}
        }
        prev = c;
    }
}
