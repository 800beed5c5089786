//! RFC 3161 timestamps of checkpoints (docs/log.md §6): the `TimeStampReq` for a note body,
//! and the checks a `TimeStampResp` must pass before it is kept or believed — status granted,
//! message imprint = SHA-256 of the body, our nonce, and, with trusted roots, the CMS signature
//! by a certificate whose path reaches a root with the timeStamping extended key usage at the
//! token's genTime. The messages are RustCrypto's (`x509-tsp`, `cms`); paths and signatures
//! are rustls-webpki's.

use cms::cert::x509::ext::pkix::name::GeneralName;
use cms::cert::x509::ext::Extensions;
use cms::cert::x509::spki::AlgorithmIdentifierOwned;
use cms::cert::x509::Certificate;
use cms::cert::CertificateChoices;
use cms::signed_data::{SignedData, SignerIdentifier, SignerInfo};
use der::asn1::{Any, Int, ObjectIdentifier as Oid, OctetString};
use der::{Decode, Encode, Sequence, Tag, Tagged};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, UnixTime};
use sha2::{Digest, Sha256};
use x509_tsp::{Accuracy, MessageImprint, TimeStampReq, TimeStampResp, TspVersion};

const SHA1: Oid = Oid::new_unwrap("1.3.14.3.2.26");
const SHA256: Oid = Oid::new_unwrap("2.16.840.1.101.3.4.2.1");
const SHA384: Oid = Oid::new_unwrap("2.16.840.1.101.3.4.2.2");
const SHA512: Oid = Oid::new_unwrap("2.16.840.1.101.3.4.2.3");
const SIGNED_DATA: Oid = Oid::new_unwrap("1.2.840.113549.1.7.2");
const TST_INFO: Oid = Oid::new_unwrap("1.2.840.113549.1.9.16.1.4");
const CONTENT_TYPE: Oid = Oid::new_unwrap("1.2.840.113549.1.9.3");
const MESSAGE_DIGEST: Oid = Oid::new_unwrap("1.2.840.113549.1.9.4");
const SIGNING_CERT: Oid = Oid::new_unwrap("1.2.840.113549.1.9.16.2.12");
const SIGNING_CERT_V2: Oid = Oid::new_unwrap("1.2.840.113549.1.9.16.2.47");
const SUBJECT_KEY_ID: Oid = Oid::new_unwrap("2.5.29.14");
/// id-kp-timeStamping (1.3.6.1.5.5.7.3.8), the OID's DER value bytes.
const TIME_STAMPING: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x08];

/// A request ready to post, and the nonce its answer must carry.
pub struct Request {
    pub der: Vec<u8>,
    pub nonce: Vec<u8>,
}

/// The `TimeStampReq` for `body`: SHA-256 imprint, a random 62-bit nonce, certReq = true (the
/// answer then carries the TSA's certificate, which a verifier needs).
pub fn request(body: &[u8]) -> Request {
    let mut nonce = vec![0u8; 8];
    getrandom::getrandom(&mut nonce).expect("the OS random source failed");
    // Positive and minimally encoded: top bit clear, first byte never zero.
    nonce[0] = (nonce[0] & 0x7f) | 0x40;
    let req = TimeStampReq {
        version: TspVersion::V1,
        message_imprint: MessageImprint {
            hash_algorithm: AlgorithmIdentifierOwned { oid: SHA256, parameters: Some(Any::null()) },
            hashed_message: OctetString::new(Sha256::digest(body).to_vec()).expect("32 bytes"),
        },
        req_policy: None,
        nonce: Some(Int::new(&nonce).expect("a minimal positive integer")),
        cert_req: true,
        extensions: None,
    };
    Request { der: req.to_der().expect("a TimeStampReq encodes"), nonce }
}

/// What a checked token says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp {
    /// genTime as RFC 3339 UTC, with the fraction of a second the TSA gave.
    pub gen_time: String,
    pub serial: String,
    /// The certificate chain was checked against trusted roots.
    pub chain_checked: bool,
}

/// Why an answer is not kept; `reason` is the metric label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    pub reason: &'static str,
    pub detail: String,
}

impl std::fmt::Display for Rejected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.detail, self.reason)
    }
}

fn invalid(detail: impl Into<String>) -> Rejected {
    Rejected { reason: "invalid", detail: detail.into() }
}

fn untrusted(detail: impl Into<String>) -> Rejected {
    Rejected { reason: "untrusted", detail: detail.into() }
}

/// TSTInfo (RFC 3161 §2.4.2), as `x509_tsp::TstInfo` but with genTime read here: `der`'s
/// GeneralizedTime is RFC 5280's and refuses the fractional seconds RFC 3161 allows (OpenSSL's
/// TSA writes them with `clock_precision_digits`).
#[derive(Sequence)]
#[allow(dead_code)] // decoded whole so the encoding is checked; not every member is read
struct TstInfo {
    version: TspVersion,
    policy: Oid,
    message_imprint: MessageImprint,
    serial_number: Int,
    gen_time: Any,
    #[asn1(optional = "true")]
    accuracy: Option<Accuracy>,
    #[asn1(default = "Default::default")]
    ordering: bool,
    #[asn1(optional = "true")]
    nonce: Option<Int>,
    #[asn1(context_specific = "0", tag_mode = "EXPLICIT", optional = "true")]
    tsa: Option<GeneralName>,
    #[asn1(context_specific = "1", tag_mode = "IMPLICIT", optional = "true")]
    extensions: Option<Extensions>,
}

/// Checks a `TimeStampResp` (DER, as received) against the note `body` it should stamp:
/// granted, imprint = SHA-256(body), `nonce` when given (the verifier of a stored token has
/// none), and with `roots` the signature and the signer's path. The token's genTime on success.
pub fn check(tsr: &[u8], body: &[u8], nonce: Option<&[u8]>, roots: Option<&Roots>) -> Result<Stamp, Rejected> {
    let resp = TimeStampResp::from_der(tsr).map_err(|e| invalid(format!("not a DER TimeStampResp: {e}")))?;
    granted(&resp)?;
    let token = resp.time_stamp_token.ok_or_else(|| invalid("a granted answer without a token"))?;
    if token.content_type != SIGNED_DATA {
        return Err(invalid(format!("the token is {} content, not SignedData", token.content_type)));
    }
    let sd = SignedData::from_der(&token.content.to_der().map_err(|e| invalid(e.to_string()))?)
        .map_err(|e| invalid(format!("the token's SignedData: {e}")))?;
    let content = tst_octets(&sd)?;
    let tst = TstInfo::from_der(&content).map_err(|e| invalid(format!("the token's TSTInfo: {e}")))?;
    let imprint = &tst.message_imprint;
    if imprint.hash_algorithm.oid != SHA256 || imprint.hashed_message.as_bytes() != Sha256::digest(body).as_slice() {
        return Err(invalid("the message imprint is not the SHA-256 of the checkpoint's body"));
    }
    if let Some(n) = nonce {
        if tst.nonce.as_ref().map(|v| v.as_bytes()) != Some(n) {
            return Err(invalid("the nonce is not the request's"));
        }
    }
    let (gen_time, unix) = gen_time(&tst.gen_time).ok_or_else(|| invalid("genTime is not a GeneralizedTime"))?;
    if let Some(roots) = roots {
        check_signer(&sd, &content, roots, unix)?;
    }
    Ok(Stamp { gen_time, serial: hex::encode(tst.serial_number.as_bytes()), chain_checked: roots.is_some() })
}

/// PKIStatus granted (0) or grantedWithMods (1); anything else is the TSA's refusal.
fn granted(resp: &TimeStampResp) -> Result<(), Rejected> {
    let status = resp.status.status;
    if status as u8 <= 1 {
        return Ok(());
    }
    let text: Vec<&str> = resp.status.status_string.iter().flatten().map(|s| s.as_str()).collect();
    Err(Rejected { reason: "refused", detail: format!("the TSA answered {status:?}: {}", text.join("; ")) })
}

/// The DER TSTInfo inside the SignedData's encapsulated content.
fn tst_octets(sd: &SignedData) -> Result<Vec<u8>, Rejected> {
    let encap = &sd.encap_content_info;
    if encap.econtent_type != TST_INFO {
        return Err(invalid(format!("the token encapsulates {}, not TSTInfo", encap.econtent_type)));
    }
    let octets = encap.econtent.as_ref().ok_or_else(|| invalid("the token has no TSTInfo"))?;
    let octets: OctetString = octets.decode_as().map_err(|e| invalid(format!("eContent: {e}")))?;
    Ok(octets.into_bytes())
}

/// GeneralizedTime `YYYYMMDDHHMMSS[.f…]Z` → (RFC 3339, whole Unix seconds).
fn gen_time(t: &Any) -> Option<(String, i64)> {
    if t.tag() != Tag::GeneralizedTime {
        return None;
    }
    let s = std::str::from_utf8(t.value()).ok()?.strip_suffix('Z')?;
    let (whole, fraction) = s.split_once('.').map_or((s, None), |(w, f)| (w, Some(f)));
    if whole.len() != 14 || !whole.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if fraction.is_some_and(|f| f.is_empty() || !f.bytes().all(|b| b.is_ascii_digit())) {
        return None;
    }
    let n = |r: std::ops::Range<usize>| whole[r].parse::<u32>().ok();
    let date = chrono::NaiveDate::from_ymd_opt(n(0..4)? as i32, n(4..6)?, n(6..8)?)?;
    let at = date.and_hms_opt(n(8..10)?, n(10..12)?, n(12..14)?)?.and_utc();
    let mut text = at.format("%Y-%m-%dT%H:%M:%S").to_string();
    if let Some(f) = fraction {
        text.push('.');
        text.push_str(f);
    }
    text.push('Z');
    Some((text, at.timestamp()))
}

/// Roots trusted for TSA certificates (`log.timestamping.ca_file`, `tollgate verify --tsa-ca`).
#[derive(Debug, Clone)]
pub struct Roots(Vec<CertificateDer<'static>>);

impl Roots {
    /// Every certificate of a PEM file; none is an error.
    pub fn from_pem(pem: &[u8]) -> Result<Roots, String> {
        let certs = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("not PEM certificates: {e}"))?;
        if certs.is_empty() {
            return Err("no PEM certificate in it".into());
        }
        for c in &certs {
            webpki::anchor_from_trusted_cert(c).map_err(|e| format!("a certificate that is no root: {e}"))?;
        }
        Ok(Roots(certs))
    }

    pub fn read(path: &std::path::Path) -> Result<Roots, String> {
        let pem = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Roots::from_pem(&pem).map_err(|e| format!("{}: {e}", path.display()))
    }
}

/// The one signer: its certificate in the token, whose path reaches `roots` for timeStamping at
/// genTime; signed attributes naming TSTInfo, its digest and (ESS) that certificate; and the
/// signature over them.
fn check_signer(sd: &SignedData, content: &[u8], roots: &Roots, at: i64) -> Result<(), Rejected> {
    let [si] = sd.signer_infos.0.as_slice() else {
        return Err(untrusted("a token has exactly one signer"));
    };
    let certs: Vec<&Certificate> = sd
        .certificates
        .iter()
        .flat_map(|set| set.0.iter())
        .filter_map(|c| match c {
            CertificateChoices::Certificate(c) => Some(c),
            _ => None,
        })
        .collect();
    let signer = certs
        .iter()
        .find(|c| identifies(&si.sid, c))
        .ok_or_else(|| untrusted("the token does not carry its signer's certificate"))?;
    let der_of = |c: &Certificate| c.to_der().map(CertificateDer::from).map_err(|e| untrusted(e.to_string()));
    let signer_der = der_of(signer)?;
    let attrs = signed_attributes(si, content, &signer_der)?;
    let others = certs.iter().map(|c| der_of(c)).collect::<Result<Vec<_>, Rejected>>()?;
    let ee = verify_path(&signer_der, &others, roots, at)?;
    let sig = si.signature.as_bytes();
    if !ALGORITHMS.iter().any(|alg| ee.verify_signature(*alg, &attrs, sig).is_ok()) {
        return Err(untrusted("the token's signature does not verify with the TSA certificate"));
    }
    Ok(())
}

/// The TSA certificate, once a path from it through the token's other certificates reaches one
/// of `roots`, valid at `at` (genTime) and allowing timeStamping.
fn verify_path<'a>(
    signer: &'a CertificateDer<'a>,
    others: &'a [CertificateDer<'a>],
    roots: &Roots,
    at: i64,
) -> Result<webpki::EndEntityCert<'a>, Rejected> {
    let anchors = roots
        .0
        .iter()
        .map(webpki::anchor_from_trusted_cert)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| untrusted(e.to_string()))?;
    let ee = webpki::EndEntityCert::try_from(signer).map_err(|e| untrusted(format!("the TSA certificate: {e}")))?;
    let time = UnixTime::since_unix_epoch(std::time::Duration::from_secs(at.max(0) as u64));
    let usage = webpki::KeyUsage::required(TIME_STAMPING);
    ee.verify_for_usage(ALGORITHMS, &anchors, others, time, usage, None, None).map_err(|e| {
        untrusted(format!("the TSA certificate does not chain to a trusted root for timeStamping: {e}"))
    })?;
    Ok(ee)
}

/// The signature algorithms a TSA may use; the certificate's key picks the one that applies.
const ALGORITHMS: &[&dyn rustls::pki_types::SignatureVerificationAlgorithm] = &[
    webpki::ring::RSA_PKCS1_2048_8192_SHA256,
    webpki::ring::RSA_PKCS1_2048_8192_SHA384,
    webpki::ring::RSA_PKCS1_2048_8192_SHA512,
    webpki::ring::RSA_PSS_2048_8192_SHA256_LEGACY_KEY,
    webpki::ring::RSA_PSS_2048_8192_SHA384_LEGACY_KEY,
    webpki::ring::RSA_PSS_2048_8192_SHA512_LEGACY_KEY,
    webpki::ring::ECDSA_P256_SHA256,
    webpki::ring::ECDSA_P256_SHA384,
    webpki::ring::ECDSA_P384_SHA256,
    webpki::ring::ECDSA_P384_SHA384,
    webpki::ring::ED25519,
];

fn identifies(sid: &SignerIdentifier, c: &Certificate) -> bool {
    let tbs = &c.tbs_certificate;
    match sid {
        SignerIdentifier::IssuerAndSerialNumber(i) => i.issuer == tbs.issuer && i.serial_number == tbs.serial_number,
        SignerIdentifier::SubjectKeyIdentifier(ski) => tbs.extensions.iter().flatten().any(|e| {
            e.extn_id == SUBJECT_KEY_ID
                && OctetString::from_der(e.extn_value.as_bytes()).is_ok_and(|v| v.as_bytes() == ski.0.as_bytes())
        }),
    }
}

/// ESSCertID / ESSCertIDv2 (RFC 2634, RFC 5035): the hash of the certificate that signed.
#[derive(Sequence)]
#[allow(dead_code)]
struct SigningCertificate {
    certs: Vec<EssCertId>,
    #[asn1(optional = "true")]
    policies: Option<Any>,
}

#[derive(Sequence)]
#[allow(dead_code)]
struct EssCertId {
    cert_hash: OctetString,
    #[asn1(optional = "true")]
    issuer_serial: Option<Any>,
}

#[derive(Sequence)]
#[allow(dead_code)]
struct SigningCertificateV2 {
    certs: Vec<EssCertIdV2>,
    #[asn1(optional = "true")]
    policies: Option<Any>,
}

#[derive(Sequence)]
#[allow(dead_code)]
struct EssCertIdV2 {
    #[asn1(optional = "true")]
    hash_algorithm: Option<AlgorithmIdentifierOwned>,
    cert_hash: OctetString,
    #[asn1(optional = "true")]
    issuer_serial: Option<Any>,
}

/// contentType = id-ct-TSTInfo, messageDigest = digest of the TSTInfo, and the ESS
/// signing-certificate attribute names `signer_der` (so the certificate cannot be swapped): the
/// DER of the attributes as signed (a SET OF, RFC 5652 §5.4).
fn signed_attributes(si: &SignerInfo, content: &[u8], signer_der: &[u8]) -> Result<Vec<u8>, Rejected> {
    let attrs = si.signed_attrs.as_ref().ok_or_else(|| untrusted("the token has no signed attributes"))?;
    let value = |oid: Oid| attrs.iter().find(|a| a.oid == oid).and_then(|a| a.values.iter().next());
    let content_type = value(CONTENT_TYPE).and_then(|v| v.decode_as::<Oid>().ok());
    if content_type != Some(TST_INFO) {
        return Err(untrusted("the signed contentType is not TSTInfo"));
    }
    let md = value(MESSAGE_DIGEST).and_then(|v| v.decode_as::<OctetString>().ok());
    let want = digest(&si.digest_alg.oid, content).ok_or_else(|| untrusted("an unknown digest algorithm"))?;
    if md.as_ref().map(|m| m.as_bytes()) != Some(want.as_slice()) {
        return Err(untrusted("the signed messageDigest is not the TSTInfo's"));
    }
    let named = if let Some(v) = value(SIGNING_CERT_V2) {
        let s: SigningCertificateV2 = v.decode_as().map_err(|e| untrusted(format!("signingCertificateV2: {e}")))?;
        s.certs.first().and_then(|c| {
            let alg = c.hash_algorithm.as_ref().map_or(SHA256, |a| a.oid);
            Some(digest(&alg, signer_der)? == c.cert_hash.as_bytes())
        })
    } else if let Some(v) = value(SIGNING_CERT) {
        let s: SigningCertificate = v.decode_as().map_err(|e| untrusted(format!("signingCertificate: {e}")))?;
        s.certs.first().and_then(|c| Some(digest(&SHA1, signer_der)? == c.cert_hash.as_bytes()))
    } else {
        None
    };
    match named {
        Some(true) => attrs.to_der().map_err(|e| untrusted(e.to_string())),
        Some(false) => Err(untrusted("the signing-certificate attribute names another certificate")),
        None => Err(untrusted("the token has no signing-certificate attribute (RFC 3161 §2.4.2)")),
    }
}

fn digest(alg: &Oid, data: &[u8]) -> Option<Vec<u8>> {
    use aws_lc_rs::digest as d;
    let which = match *alg {
        a if a == SHA1 => &d::SHA1_FOR_LEGACY_USE_ONLY,
        a if a == SHA256 => &d::SHA256,
        a if a == SHA384 => &d::SHA384,
        a if a == SHA512 => &d::SHA512,
        _ => return None,
    };
    Some(d::digest(which, data).as_ref().to_vec())
}

/// The note body of a signed checkpoint: its text up to and including the root's newline.
pub fn note_body(note: &str) -> Option<Vec<u8>> {
    signed_note::Note::from_bytes(note.as_bytes()).ok().map(|n| n.text().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_is_a_sha256_imprint_with_a_positive_nonce_and_cert_req() {
        let r = request(b"origin\n1\nroot=\n");
        let req = TimeStampReq::from_der(&r.der).unwrap();
        assert_eq!(req.message_imprint.hash_algorithm.oid, SHA256);
        assert_eq!(req.message_imprint.hashed_message.as_bytes(), Sha256::digest(b"origin\n1\nroot=\n").as_slice());
        assert!(req.cert_req);
        let nonce = req.nonce.unwrap();
        assert_eq!(nonce.as_bytes(), r.nonce.as_slice());
        assert!(r.nonce[0] & 0x80 == 0 && r.nonce[0] != 0);
        assert_ne!(request(b"x").nonce, request(b"x").nonce);
    }

    #[test]
    fn gen_time_keeps_the_fraction_and_refuses_other_forms() {
        let t = |s: &str| gen_time(&Any::new(Tag::GeneralizedTime, s.as_bytes().to_vec()).unwrap());
        assert_eq!(t("20261129034915Z"), Some(("2026-11-29T03:49:15Z".into(), 1_795_924_155)));
        assert_eq!(t("20261129034915.125Z").unwrap().0, "2026-11-29T03:49:15.125Z");
        for bad in ["20261129034915", "202611290349Z", "20261329034915Z", "20261129034915.Z", "2026112903491xZ"] {
            assert_eq!(t(bad), None, "{bad}");
        }
        assert_eq!(gen_time(&Any::new(Tag::UtcTime, b"261129034915Z".to_vec()).unwrap()), None);
    }

    #[test]
    fn garbage_and_refusals_are_named() {
        assert_eq!(check(b"not der", b"", None, None).unwrap_err().reason, "invalid");
        // TimeStampResp { status: { status: rejection(2), statusString: ["no"] } }
        let refused = [0x30, 0x0b, 0x30, 0x09, 0x02, 0x01, 0x02, 0x30, 0x04, 0x0c, 0x02, b'n', b'o'];
        let e = check(&refused, b"", None, None).unwrap_err();
        assert_eq!(e.reason, "refused", "{e}");
        assert!(e.detail.contains("no"), "{e}");
    }
}
