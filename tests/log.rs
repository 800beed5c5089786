//! The tenant log end to end (docs/log.md §1–§4), on every backend and append path: receipts
//! from real traffic become the leaves of one tree; the checkpoint is a C2SP signed note that
//! the signed-note verifier (`signed_note`, the port of Go's `sumdb/note`) accepts with the
//! published verifier key; consistency proofs between two checkpoints and inclusion proofs of
//! receipts check with `tlog_tiles` (the port of Go's `sumdb/tlog`); the tiles, read through
//! its authenticating `TileHashReader`, rebuild the checkpoint's root; the entry bundles hold
//! the receipts' `thisHash`; the 400s and 404s of the page; tenants apart.

mod support;

use std::cell::RefCell;

use base64::Engine;
use serde_json::Value;
use support::{backends, Backend, Gateway};
use tlog_tiles::tile::{Tile, TileHashReader, TileReader};
use tlog_tiles::tlog::{self, record_hash, Hash};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// A parsed checkpoint: its body's three lines and the whole note.
struct Checkpoint {
    origin: String,
    size: u64,
    root: Hash,
    note: String,
}

fn checkpoint(g: &Gateway, key: &str) -> Checkpoint {
    let r = g.mgmt("GET", "/v1/log/checkpoint", Some(key), None);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    let note = r.text();
    let mut lines = note.split('\n');
    let origin = lines.next().unwrap().to_string();
    let size = lines.next().unwrap().parse().unwrap();
    let root = Hash(B64.decode(lines.next().unwrap()).unwrap().try_into().unwrap());
    assert_eq!(lines.next(), Some(""), "a blank line ends the body: {note}");
    Checkpoint { origin, size, root, note }
}

/// The note verifies with the active verifier key of `/v1/log/verifier-keys`, and not with a
/// key of another name.
fn verify_note(g: &Gateway, key: &str, c: &Checkpoint) {
    let keys = g.get_json(key, "/v1/log/verifier-keys");
    assert_eq!(keys["origin"], c.origin.as_str());
    let active: Vec<&Value> = keys["keys"].as_array().unwrap().iter().filter(|k| k["active"] == true).collect();
    assert_eq!(active.len(), 1, "{keys}");
    let vkey = active[0]["verifierKey"].as_str().unwrap();
    assert!(vkey.starts_with(&format!("{}+", c.origin)), "{vkey}");
    let verifier = signed_note::StandardVerifier::new(vkey).unwrap();
    let note = signed_note::Note::from_bytes(c.note.as_bytes()).unwrap();
    let list = signed_note::VerifierList::new(vec![Box::new(verifier)]);
    let (verified, _) = note.verify(&list).expect("the checkpoint verifies");
    assert_eq!(verified.len(), 1);
    let other = ed25519_dalek::SigningKey::from_bytes(&[7; 32]).verifying_key();
    let vk = signed_note::new_ed25519_verifier_key(&c.origin, &other);
    let stranger = signed_note::VerifierList::new(vec![Box::new(signed_note::StandardVerifier::new(&vk).unwrap())]);
    assert!(note.verify(&stranger).is_err(), "another key with the same name does not verify it");
}

/// Reads tiles over HTTP for `TileHashReader`, which checks them against the tree's root.
struct HttpTiles<'a> {
    g: &'a Gateway,
    key: &'a str,
    fetched: RefCell<usize>,
}

impl TileReader for HttpTiles<'_> {
    fn height(&self) -> u8 {
        8
    }
    fn read_tiles(&self, tiles: &[Tile]) -> Result<Vec<Vec<u8>>, tlog::Error> {
        tiles
            .iter()
            .map(|t| {
                *self.fetched.borrow_mut() += 1;
                let r =
                    self.g.mgmt("GET", &tile_url(Some(t.level()), t.level_index(), t.width()), Some(self.key), None);
                assert_eq!(r.status, 200, "{}", r.text());
                assert_eq!(r.header("content-type"), Some("application/octet-stream"));
                Ok(r.body)
            })
            .collect()
    }
    fn save_tiles(&self, _tiles: &[Tile], _data: &[Vec<u8>]) {}
}

/// C2SP tlog-tiles: `<N>` in groups of three digits, all but the last prefixed `x`.
fn tile_url(level: Option<u8>, index: u64, width: u32) -> String {
    let mut n = index;
    let mut parts = vec![format!("{:03}", n % 1000)];
    while n >= 1000 {
        n /= 1000;
        parts.push(format!("x{:03}", n % 1000));
    }
    parts.reverse();
    let level = level.map_or("entries".to_string(), |l| l.to_string());
    let partial = if width < 256 { format!(".p/{width}") } else { String::new() };
    format!("/v1/log/tile/{level}/{}{partial}", parts.join("/"))
}

/// The `thisHash` of the receipt with `seq`: its id from the receipt list, then the receipt.
fn this_hash(g: &Gateway, key: &str, seq: u64) -> [u8; 32] {
    let mut after = String::new();
    loop {
        let page = g.get_json(key, &format!("/v1/receipts?limit=200{after}"));
        let list = page["receipts"].as_array().expect("a receipt page");
        if let Some(r) = list.iter().find(|r| r["seq"] == seq) {
            let full = g.get_json(key, &format!("/v1/receipts/{}", r["receiptId"].as_str().unwrap()));
            return hex::decode(full["thisHash"].as_str().unwrap()).unwrap().try_into().unwrap();
        }
        let next = page["nextCursor"].as_u64().unwrap_or_else(|| panic!("no receipt {seq}"));
        after = format!("&cursor={next}");
    }
}

fn hashes(v: &Value) -> Vec<Hash> {
    v.as_array().unwrap().iter().map(|h| Hash(hex::decode(h.as_str().unwrap()).unwrap().try_into().unwrap())).collect()
}

fn traffic(g: &Gateway, n: usize) {
    for i in 0..n {
        assert_eq!(g.say(&g.key, "gpt-4o-mini", &format!("hello {i}")).status, 200);
    }
}

/// Two checkpoints a full tile apart prove consistent; every receipt checked is included.
fn log_grows_consistently(g: &Gateway) {
    traffic(g, 5);
    let early = checkpoint(g, &g.key);
    assert_eq!(early.size, g.newest_seq(&g.key), "the checkpoint covers every answered request");
    assert_eq!(early.origin.rsplit_once('/').unwrap().1, g.tenant_id);
    verify_note(g, &g.key, &early);
    // The same size: the same checkpoint, published once.
    assert_eq!(checkpoint(g, &g.key).note, early.note);

    traffic(g, 300);
    let late = checkpoint(g, &g.key);
    assert_eq!(late.size, g.newest_seq(&g.key));
    assert!(late.size >= 305);
    verify_note(g, &g.key, &late);
    let p = g.get_json(&g.key, &format!("/v1/log/consistency?from={}&to={}", early.size, late.size));
    assert_eq!(p["fromRoot"], hex::encode(early.root.0));
    assert_eq!(p["toRoot"], hex::encode(late.root.0));
    tlog::check_tree(&hashes(&p["proof"]), late.size, late.root, early.size, early.root).expect("consistent");
    let mut forged = hashes(&p["proof"]);
    forged[0].0[31] ^= 1;
    assert!(tlog::check_tree(&forged, late.size, late.root, early.size, early.root).is_err());

    // The attestation of the whole log has the log's root (log.md §1).
    let a = g.get_json(&g.key, &format!("/v1/compliance/attestation?fromSeq=1&toSeq={}", late.size));
    assert_eq!(a["merkle"]["root"], hex::encode(late.root.0));

    for seq in [1, 256, 257, late.size] {
        let p = g.get_json(&g.key, &format!("/v1/log/inclusion?seq={seq}&size={}", late.size));
        let leaf = record_hash(&this_hash(g, &g.key, seq));
        assert_eq!(p["leafHash"], hex::encode(leaf.0));
        assert_eq!((p["leafIndex"].as_u64(), p["root"].as_str()), (Some(seq - 1), Some(&*hex::encode(late.root.0))));
        tlog::check_record(&hashes(&p["proof"]), late.size, late.root, seq - 1, leaf).expect("included");
    }
    // The attestation above is an evidence read: its admin receipt (log.md §8) is the newest leaf.
    let size = g.newest_seq(&g.key);
    assert_eq!(size, late.size + 1);
    let p = g.get_json(&g.key, "/v1/log/inclusion?seq=3");
    assert_eq!(p["size"], size, "size defaults to the current one");
    let p = g.get_json(&g.key, &format!("/v1/log/consistency?from=0&to={}", late.size));
    assert_eq!((p["fromRoot"].as_str(), p["proof"].as_array().unwrap().len()), (Some(&*hex::encode(Sha0)), 0));
    tiles_rebuild_the_root(g, &late);
}

/// SHA-256 of nothing: the empty tree's root.
#[allow(non_upper_case_globals)]
const Sha0: [u8; 32] = tlog::EMPTY_HASH.0;

/// The tiles, authenticated against the checkpoint's root, give every stored hash; the entry
/// bundles hold the receipts' `thisHash`, whose record hashes are the level-0 tile.
fn tiles_rebuild_the_root(g: &Gateway, c: &Checkpoint) {
    let reader = HttpTiles { g, key: &g.key, fetched: RefCell::new(0) };
    let hashes = TileHashReader::new(c.size, c.root, &reader);
    assert_eq!(tlog::tree_hash(c.size, &hashes).unwrap(), c.root);
    let proof = tlog::prove_record(c.size, 300, &hashes).unwrap();
    let leaf = record_hash(&this_hash(g, &g.key, 301));
    tlog::check_record(&proof, c.size, c.root, 300, leaf).unwrap();
    assert!(*reader.fetched.borrow() > 0);

    let full = g.mgmt("GET", &tile_url(Some(0), 0, 256), Some(&g.key), None);
    assert_eq!(full.header("cache-control"), Some("public, max-age=31536000, immutable"));
    let entries = g.mgmt("GET", &tile_url(None, 0, 256), Some(&g.key), None);
    assert_eq!((entries.status, entries.body.len()), (200, 256 * 34));
    for (i, e) in entries.body.chunks(34).enumerate().take(3) {
        assert_eq!(&e[..2], &[0, 32]);
        assert_eq!(e[2..], this_hash(g, &g.key, i as u64 + 1));
        assert_eq!(record_hash(&e[2..]).0, full.body[i * 32..(i + 1) * 32]);
    }
    // The open tile as the log is now: leaves appended after `c` (the admin receipts of
    // evidence reads, log.md §8) widen it.
    let w = (g.newest_seq(&g.key) - 256) as u32;
    // Level 1 holds one hash so far: the root of tile 0/000.
    let up = g.mgmt("GET", &tile_url(Some(1), 0, 1), Some(&g.key), None);
    assert_eq!(up.body, tlog_tiles::tile::Tile::subtree_hash(&full.body).0);
    let partial = g.mgmt("GET", &tile_url(None, 1, w), Some(&g.key), None);
    assert_eq!((partial.status, partial.body.len()), (200, w as usize * 34));
    assert_eq!(partial.header("cache-control"), Some("no-cache"));
    for missing in
        [tile_url(Some(0), 1, 256), tile_url(None, 1, w + 1), tile_url(Some(1), 0, 2), "/v1/log/tile/0/01".into()]
    {
        let r = g.mgmt("GET", &missing, Some(&g.key), None);
        assert_eq!(r.status, 404, "{missing}: {}", r.status);
        assert_eq!(r.json()["error"]["type"], "not_found");
    }
}

/// The page's 400s, and another tenant's log apart.
fn bad_sizes_and_tenants(g: &Gateway) {
    // Published on demand: the log grew by the attestation's admin receipt since the last one.
    let size = checkpoint(g, &g.key).size;
    assert_eq!(size, g.newest_seq(&g.key));
    for q in [
        "consistency?from=5&to=4".to_string(),
        format!("consistency?from=1&to={}", size + 1),
        "consistency?from=x&to=2".into(),
        "consistency?to=2".into(),
        format!("inclusion?seq={}", size + 1),
        "inclusion?seq=5&size=4".into(),
        "inclusion?seq=0".into(),
        format!("inclusion?seq=1&size={}", size + 1),
    ] {
        let r = g.mgmt("GET", &format!("/v1/log/{q}"), Some(&g.key), None);
        assert_eq!(r.status, 400, "{q}: {}", r.text());
        assert_eq!(r.json()["error"]["type"], "invalid_request");
    }
    let (other_tenant, other_key) = g.create_tenant_live("other");
    let empty = checkpoint(g, &other_key);
    assert_eq!((empty.size, empty.root), (0, tlog::EMPTY_HASH));
    assert_eq!(empty.origin.rsplit_once('/').unwrap().1, other_tenant);
    verify_note(g, &other_key, &empty);
    let r = g.mgmt("GET", &tile_url(None, 0, 1), Some(&other_key), None);
    assert_eq!(r.status, 404, "another tenant's log has no entries: {}", r.text());
    let list = g.get_json(&g.key, "/v1/log/checkpoints?limit=1");
    assert_eq!(list["data"][0]["size"], size);
    let next = list["nextCursor"].as_str().expect("two checkpoints were published");
    let older = g.get_json(&g.key, &format!("/v1/log/checkpoints?limit=5&cursor={next}"));
    assert!(older["data"][0]["size"].as_u64().unwrap() < size, "{older}");
}

#[test]
fn the_log_is_one_tree_with_signed_checkpoints_proofs_and_tiles() {
    let mut runs: Vec<(Backend, Vec<(&str, &str)>)> =
        backends().into_iter().map(|b| (b, vec![("TOLLGATE_LOG_ORIGIN_PREFIX", "")])).collect();
    // SQLite without the journal: the writer's own connection appends.
    runs.push((Backend::Sqlite, vec![("TOLLGATE_RECEIPTS_JOURNAL", "0")]));
    for (b, env) in runs {
        let (g, _up) = support::with_standin(&b, &env);
        log_grows_consistently(&g);
        bad_sizes_and_tenants(&g);
    }
}

/// The origin prefix is configurable; by default it is `tollgate-<installId>`, stable across
/// restarts of one database.
#[test]
fn the_origin_is_configured_or_the_install_s_own() {
    let (mut g, _up) = support::with_standin(&Backend::Sqlite, &[]);
    let first = checkpoint(&g, &g.key).origin;
    assert!(first.starts_with("tollgate-") && first.ends_with(&format!("/{}", g.tenant_id)), "{first}");
    g.stop();
    g.spawn();
    assert_eq!(checkpoint(&g, &g.key).origin, first);
    g.stop();
    g.set_env("TOLLGATE_LOG_ORIGIN_PREFIX", "audit.example.com/tollgate");
    g.spawn();
    traffic(&g, 1);
    let c = checkpoint(&g, &g.key);
    assert_eq!(c.origin, format!("audit.example.com/tollgate/{}", g.tenant_id));
    verify_note(&g, &g.key, &c);
}

/// `tollgate log audit` (log.md §9) passes on a log that grew, and exits 1 on a key that did
/// not sign, on a log whose past was rewritten, and on a log that shrank.
#[test]
fn the_auditor_s_tool_holds_the_log_to_its_past() {
    let (g, _up) = support::with_standin(&Backend::Sqlite, &[]);
    let state = g.dir.join("audit-state");
    let url = format!("http://{}", g.mgmt);
    let audit = |extra: &[&str]| {
        let mut args = vec!["log", "audit", "--url", &url, "--key", &g.key, "--state", state.to_str().unwrap()];
        args.extend_from_slice(extra);
        let out = g.cli(&args);
        (out.status.success(), String::from_utf8_lossy(&out.stdout).to_string())
    };
    // The first leaves are the admin receipts of the stand-in's provider writes (log.md §8).
    let setup = g.newest_seq(&g.key);
    traffic(&g, 3);
    let (ok, out) = audit(&[]);
    assert!(ok && out.contains(&format!("at size {} (first audit", setup + 3)), "{out}");
    traffic(&g, 260);
    let (ok, out) = audit(&[]);
    let grown = setup + 263;
    assert!(ok && out.contains(&format!("at size {grown} (consistent with size {}", setup + 3)), "{out}");
    let (ok, out) = audit(&[]);
    assert!(ok && out.contains(&format!("consistent with size {grown}")), "the same size again: {out}");

    let origin = checkpoint(&g, &g.key).origin;
    let stranger = signed_note::new_ed25519_verifier_key(
        &origin,
        &ed25519_dalek::SigningKey::from_bytes(&[9; 32]).verifying_key(),
    );
    let (ok, out) = audit(&["--verifier-key", &stranger]);
    assert!(!ok && out.contains("checkpoint signature"), "{out}");

    // An operator rewrites a past receipt (leaf 259, in the open tile): the next checkpoint is
    // not an extension of the one the auditor saved.
    let t = &g.tenant_id;
    let forged = "ab".repeat(32);
    assert!(grown < 512, "seq 260 is in the open tile");
    assert_eq!(g.sql(&format!("UPDATE receipts SET this_hash = '{forged}' WHERE tenant_id = '{t}' AND seq = 260")), 1);
    traffic(&g, 1);
    let (ok, out) = audit(&[]);
    assert!(!ok && out.contains("not consistent"), "{out}");

    // The log shrinks back to 5 receipts.
    g.sql(&format!("DELETE FROM receipts WHERE tenant_id = '{t}' AND seq > 5"));
    g.sql(&format!("DELETE FROM log_tiles WHERE tenant_id = '{t}'"));
    g.sql(&format!("DELETE FROM log_checkpoints WHERE tenant_id = '{t}'"));
    g.sql(&format!("UPDATE chain_heads SET seq = 5 WHERE tenant_id = '{t}'"));
    let (ok, out) = audit(&[]);
    assert!(!ok && out.contains(&format!("the log shrank: size 5 after {grown}")), "{out}");
}
