//! The auditor's own monitor (log.md §9), written only against the routes of log.md §2–§4, as an
//! outside auditor could write it: fetch the checkpoint, check its signature, prove it
//! consistent with the checkpoint saved last time, check every new leaf's entry against the
//! tile hashes, save the new checkpoint. Any failure names the first thing that did not hold.
//!
//! Trust: the verifier keys given (`--verifier-key`), else those saved in the state directory,
//! else, on the first run, the log's own `/v1/log/verifier-keys` (trust on first use, saved).

use std::path::Path;

use tlog_tiles::checkpoint::Checkpoint;
use tlog_tiles::tile::{Tile, TileHashReader, TileReader};
use tlog_tiles::tlog::{self, record_hash, stored_hash_index, Hash, HashReader};

use super::cosignature::CosignatureKey;
use super::tile_path::{self, TilePath};
use super::tree::HEIGHT;

/// `GET <path>` on the management API with the auditor's key: `(status, body)`.
pub trait Fetch {
    fn get(&self, path: &str) -> Result<(u16, Vec<u8>), String>;
}

/// What a successful audit saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Audited {
    pub origin: String,
    pub size: u64,
    /// The size of the checkpoint saved before, if there was one.
    pub since: Option<u64>,
}

const CHECKPOINT_FILE: &str = "checkpoint";
const KEYS_FILE: &str = "verifier-keys";

/// Audits the log behind `fetch` against the state in `dir` and saves the new state.
pub fn audit(fetch: &impl Fetch, dir: &Path, given: &[String]) -> Result<Audited, String> {
    let (given_log, given_witnesses) = split_keys(given);
    let keys = trusted_keys(fetch, dir, &given_log)?;
    let note_text = ok_body(fetch, "/v1/log/checkpoint")?;
    let note = signed_note::Note::from_bytes(&note_text).map_err(|e| format!("checkpoint: not a signed note: {e}"))?;
    let (log_keys, saved_witnesses) = split_keys(&keys);
    let log_keys = if given_log.is_empty() { log_keys } else { given_log };
    let witnesses: Vec<CosignatureKey> = given_witnesses.into_iter().chain(saved_witnesses).collect();
    note.verify(&verifier_list(&log_keys)?).map_err(|e| format!("checkpoint signature: {e}"))?;
    cosigned(&note_text, note.text(), &witnesses)?;
    let new = Checkpoint::from_bytes(note.text()).map_err(|e| format!("checkpoint: {e}"))?;
    let old = saved_checkpoint(dir)?;
    if let Some(old) = &old {
        consistent(fetch, old, &new)?;
    }
    let from = old.as_ref().map_or(0, Checkpoint::size);
    check_leaves(fetch, &new, from)?;
    let mut kept = keys;
    kept.extend(given.iter().filter(|k| CosignatureKey::parse(k).is_ok()).cloned());
    kept.sort();
    kept.dedup();
    save(dir, &note_text, &kept)?;
    Ok(Audited { origin: new.origin().to_string(), size: new.size(), since: old.map(|o| o.size()) })
}

fn ok_body(fetch: &impl Fetch, path: &str) -> Result<Vec<u8>, String> {
    match fetch.get(path)? {
        (200, body) => Ok(body),
        (status, body) => Err(format!("GET {path}: {status} {}", String::from_utf8_lossy(&body))),
    }
}

/// The keys to trust: given, else saved, else the log's own (first run).
fn trusted_keys(fetch: &impl Fetch, dir: &Path, given: &[String]) -> Result<Vec<String>, String> {
    if !given.is_empty() {
        return Ok(given.to_vec());
    }
    if let Ok(saved) = std::fs::read_to_string(dir.join(KEYS_FILE)) {
        return Ok(saved.lines().filter(|l| !l.is_empty()).map(str::to_string).collect());
    }
    let body = ok_body(fetch, "/v1/log/verifier-keys")?;
    let v: serde_json::Value = serde_json::from_slice(&body).map_err(|e| format!("verifier keys: {e}"))?;
    let keys = v["keys"].as_array().ok_or("verifier keys: no `keys` list")?;
    Ok(keys.iter().filter_map(|k| k["verifierKey"].as_str().map(str::to_string)).collect())
}

/// The log's keys (signed-note Ed25519, type 0x01) apart from witnesses' cosignature keys
/// (type 0x04, C2SP tlog-cosignature).
fn split_keys(keys: &[String]) -> (Vec<String>, Vec<CosignatureKey>) {
    let (mut log, mut witnesses) = (Vec::new(), Vec::new());
    for k in keys {
        match CosignatureKey::parse(k) {
            Ok(w) => witnesses.push(w),
            Err(_) => log.push(k.clone()),
        }
    }
    (log, witnesses)
}

/// Each witness key given must have a valid cosignature line on the checkpoint.
fn cosigned(note: &[u8], body: &[u8], witnesses: &[CosignatureKey]) -> Result<(), String> {
    let text = String::from_utf8_lossy(note);
    for w in witnesses {
        if !text.lines().any(|l| w.verify(body, l).is_some()) {
            return Err(format!("checkpoint: no valid cosignature by witness `{}`", w.name));
        }
    }
    Ok(())
}

fn verifier_list(keys: &[String]) -> Result<signed_note::VerifierList, String> {
    let mut list: Vec<Box<dyn signed_note::Verifier>> = Vec::new();
    for k in keys {
        let v = signed_note::StandardVerifier::new(k).map_err(|e| format!("verifier key `{k}`: {e}"))?;
        list.push(Box::new(v));
    }
    Ok(signed_note::VerifierList::new(list))
}

fn saved_checkpoint(dir: &Path) -> Result<Option<Checkpoint>, String> {
    let Ok(text) = std::fs::read(dir.join(CHECKPOINT_FILE)) else { return Ok(None) };
    let note = signed_note::Note::from_bytes(&text).map_err(|e| format!("saved checkpoint: {e}"))?;
    Checkpoint::from_bytes(note.text()).map(Some).map_err(|e| format!("saved checkpoint: {e}"))
}

/// The new checkpoint extends the saved one: same origin, not smaller, and a consistency proof
/// from the saved root to the new root holds (the roots are the checkpoints' own, never the
/// proof response's).
fn consistent(fetch: &impl Fetch, old: &Checkpoint, new: &Checkpoint) -> Result<(), String> {
    if old.origin() != new.origin() {
        return Err(format!("origin changed from `{}` to `{}`", old.origin(), new.origin()));
    }
    if new.size() < old.size() {
        return Err(format!("the log shrank: size {} after {} before", new.size(), old.size()));
    }
    if new.size() == old.size() || old.size() == 0 {
        return match new.size() == old.size() && new.hash() != old.hash() {
            true => Err(format!("the log forked: two roots for size {}", new.size())),
            false => Ok(()),
        };
    }
    let path = format!("/v1/log/consistency?from={}&to={}", old.size(), new.size());
    let v: serde_json::Value =
        serde_json::from_slice(&ok_body(fetch, &path)?).map_err(|e| format!("consistency proof: {e}"))?;
    let proof = v["proof"].as_array().ok_or("consistency proof: no `proof`")?;
    let proof: Vec<Hash> = proof.iter().map(|h| parse_hex(h.as_str().unwrap_or_default())).collect::<Result<_, _>>()?;
    tlog::check_tree(&proof, new.size(), *new.hash(), old.size(), *old.hash()).map_err(|_| {
        format!(
            "not consistent: size {} is not an extension of the saved size {} (forked or rewritten)",
            new.size(),
            old.size()
        )
    })
}

fn parse_hex(s: &str) -> Result<Hash, String> {
    let mut h = [0u8; 32];
    hex::decode_to_slice(s, &mut h).map_err(|_| format!("`{s}` is not a hash"))?;
    Ok(Hash(h))
}

/// Tiles over the management API, for `TileHashReader` (which checks them against the root).
struct ApiTiles<'a, F: Fetch>(&'a F);

impl<F: Fetch> TileReader for ApiTiles<'_, F> {
    fn height(&self) -> u8 {
        HEIGHT
    }
    fn read_tiles(&self, tiles: &[Tile]) -> Result<Vec<Vec<u8>>, tlog::Error> {
        tiles
            .iter()
            .map(|t| {
                let p = TilePath { level: Some(t.level()), index: t.level_index(), width: u64::from(t.width()) };
                ok_body(self.0, &format!("/v1/log/tile/{}", tile_path::format(p))).map_err(|_| tlog::Error::InvalidTile)
            })
            .collect()
    }
    fn save_tiles(&self, _tiles: &[Tile], _data: &[Vec<u8>]) {}
}

/// Every leaf in `[from, size)`: its entry (the receipt's `thisHash`) hashes to the level-0 tile
/// hash that the tiles, authenticated against the checkpoint's root, hold.
fn check_leaves(fetch: &impl Fetch, c: &Checkpoint, from: u64) -> Result<(), String> {
    let reader = ApiTiles(fetch);
    let hashes = TileHashReader::new(c.size(), *c.hash(), &reader);
    let mut bundle = from / 256;
    while bundle * 256 < c.size() {
        let width = (c.size() - bundle * 256).min(256);
        let p = TilePath { level: None, index: bundle, width };
        let entries = ok_body(fetch, &format!("/v1/log/tile/{}", tile_path::format(p)))?;
        let first = (bundle * 256).max(from);
        let indexes: Vec<u64> = (first..bundle * 256 + width).map(|i| stored_hash_index(0, i)).collect();
        let tree = hashes.read_hashes(&indexes).map_err(|e| format!("tiles up to leaf {}: {e}", first))?;
        for (k, want) in tree.iter().enumerate() {
            let leaf = first + k as u64;
            let at = (leaf - bundle * 256) as usize * 34;
            let entry = entries.get(at..at + 34).ok_or(format!("entry bundle {bundle}: leaf {leaf} missing"))?;
            if entry[..2] != [0, 32] || record_hash(&entry[2..]) != *want {
                return Err(format!("leaf {leaf} (receipt seq {}): its entry does not match the tree", leaf + 1));
            }
        }
        bundle += 1;
    }
    Ok(())
}

fn save(dir: &Path, note: &[u8], keys: &[String]) -> Result<(), String> {
    let write = |name: &str, data: &[u8]| {
        let tmp = dir.join(format!("{name}.tmp"));
        std::fs::write(&tmp, data).and_then(|()| std::fs::rename(&tmp, dir.join(name)))
    };
    std::fs::create_dir_all(dir).map_err(|e| format!("state directory {}: {e}", dir.display()))?;
    write(KEYS_FILE, keys.join("\n").as_bytes()).map_err(|e| format!("saving the verifier keys: {e}"))?;
    write(CHECKPOINT_FILE, note).map_err(|e| format!("saving the checkpoint: {e}"))
}
