//! Retention and legal hold of the tenant log (docs/log.md §7), end to end on every backend: the
//! retention routes and their floor, legal holds (and another tenant's ids), `tollgate log sweep
//! --as-of` in the future so that today's receipts count as old; then a pruned receipt answers
//! 410 with what is left of it, lists and exports skip it and say so, a held or young receipt
//! survives, a second sweep changes nothing, a checkpoint saved before the sweep proves
//! consistent with one after it, and verify-chain, the attestation and the evidence bundle
//! (checked offline by `tollgate verify`) still hold over the pruned range.

mod support;

use base64::Engine;
use serde_json::{json, Value};
use support::{backends, Gateway};
use tlog_tiles::tlog::{self, Hash};

fn traffic(g: &Gateway, n: usize) {
    for i in 0..n {
        assert_eq!(g.say(&g.key, "gpt-4o-mini", &format!("hello {i}")).status, 200);
    }
}

/// `(seq, receiptId)` of every receipt the list shows (calls and the `admin` receipts of
/// management writes and evidence reads, docs/log.md §8), ascending, and its `prunedBefore`.
fn listed(g: &Gateway) -> (Vec<(u64, String)>, Value) {
    let page = g.get_json(&g.key, "/v1/receipts?limit=200");
    let mut out: Vec<(u64, String)> = page["receipts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["seq"].as_u64().unwrap(), r["receiptId"].as_str().unwrap().to_string()))
        .collect();
    out.sort();
    (out, page["prunedBefore"].clone())
}

/// The checkpoint's size and root.
fn checkpoint(g: &Gateway) -> (u64, Hash) {
    let note = g.mgmt("GET", "/v1/log/checkpoint", Some(&g.key), None).text();
    let mut lines = note.split('\n').skip(1);
    let size = lines.next().unwrap().parse().unwrap();
    let root = base64::engine::general_purpose::STANDARD.decode(lines.next().unwrap()).unwrap();
    (size, Hash(root.try_into().unwrap()))
}

fn hashes(v: &Value) -> Vec<Hash> {
    v.as_array().unwrap().iter().map(|h| Hash(hex::decode(h.as_str().unwrap()).unwrap().try_into().unwrap())).collect()
}

/// `tollgate log sweep --as-of <now + days>`: its output.
fn sweep(g: &Gateway, days_ahead: i64) -> String {
    let as_of = (chrono::Utc::now() + chrono::Duration::days(days_ahead)).to_rfc3339();
    let out = g.cli(&["log", "sweep", "--as-of", &as_of]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    text
}

/// The retention routes: the default, the floor, who may set it.
fn retention_routes(g: &Gateway) {
    let r = g.get_json(&g.key, "/v1/log/retention");
    assert_eq!(
        (r["days"].clone(), r["floorDays"].clone(), r["prunedBefore"].clone()),
        (json!(null), json!(183), json!(null))
    );
    let put = |key: &str, body: Value| g.mgmt("PUT", "/v1/log/retention", Some(key), Some(&body));
    let r = put(&g.key, json!({"days": 30}));
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["error"]["type"], "invalid_request");
    assert!(r.json()["error"]["message"].as_str().unwrap().contains("183"), "names the floor: {}", r.text());
    for bad in [json!({}), json!({"days": -1}), json!({"days": "a year"}), json!({"days": 400, "x": 1})] {
        assert_eq!(put(&g.key, bad.clone()).status, 400, "{bad}");
    }
    let (_, developer) = g.create_key("developer");
    assert_eq!(put(&developer, json!({"days": 365})).status, 403);
    assert_eq!(g.mgmt("GET", "/v1/log/retention", Some(&developer), None).status, 200);
    let (_, auditor) = g.new_key(&g.key, &json!({"label": "auditor", "role": "auditor"}));
    assert_eq!(g.mgmt("GET", "/v1/log/retention", Some(&auditor), None).status, 200, "an auditor reads it");
    assert_eq!(g.mgmt("GET", "/v1/log/holds", Some(&auditor), None).status, 200);
    assert_eq!(put(&auditor, json!({"days": 365})).status, 403, "and changes nothing");
    let r = put(&g.key, json!({"days": 365}));
    assert_eq!((r.status, r.json()["days"].clone()), (200, json!(365)), "{}", r.text());
    let r = put(&g.key, json!({"days": null}));
    assert_eq!((r.status, r.json()["days"].clone()), (200, json!(null)), "{}", r.text());
}

/// Holds: created (by the acting key), listed, released; another tenant sees none of them.
/// Returns the id of a hold left in force on seq `from..=to`.
fn holds(g: &Gateway, from: u64, to: u64) -> String {
    let keys = g.get_json(&g.key, "/v1/keys");
    let manager = keys["data"].as_array().unwrap().iter().find(|k| k["role"] == "manager").unwrap();
    let manager_id = manager["id"].as_str().unwrap().to_string();
    let create = |key: &str, body: Value| g.mgmt("POST", "/v1/log/holds", Some(key), Some(&body));
    let r = create(&g.key, json!({"fromSeq": from, "toSeq": to, "reason": "matter 2026-7"}));
    assert_eq!(r.status, 201, "{}", r.text());
    let hold = r.json();
    assert_eq!((hold["fromSeq"].as_u64(), hold["toSeq"].as_u64()), (Some(from), Some(to)));
    assert_eq!((hold["reason"].as_str(), hold["createdBy"].as_str()), (Some("matter 2026-7"), Some(&*manager_id)));
    assert!(hold["createdAt"].is_string());
    let id = hold["id"].as_str().unwrap().to_string();
    for bad in [
        json!({"fromSeq": 5, "toSeq": 4, "reason": "r"}),
        json!({"fromSeq": 0, "toSeq": 4, "reason": "r"}),
        json!({"fromSeq": 1, "toSeq": 4, "reason": " "}),
        json!({"fromSeq": 1, "toSeq": 4}),
    ] {
        assert_eq!(create(&g.key, bad.clone()).status, 400, "{bad}");
    }
    let (_, developer) = g.create_key("holder");
    assert_eq!(create(&developer, json!({"fromSeq": 1, "toSeq": 2, "reason": "r"})).status, 403);

    let spare = create(&g.key, json!({"fromSeq": 1, "toSeq": 1, "reason": "to release"})).json();
    let spare = spare["id"].as_str().unwrap();
    let list = g.get_json(&g.key, "/v1/log/holds");
    let ids: Vec<&str> = list["data"].as_array().unwrap().iter().map(|h| h["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [id.as_str(), spare]);
    assert_eq!(g.get_json(&g.key, "/v1/log/holds?limit=1")["nextCursor"], id.as_str());

    let (_, other) = g.create_tenant_live("other");
    assert_eq!(g.get_json(&other, "/v1/log/holds")["data"], json!([]));
    let r = g.mgmt("DELETE", &format!("/v1/log/holds/{spare}"), Some(&other), None);
    assert_eq!((r.status, r.json()["error"]["type"].clone()), (404, json!("not_found")), "another tenant's hold");
    assert_eq!(g.mgmt("DELETE", &format!("/v1/log/holds/{spare}"), Some(&developer), None).status, 403);
    assert_eq!(g.mgmt("DELETE", &format!("/v1/log/holds/{spare}"), Some(&g.key), None).status, 204);
    assert_eq!(g.mgmt("DELETE", &format!("/v1/log/holds/{spare}"), Some(&g.key), None).status, 404);
    assert_eq!(g.get_json(&g.key, "/v1/log/holds")["data"].as_array().unwrap().len(), 1);
    id
}

/// What a client sees of the pruned log: 410s, lists and exports that skip and say so.
/// `pruned_max`: the highest pruned seq.
fn pruned_view(
    g: &Gateway,
    ids: &[(u64, String)],
    hashes_before: &[String],
    held: std::ops::RangeInclusive<u64>,
    pruned_max: u64,
) {
    for (seq, id) in ids {
        let r = g.mgmt("GET", &format!("/v1/receipts/{id}"), Some(&g.key), None);
        if held.contains(seq) {
            assert_eq!((r.status, r.json()["verified"].clone()), (200, json!(true)), "held seq {seq}: {}", r.text());
            continue;
        }
        assert_eq!(r.status, 410, "seq {seq}: {}", r.text());
        let body = r.json();
        assert_eq!(
            (body["error"]["type"].as_str(), body["error"]["code"].as_u64()),
            (Some("receipt_pruned"), Some(410))
        );
        assert!(body["error"]["message"].is_string());
        assert_eq!(
            (body["seq"].as_u64(), body["thisHash"].as_str()),
            (Some(*seq), Some(&*hashes_before[*seq as usize - 1]))
        );
        let r = g.mgmt("GET", &format!("/v1/compliance/receipts/{id}/controls"), Some(&g.key), None);
        assert_eq!(r.status, 410, "{}", r.text());
    }
    let (shown, pruned_before) = listed(g);
    assert!(shown.iter().all(|(s, _)| held.contains(s) || *s > pruned_max), "{shown:?}");
    assert_eq!(pruned_before, json!(pruned_max + 1));
    let export = g.mgmt("GET", "/v1/receipts/export", Some(&g.key), None);
    assert_eq!(export.status, 200);
    assert_eq!(export.header("x-tollgate-pruned-through"), Some(&*pruned_max.to_string()));
    let seqs: Vec<u64> =
        export.text().lines().map(|l| serde_json::from_str::<Value>(l).unwrap()["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, shown.iter().map(|(s, _)| *s).collect::<Vec<_>>(), "the export skips what the list skips");
    // The export is an evidence read: its admin receipt is listed now, after the pruned range.
    let (shown, _) = listed(g);
    assert_eq!(shown.last().map(|(s, _)| *s), Some(g.newest_seq(&g.key)));
    assert!(shown.iter().all(|(s, _)| held.contains(s) || *s > pruned_max), "{shown:?}");
    let csv = g.mgmt("GET", "/v1/receipts/export?format=csv", Some(&g.key), None);
    assert_eq!(csv.text().lines().count(), shown.len() + 1, "a header and the kept receipts");
}

/// After the sweep and more traffic: the old checkpoint is a prefix of the new log, the chain
/// verifies from the first kept receipt (and over the pruned range), and the attestation and
/// the bundle still prove the whole range.
fn proofs_after(g: &Gateway, before: (u64, Hash), pruned: u64) {
    // Since `before`: the admin receipts of the exports above (evidence reads), then 3 calls.
    let grown = g.newest_seq(&g.key);
    assert!(grown > before.0);
    traffic(g, 3);
    let (size, root) = checkpoint(g);
    assert_eq!(size, grown + 3);
    let p = g.get_json(&g.key, &format!("/v1/log/consistency?from={}&to={size}", before.0));
    assert_eq!(p["fromRoot"], hex::encode(before.1 .0), "the tree at the old size is unchanged");
    tlog::check_tree(&hashes(&p["proof"]), size, root, before.0, before.1).expect("consistent across the sweep");
    let inc = g.get_json(&g.key, &format!("/v1/log/inclusion?seq=1&size={size}"));
    tlog::check_record(
        &hashes(&inc["proof"]),
        size,
        root,
        0,
        Hash(hex::decode(inc["leafHash"].as_str().unwrap()).unwrap().try_into().unwrap()),
    )
    .expect("a pruned receipt's leaf is still proven");

    let (shown, _) = listed(g);
    let (first_kept, id) = shown.iter().find(|(s, _)| *s == before.0 + 1).unwrap().clone();
    let r = g.get_json(&g.key, &format!("/v1/receipts/{id}/verify-chain?from={first_kept}&to={size}"));
    let count = size - before.0;
    assert_eq!(
        r,
        json!({"ok": true, "count": count, "brokenAtSeq": null, "gapAtSeq": null}),
        "anchored on a pruned leaf"
    );
    let r = g.get_json(&g.key, &format!("/v1/receipts/{id}/verify-chain?from=1&to={size}"));
    assert_eq!((r["ok"].clone(), r["pruned"].clone()), (json!(true), json!(pruned)), "{r}");
    assert_eq!(r["count"], size - pruned);

    let a = g.get_json(&g.key, &format!("/v1/compliance/attestation?fromSeq=1&toSeq={size}"));
    assert_eq!(a["merkle"]["root"], hex::encode(root.0), "the attestation's root is the log's");
    let t = &a["totals"];
    assert_eq!((t["chainVerified"].clone(), t["signaturesVerified"].clone()), (json!(true), json!(true)), "{t}");
    assert_eq!(t["prunedReceipts"].as_u64(), Some(pruned), "{t}");
    // Kept: the held two calls and the three new ones; the rest kept are admin receipts.
    assert_eq!((t["receipts"].as_u64(), t["adminEvents"].as_u64()), (Some(5), Some(size - pruned - 5)), "{t}");

    let bundle = g.mgmt("GET", &format!("/v1/compliance/evidence-bundle?fromSeq=1&toSeq={size}"), Some(&g.key), None);
    assert_eq!(bundle.status, 200);
    let doc = bundle.json();
    assert_eq!(doc["prunedLeaves"].as_array().unwrap().len() as u64, pruned);
    assert_eq!(doc["receipts"].as_array().unwrap().len() as u64, size - pruned);
    assert!(doc["prunedBefore"].is_u64());
    let path = g.dir.join("bundle.json");
    std::fs::write(&path, &bundle.body).unwrap();
    let out = g.cli(&["verify", path.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "the bundle verifies offline over pruned leaves: {text}");
    assert!(text.contains(&format!("{pruned} pruned leaves")), "{text}");
    let mut forged = doc.clone();
    forged["prunedLeaves"][0]["thisHash"] = json!("ab".repeat(32));
    std::fs::write(&path, serde_json::to_vec(&forged).unwrap()).unwrap();
    assert!(!g.cli(&["verify", path.to_str().unwrap()]).status.success(), "a forged pruned leaf fails");
}

/// Every receipt of the log is listed, seq 1 up to the newest (nothing pruned yet).
fn all_listed(g: &Gateway) -> Vec<(u64, String)> {
    let (ids, pruned_before) = listed(g);
    let size = g.newest_seq(&g.key);
    assert!(ids.iter().map(|(s, _)| *s).eq(1..=size), "{ids:?}");
    assert_eq!(pruned_before, json!(null));
    ids
}

/// The log holds the admin receipts of every management write (docs/log.md §8) beside the 12
/// calls: the stand-in's providers, the retention and key writes above, the holds. A sweep
/// prunes those too, so the counts below are of the whole log, held calls apart.
fn retention_end_to_end(g: &Gateway) {
    retention_routes(g);
    let setup = g.newest_seq(&g.key);
    traffic(g, 12);
    assert_eq!(g.call_count(&g.key), 12);
    // The 3rd and 4th calls.
    let held = setup + 3..=setup + 4;
    let hold = holds(g, *held.start(), *held.end());

    // Younger than the retention: nothing goes, and the tree is the same.
    let r = g.mgmt("PUT", "/v1/log/retention", Some(&g.key), Some(&json!({"days": 365})));
    assert_eq!(r.status, 200, "{}", r.text());
    let ids = all_listed(g);
    let before = checkpoint(g);
    let out = sweep(g, 200);
    assert!(out.contains("pruned 0 receipts"), "{out}");
    assert_eq!(all_listed(g), ids);
    assert_eq!(checkpoint(g), before);

    // 200 days on, a 183-day retention: all but the held two go, the admin receipt of this
    // very write included.
    let r = g.mgmt("PUT", "/v1/log/retention", Some(&g.key), Some(&json!({"days": 183})));
    assert_eq!(r.status, 200, "{}", r.text());
    let ids = all_listed(g);
    let hashes_before: Vec<String> =
        ids.iter().map(|(_, id)| g.receipt(id)["thisHash"].as_str().unwrap().to_string()).collect();
    let before = checkpoint(g);
    assert_eq!(before.0, ids.len() as u64);
    let pruned = before.0 - 2;
    let out = sweep(g, 200);
    assert!(out.contains(&format!("tenant {}: retention 183 days, pruned {pruned} receipts", g.tenant_id)), "{out}");

    // Idempotent: the same state after a second sweep. (Nothing recorded in between: an export
    // here would append an admin receipt, which the sweep, 200 days on, would then prune.)
    let after_first = g.get_json(&g.key, "/v1/receipts?limit=200");
    let retention = g.get_json(&g.key, "/v1/log/retention");
    assert_eq!(retention["prunedBefore"], before.0 + 1);
    let out = sweep(g, 200);
    assert!(out.contains("pruned 0 receipts"), "{out}");
    assert_eq!(g.get_json(&g.key, "/v1/receipts?limit=200"), after_first);
    assert_eq!(g.get_json(&g.key, "/v1/log/retention"), retention);
    assert_eq!(checkpoint(g), before, "the same tree after the sweeps");
    pruned_view(g, &ids, &hashes_before, held, before.0);

    proofs_after(g, before, pruned);

    // Released, the hold's receipts go at the next sweep, with everything kept since: the three
    // newer calls and the admin receipts of the reads and the release.
    assert_eq!(g.mgmt("DELETE", &format!("/v1/log/holds/{hold}"), Some(&g.key), None).status, 204);
    let kept = g.newest_seq(&g.key) - pruned;
    assert!(sweep(g, 200).contains(&format!("pruned {kept} receipts")), "the held two and everything newer");
    assert_eq!(listed(g).0, vec![]);
}

#[test]
fn retention_prunes_contents_and_keeps_the_log() {
    for b in backends() {
        let (g, _up) = support::with_standin(&b, &[]);
        retention_end_to_end(&g);
    }
}
