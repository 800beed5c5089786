//! The signing key (a 0600 file holding the base64 Ed25519 seed, created on first start) and
//! the signing-key registry in the database, which keeps retired keys so old receipts verify.

use std::path::{Path, PathBuf};

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use ed25519_dalek::SigningKey;
use serde::Serialize;
use sqlx::Row;
use zeroize::Zeroizing;

use super::canonical::{self, hash_only, Receipt, Sealed};
use crate::store::{now_ts, Store, StoreError};

pub struct Signer {
    /// Signs through AWS-LC's `ED25519_sign` ([`Signer::sign`]). Ed25519 signatures are
    /// deterministic (RFC 8032), so both give the same bytes (a unit test holds them equal);
    /// AWS-LC's assembly base-point multiplication signs in well under half of dalek's time on
    /// x86-64, and signing is the receipt writer's largest cost. dalek keeps verification (batch
    /// verification for walks).
    key: SigningKey,
    pub key_id: String,
    pub public_b64: String,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Signer {{ key_id: {} }}", self.key_id)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SignerError {
    #[error("signing key file {0}: {1}")]
    File(String, String),
}

impl Signer {
    pub fn from_seed(seed: &[u8; 32]) -> Signer {
        let key = SigningKey::from_bytes(seed);
        let vk = key.verifying_key();
        Signer { key_id: canonical::key_id(&vk), public_b64: B64.encode(vk.as_bytes()), key }
    }

    /// Reads the key file, or creates it (mode 0600) with a fresh key when it does not exist.
    pub fn load_or_create(path: &Path) -> Result<Signer, SignerError> {
        let err = |e: String| SignerError::File(path.display().to_string(), e);
        match std::fs::read_to_string(path) {
            Ok(text) => {
                let raw = B64.decode(text.trim()).map_err(|_| err("not base64".into()))?;
                let seed: [u8; 32] = raw.try_into().map_err(|_| err("not a 32-byte Ed25519 seed".into()))?;
                Ok(Signer::from_seed(&seed))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut seed = [0u8; 32];
                getrandom::getrandom(&mut seed).map_err(|e| err(e.to_string()))?;
                crate::secrets::at_rest::write_private_file(path, B64.encode(seed).as_bytes())
                    .map_err(|e| err(e.to_string()))?;
                Ok(Signer::from_seed(&seed))
            }
            Err(e) => Err(err(e.to_string())),
        }
    }

    pub fn signing_key(&self) -> &SigningKey {
        &self.key
    }

    /// The raw 64-byte Ed25519 signature of `message`.
    pub fn sign(&self, message: &[u8]) -> [u8; 64] {
        // AWS-LC's private key form: seed, then public key (a 64-byte copy, wiped after). Called
        // directly rather than through aws-lc-rs's `Ed25519KeyPair::sign`, whose EVP context is
        // allocated and freed per call (~1 µs a receipt on session 28's VM, ~4 % of the writer).
        let private = Zeroizing::new(self.key.to_keypair_bytes());
        let mut out = [0u8; 64];
        // SAFETY: `out` is the 64 bytes ED25519_sign writes, `message` is read for its length,
        // `private` is the 64 bytes it reads. It fails only on an allocation failure, which it
        // does not make (no EVP context on this path).
        let ok =
            unsafe { aws_lc_sys::ED25519_sign(out.as_mut_ptr(), message.as_ptr(), message.len(), private.as_ptr()) };
        assert_eq!(ok, 1, "ED25519_sign failed");
        out
    }

    /// Replaces the key file with a new key; the old file is kept beside it as
    /// `<name>.<keyId>.retired`. Returns (old, new).
    pub fn rotate_file(path: &Path) -> Result<(Signer, Signer), SignerError> {
        let old = Signer::load_or_create(path)?;
        let retired = PathBuf::from(format!("{}.{}.retired", path.display(), old.key_id));
        std::fs::rename(path, &retired).map_err(|e| SignerError::File(path.display().to_string(), e.to_string()))?;
        let new = Signer::load_or_create(path)?;
        Ok((old, new))
    }
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegisteredKey {
    pub key_id: String,
    pub algorithm: String,
    pub public_key: String,
    pub created_at: String,
    pub retired_at: Option<String>,
}

/// Adds the key to the registry if it is not there yet.
pub async fn register(store: &Store, signer: &Signer) -> Result<(), StoreError> {
    let (id, public) = (signer.key_id.clone(), signer.public_b64.clone());
    store
        .run(|pool, _| async move {
            sqlx::query(
                "INSERT INTO signing_keys (key_id, algorithm, public_key, created_at) VALUES ($1, 'ed25519', $2, $3) \
                 ON CONFLICT (key_id) DO NOTHING",
            )
            .bind(id)
            .bind(public)
            .bind(now_ts())
            .execute(&pool)
            .await?;
            Ok(())
        })
        .await
}

pub async fn retire(store: &Store, key_id: &str) -> Result<(), StoreError> {
    let id = key_id.to_string();
    store
        .run(|pool, _| async move {
            sqlx::query("UPDATE signing_keys SET retired_at = $1 WHERE key_id = $2 AND retired_at IS NULL")
                .bind(now_ts())
                .bind(id)
                .execute(&pool)
                .await?;
            Ok(())
        })
        .await
}

pub async fn registry(store: &Store) -> Result<Vec<RegisteredKey>, StoreError> {
    store
        .run(|pool, _| async move {
            let rows = sqlx::query(
                "SELECT key_id, algorithm, public_key, created_at, retired_at FROM signing_keys ORDER BY created_at, key_id",
            )
            .fetch_all(&pool)
            .await?;
            rows.iter()
                .map(|r| {
                    Ok(RegisteredKey {
                        key_id: r.try_get("key_id")?,
                        algorithm: r.try_get("algorithm")?,
                        public_key: r.try_get("public_key")?,
                        created_at: r.try_get("created_at")?,
                        retired_at: r.try_get("retired_at")?,
                    })
                })
                .collect::<Result<Vec<_>, sqlx::Error>>()
                .map_err(StoreError::from)
        })
        .await
}

/// The raw public key of a registered key id.
pub fn public_bytes(k: &RegisteredKey) -> Option<[u8; 32]> {
    B64.decode(&k.public_key).ok()?.try_into().ok()
}

/// Hashes and signs `receipt` (its chain fields set).
pub fn seal(receipt: Receipt, key: &Signer) -> Sealed {
    let mut s = hash_only(receipt);
    sign(&mut s, key);
    s
}

/// Signs a hashed receipt.
pub fn sign(s: &mut Sealed, key: &Signer) {
    s.signature = B64.encode(key.sign(&s.canonical));
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::Signer as _;

    /// The signing implementation may change, the signature bytes may not: AWS-LC must give
    /// exactly dalek's (RFC 8032) signature for any key and message.
    #[test]
    fn aws_lc_signs_exactly_as_dalek() {
        for i in 0u8..32 {
            let seed = [i.wrapping_mul(37).wrapping_add(1); 32];
            let signer = Signer::from_seed(&seed);
            let message: Vec<u8> = (0..(i as usize * 41)).map(|j| (j as u8) ^ i).collect();
            assert_eq!(signer.sign(&message), signer.signing_key().sign(&message).to_bytes(), "seed {i}");
        }
    }
}
