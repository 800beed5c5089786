//! Provider secrets at rest: AES-256-GCM under a master key.
//!
//! The master key comes from `TOLLGATE_MASTER_KEY` (base64 of 32 bytes) or from a key file,
//! created with mode 0600 on first start. Each value gets a fresh 96-bit nonce; the stored text
//! is `base64(nonce || ciphertext+tag)`. The tenant and provider are bound as associated data,
//! so a sealed value copied onto another row does not open.
//!
//! The same master key also yields purpose-bound subkeys ([`MasterKey::derive_key`]), e.g. the
//! key of the verified-span memo (`compliance::memo`), so that memo cannot be forged by someone
//! who can write the database but does not hold the master key.

use std::io::Write;
use std::path::Path;

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

pub struct MasterKey {
    aead: Aes256Gcm,
    /// HMAC-SHA256 keyed with the master key: derives subkeys, never encrypts.
    kdf: Hmac<Sha256>,
}

#[derive(Debug, thiserror::Error)]
pub enum AtRestError {
    #[error("TOLLGATE_MASTER_KEY must be base64 of exactly 32 bytes")]
    BadEnvKey,
    #[error("master key file {0}: {1}")]
    File(String, String),
    #[error("a stored secret could not be decrypted (wrong master key?)")]
    Open,
}

impl MasterKey {
    pub fn from_bytes(bytes: &[u8; 32]) -> Self {
        let kdf = <Hmac<Sha256> as Mac>::new_from_slice(bytes).expect("HMAC takes a key of any length");
        MasterKey { aead: Aes256Gcm::new(bytes.into()), kdf }
    }

    /// A 32-byte subkey for one purpose: HMAC-SHA256(master, label), the HKDF-Expand step for a
    /// single output block with a uniformly random master key. Distinct labels give independent
    /// keys; none of them reveals the master key or opens a sealed value.
    pub fn derive_key(&self, label: &str) -> [u8; 32] {
        let mut mac = self.kdf.clone();
        mac.update(label.as_bytes());
        mac.update(&[1]);
        mac.finalize().into_bytes().into()
    }

    /// From the environment value if given, else from `path` (created 0600 when absent).
    pub fn load(env_value: Option<&str>, path: &Path) -> Result<Self, AtRestError> {
        if let Some(v) = env_value.filter(|v| !v.trim().is_empty()) {
            let raw = B64.decode(v.trim()).map_err(|_| AtRestError::BadEnvKey)?;
            let bytes: [u8; 32] = raw.try_into().map_err(|_| AtRestError::BadEnvKey)?;
            return Ok(Self::from_bytes(&bytes));
        }
        let err = |e: String| AtRestError::File(path.display().to_string(), e);
        match std::fs::read_to_string(path) {
            Ok(text) => {
                let raw = B64.decode(text.trim()).map_err(|_| err("not base64".into()))?;
                let bytes: [u8; 32] = raw.try_into().map_err(|_| err("not 32 bytes".into()))?;
                Ok(Self::from_bytes(&bytes))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut bytes = [0u8; 32];
                getrandom::getrandom(&mut bytes).map_err(|e| err(e.to_string()))?;
                write_private_file(path, B64.encode(bytes).as_bytes()).map_err(|e| err(e.to_string()))?;
                Ok(Self::from_bytes(&bytes))
            }
            Err(e) => Err(err(e.to_string())),
        }
    }

    pub fn encrypt(&self, plaintext: &[u8], context: &str) -> String {
        let mut nonce = [0u8; 12];
        getrandom::getrandom(&mut nonce).expect("the OS random source failed");
        let ct = self
            .aead
            .encrypt(Nonce::from_slice(&nonce), Payload { msg: plaintext, aad: context.as_bytes() })
            .expect("AES-GCM encryption cannot fail for in-memory buffers");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&ct);
        B64.encode(out)
    }

    pub fn decrypt(&self, sealed: &str, context: &str) -> Result<Vec<u8>, AtRestError> {
        let raw = B64.decode(sealed).map_err(|_| AtRestError::Open)?;
        if raw.len() < 12 + 16 {
            return Err(AtRestError::Open);
        }
        let (nonce, ct) = raw.split_at(12);
        self.aead
            .decrypt(Nonce::from_slice(nonce), Payload { msg: ct, aad: context.as_bytes() })
            .map_err(|_| AtRestError::Open)
    }
}

/// Creates a file readable by its owner only (0600) and writes `data` to it.
pub fn write_private_file(path: &Path, data: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir)?;
        }
    }
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(path)?;
    f.write_all(data)?;
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_binding() {
        let k = MasterKey::from_bytes(&[7u8; 32]);
        let s = k.encrypt(b"{\"api_key\":\"sk-x\"}", "t1/openai");
        assert!(!s.contains("sk-x"));
        assert_eq!(k.decrypt(&s, "t1/openai").unwrap(), b"{\"api_key\":\"sk-x\"}");
        assert!(k.decrypt(&s, "t2/openai").is_err(), "bound to its row");
        assert!(MasterKey::from_bytes(&[8u8; 32]).decrypt(&s, "t1/openai").is_err());
        assert_ne!(s, k.encrypt(b"{\"api_key\":\"sk-x\"}", "t1/openai"), "fresh nonce each time");
    }

    #[test]
    fn subkeys_are_bound_to_their_label_and_master() {
        let k = MasterKey::from_bytes(&[7u8; 32]);
        let a = k.derive_key("tollgate verified-span memo v1");
        assert_eq!(a, MasterKey::from_bytes(&[7u8; 32]).derive_key("tollgate verified-span memo v1"));
        assert_ne!(a, k.derive_key("another purpose"));
        assert_ne!(a, MasterKey::from_bytes(&[8u8; 32]).derive_key("tollgate verified-span memo v1"));
        assert_ne!(a, [7u8; 32]);
    }

    #[test]
    fn key_file_is_created_private_and_reused() {
        let dir = std::env::temp_dir().join(format!("tg-mk-{}", uuid::Uuid::new_v4()));
        let path = dir.join("master.key");
        let a = MasterKey::load(None, &path).unwrap();
        let sealed = a.encrypt(b"x", "c");
        let b = MasterKey::load(None, &path).unwrap();
        assert_eq!(b.decrypt(&sealed, "c").unwrap(), b"x");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }
        assert!(matches!(MasterKey::load(Some("short"), &path), Err(AtRestError::BadEnvKey)));
        std::fs::remove_dir_all(dir).ok();
    }
}
