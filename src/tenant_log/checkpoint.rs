//! Checkpoints (log.md §2): C2SP `tlog-checkpoint` bodies in C2SP `signed-note`s, signed with
//! the receipts' active Ed25519 key under the name `<origin prefix>/<tenantId>`.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use tlog_tiles::tlog::Hash;

use super::tree;
use crate::error::ApiError;
use crate::receipts::signer::{self, RegisteredKey, Signer};
use crate::store::checkpoints::{self, CheckpointRow};
use crate::store::log_heads::{Edge, KeptHead};
use crate::store::tiles;
use crate::store::{receipts as stored, Store};

/// Signed-note signature type of Ed25519 (C2SP signed-note).
const ED25519: u8 = 0x01;

/// The origin prefix: configured, else `tollgate-<installId>` (one id per database).
pub async fn origin_prefix(store: &Store, configured: &str) -> Result<String, crate::store::StoreError> {
    if !configured.is_empty() {
        return Ok(configured.to_string());
    }
    Ok(format!("tollgate-{}", checkpoints::install_id(store).await?))
}

/// A tenant's log origin, which is also its signing key's name.
pub fn origin(prefix: &str, tenant: &str) -> String {
    format!("{prefix}/{tenant}")
}

/// The note body: origin, size, root in standard base64, each ending in a newline.
pub fn body(origin: &str, size: u64, root: &[u8; 32]) -> Result<Vec<u8>, ApiError> {
    let c = tlog_tiles::checkpoint::Checkpoint::new(origin, size, Hash(*root), "")
        .map_err(|e| ApiError::internal(format!("checkpoint: {e}")))?;
    Ok(c.to_bytes())
}

/// The receipts' key as a signed-note signer named `name`.
struct NoteSigner<'a> {
    name: &'a str,
    key: &'a Signer,
}

impl signed_note::Signer for NoteSigner<'_> {
    fn name(&self) -> &str {
        self.name
    }
    fn key_id(&self) -> u32 {
        key_hash(self.name, &self.key.signing_key().verifying_key().to_bytes())
    }
    fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, ed25519_dalek::SignatureError> {
        Ok(self.key.sign(msg).to_vec())
    }
}

/// First 4 bytes of `SHA-256(name || 0x0A || 0x01 || public key)`, big-endian.
pub fn key_hash(name: &str, public: &[u8; 32]) -> u32 {
    signed_note::key_id(name, &[&[ED25519][..], public].concat())
}

/// The signed note: `body`, a blank line, and the signature line `— <name> <base64>`.
pub fn sign(body: &[u8], name: &str, key: &Signer) -> Result<String, ApiError> {
    let fail = |e: signed_note::NoteError| ApiError::internal(format!("checkpoint note: {e}"));
    let mut note = signed_note::Note::new(body, &[]).map_err(fail)?;
    note.add_sigs(&[&NoteSigner { name, key }]).map_err(fail)?;
    String::from_utf8(note.to_bytes()).map_err(|e| ApiError::internal(e.to_string()))
}

/// `<name>+<key hash, 8 hex>+<base64(0x01 || public key)>`.
pub fn verifier_key(name: &str, public: &[u8; 32]) -> String {
    format!("{name}+{:08x}+{}", key_hash(name, public), B64.encode([&[ED25519][..], public].concat()))
}

/// The verifier key of every key in the registry, for the tenant's origin: `(keyId, key)`.
pub fn verifier_keys(name: &str, registry: &[RegisteredKey]) -> Vec<(String, String)> {
    registry.iter().filter_map(|k| Some((k.key_id.clone(), verifier_key(name, &signer::public_bytes(k)?)))).collect()
}

/// The most leaves the fast path of [`current`] reads past the last one it knows; a log that
/// grew by more since this process's last checkpoint of it has its edge read from the tiles
/// again. Why 512: at 1 000 000 leaves on SQLite (benches/log.rs, session 39, p50 of 200 reads
/// of the newest leaves) 257 leaves read in 0.30–0.32 ms, 513 in 0.55–0.61, 1 025 in 1.19–1.21,
/// and the edge from the tiles in 0.87–0.94: up to 512 the fast path stays under the 1 ms of
/// issue 41 with the signature and the insert, and under the slow path (1.2–3.6 ms p50).
pub(super) const CATCH_UP: u64 = 512;

/// The checkpoint at the tenant's current size, published (signed and stored) when the log
/// grew since the newest one. It covers every receipt committed before the call, and so every
/// receipt whose answer was sent (receipts.commit: before_answer).
pub async fn current(store: &Store, key: &Signer, prefix: &str, tenant: &str) -> Result<CheckpointRow, ApiError> {
    Ok(latest(store, key, prefix, tenant).await?.0)
}

/// The checkpoint as `GET /v1/log/checkpoint` serves it: [`current`] followed by the witnesses'
/// kept cosignature lines, which are not read when this call stored the checkpoint (no witness
/// has seen it yet: they cosign stored checkpoints).
pub async fn current_served(store: &Store, key: &Signer, prefix: &str, tenant: &str) -> Result<String, ApiError> {
    match latest(store, key, prefix, tenant).await? {
        (c, true) => Ok(c.note),
        (c, false) => served(store, tenant, &c).await,
    }
}

/// [`current`], and whether this call stored it.
///
/// Why a kept edge: from the stored tiles alone, a checkpoint of a log that grew is `head_seq`,
/// the newest stored checkpoint, the root from several tile reads, the signature and the insert:
/// 2.3–2.6 ms p50 at 1 000 000 leaves on SQLite in session 38, 1.24–3.72 ms in session 39's
/// runs of the same build (docs/benchmarks.md), over the 1 ms of issue 41. With the tree's right
/// edge kept per tenant (`store::log_heads`) it is one range read of the leaves committed since
/// (the first of them the kept last leaf, whose `thisHash` commits to every receipt before it,
/// so an edge that does not belong to this store's log is never extended), the signature and
/// the insert: 0.17–0.50 ms p50 after one receipt, 0.09–0.34 ms for an unchanged log (one read).
async fn latest(store: &Store, key: &Signer, prefix: &str, tenant: &str) -> Result<(CheckpointRow, bool), ApiError> {
    let name = origin(prefix, tenant);
    if let Some(head) = store.log_heads().get(tenant, &name) {
        if let Some(done) = extend(store, key, tenant, head).await? {
            return Ok(done);
        }
        store.log_heads().forget(tenant);
    }
    reseed(store, key, tenant, name).await
}

/// The fast path: the kept head extended by the leaves committed since, if they follow its last
/// leaf and are at most [`CATCH_UP`]; None otherwise (the slow path decides).
async fn extend(
    store: &Store,
    key: &Signer,
    tenant: &str,
    mut head: KeptHead,
) -> Result<Option<(CheckpointRow, bool)>, ApiError> {
    let size = head.edge.size();
    // The kept last leaf (when there is one), at most CATCH_UP new ones, and one more if there are more.
    let rows = tiles::leaves_from(store, tenant, size.max(1), CATCH_UP + 2).await?;
    if rows.len() as u64 > CATCH_UP + u64::from(size > 0) {
        return Ok(None);
    }
    let mut rows = rows.into_iter().peekable();
    if size > 0 && rows.next_if(|(seq, leaf)| *seq == size && leaf == head.edge.last_leaf()).is_none() {
        return Ok(None);
    }
    if rows.peek().is_none() {
        return Ok(Some((head.checkpoint, false)));
    }
    for (seq, leaf) in rows {
        if seq != head.edge.size() + 1 {
            return Ok(None);
        }
        head.edge.push(&leaf);
    }
    let (row, stored) = publish(store, key, &head.origin, tenant, &head.edge).await?;
    head.checkpoint = row.clone();
    store.log_heads().put(tenant, head);
    Ok(Some((row, stored)))
}

/// The slow path: the edge at the current size read from the stored tiles, and the newest stored
/// checkpoint when it is of that size, else a new one; both kept for the fast path.
async fn reseed(store: &Store, key: &Signer, tenant: &str, name: String) -> Result<(CheckpointRow, bool), ApiError> {
    let size = stored::head_seq(store, tenant).await?;
    let edge = tree::edge(store, tenant, size).await?;
    let (row, stored) = match checkpoints::page(store, tenant, None, 1).await?.pop() {
        Some(newest) if newest.size == size => (newest, false),
        _ => publish(store, key, &name, tenant, &edge).await?,
    };
    store.log_heads().put(tenant, KeptHead { origin: name, edge, checkpoint: row.clone() });
    Ok((row, stored))
}

/// Signs the checkpoint of `edge` and stores it (or takes the one another process stored at
/// that size first); true when this call stored it.
async fn publish(
    store: &Store,
    key: &Signer,
    name: &str,
    tenant: &str,
    edge: &Edge,
) -> Result<(CheckpointRow, bool), ApiError> {
    let root = edge.root();
    let note = sign(&body(name, edge.size(), &root)?, name, key)?;
    let row = CheckpointRow {
        size: edge.size(),
        root: hex::encode(root),
        note,
        key_id: key.key_id.clone(),
        created_at: crate::store::now_ts(),
    };
    Ok(checkpoints::publish(store, tenant, row).await?)
}

/// Opens a signed checkpoint with the first of `keys` (raw Ed25519 public keys) that signed it
/// under the note's own origin: the checkpoint, or what did not hold.
pub fn open(note: &str, keys: &[[u8; 32]]) -> Result<tlog_tiles::checkpoint::Checkpoint, String> {
    let parsed = signed_note::Note::from_bytes(note.as_bytes()).map_err(|e| format!("not a signed note: {e}"))?;
    let c = tlog_tiles::checkpoint::Checkpoint::from_bytes(parsed.text()).map_err(|e| format!("{e}"))?;
    for k in keys {
        let Ok(v) = signed_note::StandardVerifier::new(&verifier_key(c.origin(), k)) else { continue };
        if parsed.verify(&signed_note::VerifierList::new(vec![Box::new(v)])).is_ok() {
            return Ok(c);
        }
    }
    Err(format!("no listed key signed the checkpoint of `{}`", c.origin()))
}

/// The checkpoint as served: the log's note followed by the witnesses' kept cosignature lines.
pub async fn served(store: &Store, tenant: &str, c: &CheckpointRow) -> Result<String, ApiError> {
    with_cosignatures(store, tenant, c.note.clone(), c.size).await
}

/// `note` (the checkpoint of `size`) followed by the witnesses' kept cosignature lines.
pub async fn with_cosignatures(store: &Store, tenant: &str, mut note: String, size: u64) -> Result<String, ApiError> {
    for line in checkpoints::cosignatures(store, tenant, size).await? {
        note.push_str(&line);
        note.push('\n');
    }
    Ok(note)
}
