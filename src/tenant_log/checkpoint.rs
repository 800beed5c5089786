//! Checkpoints (log.md §2): C2SP `tlog-checkpoint` bodies in C2SP `signed-note`s, signed with
//! the receipts' active Ed25519 key under the name `<origin prefix>/<tenantId>`.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use tlog_tiles::tlog::Hash;

use super::tree;
use crate::error::ApiError;
use crate::receipts::signer::{self, RegisteredKey, Signer};
use crate::store::checkpoints::{self, CheckpointRow};
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

/// The checkpoint at the tenant's current size, published (signed and stored) when the log
/// grew since the newest one. It covers every receipt committed before the call, and so every
/// receipt whose answer was sent (receipts.commit: before_answer).
pub async fn current(store: &Store, key: &Signer, prefix: &str, tenant: &str) -> Result<CheckpointRow, ApiError> {
    let size = stored::head_seq(store, tenant).await?;
    if let Some(newest) = checkpoints::page(store, tenant, None, 1).await?.pop() {
        if newest.size == size {
            return Ok(newest);
        }
    }
    let root = tree::root(store, tenant, size).await?;
    let name = origin(prefix, tenant);
    let note = sign(&body(&name, size, &root)?, &name, key)?;
    let row = CheckpointRow {
        size,
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
