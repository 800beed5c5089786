//! Attestation, inclusion proofs and evidence bundles end to end, on every backend: totals
//! computed from real traffic, the RFC 6962 root recomputed here from the receipts, the signed
//! tree head, proofs checked with RFC 9162 §2.1.3.2, tampering found, bundles checked by
//! `tollgate verify`, and tenant isolation.

mod support;

use base64::Engine;
use ed25519_dalek::{Signature, Verifier, VerifyingKey};
use serde_json::{json, Value};
use support::{backends, Backend, Gateway};
use tollgate::receipts::merkle;

/// 4 answered, 1 upstream failure, 1 blocked by the rate limit: 6 receipts, seq 1..6.
fn traffic(g: &Gateway) -> Vec<String> {
    let key_id = g.get_json(&g.key, "/v1/keys")["data"][0]["id"].as_str().unwrap().to_string();
    let r = g.mgmt("PATCH", &format!("/v1/keys/{key_id}/limits"), Some(&g.key), Some(&json!({"rpmLimit": 5})));
    assert_eq!(r.status, 200, "{}", r.text());
    let mut ids: Vec<String> = (0..4).map(|_| g.say(&g.key, "gpt-4o-mini", "hi").receipt_id()).collect();
    ids.push(g.say(&g.key, "gpt-fail", "hi").receipt_id());
    ids.push(g.say(&g.key, "gpt-4o-mini", "hi").receipt_id()); // the 6th in a minute: 429
    assert_eq!(g.wait_receipts(&g.key, 6), 6);
    ids
}

fn this_hashes(g: &Gateway, ids: &[String]) -> Vec<merkle::Hash> {
    ids.iter()
        .map(|id| {
            let r = g.get_json(&g.key, &format!("/v1/receipts/{id}"));
            merkle::from_hex(r["thisHash"].as_str().unwrap()).unwrap()
        })
        .collect()
}

fn public_key(g: &Gateway, key_id: &str) -> VerifyingKey {
    let keys = g.get_json(&g.key, "/v1/compliance/signing-keys");
    let k = keys["keys"].as_array().unwrap().iter().find(|k| k["keyId"] == key_id).expect("key in the registry");
    let raw = base64::engine::general_purpose::STANDARD.decode(k["publicKey"].as_str().unwrap()).unwrap();
    VerifyingKey::from_bytes(&raw.try_into().unwrap()).unwrap()
}

/// docs/receipts.md §3: the signature over JCS({tenantId, fromSeq, toSeq, leafCount, root}).
fn tree_head_verifies(g: &Gateway, head: &Value, signed: &Value) -> bool {
    let bytes = serde_json_canonicalizer::to_vec(head).unwrap();
    let sig = base64::engine::general_purpose::STANDARD.decode(signed["signature"].as_str().unwrap()).unwrap();
    public_key(g, signed["keyId"].as_str().unwrap()).verify(&bytes, &Signature::from_slice(&sig).unwrap()).is_ok()
}

#[test]
fn attestation_is_computed_from_the_chain_and_signed() {
    for b in backends() {
        let (g, _up) = support::with_standin(&b, &[]);
        let ids = traffic(&g);
        let a = g.get_json(&g.key, "/v1/compliance/attestation?fromSeq=1&toSeq=6");
        let t = &a["totals"];
        assert_eq!(t["receipts"], 6, "{a}");
        assert_eq!((t["modelReceipts"].as_u64(), t["toolReceipts"].as_u64()), (Some(6), Some(0)));
        assert_eq!((t["chainVerifiedCount"].as_u64(), t["signaturesVerifiedCount"].as_u64()), (Some(6), Some(6)));
        assert_eq!((t["chainVerified"].as_bool(), t["signaturesVerified"].as_bool()), (Some(true), Some(true)));
        assert_eq!(t["enforcementActions"], 1, "the rate-limited request");
        assert_eq!(t["upstreamFailures"], 1, "gpt-fail");
        assert_eq!(a["scope"], tollgate::compliance::SCOPE);
        assert_eq!(a["disclaimer"], tollgate::compliance::DISCLAIMER);
        assert_eq!(a["version"], "v1");
        assert_eq!(a["tenantId"], g.tenant_id.as_str());
        assert_eq!((a["period"]["fromSeq"].as_u64(), a["period"]["toSeq"].as_u64()), (Some(1), Some(6)));
        assert_eq!(a["signingKeyIds"].as_array().unwrap().len(), 1);
        let coverage: Vec<&str> =
            a["checkCoverage"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert_eq!(coverage, ["ALLOWLIST", "policy", "RATELIMIT", "BUDGET", "GUARDRAIL", "CACHE", "UPSTREAM"]);
        let rl = a["checkCoverage"].as_array().unwrap().iter().find(|c| c["name"] == "RATELIMIT").unwrap();
        assert_eq!(
            (rl["receipts"].as_u64(), rl["applicableReceipts"].as_u64(), rl["pct"].as_f64()),
            (Some(6), Some(6), Some(100.0))
        );
        let up = a["checkCoverage"].as_array().unwrap().iter().find(|c| c["name"] == "UPSTREAM").unwrap();
        assert_eq!((up["receipts"].as_u64(), up["applicableReceipts"].as_u64()), (Some(5), Some(5)), "{up}");

        // The root, recomputed here from the receipts' own thisHash values.
        let leaves: Vec<merkle::Hash> = this_hashes(&g, &ids).iter().map(|h| merkle::leaf_hash(h)).collect();
        let root = merkle::to_hex(&merkle::root(&leaves));
        assert_eq!(a["merkle"], json!({"algorithm": "RFC6962-SHA256", "leafCount": 6, "root": root}));
        assert_eq!(a["anchor"]["type"], "merkle_root_v1");
        assert_eq!(a["anchor"]["root"], root.as_str());
        let head = json!({"tenantId": g.tenant_id, "fromSeq": 1, "toSeq": 6, "leafCount": 6, "root": root});
        assert!(tree_head_verifies(&g, &head, &a["anchor"]), "signed tree head");
        let forged = json!({"tenantId": g.tenant_id, "fromSeq": 1, "toSeq": 6, "leafCount": 5, "root": root});
        assert!(!tree_head_verifies(&g, &forged, &a["anchor"]));

        // The same period by time and by days; a sub-period links to its anchor.
        for q in ["days=1", "from=2020-01-01T00:00:00Z", "from=2020-01-01T00:00:00Z&to=2100-01-01T00:00:00Z"] {
            let other = g.get_json(&g.key, &format!("/v1/compliance/attestation?{q}"));
            assert_eq!(other["merkle"]["root"], root.as_str(), "{q}");
            assert!(other["period"]["label"].is_string() && other["period"]["days"].is_u64(), "{q}");
        }
        let sub = g.get_json(&g.key, "/v1/compliance/attestation?fromSeq=2&toSeq=4");
        assert_eq!(sub["merkle"]["root"], merkle::to_hex(&merkle::root(&leaves[1..4])));
        assert_eq!(sub["totals"]["chainVerified"], true);
        let empty = g.get_json(&g.key, "/v1/compliance/attestation?from=2001-01-01T00:00:00Z&to=2001-01-02T00:00:00Z");
        assert_eq!(empty["merkle"]["leafCount"], 0);
        assert_eq!(empty["merkle"]["root"], merkle::to_hex(&merkle::empty_root()));

        for bad in [
            "days=0",
            "days=x",
            "from=yesterday",
            "fromSeq=4&toSeq=2",
            "days=3&fromSeq=1",
            "from=2026-02-01T00:00:00Z&to=2026-01-01T00:00:00Z",
        ] {
            let r = g.mgmt("GET", &format!("/v1/compliance/attestation?{bad}"), Some(&g.key), None);
            assert_eq!(r.status, 400, "{bad}: {}", r.text());
            assert_eq!(r.json()["error"]["type"], "invalid_request");
        }

        // Tampering with a stored field breaks the chain and that receipt's signature.
        assert_eq!(g.sql("UPDATE receipts SET completion_tokens = 999 WHERE seq = 3"), 1);
        let broken = g.get_json(&g.key, "/v1/compliance/attestation?fromSeq=1&toSeq=6");
        assert_eq!(broken["totals"]["chainVerified"], false);
        assert_eq!(broken["totals"]["signaturesVerified"], false);
        assert_eq!(broken["totals"]["signaturesVerifiedCount"], 5);
        assert_eq!(broken["verification"]["brokenAtSeq"], 3);
    }
}

#[test]
fn inclusion_proofs_verify_against_the_attested_root() {
    for b in backends() {
        let (g, _up) = support::with_standin(&b, &[]);
        let ids = traffic(&g);
        let hashes = this_hashes(&g, &ids);
        let root_hex = g.get_json(&g.key, "/v1/compliance/attestation?fromSeq=1&toSeq=6")["merkle"]["root"].clone();
        let root = merkle::from_hex(root_hex.as_str().unwrap()).unwrap();
        for (i, id) in ids.iter().enumerate() {
            let p =
                g.get_json(&g.key, &format!("/v1/compliance/attestation/receipts/{id}/inclusion?fromSeq=1&toSeq=6"));
            assert_eq!(p["root"], root_hex, "{p}");
            assert_eq!(
                (p["index"].as_u64(), p["treeSize"].as_u64(), p["seq"].as_u64()),
                (Some(i as u64), Some(6), Some(i as u64 + 1))
            );
            assert_eq!((p["verified"].as_bool(), p["algorithm"].as_str()), (Some(true), Some("RFC6962-SHA256")));
            assert_eq!(p["thisHash"], merkle::to_hex(&hashes[i]));
            let proof: Vec<merkle::Hash> =
                p["proof"].as_array().unwrap().iter().map(|h| merkle::from_hex(h.as_str().unwrap()).unwrap()).collect();
            let leaf = merkle::leaf_hash(&hashes[i]);
            assert!(merkle::verify_inclusion(&leaf, i as u64, 6, &proof, &root), "receipt {i}");
            let mut bent = proof.clone();
            bent[0][0] ^= 1;
            assert!(!merkle::verify_inclusion(&leaf, i as u64, 6, &bent, &root), "an altered proof hash fails");
            let h = &p["signedTreeHead"];
            let head = json!({"tenantId": g.tenant_id, "fromSeq": 1, "toSeq": 6, "leafCount": 6, "root": root_hex});
            assert!(tree_head_verifies(&g, &head, h));
            assert_eq!((p["scope"].is_string(), p["disclaimer"].is_string()), (true, true));
        }
        // The same proof with the default period (last 30 days).
        let p = g.get_json(&g.key, &format!("/v1/compliance/attestation/receipts/{}/inclusion", ids[2]));
        assert_eq!((p["verified"].as_bool(), p["root"].clone()), (Some(true), root_hex.clone()));
        // A receipt outside the period.
        let r = g.mgmt(
            "GET",
            &format!("/v1/compliance/attestation/receipts/{}/inclusion?fromSeq=2&toSeq=6", ids[0]),
            Some(&g.key),
            None,
        );
        assert_eq!(r.status, 404, "{}", r.text());
        assert!(r.json()["error"]["message"].as_str().unwrap().contains("not in the period"), "{}", r.text());
        let r = g.mgmt(
            "GET",
            "/v1/compliance/attestation/receipts/00000000-0000-0000-0000-000000000000/inclusion",
            Some(&g.key),
            None,
        );
        assert_eq!(r.status, 404);
    }
}

#[test]
fn another_tenant_sees_none_of_it() {
    let (g, _up) = support::with_standin(&Backend::Sqlite, &[]);
    let ids = traffic(&g);
    let (_t2, key2) = g.create_tenant_live("globex");
    let r = g.mgmt("GET", &format!("/v1/compliance/attestation/receipts/{}/inclusion", ids[0]), Some(&key2), None);
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"]["type"], "not_found");
    let a = g.get_json(&key2, "/v1/compliance/attestation");
    assert_eq!(a["totals"]["receipts"], 0);
    let bundle = g.mgmt("GET", "/v1/compliance/evidence-bundle", Some(&key2), None);
    assert_eq!(bundle.status, 200);
    assert!(!bundle.text().contains(&ids[0]));
    assert_eq!(bundle.json()["receipts"].as_array().unwrap().len(), 0);
}

#[test]
fn evidence_bundles_verify_offline_and_tampering_fails() {
    for b in backends() {
        let (g, _up) = support::with_standin(&b, &[]);
        traffic(&g);
        let r = g.mgmt("GET", "/v1/compliance/evidence-bundle?fromSeq=2&toSeq=6", Some(&g.key), None);
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(r.header("content-disposition").is_some_and(|d| d.starts_with("attachment")));
        let bundle = r.json();
        assert_eq!(bundle["format"], "tollgate-evidence-bundle/v1");
        assert_eq!(bundle["anchor"]["seq"], 1);
        assert_eq!(bundle["receipts"].as_array().unwrap().len(), 5);
        assert_eq!(bundle["merkle"], bundle["attestation"]["merkle"]);
        assert_eq!(bundle["attestation"]["totals"]["chainVerified"], true);

        let (ok, out) = g.verify_bundle(&r.body, &[]);
        assert!(ok, "{out}");
        assert!(
            out.contains("5 of 5 Ed25519 signatures verified") && out.contains("verified: every check holds"),
            "{out}"
        );
        let public =
            g.get_json(&g.key, "/v1/compliance/signing-keys")["keys"][0]["publicKey"].as_str().unwrap().to_string();
        assert!(g.verify_bundle(&r.body, &["--key", &public]).0, "pinned to the real key");
        let stranger = base64::engine::general_purpose::STANDARD
            .encode(ed25519_dalek::SigningKey::from_bytes(&[9u8; 32]).verifying_key().to_bytes());
        assert!(!g.verify_bundle(&r.body, &["--key", &stranger]).0, "pinned to another key");

        let tampered = |f: &dyn Fn(&mut Value)| {
            let mut v = bundle.clone();
            f(&mut v);
            serde_json::to_vec(&v).unwrap()
        };
        let (ok, out) = g.verify_bundle(&tampered(&|v| v["receipts"][2]["costUsd"] = json!(123.0)), &[]);
        assert!(!ok && out.contains("first failure: seq 4"), "{out}");
        // The log member (docs/log.md §6): a signed checkpoint whose tree holds toSeq.
        assert_eq!(bundle["log"]["inclusion"]["seq"], 6, "{}", bundle["log"]);
        assert!(bundle["log"]["checkpoint"].as_str().unwrap().contains(&format!("/{}\n6\n", g.tenant_id)));
        let (ok, out) = g.verify_bundle(&r.body, &[]);
        assert!(ok && out.contains("log: receipt seq 6 is in the checkpoint's tree"), "{out}");
        let forged_proof = tampered(&|v| v["log"]["inclusion"]["proof"][0] = json!("00".repeat(32)));
        let (ok, out) = g.verify_bundle(&forged_proof, &[]);
        assert!(!ok && out.contains("first failure: log: receipt seq 6"), "{out}");
        let forged_size = tampered(&|v| {
            let c = v["log"]["checkpoint"].as_str().unwrap().replacen("\n6\n", "\n7\n", 1);
            v["log"]["checkpoint"] = json!(c);
        });
        let (ok, out) = g.verify_bundle(&forged_size, &[]);
        assert!(!ok && out.contains("first failure: log: checkpoint"), "{out}");
        let (ok, out) = g.verify_bundle(
            &tampered(&|v| {
                v["receipts"].as_array_mut().unwrap().remove(1);
            }),
            &[],
        );
        assert!(!ok && out.contains("first failure: seq 4"), "removed seq 3: {out}");
        let (ok, out) = g.verify_bundle(&tampered(&|v| v["merkle"]["root"] = json!("00".repeat(32))), &[]);
        assert!(!ok && out.contains("FAIL  merkle"), "{out}");
        let (ok, out) = g.verify_bundle(&tampered(&|v| v["attestation"]["period"]["toSeq"] = json!(7)), &[]);
        assert!(!ok, "{out}");
        let (ok, out) = g.verify_bundle(&tampered(&|v| v["anchor"]["thisHash"] = json!("ab".repeat(32))), &[]);
        assert!(!ok && out.contains("seq 2"), "{out}");
        let (ok, out) = g.verify_bundle(b"{\"format\": ", &[]);
        assert!(!ok && out.contains("not a well-formed"), "{out}");
    }
}

const ED25519: &str = "tollgate_attestation_signatures_verified_total";
const MEMO_BLOCKS: &str = "tollgate_attestation_memo_blocks_total";
const MEMO_WRITTEN: &str = "tollgate_attestation_memo_spans_written_total";

/// The verified-span memo, with blocks of 4 receipts (`TOLLGATE_VERIFIED_SPAN_BLOCK`): the first
/// attestation records memo rows after it answers, later walks (attestation and bundle) use them
/// instead of Ed25519, and tampering inside a memoised block is still found where it happened.
#[test]
fn the_verified_span_memo_is_used_and_tampering_is_still_found() {
    for b in backends() {
        let (g, _up) =
            support::with_standin(&b, &[("TOLLGATE_VERIFIED_SPAN_BLOCK", "4"), ("TOLLGATE_CHAIN_AUDIT_SECONDS", "0")]);
        for _ in 0..14 {
            g.say(&g.key, "gpt-4o-mini", "hi").receipt_id();
        }
        assert_eq!(g.wait_receipts(&g.key, 14), 14);
        let t = g.tenant_id.clone();
        let all = "/v1/compliance/attestation?fromSeq=1&toSeq=14";

        let cold = g.get_json(&g.key, all);
        assert_eq!(
            (cold["totals"]["chainVerified"].as_bool(), cold["totals"]["signaturesVerified"].as_bool()),
            (Some(true), Some(true))
        );
        assert_eq!((g.metric(ED25519, &[]), g.metric(MEMO_BLOCKS, &[])), (14.0, 0.0));
        assert_eq!(g.metric_eventually(MEMO_WRITTEN, &[], 3.0), 3.0, "blocks 1-4, 5-8, 9-12; 13-14 is not whole");
        let touch =
            |tenant: &str| g.sql(&format!("UPDATE verified_spans SET key_ids = key_ids WHERE tenant_id = '{tenant}'"));
        assert_eq!(touch(&t), 3, "memo rows are the tenant's");

        let warm = g.get_json(&g.key, all);
        assert_eq!((g.metric(ED25519, &[]), g.metric(MEMO_BLOCKS, &[])), (16.0, 3.0), "only 13 and 14 re-verified");
        for field in ["totals", "verification", "merkle", "checkCoverage", "anchor"] {
            assert_eq!(warm[field], cold[field], "{field}");
        }
        let r = g.mgmt("GET", "/v1/compliance/evidence-bundle?fromSeq=1&toSeq=14", Some(&g.key), None);
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["attestation"]["totals"], cold["totals"]);
        assert_eq!((g.metric(ED25519, &[]), g.metric(MEMO_BLOCKS, &[])), (18.0, 6.0), "the bundle's walk uses it too");

        // A row written without the master key vouches for nothing: that block is re-verified.
        assert_eq!(
            g.sql(&format!(
                "UPDATE verified_spans SET digest = '{}' WHERE tenant_id = '{t}' AND block_start = 1",
                "ab".repeat(32)
            )),
            1
        );
        let forged = g.get_json(&g.key, "/v1/compliance/attestation?fromSeq=1&toSeq=8");
        assert_eq!(forged["totals"]["signaturesVerified"], true);
        assert_eq!((g.metric(ED25519, &[]), g.metric(MEMO_BLOCKS, &[])), (22.0, 7.0));
        assert_eq!(g.metric_eventually(MEMO_WRITTEN, &[], 4.0), 4.0, "and its row rewritten");

        // A signature swapped inside a memoised block.
        let swapped = g.sql(&format!(
            "UPDATE receipts SET signature = (SELECT r.signature FROM receipts r WHERE r.tenant_id = '{t}' AND \
             r.seq = 7) WHERE tenant_id = '{t}' AND seq = 6"
        ));
        assert_eq!(swapped, 1);
        let bad = g.get_json(&g.key, all);
        assert_eq!(
            (bad["totals"]["chainVerified"].as_bool(), bad["totals"]["signaturesVerified"].as_bool()),
            (Some(true), Some(false))
        );
        assert_eq!(bad["verification"]["badSignatureAtSeq"], 6);
        assert_eq!(bad["totals"]["signaturesVerifiedCount"], 13);
        assert_eq!(g.metric(MEMO_BLOCKS, &[]), 9.0, "blocks 1-4 and 9-12 vouched for, 5-8 re-verified");

        // A key id changed inside a memoised block.
        assert_eq!(
            g.sql(&format!("UPDATE receipts SET key_id = '0000000000000000' WHERE tenant_id = '{t}' AND seq = 10")),
            1
        );
        let bad = g.get_json(&g.key, "/v1/compliance/attestation?fromSeq=9&toSeq=12");
        assert_eq!(bad["totals"]["signaturesVerified"], false);
        assert_eq!(bad["verification"]["badSignatureAtSeq"], 10);

        // A signed member changed inside a memoised block.
        assert_eq!(
            g.sql(&format!("UPDATE receipts SET completion_tokens = 999 WHERE tenant_id = '{t}' AND seq = 3")),
            1
        );
        let bad = g.get_json(&g.key, "/v1/compliance/attestation?fromSeq=1&toSeq=4");
        assert_eq!(
            (bad["totals"]["chainVerified"].as_bool(), bad["totals"]["signaturesVerified"].as_bool()),
            (Some(false), Some(false))
        );
        assert_eq!(
            (bad["verification"]["brokenAtSeq"].as_u64(), bad["verification"]["badSignatureAtSeq"].as_u64()),
            (Some(3), Some(3))
        );
    }
}

/// The chain auditor walks whole blocks nobody asked about, so the first attestation is warm.
#[test]
fn the_chain_auditor_warms_the_memo() {
    for b in backends() {
        let env = [("TOLLGATE_VERIFIED_SPAN_BLOCK", "4"), ("TOLLGATE_CHAIN_AUDIT_SECONDS", "1")];
        let (g, _up) = support::with_standin(&b, &env);
        for _ in 0..9 {
            g.say(&g.key, "gpt-4o-mini", "hi").receipt_id();
        }
        assert_eq!(g.wait_receipts(&g.key, 9), 9);
        assert_eq!(g.metric_eventually(MEMO_WRITTEN, &[], 2.0), 2.0, "blocks 1-4 and 5-8, not the partial 9");
        assert_eq!(g.metric(ED25519, &[]), 8.0, "each whole block walked once");
        let a = g.get_json(&g.key, "/v1/compliance/attestation?fromSeq=1&toSeq=9");
        assert_eq!(a["totals"]["signaturesVerified"], true);
        assert_eq!((g.metric(ED25519, &[]), g.metric(MEMO_BLOCKS, &[])), (9.0, 2.0));
    }
}

/// The walk's packed page read (one JSON array built by the database) decodes to exactly what
/// the row-by-row read gives, awkward values included: costs that need 17 digits to round-trip,
/// quotes, backslashes, control characters and non-ASCII text.
#[test]
fn packed_pages_decode_exactly_like_rows() {
    use tollgate::receipts::{rows::append_batch, stored};
    use tollgate::receipts::{CacheSide, Check, Draft, Kind, UpstreamStatus};
    use tollgate::store::{receipts as rows, Store};
    for b in backends() {
        let (url, dir) = match &b {
            Backend::Sqlite => {
                let dir = std::env::temp_dir().join(format!("tollgate-packed-{}", uuid::Uuid::new_v4().simple()));
                (format!("sqlite://{}", dir.join("t.db").display()), Some(dir))
            }
            Backend::Postgres(url) => (url.clone(), None),
        };
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(async {
            let db = Store::connect(&url).await.unwrap();
            db.migrate().await.unwrap();
            let signer = std::sync::Arc::new(tollgate::receipts::signer::Signer::from_seed(&[6; 32]));
            let costs = [0.1 + 0.2, 0.000066, 1.0 / 3.0, 0.0, 12345.678901234567, 5e-324, 1e300, 2.0f64.sqrt()];
            let drafts: Vec<_> = costs
                .iter()
                .enumerate()
                .map(|(i, c)| Draft {
                    tenant_id: "t-packed".into(),
                    receipt_id: uuid::Uuid::now_v7().to_string(),
                    request_id: format!("q\"{i}\\\n\t\u{1}é😀"),
                    actor: "k/ünd user".into(),
                    provider: "openai".into(),
                    model: "gpt-4o-mini".into(),
                    prompt_tokens: 9_007_199_254_740_991 - i as u64,
                    completion_tokens: i as u64,
                    cost_usd: *c,
                    checks: vec![Check { name: "policy".into(), result: format!("allow\"{i}").into() }],
                    upstream_status: UpstreamStatus::Ok,
                    ts: "2026-11-23 10:00:00.000".into(),
                    kind: Kind::ModelCall,
                    pack_version: String::new(),
                    cache: CacheSide::default(),
                    events: Vec::new(),
                    outbox: Vec::new(),
                    attempts: Vec::new(),
                    subject: None,
                    key_id: "k".into(),
                })
                .collect();
            append_batch(&db, drafts, signer).await.unwrap();
            let plain = stored::seq_range(&db, "t-packed", 2, 100, 100).await.unwrap();
            let page = rows::seq_range_packed(&db, "t-packed", 2, 100, 100).await.unwrap();
            let packed = stored::unpack("t-packed", &page).unwrap();
            assert_eq!(plain.len(), costs.len() - 1);
            assert_eq!(format!("{plain:?}"), format!("{packed:?}"));
            for (r, c) in packed.iter().zip(&costs[1..]) {
                assert_eq!(r.receipt.cost_usd.to_bits(), c.to_bits(), "{c}");
            }
            let none = rows::seq_range_packed(&db, "t-packed", 50, 60, 100).await.unwrap();
            assert!(stored::unpack("t-packed", &none).unwrap().is_empty());
        });
        if let Some(dir) = dir {
            std::fs::remove_dir_all(dir).ok();
        }
        if let Backend::Postgres(url) = &b {
            support::drop_postgres(url);
        }
    }
}
