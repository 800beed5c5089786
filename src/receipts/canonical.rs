//! The signed canonical receipt and its bytes, hash, signature and key id, exactly as
//! `docs/receipts.md` §1 says: JCS (RFC 8785) → SHA-256 → Ed25519.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use ed25519_dalek::{Verifier, VerifyingKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// `prevHash` of `seq = 1`.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

pub use super::vocabulary::Check;
use super::vocabulary::{Term, UpstreamStatus};

/// Exactly the signed members; nothing else may be added without a format version change.
///
/// Not `deny_unknown_fields`: API answers flatten it beside unsigned members (`thisHash`,
/// `signature`, `kind`…), and the `additionalProperties: false` that serde attribute puts in
/// its OpenAPI schema made every such answer invalid against its own document (schemathesis).
/// What is signed is what this type serializes, whatever a parsed input carried besides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Receipt {
    pub v: u32,
    pub tenant_id: String,
    pub seq: u64,
    pub receipt_id: String,
    pub request_id: String,
    pub actor: String,
    pub provider: String,
    pub model: String,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cost_usd: f64,
    pub checks: Vec<Check>,
    #[schema(value_type = UpstreamStatus)]
    pub upstream_status: Term<UpstreamStatus>,
    pub ts: String,
    pub prev_hash: String,
    /// Only on receipts of kind `admin` (docs/receipts.md §1): the resource acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
}

pub fn canonical_bytes<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json_canonicalizer::to_vec(value).expect("receipt members are plain JSON values")
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// `lowercase_hex(SHA-256(raw 32-byte public key))[0:16]`.
pub fn key_id(public: &VerifyingKey) -> String {
    sha256_hex(public.as_bytes())[..16].to_string()
}

/// A receipt with its chain hash and signature.
#[derive(Debug, Clone)]
pub struct Sealed {
    pub receipt: Receipt,
    pub canonical: Vec<u8>,
    pub this_hash: String,
    pub signature: String,
}

/// The signed members, borrowed: what the JCS writer reads. The receipt writer builds one
/// straight from a queued draft (no owned `Receipt` per row); stored receipts lend theirs.
#[derive(Debug, Clone, Copy)]
pub struct ReceiptView<'a> {
    pub v: u32,
    pub tenant_id: &'a str,
    pub seq: u64,
    pub receipt_id: &'a str,
    pub request_id: &'a str,
    pub actor: &'a str,
    pub provider: &'a str,
    pub model: &'a str,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cost_usd: f64,
    pub checks: &'a [Check],
    pub upstream_status: &'a str,
    pub ts: &'a str,
    pub prev_hash: &'a str,
    pub subject: Option<&'a str>,
}

impl Receipt {
    pub fn view(&self) -> ReceiptView<'_> {
        ReceiptView {
            v: self.v,
            tenant_id: &self.tenant_id,
            seq: self.seq,
            receipt_id: &self.receipt_id,
            request_id: &self.request_id,
            actor: &self.actor,
            provider: &self.provider,
            model: &self.model,
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
            cost_usd: self.cost_usd,
            checks: &self.checks,
            upstream_status: self.upstream_status.as_str(),
            ts: &self.ts,
            prev_hash: &self.prev_hash,
            subject: self.subject.as_deref(),
        }
    }
}

/// JCS of a receipt (see [`write_receipt`]).
pub fn receipt_bytes(r: &Receipt) -> Vec<u8> {
    let mut out = Vec::with_capacity(512 + r.checks.len() * 40);
    write_receipt(&r.view(), &mut out);
    out
}

/// Appends the JCS of a receipt to `out`, written directly: the members are fixed and
/// ASCII-named, so their sorted order is known, and serde_json's string escaping is exactly
/// RFC 8785's (short escapes for `\b \f \n \r \t`, lowercase `\u00xx` for other controls,
/// nothing else escaped). Only `costUsd` needs ECMAScript number formatting. A unit test holds
/// it equal to the generic path.
pub fn write_receipt(r: &ReceiptView<'_>, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"actor\":");
    string(out, r.actor);
    member(out, "checks");
    write_checks(out, r.checks);
    member(out, "completionTokens");
    number(out, r.completion_tokens);
    member(out, "costUsd");
    out.extend_from_slice(&canonical_bytes(&r.cost_usd));
    member(out, "model");
    string(out, r.model);
    member(out, "prevHash");
    string(out, r.prev_hash);
    member(out, "promptTokens");
    number(out, r.prompt_tokens);
    member(out, "provider");
    string(out, r.provider);
    member(out, "receiptId");
    string(out, r.receipt_id);
    member(out, "requestId");
    string(out, r.request_id);
    member(out, "seq");
    number(out, r.seq);
    if let Some(subject) = r.subject {
        member(out, "subject");
        string(out, subject);
    }
    member(out, "tenantId");
    string(out, r.tenant_id);
    member(out, "ts");
    string(out, r.ts);
    member(out, "upstreamStatus");
    string(out, r.upstream_status);
    member(out, "v");
    number(out, u64::from(r.v));
    out.push(b'}');
}

/// The `checks` array: `{name, result}` objects, members in sorted order.
fn write_checks(out: &mut Vec<u8>, checks: &[Check]) {
    out.push(b'[');
    for (i, c) in checks.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"name\":");
        string(out, c.name.as_str());
        out.extend_from_slice(b",\"result\":");
        string(out, c.result.as_str());
        out.push(b'}');
    }
    out.push(b']');
}

/// A JSON string as RFC 8785 writes it.
fn string(out: &mut Vec<u8>, s: &str) {
    // Most values need no escaping (RFC 8785 escapes only `"`, `\\` and controls): copy them.
    // A fold, not `all`: without the early exit the compiler checks 16 bytes at a time (ten of a
    // receipt's strings 88 → 47 ns, session 51; ~25 strings a receipt, written by the writer and
    // again by the applier).
    if !s.bytes().fold(false, |escape, b| escape | (b < 0x20) | (b == b'"') | (b == b'\\')) {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
        return;
    }
    serde_json::to_writer(&mut *out, s).expect("writing to a Vec cannot fail");
}

/// `,"name":` before a member that is not the first.
fn member(out: &mut Vec<u8>, name: &str) {
    out.extend_from_slice(b",\"");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\":");
}

fn number(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// The chain step: canonical bytes and `thisHash` (cheap, and sequential by nature).
pub fn hash_only(receipt: Receipt) -> Sealed {
    let canonical = receipt_bytes(&receipt);
    let this_hash = sha256_hex(&canonical);
    Sealed { receipt, canonical, this_hash, signature: String::new() }
}

/// Checks `signature` (base64) over `canonical` with `public` (raw 32 bytes).
pub fn verify_signature(canonical: &[u8], signature_b64: &str, public: &[u8; 32]) -> bool {
    let Ok(vk) = VerifyingKey::from_bytes(public) else { return false };
    let Ok(raw) = B64.decode(signature_b64) else { return false };
    let Ok(sig) = ed25519_dalek::Signature::from_slice(&raw) else { return false };
    vk.verify(canonical, &sig).is_ok()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::receipts::signer::seal;
    use serde_json::json;

    /// The copy of strings that need no escaping against serde_json's writer (RFC 8785's
    /// strings are JSON's): every ASCII byte, alone and at each place of longer strings, and
    /// strings with non-ASCII letters.
    #[test]
    fn strings_are_written_as_serde_json_writes_them() {
        let mut cases: Vec<String> = vec!["".into(), "é😀".into(), "a\u{7f}b".into(), "\u{2028}".into()];
        for b in 0..0x80u8 {
            for len in [1, 15, 16, 17, 40] {
                for at in [0, len / 2, len - 1] {
                    let mut v = vec![b'x'; len];
                    v[at] = b;
                    cases.push(String::from_utf8(v).unwrap());
                }
            }
        }
        for s in cases {
            let (mut ours, mut theirs) = (Vec::new(), Vec::new());
            string(&mut ours, &s);
            serde_json::to_writer(&mut theirs, &s).unwrap();
            assert_eq!(ours, theirs, "{s:?}");
        }
    }

    /// RFC 8785 §3.2.2 and Appendix B number vectors (IEEE-754 → ECMAScript text).
    #[test]
    fn rfc8785_vectors() {
        let input: serde_json::Value = serde_json::from_str(
            r#"{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
                "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
                "literals": [null, true, false]}"#,
        )
        .unwrap();
        let out = String::from_utf8(canonical_bytes(&input)).unwrap();
        assert_eq!(
            out,
            "{\"literals\":[null,true,false],\"numbers\":[333333333.3333333,1e+30,4.5,0.002,1e-27],\
             \"string\":\"€$\\u000f\\nA'B\\\"\\\\\\\\\\\"/\"}"
        );
        // Property sorting by UTF-16 code units (RFC 8785 §3.2.3): U+20AC < U+D83D (the emoji's
        // high surrogate) < U+FB33, although the emoji's code point is the largest.
        let sorted = canonical_bytes(&json!({"\u{20ac}": "Euro Sign", "\r": "Carriage Return", "1": "One",
            "\u{1f600}": "Emoji: Grinning Face", "\u{80}": "Control", "\u{fb33}": "Hebrew Letter Dalet With Dagesh"}));
        assert_eq!(
            String::from_utf8(sorted).unwrap(),
            "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\",\"\u{20ac}\":\"Euro Sign\",\
             \"\u{1f600}\":\"Emoji: Grinning Face\",\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}"
        );
        for (f, text) in
            [(1e21, "1e+21"), (1e20, "100000000000000000000"), (5.85e-6, "0.00000585"), (1e-7, "1e-7"), (0.0, "0")]
        {
            assert_eq!(String::from_utf8(canonical_bytes(&f)).unwrap(), text);
        }
    }

    /// The golden test's receipt (`receipts::seal`'s tests seal a draft of it, too).
    pub(crate) fn golden_receipt() -> Receipt {
        Receipt {
            v: 1,
            tenant_id: "01a204c8-0000-7000-8000-00000000beef".into(),
            seq: 1,
            receipt_id: "01a204c8-7a19-7530-9164-6478a4aeb252".into(),
            request_id: "req-1".into(),
            actor: "01a204c8-7a19-7530-9164-000000000001".into(),
            provider: "openai".into(),
            model: "gpt-4o-mini".into(),
            prompt_tokens: 11,
            completion_tokens: 7,
            cost_usd: 5.85e-6,
            checks: vec![Check { name: "UPSTREAM".into(), result: "PASS".into() }],
            upstream_status: "ok".into(),
            ts: "2026-11-22 19:42:57.049".into(),
            prev_hash: GENESIS.into(),
            subject: None,
        }
    }

    #[test]
    fn the_direct_writer_equals_the_generic_jcs() {
        let mut r = golden_receipt();
        assert_eq!(receipt_bytes(&r), canonical_bytes(&r));
        r.actor = "k/\u{1}\u{8}\t\n\u{c}\r\u{1f}\u{7f}\"\\/é€😀\u{2028}".into();
        r.model = String::new();
        r.checks.push(Check { name: "GUARDRAIL".into(), result: "REDACT".into() });
        r.checks.push(Check { name: "ünïcödé".into(), result: "\u{0}".into() });
        for cost in [0.0, 1e-7, 5.85e-6, 0.1 + 0.2, 123456789.125, 1e21, 9007199254740991.0] {
            r.cost_usd = cost;
            r.seq = 9_007_199_254_740_991;
            r.prompt_tokens = u32::MAX as u64;
            assert_eq!(String::from_utf8(receipt_bytes(&r)).unwrap(), String::from_utf8(canonical_bytes(&r)).unwrap());
        }
        r.checks.clear();
        assert_eq!(receipt_bytes(&r), canonical_bytes(&r));
        for subject in ["", "01a204c8-7a19-7530-9164-6478a4aeb252", "1-42", "\u{1}\"é"] {
            r.subject = Some(subject.into());
            assert_eq!(receipt_bytes(&r), canonical_bytes(&r));
        }
    }

    /// Fixed key and fields → fixed bytes, hash and signature. The expected values were
    /// computed independently (Python hashlib and `cryptography`'s Ed25519), so the format
    /// cannot drift without this test failing.
    #[test]
    fn golden_receipt_bytes_hash_signature() {
        let signer = crate::receipts::signer::Signer::from_seed(&[7u8; 32]);
        let key = signer.signing_key();
        let sealed = seal(golden_receipt(), &signer);
        assert_eq!(
            String::from_utf8(sealed.canonical.clone()).unwrap(),
            concat!(
                r#"{"actor":"01a204c8-7a19-7530-9164-000000000001","checks":[{"name":"UPSTREAM","result":"PASS"}],"#,
                r#""completionTokens":7,"costUsd":0.00000585,"model":"gpt-4o-mini","#,
                r#""prevHash":"0000000000000000000000000000000000000000000000000000000000000000","promptTokens":11,"#,
                r#""provider":"openai","receiptId":"01a204c8-7a19-7530-9164-6478a4aeb252","requestId":"req-1","seq":1,"#,
                r#""tenantId":"01a204c8-0000-7000-8000-00000000beef","ts":"2026-11-22 19:42:57.049","upstreamStatus":"ok","v":1}"#
            )
        );
        assert_eq!(sealed.this_hash, "8b98b84d393561ee9dbffc51bc09188e41345a27834f197ff474cb73e0619a0d");
        assert_eq!(
            sealed.signature,
            "osxsnkfs+f2CvS6WsQCt9enaZF37mRBET9noelLzJatUYR8ggs8m8g7Mcp+lsWNxbsUm92DDZBum+nwm1oBNDQ=="
        );
        assert_eq!(key_id(&key.verifying_key()), "fe812c12f3ab4ce6");
        let public = key.verifying_key().to_bytes();
        assert!(verify_signature(&sealed.canonical, &sealed.signature, &public));
        let mut tampered = sealed.canonical.clone();
        tampered[10] ^= 1;
        assert!(!verify_signature(&tampered, &sealed.signature, &public));
    }
}
