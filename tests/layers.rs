//! The layers of `src/` (docs/architecture.md, "Layers"): every module belongs to one layer,
//! imports only from its own layer or the layers below it, and no import cycle exists between
//! modules (files). This test reads the source, so it fails the moment an upward import or a
//! cycle comes back.
//!
//! What counts as an import: a `use` of a `crate::`/`super::`/`self::` path, or such a path
//! written inline, resolved to the module (file) that *defines* the item — a re-export
//! (`pub use child::Item` in a `mod.rs`) is followed to its source, so a folder's facade is not
//! an edge. Test code (`#[cfg(test)]` items, `tests.rs` files) is left out: fixtures may reach
//! up to build what they test.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

#[path = "support/source.rs"]
mod source;
use source::drop_test_items;

/// The layers, top to bottom, each with the module paths that belong to it (the longest
/// matching prefix decides). A module may import from its own layer and from layers below.
const LAYERS: &[(&str, &[&str])] = &[
    ("entry", &["cli", "server"]),
    ("services", &["gateway", "management", "balance", "notices", "app"]),
    (
        "domain",
        &[
            "snapshot",
            "checks",
            "providers",
            "receipts",
            "routing",
            "compliance",
            "tenant_log",
            "tool_servers",
            "prompts",
            "webhooks",
            "keys",
        ],
    ),
    ("platform", &["store", "config", "metrics", "telemetry", "upstream", "error", "secrets", "process"]),
];

/// Known violations still being paid off, each `"from -> to"` (layer) or `"cycle: a, b, …"`.
/// The test fails on any violation not listed here, and on any listed one that is gone (so
/// the list only shrinks).
const DEBTS: &[&str] = &[];

#[test]
fn imports_only_go_down_and_never_in_a_circle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = Graph::read(&root.join("lib.rs"));
    let mut found = BTreeSet::new();
    let mut unassigned = Vec::new();
    for (from, tos) in &graph.edges {
        let Some(lf) = layer_of(from) else {
            unassigned.push(show(from));
            continue;
        };
        for to in tos {
            match layer_of(to) {
                Some(lt) if lt < lf => {
                    found.insert(format!("{} -> {} ({} imports {})", show(from), show(to), LAYERS[lf].0, LAYERS[lt].0));
                }
                Some(_) => {}
                None => unassigned.push(show(to)),
            }
        }
    }
    for cycle in graph.cycles() {
        found.insert(format!("cycle: {}", cycle.iter().map(show).collect::<Vec<_>>().join(", ")));
    }
    unassigned.sort();
    unassigned.dedup();
    assert!(unassigned.is_empty(), "modules in no layer (add them to LAYERS): {unassigned:?}");
    let debts: BTreeSet<String> = DEBTS.iter().map(|s| s.to_string()).collect();
    let new: Vec<&String> = found.iter().filter(|f| !debts.contains(*f)).collect();
    let paid: Vec<&String> = debts.iter().filter(|d| !found.contains(*d)).collect();
    assert!(new.is_empty(), "imports that break the layers:\n{}", lines(&new));
    assert!(paid.is_empty(), "debts no longer found (remove them from DEBTS):\n{}", lines(&paid));
    assert!(graph.modules.len() > 50, "the reader found only {} modules", graph.modules.len());
}

#[test]
fn the_reader_sees_cycles_and_upward_imports() {
    // The checker itself, on a made-up crate: a child importing its parent's item while the
    // parent uses the child is a cycle; a re-export alone is not.
    let dir = std::env::temp_dir().join(format!("tollgate-layers-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("a")).unwrap();
    std::fs::write(dir.join("lib.rs"), "pub mod a;\npub mod b;\n").unwrap();
    std::fs::write(dir.join("a/mod.rs"), "mod x;\nmod y;\npub use x::X;\npub struct A;\nfn f() { y::g(); }\n").unwrap();
    std::fs::write(dir.join("a/x.rs"), "pub struct X;\n#[cfg(test)]\nmod tests { use crate::b::B; }\n").unwrap();
    std::fs::write(dir.join("a/y.rs"), "use super::A;\npub fn g() {}\n").unwrap();
    std::fs::write(dir.join("b.rs"), "use crate::a::X;\n// crate::a::A in a comment\npub struct B;\n").unwrap();
    let g = Graph::read(&dir.join("lib.rs"));
    let cycles: Vec<Vec<String>> = g.cycles().iter().map(|c| c.iter().map(show).collect()).collect();
    assert_eq!(cycles, vec![vec!["a".to_string(), "a::y".to_string()]]);
    assert_eq!(g.edges[&path("crate::b")], BTreeSet::from([path("crate::a::x")]), "the re-export is followed");
    assert!(!g.edges.contains_key(&path("crate::a::x")), "test code is left out");
    std::fs::remove_dir_all(&dir).ok();
}

type ModPath = Vec<String>;

fn path(s: &str) -> ModPath {
    s.split("::").map(str::to_string).collect()
}

fn show(m: &ModPath) -> String {
    if m.len() == 1 {
        "lib".into()
    } else {
        m[1..].join("::")
    }
}

fn lines(v: &[&String]) -> String {
    v.iter().map(|s| format!("  {s}")).collect::<Vec<_>>().join("\n")
}

fn layer_of(m: &ModPath) -> Option<usize> {
    if m.len() == 1 {
        return Some(0); // lib.rs: declarations only
    }
    let name = m[1..].join("::");
    let mut best: Option<(usize, usize)> = None;
    for (i, (_, prefixes)) in LAYERS.iter().enumerate() {
        for p in *prefixes {
            let hit = name == *p || name.starts_with(&format!("{p}::"));
            if hit && best.is_none_or(|(_, len)| p.len() > len) {
                best = Some((i, p.len()));
            }
        }
    }
    best.map(|(i, _)| i)
}

struct Module {
    text: String,
    children: BTreeMap<String, ModPath>,
    items: BTreeSet<String>,
    reexports: HashMap<String, ModPath>,
}

struct Graph {
    modules: BTreeMap<ModPath, Module>,
    edges: BTreeMap<ModPath, BTreeSet<ModPath>>,
}

impl Graph {
    fn read(lib: &Path) -> Graph {
        let mut g = Graph { modules: BTreeMap::new(), edges: BTreeMap::new() };
        g.load(vec!["crate".into()], lib);
        let paths: Vec<ModPath> = g.modules.keys().cloned().collect();
        for m in &paths {
            let reexports = g.reexports_of(m);
            g.modules.get_mut(m).unwrap().reexports = reexports;
        }
        for m in &paths {
            let refs = g.references(m);
            for r in refs {
                let target = g.resolve(&r, 0);
                if &target != m {
                    g.edges.entry(m.clone()).or_default().insert(target);
                }
            }
        }
        g
    }

    fn load(&mut self, at: ModPath, file: &Path) {
        let raw = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let text = drop_test_items(&strip(&raw));
        let dir = file.parent().unwrap();
        let stem = file.file_stem().unwrap().to_str().unwrap();
        let own_dir: PathBuf = if matches!(stem, "mod" | "lib" | "main") { dir.into() } else { dir.join(stem) };
        let mut children = BTreeMap::new();
        for (name, path_attr) in mod_decls(&raw, &text) {
            if name == "tests" {
                continue;
            }
            let f = match path_attr {
                Some(p) => dir.join(p),
                None if own_dir.join(format!("{name}.rs")).exists() => own_dir.join(format!("{name}.rs")),
                None => own_dir.join(&name).join("mod.rs"),
            };
            if f.exists() {
                let mut child = at.clone();
                child.push(name.clone());
                children.insert(name, child.clone());
                self.load(child, &f);
            }
        }
        let items = item_names(&text);
        self.modules.insert(at, Module { text, children, items, reexports: HashMap::new() });
    }

    fn reexports_of(&self, m: &ModPath) -> HashMap<String, ModPath> {
        let module = &self.modules[m];
        let mut out = HashMap::new();
        for (is_pub, tree) in use_decls(&module.text) {
            if !is_pub {
                continue;
            }
            for (parts, alias) in expand(&tree) {
                if parts.last().is_some_and(|p| p == "*") {
                    continue;
                }
                if let Some(abs) = self.absolute(m, &parts) {
                    let name = alias.unwrap_or_else(|| parts.last().unwrap().clone());
                    out.insert(name, abs);
                }
            }
        }
        out
    }

    /// Every path this module names, made absolute.
    fn references(&self, m: &ModPath) -> Vec<ModPath> {
        let module = &self.modules[m];
        let mut out = Vec::new();
        for (_, tree) in use_decls(&module.text) {
            for (mut parts, _) in expand(&tree) {
                if parts.last().is_some_and(|p| p == "*") {
                    parts.pop();
                }
                out.extend(self.absolute(m, &parts));
            }
        }
        let body = remove_use_decls(&module.text);
        for p in inline_paths(&body) {
            let first_is_child = module.children.contains_key(&p[0]);
            if matches!(p[0].as_str(), "crate" | "super" | "self") || first_is_child {
                out.extend(self.absolute(m, &p));
            }
        }
        out
    }

    fn absolute(&self, m: &ModPath, parts: &[String]) -> Option<ModPath> {
        let first = parts.first()?;
        let mut cur = m.clone();
        let rest: &[String] = match first.as_str() {
            "crate" => {
                cur = vec!["crate".into()];
                &parts[1..]
            }
            "self" => &parts[1..],
            "super" => {
                let mut i = 0;
                while parts.get(i).is_some_and(|p| p == "super") {
                    cur.pop();
                    i += 1;
                }
                // `super::X` inside an inline `mod name { … }` names this file's own item.
                let own = &self.modules[m];
                if let Some(next) = parts.get(i) {
                    let parent = &self.modules[&cur];
                    let in_parent = parent.children.contains_key(next)
                        || parent.items.contains(next)
                        || parent.reexports.contains_key(next);
                    if own.items.contains(next) && !in_parent {
                        cur = m.clone();
                    }
                }
                &parts[i..]
            }
            name if self.modules[m].children.contains_key(name) => parts,
            _ => return None,
        };
        cur.extend(rest.iter().cloned());
        Some(cur)
    }

    /// The module that defines what an absolute path names (re-exports followed).
    fn resolve(&self, abs: &ModPath, depth: usize) -> ModPath {
        let mut at: ModPath = vec!["crate".into()];
        let mut i = 1;
        while i < abs.len() {
            let module = &self.modules[&at];
            let seg = &abs[i];
            if let Some(child) = module.children.get(seg) {
                at = child.clone();
                i += 1;
                continue;
            }
            if let Some(target) = module.reexports.get(seg) {
                if depth < 20 && !module.items.contains(seg) {
                    let mut next = target.clone();
                    next.extend(abs[i + 1..].iter().cloned());
                    return self.resolve(&next, depth + 1);
                }
            }
            break;
        }
        at
    }

    /// Strongly connected components of two or more modules (Tarjan), each sorted.
    fn cycles(&self) -> Vec<Vec<ModPath>> {
        struct T<'a> {
            g: &'a Graph,
            index: HashMap<&'a ModPath, usize>,
            low: HashMap<&'a ModPath, usize>,
            stack: Vec<&'a ModPath>,
            on: BTreeSet<&'a ModPath>,
            out: Vec<Vec<ModPath>>,
        }
        fn visit<'a>(t: &mut T<'a>, v: &'a ModPath) {
            let n = t.index.len();
            t.index.insert(v, n);
            t.low.insert(v, n);
            t.stack.push(v);
            t.on.insert(v);
            if let Some(ws) = t.g.edges.get(v) {
                for w in ws {
                    if !t.index.contains_key(w) {
                        visit(t, w);
                        let lw = t.low[w];
                        let lv = t.low.get_mut(v).unwrap();
                        *lv = (*lv).min(lw);
                    } else if t.on.contains(w) {
                        let iw = t.index[w];
                        let lv = t.low.get_mut(v).unwrap();
                        *lv = (*lv).min(iw);
                    }
                }
            }
            if t.low[v] == t.index[v] {
                let mut comp = Vec::new();
                loop {
                    let w = t.stack.pop().unwrap();
                    t.on.remove(w);
                    comp.push(w.clone());
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort();
                    t.out.push(comp);
                }
            }
        }
        let mut t =
            T { g: self, index: HashMap::new(), low: HashMap::new(), stack: vec![], on: BTreeSet::new(), out: vec![] };
        for m in self.modules.keys() {
            if !t.index.contains_key(m) {
                visit(&mut t, m);
            }
        }
        t.out.sort();
        t.out
    }
}

/// The source without comments, string and char literals (their contents become empty).
fn strip(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    let word = |i: usize| i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if (b[i] == b'r' || (b[i] == b'b' && b.get(i + 1) == Some(&b'r')))
            && !word(i)
            && raw_string_at(b, i).is_some()
        {
            i = raw_string_at(b, i).unwrap();
            out.push_str("\"\"");
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' {
            // A char literal ('a', '\n', '\'', '\u{..}') or a lifetime ('a): skip only the former.
            let end = if b.get(i + 1) == Some(&b'\\') {
                (i + 2..b.len().min(i + 12)).find(|&j| b[j] == b'\'')
            } else if b.get(i + 2) == Some(&b'\'') {
                Some(i + 2)
            } else {
                let ch = s[i + 1..].chars().next();
                ch.filter(|c| c.len_utf8() > 1 && b.get(i + 1 + c.len_utf8()) == Some(&b'\''))
                    .map(|c| i + 1 + c.len_utf8())
            };
            match end {
                Some(j) => {
                    out.push_str("' '");
                    i = j + 1;
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            let ch = s[i..].chars().next().unwrap();
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// Where a raw string (`r"…"`, `r#"…"#`, `br"…"`) starting at `i` ends, if one starts there.
fn raw_string_at(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i + if b[i] == b'b' { 2 } else { 1 };
    let mut hashes = 0;
    while b.get(j) == Some(&b'#') {
        hashes += 1;
        j += 1;
    }
    if b.get(j) != Some(&b'"') {
        return None;
    }
    j += 1;
    let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
    while j < b.len() {
        if b[j..].starts_with(&close) {
            return Some(j + close.len());
        }
        j += 1;
    }
    Some(b.len())
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// `mod name;` declarations, with their `#[path = "…"]` when the raw source has one.
fn mod_decls(raw: &str, text: &str) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    for (i, _) in text.match_indices("mod ") {
        if i > 0 && is_ident(text[..i].chars().last().unwrap()) {
            continue;
        }
        let rest = &text[i + 4..];
        let name: String = rest.trim_start().chars().take_while(|c| is_ident(*c)).collect();
        let after = rest.trim_start()[name.len()..].trim_start();
        if name.is_empty() || !after.starts_with(';') {
            continue;
        }
        let attr = format!("mod {name};");
        let path_attr = raw.find(&attr).and_then(|at| {
            let before = &raw[..at];
            let line_start = before.rfind("#[path").filter(|p| !before[*p..].contains(";"))?;
            let q = &raw[line_start..at];
            let start = q.find('"')? + 1;
            let end = q[start..].find('"')? + start;
            Some(q[start..end].to_string())
        });
        out.push((name, path_attr));
    }
    out
}

fn item_names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for kw in ["struct ", "enum ", "fn ", "trait ", "type ", "const ", "static ", "union ", "mod ", "macro_rules! "] {
        for (i, _) in text.match_indices(kw) {
            if i > 0 && is_ident(text[..i].chars().last().unwrap()) {
                continue;
            }
            let name: String = text[i + kw.len()..].trim_start().chars().take_while(|c| is_ident(*c)).collect();
            if !name.is_empty() {
                out.insert(name);
            }
        }
    }
    out
}

/// Every `use` declaration: (is it `pub`, its tree text).
fn use_decls(text: &str) -> Vec<(bool, String)> {
    let mut out = Vec::new();
    for (i, _) in text.match_indices("use ") {
        if i > 0 && is_ident(text[..i].chars().last().unwrap()) {
            continue;
        }
        let Some(end) = text[i..].find(';') else { continue };
        let tree = text[i + 4..i + end].trim().to_string();
        let before = text[..i].trim_end();
        let is_pub = before.ends_with("pub")
            || before.ends_with(')') && before.rsplit("pub").next().is_some_and(|r| r.starts_with('('));
        out.push((is_pub, tree));
    }
    out
}

fn remove_use_decls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("use ") {
        let boundary = i == 0 || !is_ident(rest[..i].chars().last().unwrap());
        let end = rest[i..].find(';');
        match (boundary, end) {
            (true, Some(end)) => {
                out.push_str(&rest[..i]);
                rest = &rest[i + end + 1..];
            }
            _ => {
                out.push_str(&rest[..i + 4]);
                rest = &rest[i + 4..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// A use tree (`a::{b, c::{d as e}, self}`) flattened to (path, alias) pairs.
fn expand(tree: &str) -> Vec<(Vec<String>, Option<String>)> {
    let tree: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    let Some(open) = tree.find('{') else {
        let (path, alias) = match tree.split_once(" as ") {
            Some((p, a)) => (p, Some(a.trim().to_string())),
            None => (tree.as_str(), None),
        };
        let parts = path.split("::").map(|p| p.trim().to_string()).filter(|p| !p.is_empty()).collect();
        return vec![(parts, alias)];
    };
    let prefix: Vec<String> =
        tree[..open].split("::").map(|p| p.trim().to_string()).filter(|p| !p.is_empty()).collect();
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    let mut out = Vec::new();
    for p in parts.into_iter().filter(|p| !p.trim().is_empty()) {
        for (sub, alias) in expand(p) {
            if sub == ["self"] {
                out.push((prefix.clone(), alias.or_else(|| prefix.last().cloned())));
            } else {
                out.push((prefix.iter().cloned().chain(sub).collect(), alias));
            }
        }
    }
    out
}

/// Paths written in code: `a::b::c` sequences of identifiers.
fn inline_paths(body: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let chars: Vec<char> = body.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let at_start = i == 0 || !(is_ident(chars[i - 1]) || chars[i - 1] == ':');
        if at_start && (chars[i].is_ascii_alphabetic() || chars[i] == '_') {
            let mut parts = Vec::new();
            let mut j = i;
            loop {
                let s = j;
                while j < chars.len() && is_ident(chars[j]) {
                    j += 1;
                }
                parts.push(chars[s..j].iter().collect::<String>());
                if j + 2 < chars.len() && chars[j] == ':' && chars[j + 1] == ':' && (is_ident(chars[j + 2])) {
                    j += 2;
                } else {
                    break;
                }
            }
            if parts.len() > 1 {
                out.push(parts);
            }
            i = j.max(i + 1);
        } else {
            i += 1;
        }
    }
    out
}
