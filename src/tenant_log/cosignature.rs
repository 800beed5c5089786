//! C2SP `tlog-cosignature/v1`: a witness's Ed25519 cosignature of a checkpoint (log.md §5).
//!
//! Message: `cosignature/v1\ntime <unix seconds>\n` followed by the checkpoint's note body.
//! Signature line: `— <witness name> <base64(key hash (4) || timestamp (8, big-endian) || sig (64))>`,
//! key hash = the first 4 bytes of `SHA-256(name || 0x0A || 0x04 || public key)`. Verifier key:
//! `<name>+<key hash, 8 hex>+<base64(0x04 || public key)>`.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};

/// Signature type of a cosignature (C2SP tlog-cosignature).
pub const COSIGNATURE_V1: u8 = 0x04;

/// A witness's cosigning key, from its verifier key.
#[derive(Debug, Clone)]
pub struct CosignatureKey {
    pub name: String,
    key_hash: u32,
    key: VerifyingKey,
}

impl CosignatureKey {
    /// Parses `<name>+<8 hex>+<base64(0x04 || 32-byte key)>`, checking the key hash.
    pub fn parse(vkey: &str) -> Result<CosignatureKey, String> {
        let bad = |why: &str| format!("witness verifier key `{vkey}`: {why}");
        let mut parts = vkey.rsplitn(3, '+');
        let (Some(b64), Some(hash), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(bad("expected <name>+<key hash>+<base64 key>"));
        };
        let raw = B64.decode(b64).map_err(|_| bad("the key is not base64"))?;
        let (Some(&COSIGNATURE_V1), Ok(key)) = (raw.first(), <[u8; 32]>::try_from(&raw[1.min(raw.len())..])) else {
            return Err(bad("expected type 0x04 (tlog-cosignature/v1) and a 32-byte Ed25519 key"));
        };
        let key_hash = signed_note::key_id(name, &raw);
        if name.is_empty() || u32::from_str_radix(hash, 16) != Ok(key_hash) || hash.len() != 8 {
            return Err(bad("the key hash does not match the name and key"));
        }
        let key = VerifyingKey::from_bytes(&key).map_err(|_| bad("not an Ed25519 public key"))?;
        Ok(CosignatureKey { name: name.to_string(), key_hash, key })
    }

    /// The verifier key string for `name` and `key` (the inverse of [`CosignatureKey::parse`]).
    pub fn verifier_key(name: &str, key: &VerifyingKey) -> String {
        let raw = [&[COSIGNATURE_V1][..], key.as_bytes()].concat();
        format!("{name}+{:08x}+{}", signed_note::key_id(name, &raw), B64.encode(&raw))
    }

    /// The timestamp of `line` when it is this witness's valid cosignature of `body`.
    pub fn verify(&self, body: &[u8], line: &str) -> Option<u64> {
        let rest = line.strip_prefix("— ")?;
        let (name, b64) = rest.split_once(' ')?;
        let blob = B64.decode(b64.trim_end()).ok()?;
        if name != self.name || blob.len() != 4 + 8 + 64 || blob[..4] != self.key_hash.to_be_bytes() {
            return None;
        }
        let time = u64::from_be_bytes(blob[4..12].try_into().ok()?);
        let sig = Signature::from_slice(&blob[12..]).ok()?;
        self.key.verify(&message(time, body), &sig).ok().map(|()| time)
    }
}

/// The bytes a cosignature signs.
pub fn message(time: u64, body: &[u8]) -> Vec<u8> {
    [format!("cosignature/v1\ntime {time}\n").as_bytes(), body].concat()
}

/// A cosignature line by `key` named `name` at `time` (witness side: tests and tools).
pub fn cosign(name: &str, key: &SigningKey, time: u64, body: &[u8]) -> String {
    let raw = [&[COSIGNATURE_V1][..], key.verifying_key().as_bytes()].concat();
    let hash = signed_note::key_id(name, &raw).to_be_bytes();
    let sig = key.sign(&message(time, body));
    let blob = [&hash[..], &time.to_be_bytes(), &sig.to_bytes()].concat();
    format!("— {name} {}", B64.encode(blob))
}
