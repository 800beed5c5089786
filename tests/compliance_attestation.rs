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

/// 4 answered, 1 upstream failure, 1 blocked by the rate limit: 6 receipts, seq `first..first + 6`.
/// The management writes before them (the stand-in's providers, the rpm limit) are `admin`
/// receipts of the same log (docs/log.md §8), so the calls start at `first`, not at 1.
fn traffic(g: &Gateway) -> (u64, Vec<String>) {
    let key_id = g.get_json(&g.key, "/v1/keys")["data"][0]["id"].as_str().unwrap().to_string();
    let r = g.mgmt("PATCH", &format!("/v1/keys/{key_id}/limits"), Some(&g.key), Some(&json!({"rpmLimit": 5})));
    assert_eq!(r.status, 200, "{}", r.text());
    let first = g.newest_seq(&g.key) + 1;
    let mut ids: Vec<String> = (0..4).map(|_| g.say(&g.key, "gpt-4o-mini", "hi").receipt_id()).collect();
    ids.push(g.say(&g.key, "gpt-fail", "hi").receipt_id());
    ids.push(g.say(&g.key, "gpt-4o-mini", "hi").receipt_id()); // the 6th in a minute: 429
    assert_eq!(g.wait_receipts(&g.key, first + 5), first + 5);
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(g.receipt(id)["seq"], first + i as u64, "the calls are seq {first}.., in order");
    }
    (first, ids)
}

/// `thisHash` of every receipt of the tenant (calls and `admin` ones) with seq `1..=to`, in seq
/// order: the leaves of the whole log up to `to`.
fn hashes_through(g: &Gateway, to: u64) -> Vec<merkle::Hash> {
    let mut ids = Vec::new();
    let mut cursor = String::new();
    loop {
        let page = g.get_json(&g.key, &format!("/v1/receipts?limit=200{cursor}"));
        for r in page["receipts"].as_array().unwrap() {
            ids.push((r["seq"].as_u64().unwrap(), r["receiptId"].as_str().unwrap().to_string()));
        }
        match page["nextCursor"].as_u64() {
            Some(next) => cursor = format!("&cursor={next}"),
            None => break,
        }
    }
    ids.retain(|(seq, _)| *seq <= to);
    ids.sort();
    assert!(ids.iter().map(|(seq, _)| *seq).eq(1..=to), "every seq up to {to} is listed: {ids:?}");
    let ids: Vec<String> = ids.into_iter().map(|(_, id)| id).collect();
    this_hashes(g, &ids)
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
        let (first, ids) = traffic(&g);
        let last = first + 5;
        let a = g.get_json(&g.key, &format!("/v1/compliance/attestation?fromSeq={first}&toSeq={last}"));
        let t = &a["totals"];
        assert_eq!(t["receipts"], 6, "{a}");
        assert_eq!(t["adminEvents"], 0, "no management write among the calls");
        assert_eq!((t["modelReceipts"].as_u64(), t["toolReceipts"].as_u64()), (Some(6), Some(0)));
        assert_eq!((t["chainVerifiedCount"].as_u64(), t["signaturesVerifiedCount"].as_u64()), (Some(6), Some(6)));
        assert_eq!((t["chainVerified"].as_bool(), t["signaturesVerified"].as_bool()), (Some(true), Some(true)));
        assert_eq!(t["enforcementActions"], 1, "the rate-limited request");
        assert_eq!(t["upstreamFailures"], 1, "gpt-fail");
        assert_eq!(a["scope"], tollgate::compliance::SCOPE);
        assert_eq!(a["disclaimer"], tollgate::compliance::DISCLAIMER);
        assert_eq!(a["version"], "v1");
        assert_eq!(a["tenantId"], g.tenant_id.as_str());
        assert_eq!((a["period"]["fromSeq"].as_u64(), a["period"]["toSeq"].as_u64()), (Some(first), Some(last)));
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
        let head = json!({"tenantId": g.tenant_id, "fromSeq": first, "toSeq": last, "leafCount": 6, "root": root});
        assert!(tree_head_verifies(&g, &head, &a["anchor"]), "signed tree head");
        let forged = json!({"tenantId": g.tenant_id, "fromSeq": first, "toSeq": last, "leafCount": 5, "root": root});
        assert!(!tree_head_verifies(&g, &forged, &a["anchor"]));

        // The whole log by time and by days: every leaf, the admin receipts of the management
        // writes and of the attestations before it included (each attestation is recorded after
        // it is computed, so it sees the log up to the one before); those count as
        // `adminEvents`, not as receipts. A sub-period links to its anchor.
        for q in ["days=1", "from=2020-01-01T00:00:00Z", "from=2020-01-01T00:00:00Z&to=2100-01-01T00:00:00Z"] {
            let size = g.newest_seq(&g.key);
            let all = hashes_through(&g, size);
            let whole = merkle::to_hex(&merkle::root(&all.iter().map(|h| merkle::leaf_hash(h)).collect::<Vec<_>>()));
            let other = g.get_json(&g.key, &format!("/v1/compliance/attestation?{q}"));
            assert_eq!((other["period"]["fromSeq"].as_u64(), other["period"]["toSeq"].as_u64()), (Some(1), Some(size)));
            assert_eq!(other["merkle"]["root"], whole.as_str(), "{q}");
            assert_eq!(other["merkle"]["leafCount"], size, "{q}");
            let t = &other["totals"];
            assert_eq!((t["receipts"].as_u64(), t["adminEvents"].as_u64()), (Some(6), Some(size - 6)), "{q}: {t}");
            assert_eq!((t["modelReceipts"].as_u64(), t["enforcementActions"].as_u64()), (Some(6), Some(1)), "{q}");
            assert_eq!(
                (t["chainVerifiedCount"].as_u64(), t["signaturesVerifiedCount"].as_u64()),
                (Some(size), Some(size)),
                "every leaf verified, admin ones too: {t}"
            );
            let rl = other["checkCoverage"].as_array().unwrap().iter().find(|c| c["name"] == "RATELIMIT").unwrap();
            assert_eq!((rl["receipts"].as_u64(), rl["applicableReceipts"].as_u64()), (Some(6), Some(6)), "{q}");
            assert!(other["period"]["label"].is_string() && other["period"]["days"].is_u64(), "{q}");
        }
        let sub = g.get_json(&g.key, &format!("/v1/compliance/attestation?fromSeq={}&toSeq={}", first + 1, first + 3));
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
        let third = first + 2;
        assert_eq!(g.sql(&format!("UPDATE receipts SET completion_tokens = 999 WHERE seq = {third}")), 1);
        let broken = g.get_json(&g.key, &format!("/v1/compliance/attestation?fromSeq={first}&toSeq={last}"));
        assert_eq!(broken["totals"]["chainVerified"], false);
        assert_eq!(broken["totals"]["signaturesVerified"], false);
        assert_eq!(broken["totals"]["signaturesVerifiedCount"], 5);
        assert_eq!(broken["verification"]["brokenAtSeq"], third);
    }
}

#[test]
fn inclusion_proofs_verify_against_the_attested_root() {
    for b in backends() {
        let (g, _up) = support::with_standin(&b, &[]);
        let (first, ids) = traffic(&g);
        let last = first + 5;
        let period = format!("fromSeq={first}&toSeq={last}");
        let hashes = this_hashes(&g, &ids);
        let root_hex = g.get_json(&g.key, &format!("/v1/compliance/attestation?{period}"))["merkle"]["root"].clone();
        let root = merkle::from_hex(root_hex.as_str().unwrap()).unwrap();
        for (i, id) in ids.iter().enumerate() {
            let p = g.get_json(&g.key, &format!("/v1/compliance/attestation/receipts/{id}/inclusion?{period}"));
            assert_eq!(p["root"], root_hex, "{p}");
            assert_eq!(
                (p["index"].as_u64(), p["treeSize"].as_u64(), p["seq"].as_u64()),
                (Some(i as u64), Some(6), Some(first + i as u64))
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
            let head =
                json!({"tenantId": g.tenant_id, "fromSeq": first, "toSeq": last, "leafCount": 6, "root": root_hex});
            assert!(tree_head_verifies(&g, &head, h));
            assert_eq!((p["scope"].is_string(), p["disclaimer"].is_string()), (true, true));
        }
        // The same proof with the default period (last 30 days): the whole log, whose first
        // leaves are the admin receipts of the management writes and of the attestation above.
        let size = g.newest_seq(&g.key);
        let all: Vec<merkle::Hash> = hashes_through(&g, size).iter().map(|h| merkle::leaf_hash(h)).collect();
        let whole = merkle::root(&all);
        let p = g.get_json(&g.key, &format!("/v1/compliance/attestation/receipts/{}/inclusion", ids[2]));
        assert_eq!((p["verified"].as_bool(), p["root"].clone()), (Some(true), json!(merkle::to_hex(&whole))), "{p}");
        let index = first + 1; // seq first + 2
        assert_eq!((p["index"].as_u64(), p["treeSize"].as_u64()), (Some(index), Some(size)));
        let proof: Vec<merkle::Hash> =
            p["proof"].as_array().unwrap().iter().map(|h| merkle::from_hex(h.as_str().unwrap()).unwrap()).collect();
        assert!(merkle::verify_inclusion(&merkle::leaf_hash(&hashes[2]), index, size, &proof, &whole));
        // A receipt outside the period.
        let r = g.mgmt(
            "GET",
            &format!("/v1/compliance/attestation/receipts/{}/inclusion?fromSeq={}&toSeq={last}", ids[0], first + 1),
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
    let (_, ids) = traffic(&g);
    let (_t2, key2) = g.create_tenant_live("globex");
    let r = g.mgmt("GET", &format!("/v1/compliance/attestation/receipts/{}/inclusion", ids[0]), Some(&key2), None);
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"]["type"], "not_found");
    let a = g.get_json(&key2, "/v1/compliance/attestation");
    assert_eq!((a["totals"]["receipts"].as_u64(), a["totals"]["adminEvents"].as_u64()), (Some(0), Some(0)), "{a}");
    assert_eq!(a["merkle"]["leafCount"], 0);
    let bundle = g.mgmt("GET", "/v1/compliance/evidence-bundle", Some(&key2), None);
    assert_eq!(bundle.status, 200);
    for id in &ids {
        assert!(!bundle.text().contains(id.as_str()));
    }
    // Globex's log holds one receipt: the admin receipt of its own attestation read above.
    let theirs = bundle.json()["receipts"].as_array().unwrap().clone();
    assert_eq!(theirs.len(), 1, "{theirs:?}");
    assert_eq!(
        (theirs[0]["kind"].as_str(), theirs[0]["model"].as_str(), theirs[0]["seq"].as_u64()),
        (Some("admin"), Some("compliance.attestation"), Some(1)),
        "{theirs:?}"
    );
}

#[test]
fn evidence_bundles_verify_offline_and_tampering_fails() {
    for b in backends() {
        let (g, _up) = support::with_standin(&b, &[]);
        let (first, _) = traffic(&g);
        let last = first + 5;
        assert_eq!(g.newest_seq(&g.key), last, "the calls are the newest receipts");
        let r = g.mgmt(
            "GET",
            &format!("/v1/compliance/evidence-bundle?fromSeq={}&toSeq={last}", first + 1),
            Some(&g.key),
            None,
        );
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(r.header("content-disposition").is_some_and(|d| d.starts_with("attachment")));
        let bundle = r.json();
        assert_eq!(bundle["format"], "tollgate-evidence-bundle/v1");
        assert_eq!(bundle["anchor"]["seq"], first);
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
        assert!(!ok && out.contains(&format!("first failure: seq {}", first + 3)), "{out}");
        // The log member (docs/log.md §6): a signed checkpoint whose tree holds toSeq. No stamp
        // here, so it is the log's current checkpoint when the bundle's end is written: its
        // tree already holds the bundle's own admin receipt, recorded as the stream began.
        assert_eq!(bundle["log"]["inclusion"]["seq"], last, "{}", bundle["log"]);
        let size = last + 1;
        assert_eq!(g.newest_seq(&g.key), size, "the bundle's admin receipt");
        assert_eq!(bundle["log"]["inclusion"]["size"], size, "{}", bundle["log"]);
        let (at_size, one_more) = (format!("\n{size}\n"), format!("\n{}\n", size + 1));
        let checkpoint = bundle["log"]["checkpoint"].as_str().unwrap();
        assert!(checkpoint.contains(&format!("/{}{at_size}", g.tenant_id)), "{checkpoint}");
        let (ok, out) = g.verify_bundle(&r.body, &[]);
        assert!(ok && out.contains(&format!("log: receipt seq {last} is in the checkpoint's tree")), "{out}");
        let forged_proof = tampered(&|v| v["log"]["inclusion"]["proof"][0] = json!("00".repeat(32)));
        let (ok, out) = g.verify_bundle(&forged_proof, &[]);
        assert!(!ok && out.contains(&format!("first failure: log: receipt seq {last}")), "{out}");
        let forged_size = tampered(&|v| {
            let c = v["log"]["checkpoint"].as_str().unwrap().replacen(&at_size, &one_more, 1);
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
        assert!(!ok && out.contains(&format!("first failure: seq {}", first + 3)), "removed seq {}: {out}", first + 2);
        let (ok, out) = g.verify_bundle(&tampered(&|v| v["merkle"]["root"] = json!("00".repeat(32))), &[]);
        assert!(!ok && out.contains("FAIL  merkle"), "{out}");
        let (ok, out) = g.verify_bundle(&tampered(&|v| v["attestation"]["period"]["toSeq"] = json!(last + 1)), &[]);
        assert!(!ok, "{out}");
        let (ok, out) = g.verify_bundle(&tampered(&|v| v["anchor"]["thisHash"] = json!("ab".repeat(32))), &[]);
        assert!(!ok && out.contains(&format!("seq {}", first + 1)), "{out}");
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
        // Seq 1..=14: the stand-in's provider writes (admin receipts, leaves like any other),
        // then calls. Every attestation and bundle below appends its own admin receipt after
        // seq 14, outside the periods read.
        let setup = g.newest_seq(&g.key);
        assert!(setup < 3, "the receipts tampered with below (3, 6, 7, 10) are calls: {setup}");
        for _ in setup..14 {
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
        // Seq 1..=9: the stand-in's provider writes (admin receipts), then calls.
        for _ in g.newest_seq(&g.key)..9 {
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
                    latency_us: None,
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
