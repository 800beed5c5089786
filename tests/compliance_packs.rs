//! Compliance packs end to end, on every backend: the baseline packs and their hashes, coverage
//! maps, the receipts that prove a control, receipt controls read through the pack set stamped
//! at emit time (old sets stay resolvable after a pack changes, across a restart), tenant packs
//! put and removed, stamping switched off, and tenant isolation.

mod support;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use support::{backends, Gateway};

fn status(g: &Gateway, key: &str, method: &str, path: &str) -> u16 {
    g.mgmt(method, path, Some(key), None).status
}

fn put_pack(g: &Gateway, key: &str, framework: &str, yaml: &str) -> support::Resp {
    g.mgmt_raw("PUT", &format!("/v1/compliance/packs/{framework}"), key, yaml.as_bytes())
}

fn control<'a>(doc: &'a Value, framework: &str, id: &str) -> &'a Value {
    let fw = doc["frameworks"].as_array().unwrap().iter().find(|f| f["framework"] == framework).unwrap();
    fw["controls"].as_array().unwrap().iter().find(|c| c["id"] == id).unwrap_or_else(|| panic!("{id} in {fw}"))
}

const ACME: &str = r#"framework: acme-ai
version: "3"
title: Acme AI controls
status: reviewed
effectiveDate: 2026-01-01
disclaimer: Internal mapping, not an audit.
controls:
  - id: acme-ai:limits
    title: Spend and rate limits
    coverage: enforced
    provenBy: [RATELIMIT, BUDGET]
    evidence: RATELIMIT and BUDGET results
    gap: ""
  - id: acme-ai:training
    title: Training data
    coverage: external
    provenBy: []
"#;

#[test]
fn packs_coverage_stamps_and_receipt_controls() {
    for b in backends() {
        let (mut g, _up) = support::with_standin(&b, &[]);
        let key = g.key.clone();

        // Baseline packs: hashes over the exact bytes shipped in conf/packs.
        let packs = g.get_json(&key, "/v1/compliance/packs");
        let list = packs["data"].as_array().unwrap();
        assert_eq!(list.len(), 5, "{packs}");
        for p in list {
            assert_eq!(p["source"], "baseline");
            let raw = std::fs::read(format!("conf/packs/{}.yaml", p["framework"].as_str().unwrap())).unwrap();
            assert_eq!(p["packHash"], hex::encode(Sha256::digest(&raw)), "{}", p["framework"]);
        }
        assert_eq!(packs["scope"], tollgate::compliance::SCOPE);
        let v1 = packs["packSetVersion"].as_str().unwrap().to_string();
        assert!(v1.starts_with("ps-") && v1.len() == 15, "{v1}");

        // Coverage map: the seed's fields; summary counts equal the controls.
        let eu = g.get_json(&key, "/v1/compliance/coverage/eu-ai-act");
        for f in ["framework", "version", "title", "status", "effectiveDate", "disclaimer", "packHash", "source"] {
            assert!(eu[f].is_string(), "{f}: {eu}");
        }
        let controls = eu["controls"].as_array().unwrap();
        let count = |c: &str| controls.iter().filter(|x| x["coverage"] == c).count() as u64;
        assert_eq!(
            eu["summary"],
            json!({"enforced": count("enforced"), "partial": count("partial"), "external": count("external"), "total": controls.len()})
        );
        assert_eq!(eu["summary"], json!({"enforced": 1, "partial": 8, "external": 6, "total": 15}));
        assert_eq!(eu["disclaimer"], tollgate::compliance::DISCLAIMER);
        assert_eq!(status(&g, &key, "GET", "/v1/compliance/coverage/no-such-framework"), 404);

        // Traffic: two answered, the third over the rpm limit (RATELIMIT BLOCK). Stamped with v1.
        let key_id = g.get_json(&key, "/v1/keys")["data"][0]["id"].as_str().unwrap().to_string();
        let r = g.mgmt("PATCH", &format!("/v1/keys/{key_id}/limits"), Some(&key), Some(&json!({"rpmLimit": 2})));
        assert_eq!(r.status, 200);
        let before = g.newest_seq(&key);
        let ids: Vec<(u16, String)> =
            (0..3).map(|_| g.say(&key, "gpt-4o-mini", "hi")).map(|r| (r.status, r.receipt_id())).collect();
        assert_eq!(ids.iter().map(|i| i.0).collect::<Vec<_>>(), [200, 200, 429]);
        assert_eq!(g.wait_receipts(&key, before + 3), before + 3);
        for (_, id) in &ids {
            assert_eq!(g.get_json(&key, &format!("/v1/receipts/{id}"))["receiptPackVersion"], v1.as_str());
        }

        // Receipt controls of the blocked request.
        let blocked = &ids[2].1;
        let rc = g.get_json(&key, &format!("/v1/compliance/receipts/{blocked}/controls"));
        assert_eq!((rc["verified"].as_bool(), rc["note"].is_null()), (Some(true), true), "{rc}");
        assert_eq!(rc["receiptPackVersion"], v1.as_str());
        assert_eq!(rc["frameworks"].as_array().unwrap().len(), 5);
        assert!(rc["frameworks"].as_array().unwrap().iter().all(|f| f["resolution"] == "stamped"));
        let llm10 = control(&rc, "owasp-llm-2025", "owasp-llm-2025:LLM10");
        assert_eq!((llm10["check"].as_str(), llm10["result"].as_str()), (Some("RATELIMIT"), Some("BLOCK")), "{llm10}");
        let art12 = control(&rc, "eu-ai-act", "eu-ai-act:art-12");
        assert_eq!((art12["check"].as_str(), art12["result"].as_str()), (Some("RECEIPT"), Some("PASS")));
        // Only what this receipt's checks prove is listed, each with strings (the seed's types):
        // no external control, no control whose checks did not run here (GUARDRAIL, for LLM02).
        for fw in rc["frameworks"].as_array().unwrap() {
            for c in fw["controls"].as_array().unwrap() {
                assert!(c["check"].is_string() && c["result"].is_string(), "{c}");
                assert_ne!(c["coverage"], "external", "{c}");
            }
        }
        let listed = |doc: &Value, framework: &str, id: &str| {
            let fw = doc["frameworks"].as_array().unwrap().iter().find(|f| f["framework"] == framework).unwrap();
            fw["controls"].as_array().unwrap().iter().any(|c| c["id"] == id)
        };
        assert!(!listed(&rc, "eu-ai-act", "eu-ai-act:art-10"), "external: {rc}");
        assert!(!listed(&rc, "owasp-llm-2025", "owasp-llm-2025:LLM02"), "GUARDRAIL did not run: {rc}");
        // The same reading as the control's receipts list: a control is listed for this receipt
        // exactly when the receipt is among the receipts that prove it.
        for p in g.get_json(&key, "/v1/compliance/packs")["data"].as_array().unwrap() {
            let fw = p["framework"].as_str().unwrap();
            for c in g.get_json(&key, &format!("/v1/compliance/coverage/{fw}"))["controls"].as_array().unwrap() {
                let id = c["id"].as_str().unwrap();
                let proving =
                    g.get_json(&key, &format!("/v1/compliance/coverage/{fw}/controls/{id}/receipts?limit=200"));
                let proves = proving["receipts"].as_array().unwrap().iter().any(|r| r["receiptId"] == blocked.as_str());
                assert_eq!(listed(&rc, fw, id), proves, "{id}");
            }
        }
        let one = g.get_json(&key, &format!("/v1/compliance/receipts/{blocked}/controls?framework=soc2"));
        assert_eq!(one["frameworks"].as_array().unwrap().len(), 1);
        let cc61 = control(&one, "soc2", "soc2:CC6.1");
        assert_eq!((cc61["check"].as_str(), cc61["result"].as_str()), (Some("KEY"), Some("PASS")));
        assert_eq!(status(&g, &key, "GET", &format!("/v1/compliance/receipts/{blocked}/controls?framework=nope")), 404);

        // The receipts that prove a control: cursor pages, full or bare id, encoded or not.
        let path = "/v1/compliance/coverage/owasp-llm-2025/controls/owasp-llm-2025%3ALLM10/receipts?limit=2";
        let page1 = g.get_json(&key, path);
        assert_eq!(page1["receipts"].as_array().unwrap().len(), 2, "{page1}");
        let cursor = page1["nextCursor"].as_u64().expect("a second page");
        let page2 = g.get_json(&key, &format!("{path}&cursor={cursor}"));
        assert_eq!(page2["receipts"].as_array().unwrap().len(), 1);
        assert!(page2["nextCursor"].is_null());
        let bare = g.get_json(&key, "/v1/compliance/coverage/owasp-llm-2025/controls/LLM10/receipts");
        assert_eq!(bare["receipts"].as_array().unwrap().len(), 3);
        let ext = g.get_json(&key, "/v1/compliance/coverage/owasp-llm-2025/controls/owasp-llm-2025:LLM04/receipts");
        assert!(ext["receipts"].as_array().unwrap().is_empty() && ext["note"].is_string(), "{ext}");
        // GUARDRAIL never ran here (no guardrail configured): nothing proves LLM02.
        let none = g.get_json(&key, "/v1/compliance/coverage/owasp-llm-2025/controls/LLM02/receipts");
        assert!(none["receipts"].as_array().unwrap().is_empty(), "{none}");
        let nope = "/v1/compliance/coverage/owasp-llm-2025/controls/LLM99/receipts";
        assert_eq!(status(&g, &key, "GET", nope), 404);

        // Tenant packs: managers only, validated with line and column, path and body agree.
        let dev = g.mgmt(
            "POST",
            "/v1/keys",
            Some(&key),
            Some(&json!({"label": "dev", "keyClass": "service", "role": "developer"})),
        );
        assert_eq!(dev.status, 201, "{}", dev.text());
        let dev_key = dev.json()["key"].as_str().unwrap().to_string();
        assert_eq!(put_pack(&g, &dev_key, "acme-ai", ACME).status, 403);
        let bad = put_pack(&g, &key, "acme-ai", &ACME.replace("[RATELIMIT, BUDGET]", "[RATELIMIT, SPEED]"));
        assert_eq!(bad.status, 400);
        let msg = bad.json()["error"]["message"].as_str().unwrap().to_string();
        assert!(msg.starts_with("line 8, column ") && msg.contains("provenBy[1]") && msg.contains("SPEED"), "{msg}");
        let msg =
            put_pack(&g, &key, "acme-ai", "framework: [").json()["error"]["message"].as_str().unwrap().to_string();
        assert!(msg.starts_with("line ") && msg.contains(", column ") && !msg.contains("pack:"), "{msg}");
        assert_eq!(put_pack(&g, &key, "other", ACME).status, 400, "path and framework differ");
        assert_eq!(put_pack(&g, &key, "acme-ai", "framework: [").status, 400);
        let created = put_pack(&g, &key, "acme-ai", ACME);
        assert_eq!(created.status, 201, "{}", created.text());
        let created = created.json();
        assert_eq!(created["source"], "tenant");
        assert_eq!(created["packHash"], hex::encode(Sha256::digest(ACME.as_bytes())));
        assert_eq!(created["summary"], json!({"enforced": 1, "partial": 0, "external": 1, "total": 2}));
        let v2 = created["packSetVersion"].as_str().unwrap().to_string();
        assert_ne!(v2, v1);
        assert_eq!(put_pack(&g, &key, "acme-ai", ACME).status, 200, "a replace");
        let round = g.get_json(&key, "/v1/compliance/coverage/acme-ai");
        assert_eq!((round["source"].as_str(), round["title"].as_str()), (Some("tenant"), Some("Acme AI controls")));
        assert_eq!(round["gatewayDisclaimer"], tollgate::compliance::DISCLAIMER);
        assert_eq!(g.get_json(&key, "/v1/compliance/packs")["data"].as_array().unwrap().len(), 6);

        // A baseline framework replaced by a tenant pack, then restored by deleting it.
        let eu_raw = std::fs::read_to_string("conf/packs/eu-ai-act.yaml").unwrap();
        let eu_own =
            eu_raw.replace("title: \"EU AI Act (Regulation (EU) 2024/1689)\"", "title: \"EU AI Act, Acme reading\"");
        assert_ne!(eu_own, eu_raw);
        assert_eq!(put_pack(&g, &key, "eu-ai-act", &eu_own).status, 201);
        assert_eq!(g.get_json(&key, "/v1/compliance/coverage/eu-ai-act")["source"], "tenant");
        assert_eq!(status(&g, &key, "DELETE", "/v1/compliance/packs/eu-ai-act"), 204);
        let back = g.get_json(&key, "/v1/compliance/coverage/eu-ai-act");
        assert_eq!((back["source"].as_str(), back["packHash"].as_str()), (Some("baseline"), eu["packHash"].as_str()));
        assert_eq!(status(&g, &key, "DELETE", "/v1/compliance/packs/eu-ai-act"), 409, "baseline packs stay");
        assert_eq!(status(&g, &key, "DELETE", "/v1/compliance/packs/unknown"), 404);
        assert_eq!(g.get_json(&key, "/v1/compliance/packs")["packSetVersion"], v2.as_str(), "same packs, same version");

        // New receipts carry the new set; the old ones still resolve to theirs, after a restart too.
        let before = g.newest_seq(&key);
        let newer = g.say(&key, "gpt-4o-mini", "hi").receipt_id(); // a minute's limit is used up: 429, still a receipt
        assert_eq!(g.wait_receipts(&key, before + 1), before + 1);
        assert_eq!(g.get_json(&key, &format!("/v1/receipts/{newer}"))["receiptPackVersion"], v2.as_str());
        g.stop();
        g.spawn();
        let new_rc = g.get_json(&key, &format!("/v1/compliance/receipts/{newer}/controls?framework=acme-ai"));
        let limits = control(&new_rc, "acme-ai", "acme-ai:limits");
        assert_eq!((limits["check"].as_str(), limits["result"].as_str()), (Some("RATELIMIT"), Some("BLOCK")));
        let old_rc = g.get_json(&key, &format!("/v1/compliance/receipts/{blocked}/controls"));
        assert!(old_rc["frameworks"].as_array().unwrap().iter().all(|f| f["resolution"] == "stamped"));
        assert_eq!(old_rc["frameworks"].as_array().unwrap().len(), 5, "acme-ai was not in force then");
        assert_eq!(
            status(&g, &key, "GET", &format!("/v1/compliance/receipts/{blocked}/controls?framework=acme-ai")),
            404
        );

        // The attestation lists the packs in force and the versions observed: over the whole log,
        // the four calls and the admin receipts of the writes between them (which carry no stamp).
        let a = g.get_json(&key, &format!("/v1/compliance/attestation?fromSeq=1&toSeq={}", g.newest_seq(&key)));
        assert_eq!(a["totals"]["receipts"], 4, "{}", a["totals"]);
        assert_eq!(a["packsInForce"].as_array().unwrap().len(), 6, "{}", a["packsInForce"]);
        assert_eq!(
            a["packVersionsObserved"],
            json!([v1.clone(), v2.clone()].iter().collect::<std::collections::BTreeSet<_>>())
        );

        // An unknown stamp, and a receipt whose stored fields were altered.
        g.sql(&format!(
            "UPDATE receipts SET receipt_pack_version = 'ps-000000000000' WHERE receipt_id = '{}'",
            ids[0].1
        ));
        let unknown = g.get_json(&key, &format!("/v1/compliance/receipts/{}/controls", ids[0].1));
        assert!(unknown["frameworks"].as_array().unwrap().iter().all(|f| f["resolution"] == "unknown"), "{unknown}");
        g.sql(&format!("UPDATE receipts SET model = 'gpt-other' WHERE receipt_id = '{}'", ids[1].1));
        let altered = g.get_json(&key, &format!("/v1/compliance/receipts/{}/controls?framework=eu-ai-act", ids[1].1));
        assert_eq!(altered["verified"], false);
        assert!(altered["note"].as_str().unwrap().contains("does not verify"), "{altered}");
        let art12 = control(&altered, "eu-ai-act", "eu-ai-act:art-12");
        assert_eq!(art12["result"], "FAIL");
    }
}

#[test]
fn stamping_can_be_switched_off() {
    let b = &backends()[0];
    let (g, _up) = support::with_standin(b, &[("TOLLGATE_STAMP_PACK_VERSION", "false")]);
    let before = g.newest_seq(&g.key);
    let r = g.say(&g.key, "gpt-4o-mini", "hi");
    let (s, id) = (r.status, r.receipt_id());
    assert_eq!(s, 200);
    assert_eq!(g.wait_receipts(&g.key, before + 1), before + 1);
    assert_eq!(g.get_json(&g.key, &format!("/v1/receipts/{id}"))["receiptPackVersion"], "");
    let rc = g.get_json(&g.key, &format!("/v1/compliance/receipts/{id}/controls"));
    assert_eq!(rc["receiptPackVersion"], "");
    assert!(rc["frameworks"].as_array().unwrap().iter().all(|f| f["resolution"] == "unstamped"), "{rc}");
}

#[test]
fn another_tenants_packs_and_receipts_are_not_found() {
    for b in backends() {
        let (g, _up) = support::with_standin(&b, &[]);
        let before = g.newest_seq(&g.key);
        let id = g.say(&g.key, "gpt-4o-mini", "hi").receipt_id();
        assert_eq!(g.wait_receipts(&g.key, before + 1), before + 1);
        assert_eq!(put_pack(&g, &g.key, "acme-ai", ACME).status, 201);
        let (_, other) = g.create_tenant_live("globex");
        for path in [
            format!("/v1/compliance/receipts/{id}/controls"),
            format!("/v1/compliance/receipts/{id}/controls?framework=eu-ai-act"),
            "/v1/compliance/coverage/acme-ai".to_string(),
            "/v1/compliance/coverage/acme-ai/controls/acme-ai:limits/receipts".to_string(),
        ] {
            assert_eq!(status(&g, &other, "GET", &path), 404, "{path}");
        }
        assert_eq!(status(&g, &other, "DELETE", "/v1/compliance/packs/acme-ai"), 404);
        assert_eq!(g.get_json(&other, "/v1/compliance/packs")["data"].as_array().unwrap().len(), 5);
        // Art. 12 is proven by RECEIPT, which every receipt of a call proves: the list is the
        // tenant's own call receipts, here our one call. The admin receipts of the writes above
        // are not evidence of a control (docs/log.md §8: coverage ignores them).
        let mine = g.get_json(&g.key, "/v1/compliance/coverage/eu-ai-act/controls/art-12/receipts");
        let calls: Vec<&str> =
            mine["receipts"].as_array().unwrap().iter().map(|r| r["receiptId"].as_str().unwrap()).collect();
        assert_eq!(calls, [id.as_str()], "{mine}");
        let theirs = g.get_json(&other, "/v1/compliance/coverage/eu-ai-act/controls/art-12/receipts");
        assert!(theirs["receipts"].as_array().unwrap().is_empty(), "{theirs}");
    }
}

#[test]
fn check_config_names_the_pack_file_line_and_column() {
    let dir = std::env::temp_dir().join(format!("tollgate-pack-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    // Not in the policy directory, which check-config reads as policies.
    let file = std::env::temp_dir().join(format!("tollgate-pack-{}.yaml", uuid::Uuid::new_v4().simple()));
    std::fs::write(&file, ACME.replace("[RATELIMIT, BUDGET]", "[RATELIMIT, SPEED]")).unwrap();
    let out = std::process::Command::new(support::bin())
        .args(["check-config", "--pack", file.to_str().unwrap()])
        .env("TOLLGATE_POLICY_DIR", &dir)
        .env("TOLLGATE_DATA_DIR", &dir)
        .output()
        .unwrap();
    assert!(!out.status.success());
    // On the command line a position stays `file:line:column`, the form editors and CI jump to.
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("{}:8:", file.display())) && err.contains("provenBy[1]"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(&file);
}
