//! Policy files: `*.yaml` / `*.yml` in the policy directory (`policies.dir`), read-only through
//! the API. A file that stops parsing keeps its last good version in force, and its error is
//! reported (log, `/status`) until it is fixed; a file that never parsed contributes nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use sha2::{Digest, Sha256};

use super::compiled::CompiledPolicy;
use super::validate;

/// Larger files are refused rather than read: a policy is a few kilobytes.
const MAX_FILE_BYTES: u64 = 1 << 20;

/// The last good version of one policy file.
#[derive(Debug, Clone)]
pub struct FilePolicy {
    /// File name inside the directory, e.g. `acme.yaml`.
    pub name: String,
    pub path: PathBuf,
    /// Modification time of the version in force (RFC 3339, UTC).
    pub modified: String,
    pub compiled: Arc<CompiledPolicy>,
}

/// A file whose current content does not parse or validate.
#[derive(Debug, Clone, PartialEq)]
pub struct FileError {
    pub name: String,
    /// `path:line:column: field `x`: reason`.
    pub message: String,
}

/// What the directory holds right now, as far as policies go.
#[derive(Debug, Default)]
pub struct FileSet {
    pub dir_exists: bool,
    /// The directory exists but cannot be listed.
    pub dir_error: Option<String>,
    /// Versions in force, by file name.
    pub policies: Vec<FilePolicy>,
    pub errors: Vec<FileError>,
}

impl FileSet {
    pub fn compiled(&self) -> Vec<Arc<CompiledPolicy>> {
        self.policies.iter().map(|p| p.compiled.clone()).collect()
    }

    /// The error of a file, when its current content is broken.
    pub fn error_of(&self, name: &str) -> Option<&str> {
        self.errors.iter().find(|e| e.name == name).map(|e| e.message.as_str())
    }
}

struct Entry {
    digest: [u8; 32],
    good: Option<FilePolicy>,
    error: Option<String>,
}

pub struct PolicyFiles {
    dir: PathBuf,
    entries: Mutex<BTreeMap<String, Entry>>,
    current: ArcSwap<FileSet>,
}

impl PolicyFiles {
    pub fn new(dir: impl Into<PathBuf>) -> PolicyFiles {
        PolicyFiles {
            dir: dir.into(),
            entries: Mutex::new(BTreeMap::new()),
            current: ArcSwap::from_pointee(FileSet::default()),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn current(&self) -> Arc<FileSet> {
        self.current.load_full()
    }

    /// Re-reads the directory; re-parses files whose content changed. True when what is in
    /// force or what is reported changed (the caller then rebuilds the snapshot).
    pub fn scan(&self) -> bool {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let before = self.current();
        let (names, dir_exists, dir_error) = match list(&self.dir) {
            Ok(Some(n)) => (n, true, None),
            Ok(None) => (Vec::new(), false, None),
            Err(e) => {
                let msg = format!("cannot list policy directory {}: {e}", self.dir.display());
                if before.dir_error.as_deref() != Some(msg.as_str()) {
                    log::error!("{msg}; keeping the policy files in force");
                    let next = FileSet {
                        dir_exists: true,
                        dir_error: Some(msg),
                        policies: before.policies.clone(),
                        errors: before.errors.clone(),
                    };
                    self.current.store(Arc::new(next));
                    return true;
                }
                return false;
            }
        };
        let mut changed = dir_exists != before.dir_exists || before.dir_error.is_some();
        let before_len = entries.len();
        entries.retain(|name, _| names.contains(name));
        if entries.len() != before_len {
            changed = true;
        }
        for name in names {
            changed |= self.refresh(&mut entries, name);
        }
        if !changed {
            return false;
        }
        let next = FileSet {
            dir_exists,
            dir_error,
            policies: entries.values().filter_map(|e| e.good.clone()).collect(),
            errors: entries
                .iter()
                .filter_map(|(n, e)| e.error.as_ref().map(|m| FileError { name: n.clone(), message: m.clone() }))
                .collect(),
        };
        self.current.store(Arc::new(next));
        true
    }

    /// Re-reads one file; re-parses it when its content changed. True when it changed.
    fn refresh(&self, entries: &mut BTreeMap<String, Entry>, name: String) -> bool {
        let path = self.dir.join(&name);
        let read = read_limited(&path);
        let digest: [u8; 32] = match &read {
            Ok(text) => Sha256::digest(text.as_bytes()).into(),
            Err(e) => Sha256::digest(e.as_bytes()).into(),
        };
        if entries.get(&name).is_some_and(|e| e.digest == digest) {
            return false;
        }
        let origin = path.display().to_string();
        let parsed = read.and_then(|text| compile(&name, &origin, &text));
        let entry = entries.entry(name.clone()).or_insert(Entry { digest, good: None, error: None });
        entry.digest = digest;
        match parsed {
            Ok(compiled) => {
                log::info!("policy file {origin} loaded");
                entry.good = Some(FilePolicy {
                    name,
                    path: path.clone(),
                    modified: modified(&path),
                    compiled: Arc::new(compiled),
                });
                entry.error = None;
            }
            Err(e) => {
                let kept = if entry.good.is_some() { "the last good version stays in force" } else { "not in force" };
                log::error!("policy file rejected ({kept}): {e}");
                entry.error = Some(e);
            }
        }
        true
    }
}

fn compile(name: &str, origin: &str, text: &str) -> Result<CompiledPolicy, String> {
    let doc = validate::parse_file(text, origin)?;
    CompiledPolicy::compile(format!("file:{name}"), text, doc).map_err(|e| format!("{origin}: {e}"))
}

/// Policy file names in the directory, sorted; None when it does not exist.
fn list(dir: &Path) -> std::io::Result<Option<Vec<String>>> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut names = Vec::new();
    for e in rd {
        let e = e?;
        let Ok(name) = e.file_name().into_string() else { continue };
        // Editors' hidden swap and backup files are not policies.
        if name.starts_with('.') || !(name.ends_with(".yaml") || name.ends_with(".yml")) {
            continue;
        }
        if e.path().is_file() {
            names.push(name);
        }
    }
    names.sort();
    Ok(Some(names))
}

fn read_limited(path: &Path) -> Result<String, String> {
    let origin = path.display();
    let meta = std::fs::metadata(path).map_err(|e| format!("{origin}: cannot read: {e}"))?;
    if meta.len() > MAX_FILE_BYTES {
        return Err(format!("{origin}: file is {} bytes; policy files may be at most {MAX_FILE_BYTES}", meta.len()));
    }
    let bytes = std::fs::read(path).map_err(|e| format!("{origin}: cannot read: {e}"))?;
    String::from_utf8(bytes).map_err(|_| format!("{origin}: not UTF-8 text"))
}

fn modified(path: &Path) -> String {
    let t = std::fs::metadata(path).and_then(|m| m.modified()).map(chrono::DateTime::<chrono::Utc>::from);
    t.unwrap_or_else(|_| chrono::Utc::now()).format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

/// `tollgate check-config`: every policy file in `dir` must parse and validate. Ok(number of
/// files); Err lists each failure as `path:line:column: field `x`: reason`.
pub fn check_dir(dir: &Path) -> Result<usize, String> {
    let names = list(dir).map_err(|e| format!("cannot list policy directory {}: {e}", dir.display()))?;
    let names = names.unwrap_or_default();
    let errors: Vec<String> = names
        .iter()
        .filter_map(|name| {
            let path = dir.join(name);
            read_limited(&path).and_then(|text| compile(name, &path.display().to_string(), &text)).err()
        })
        .collect();
    if errors.is_empty() {
        Ok(names.len())
    } else {
        Err(errors.join("\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp() -> PathBuf {
        let d = std::env::temp_dir().join(format!("tollgate-policy-files-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn the_shipped_example_is_a_valid_file_policy() {
        let text = include_str!("../../../conf/policies/example.yaml.sample");
        let doc = validate::parse_file(text, "example.yaml.sample").unwrap();
        assert_eq!(doc.tenant.as_deref(), Some("acme"));
        assert_eq!(doc.rules.len(), 3);
        assert!(CompiledPolicy::compile("file:example.yaml", text, doc).is_ok());
    }

    #[test]
    fn broken_files_keep_their_last_good_version() {
        let dir = tmp();
        let files = PolicyFiles::new(&dir);
        assert!(files.scan(), "an existing empty directory is news");
        assert!(!files.scan());
        std::fs::write(dir.join("a.yaml"), "rules:\n  - {id: one, action: deny}\n").unwrap();
        std::fs::write(dir.join("notes.txt"), "not a policy").unwrap();
        std::fs::write(dir.join("b.yml.sample"), "not loaded").unwrap();
        assert!(files.scan());
        let set = files.current();
        assert_eq!(set.policies.len(), 1);
        assert_eq!(set.policies[0].compiled.source_id(), "file:a.yaml");
        assert!(!files.scan(), "nothing changed");

        std::fs::write(dir.join("a.yaml"), "rules:\n  - id: one\n    action: sometimes\n").unwrap();
        std::fs::write(dir.join("c.yml"), "cache: {mode: maybe}\n").unwrap();
        assert!(files.scan());
        let set = files.current();
        assert_eq!(set.policies.len(), 1, "a.yaml keeps its old version; c.yml never parsed");
        assert!(set.policies[0].compiled.yaml().contains("{id: one, action: deny}"));
        let e = set.error_of("a.yaml").unwrap();
        assert!(e.starts_with(&format!("{}:3:", dir.join("a.yaml").display())) && e.contains("rules[0].action"), "{e}");
        assert!(set.error_of("c.yml").unwrap().contains("cache.mode"));
        let e = check_dir(&dir).unwrap_err();
        assert!(e.contains("a.yaml:3:") && e.contains("c.yml:1:"), "{e}");

        std::fs::write(dir.join("a.yaml"), "rules:\n  - {id: two, action: deny}\n").unwrap();
        std::fs::remove_file(dir.join("c.yml")).unwrap();
        assert!(files.scan());
        let set = files.current();
        assert!(set.errors.is_empty());
        assert!(set.policies[0].compiled.yaml().contains("two"));
        assert_eq!(check_dir(&dir), Ok(1));

        std::fs::remove_file(dir.join("a.yaml")).unwrap();
        assert!(files.scan());
        assert!(files.current().policies.is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(files.scan());
        assert!(!files.current().dir_exists);
        assert_eq!(check_dir(&dir), Ok(0));
    }
}
