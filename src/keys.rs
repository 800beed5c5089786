//! Virtual key secrets: `tollgate_sk_` + 43 base62 characters (~256 bits of entropy).

use sha2::{Digest, Sha256};

pub const PREFIX: &str = "tollgate_sk_";
const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
const BODY_LEN: usize = 43;

/// SHA-256 of a presented key: how keys are stored and looked up.
pub fn key_digest(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

pub struct NewSecret {
    pub secret: String,
    pub hash_hex: String,
    pub hint: String,
}

pub fn generate() -> NewSecret {
    let mut body = String::with_capacity(BODY_LEN);
    let mut buf = [0u8; 64];
    while body.len() < BODY_LEN {
        getrandom::getrandom(&mut buf).expect("the OS random source failed");
        // Rejection sampling keeps every character uniformly likely (248 = 4 * 62).
        for &b in buf.iter().filter(|&&b| b < 248) {
            if body.len() == BODY_LEN {
                break;
            }
            body.push(ALPHABET[(b % 62) as usize] as char);
        }
    }
    let secret = format!("{PREFIX}{body}");
    let hash_hex = hex::encode(key_digest(&secret));
    let hint = body[BODY_LEN - 4..].to_string();
    NewSecret { secret, hash_hex, hint }
}

/// Creates a key for a tenant and returns (secret, key id): the CLI's and the first start's
/// way in (the management API's `POST /v1/keys` takes more fields).
pub async fn issue(
    store: &crate::store::Store,
    tenant_id: &str,
    role: &str,
    label: &str,
) -> Result<(String, String), crate::store::StoreError> {
    let secret = generate();
    let new = crate::store::keys::NewKey {
        tenant_id: tenant_id.to_string(),
        key_hash: secret.hash_hex,
        key_hint: secret.hint,
        label: label.to_string(),
        key_class: "interactive".into(),
        role: role.into(),
        team_id: None,
        budget_usd: None,
    };
    let rec = crate::store::keys::insert(store, new).await?;
    Ok((secret.secret, rec.id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_and_uniqueness() {
        let a = generate();
        let b = generate();
        assert!(a.secret.starts_with(PREFIX));
        assert_eq!(a.secret.len(), PREFIX.len() + BODY_LEN);
        assert!(a.secret[PREFIX.len()..].bytes().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(a.secret, b.secret);
        assert_eq!(a.hash_hex.len(), 64);
        assert!(a.secret.ends_with(&a.hint));
    }
}
