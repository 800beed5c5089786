//! A Google service-account key file with a fresh RSA key, for the Vertex tests: the file as
//! Google issues it (PKCS#8 PEM, `token_uri` pointing where the test says), and the public key
//! a stand-in token endpoint verifies the gateway's grants with.

use aws_lc_rs::encoding::AsDer;
use aws_lc_rs::signature::KeyPair as _;
use base64::Engine;
use serde_json::{json, Value};

pub const CLIENT_EMAIL: &str = "gateway@tollgate-test.iam.gserviceaccount.com";
pub const PRIVATE_KEY_ID: &str = "4f6c0a1b2c3d4e5f";

pub struct ServiceAccountKey {
    /// The key file, ready to be sent as `service_account_json` (after `to_string`).
    pub file: Value,
    /// The public key as PKCS#1 `RSAPublicKey` DER (jsonwebtoken's `DecodingKey::from_rsa_der`).
    pub public_der: Vec<u8>,
}

pub fn service_account(token_uri: &str) -> ServiceAccountKey {
    let pair = aws_lc_rs::rsa::KeyPair::generate(aws_lc_rs::rsa::KeySize::Rsa2048).unwrap();
    let der = pair.as_der().unwrap();
    let b64 = base64::engine::general_purpose::STANDARD.encode(der.as_ref());
    let lines: Vec<&str> = b64.as_bytes().chunks(64).map(|c| std::str::from_utf8(c).unwrap()).collect();
    let pem = format!("-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n", lines.join("\n"));
    let file = json!({
        "type": "service_account",
        "project_id": "tollgate-test",
        "private_key_id": PRIVATE_KEY_ID,
        "private_key": pem,
        "client_email": CLIENT_EMAIL,
        "client_id": "1234567890",
        "token_uri": token_uri,
    });
    ServiceAccountKey { file, public_der: pair.public_key().as_ref().to_vec() }
}
