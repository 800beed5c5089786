//! The registered signing keys, decoded once per walk and shared by the walk and its memo.

use std::collections::HashMap;

use ed25519_dalek::{Signature, Verifier, VerifyingKey};

use crate::receipts::signer::{self, RegisteredKey};

/// Public keys by key id, decoded once per walk.
#[derive(Default)]
pub struct KeyRing {
    keys: HashMap<String, VerifyingKey>,
}

impl KeyRing {
    pub fn new(registry: &[RegisteredKey]) -> KeyRing {
        let keys = registry
            .iter()
            .filter_map(|k| {
                let raw = signer::public_bytes(k)?;
                Some((k.key_id.clone(), VerifyingKey::from_bytes(&raw).ok()?))
            })
            .collect();
        KeyRing { keys }
    }

    /// The raw public key a key id names.
    pub fn public_bytes(&self, key_id: &str) -> Option<[u8; 32]> {
        self.keys.get(key_id).map(|k| k.to_bytes())
    }

    pub fn verify(&self, key_id: &str, message: &[u8], signature_b64: &str) -> bool {
        use base64::Engine;
        let Some(key) = self.keys.get(key_id) else { return false };
        let Ok(raw) = base64::engine::general_purpose::STANDARD.decode(signature_b64) else { return false };
        let Ok(sig) = Signature::from_slice(&raw) else { return false };
        key.verify(message, &sig).is_ok()
    }

    /// True only if every `(keyId, message, signature)` verifies; false also for an unknown
    /// key or a malformed signature (the caller then checks them one by one).
    pub fn verify_batch<'a>(&self, items: impl Iterator<Item = (&'a str, &'a [u8], &'a str)>) -> bool {
        use base64::Engine;
        let (mut msgs, mut sigs, mut vks) = (Vec::new(), Vec::new(), Vec::new());
        for (key_id, message, signature_b64) in items {
            let Some(key) = self.keys.get(key_id) else { return false };
            let Ok(raw) = base64::engine::general_purpose::STANDARD.decode(signature_b64) else { return false };
            let Ok(sig) = Signature::from_slice(&raw) else { return false };
            msgs.push(message);
            sigs.push(sig);
            vks.push(*key);
        }
        msgs.is_empty() || ed25519_dalek::verify_batch(&msgs, &sigs, &vks).is_ok()
    }
}
