//! `tollgate verify BUNDLE.json`: checks an evidence bundle offline (docs/receipts.md §4) with
//! nothing but the bundle and, optionally, pinned public keys: every signature, every
//! `thisHash`, the chain from the anchor with no gap, the RFC 6962 root against `merkle.root`
//! and `attestation.merkle.root`, and the signed tree head.
//!
//! The document is read as a stream: receipts are checked one by one as they are parsed, so a
//! bundle of millions of receipts needs memory for one receipt, not for the file. That works
//! when `anchor` and `signingKeys` come before `receipts`, as Tollgate writes them; for any
//! other member order the receipts are held until those two have been read. The leaves of the
//! period's pruned receipts (`prunedLeaves`, docs/log.md §7) must come before `receipts`, as
//! Tollgate writes them: they are held (40 bytes each) and merged into the walk by seq.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::io::Read;

use base64::Engine;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::attestation::{tree_head_bytes, MERKLE_ALGORITHM};
use super::bundle::FORMAT;
use super::walk::KeyRing;
use crate::receipts::canonical::{self, Check, Receipt};
use crate::receipts::merkle::{self, RootBuilder};
use crate::receipts::signer::RegisteredKey;
use crate::receipts::{Term, UpstreamStatus};
use crate::tenant_log::checkpoint;
use crate::tenant_log::timestamp::{self, Roots};

/// One line of the report: what was checked and whether it held.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub ok: bool,
    pub text: String,
}

#[derive(Debug, Default)]
pub struct Report {
    pub lines: Vec<Line>,
    /// The first failure found, with the seq where it applies.
    pub first_failure: Option<String>,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.first_failure.is_none() && self.lines.iter().all(|l| l.ok)
    }

    fn line(&mut self, ok: bool, text: impl Into<String>) {
        let text = text.into();
        if !ok && self.first_failure.is_none() {
            self.first_failure = Some(text.clone());
        }
        self.lines.push(Line { ok, text });
    }

    fn fail(&mut self, text: String) {
        self.first_failure.get_or_insert(text);
    }
}

/// A receipt as the bundle lists it: the signed members plus chain fields.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    v: u32,
    tenant_id: String,
    seq: u64,
    receipt_id: String,
    request_id: String,
    actor: String,
    provider: String,
    model: String,
    prompt_tokens: u64,
    completion_tokens: u64,
    cost_usd: f64,
    checks: Vec<Check>,
    upstream_status: Term<UpstreamStatus>,
    ts: String,
    prev_hash: String,
    /// Only on `admin` receipts (signed there).
    #[serde(default)]
    subject: Option<String>,
    this_hash: String,
    signature: String,
    key_id: String,
}

/// A receipt whose contents a retention sweep deleted: its seq and kept `thisHash`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PrunedLeaf {
    seq: u64,
    this_hash: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Anchor {
    seq: u64,
    this_hash: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct KeyDoc {
    key_id: String,
    algorithm: String,
    public_key: String,
    #[serde(default)]
    created_at: String,
    #[serde(default)]
    retired_at: Option<String>,
}

/// The running checks over the receipts array.
struct Chain {
    tenant: Option<String>,
    /// The seq of the anchor the walk starts after.
    anchor_seq: u64,
    keys: KeyRing,
    prev: String,
    next_seq: u64,
    merkle: RootBuilder,
    count: u64,
    hashes_ok: u64,
    signatures_ok: u64,
    links_ok: u64,
    key_ids: BTreeSet<String>,
    first_seq: Option<u64>,
    failure: Option<String>,
    /// The pruned leaves not yet reached, ascending, and how many were taken.
    pruned: VecDeque<PrunedLeaf>,
    pruned_count: u64,
}

impl Chain {
    fn new(tenant: Option<String>, anchor: &Anchor, keys: KeyRing, pruned: Vec<PrunedLeaf>) -> Chain {
        Chain {
            tenant,
            anchor_seq: anchor.seq,
            keys,
            prev: anchor.this_hash.clone(),
            next_seq: anchor.seq + 1,
            merkle: RootBuilder::new(),
            count: 0,
            hashes_ok: 0,
            signatures_ok: 0,
            links_ok: 0,
            key_ids: BTreeSet::new(),
            first_seq: None,
            failure: None,
            pruned: pruned.into(),
            pruned_count: 0,
        }
    }

    /// Takes the pruned leaves below `seq` in order: each must be the next seq; its `thisHash`
    /// is a leaf of the root and what the next receipt links to. Nothing else of it is left.
    fn take_pruned_below(&mut self, seq: u64) {
        while self.pruned.front().is_some_and(|p| p.seq < seq) {
            let Some(p) = self.pruned.pop_front() else { break };
            self.first_seq.get_or_insert(p.seq);
            if p.seq != self.next_seq {
                self.fail(p.seq, &format!("expected seq {} here (a pruned leaf is out of order)", self.next_seq));
            }
            match merkle::from_hex(&p.this_hash) {
                Some(h) => self.merkle.push(merkle::leaf_hash(&h)),
                None => {
                    self.fail(p.seq, "a pruned leaf's thisHash is not 64 lowercase hex digits");
                    self.merkle.push(merkle::leaf_hash(Sha256::digest(p.this_hash.as_bytes()).as_slice()));
                }
            }
            self.prev = p.this_hash;
            self.next_seq = p.seq + 1;
            self.pruned_count += 1;
        }
    }

    fn fail(&mut self, seq: u64, what: &str) {
        self.failure.get_or_insert_with(|| format!("seq {seq}: {what}"));
    }

    fn check(&mut self, e: Entry) {
        let seq = e.seq;
        self.take_pruned_below(seq);
        self.first_seq.get_or_insert(seq);
        if self.tenant.as_deref().is_some_and(|t| t != e.tenant_id) {
            self.fail(seq, "tenantId differs from the bundle's tenantId");
        }
        if seq != self.next_seq {
            self.fail(seq, &format!("expected seq {} here (a receipt is missing or out of order)", self.next_seq));
        }
        if e.prev_hash == self.prev {
            self.links_ok += 1;
        } else {
            self.fail(seq, "prevHash does not equal the previous receipt's thisHash (or the anchor's)");
        }
        let receipt = Receipt {
            v: e.v,
            tenant_id: e.tenant_id,
            seq,
            receipt_id: e.receipt_id,
            request_id: e.request_id,
            actor: e.actor,
            provider: e.provider,
            model: e.model,
            prompt_tokens: e.prompt_tokens,
            completion_tokens: e.completion_tokens,
            cost_usd: e.cost_usd,
            checks: e.checks,
            upstream_status: e.upstream_status,
            ts: e.ts,
            prev_hash: e.prev_hash,
            subject: e.subject,
        };
        // The generic RFC 8785 canonicalizer, not the writer's hand-rolled one: a second
        // implementation is what makes this an independent check.
        let bytes = canonical::canonical_bytes(&receipt);
        if canonical::sha256_hex(&bytes) == e.this_hash {
            self.hashes_ok += 1;
        } else {
            self.fail(seq, "thisHash does not match SHA-256 of the canonical (RFC 8785) members");
        }
        if self.keys.verify(&e.key_id, &bytes, &e.signature) {
            self.signatures_ok += 1;
        } else {
            self.fail(seq, &format!("Ed25519 signature does not verify with signing key {}", e.key_id));
        }
        match merkle::from_hex(&e.this_hash) {
            Some(h) => self.merkle.push(merkle::leaf_hash(&h)),
            None => {
                self.fail(seq, "thisHash is not 64 lowercase hex digits");
                self.merkle.push(merkle::leaf_hash(Sha256::digest(e.this_hash.as_bytes()).as_slice()));
            }
        }
        self.key_ids.insert(e.key_id);
        self.prev = e.this_hash;
        self.next_seq = seq + 1;
        self.count += 1;
    }
}

/// What the top-level members hold after parsing.
#[derive(Default)]
struct Parsed {
    format: Option<String>,
    tenant: Option<String>,
    period: Option<Value>,
    anchor: Option<Anchor>,
    keys: Option<Vec<KeyDoc>>,
    merkle: Option<Value>,
    attestation: Option<Value>,
    /// The tenant log's checkpoint and the inclusion of `toSeq` (docs/log.md §6); older bundles
    /// have none.
    log: Option<Value>,
    chain: Option<Chain>,
    /// Receipts met before `anchor`/`signingKeys` (other member orders).
    held: Option<Vec<Entry>>,
    /// `prunedLeaves`, until the chain takes them.
    pruned: Vec<PrunedLeaf>,
    /// `prunedLeaves` came after receipts had been checked: they cannot be merged in.
    pruned_late: bool,
    pinned: Vec<[u8; 32]>,
    key_failure: Option<String>,
}

impl Parsed {
    fn ring(&mut self) -> KeyRing {
        let docs = self.keys.as_deref().unwrap_or_default();
        let registry: Vec<RegisteredKey> = docs
            .iter()
            .filter(|k| {
                let raw = base64::engine::general_purpose::STANDARD.decode(&k.public_key).unwrap_or_default();
                let Ok(raw) = <[u8; 32]>::try_from(raw.as_slice()) else { return false };
                let derived = canonical::sha256_hex(&raw)[..16].to_string();
                if derived != k.key_id || k.algorithm != "ed25519" {
                    self.key_failure.get_or_insert(format!(
                        "signing key {}: keyId is not SHA-256(publicKey)[0:16] or algorithm is not ed25519",
                        k.key_id
                    ));
                    return false;
                }
                self.pinned.is_empty() || self.pinned.contains(&raw)
            })
            .map(|k| RegisteredKey {
                key_id: k.key_id.clone(),
                algorithm: k.algorithm.clone(),
                public_key: k.public_key.clone(),
                created_at: k.created_at.clone(),
                retired_at: k.retired_at.clone(),
            })
            .collect();
        KeyRing::new(&registry)
    }

    fn start_chain(&mut self) -> Option<&mut Chain> {
        if self.chain.is_none() && self.anchor.is_some() && self.keys.is_some() {
            let ring = self.ring();
            let anchor = self.anchor.as_ref()?;
            self.chain = Some(Chain::new(self.tenant.clone(), anchor, ring, std::mem::take(&mut self.pruned)));
        }
        self.chain.as_mut()
    }
}

struct Receipts<'a>(&'a mut Parsed);

impl<'de> DeserializeSeed<'de> for Receipts<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Receipts<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of receipts")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(e) = seq.next_element::<Entry>()? {
            match self.0.start_chain() {
                Some(chain) => chain.check(e),
                None => self.0.held.get_or_insert_with(Vec::new).push(e),
            }
        }
        Ok(())
    }
}

struct Top<'a>(&'a mut Parsed);

impl<'de> DeserializeSeed<'de> for Top<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Top<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an evidence bundle object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let p = self.0;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "format" => p.format = Some(map.next_value()?),
                "tenantId" => p.tenant = Some(map.next_value()?),
                "period" => p.period = Some(map.next_value()?),
                "anchor" => p.anchor = Some(map.next_value()?),
                "signingKeys" => p.keys = Some(map.next_value()?),
                "merkle" => p.merkle = Some(map.next_value()?),
                "attestation" => p.attestation = Some(map.next_value()?),
                "log" => p.log = Some(map.next_value()?),
                "prunedLeaves" => {
                    p.pruned = map.next_value()?;
                    p.pruned_late = p.chain.is_some();
                }
                "receipts" => map.next_value_seed(Receipts(p))?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// Verifies a bundle read from `input`. `pinned` (raw public keys) restricts which signing keys
/// are trusted; empty = the keys the bundle lists (self-asserted, and said so in the report).
/// `tsa_roots` (`--tsa-ca`) are the roots a timestamp's signer must chain to; without them the
/// timestamp's imprint and genTime are checked and its signature is reported unchecked.
pub fn verify(input: impl Read, pinned: &[[u8; 32]], tsa_roots: Option<&Roots>) -> Report {
    let mut report = Report::default();
    let mut p = Parsed { pinned: pinned.to_vec(), ..Parsed::default() };
    let mut de = serde_json::Deserializer::from_reader(std::io::BufReader::with_capacity(1 << 20, input));
    if let Err(e) = Top(&mut p).deserialize(&mut de).and_then(|_| de.end()) {
        report.line(false, format!("the bundle is not a well-formed evidence bundle: {e}"));
        return report;
    }
    report.line(
        p.format.as_deref() == Some(FORMAT),
        format!("format is {FORMAT} (found {:?})", p.format.as_deref().unwrap_or("none")),
    );
    let Some(mut chain) = walked_chain(&mut p, &mut report) else { return report };
    let period = p.period.clone().unwrap_or(Value::Null);
    let to_seq = period["toSeq"].as_u64();
    chain_lines(&mut report, &chain, &period, pinned.is_empty());
    let leaf_count = chain.merkle.len();
    let root = merkle::to_hex(&std::mem::take(&mut chain.merkle).finish());
    root_lines(&mut report, &p, &chain, &period, &root, leaf_count);
    let proved = (chain.count + chain.pruned_count > 0).then_some(to_seq).flatten();
    check_log(&mut report, &p, &chain.prev, proved, tsa_roots);
    report
}

/// The receipts walked from the anchor (those met before `anchor`/`signingKeys` too), the
/// pruned leaves merged in, and the first per-receipt failure reported; None (reported) when
/// the bundle has no anchor or keys.
fn walked_chain(p: &mut Parsed, report: &mut Report) -> Option<Chain> {
    if p.anchor.is_none() || p.keys.is_none() {
        report.line(false, "the bundle has `anchor` and `signingKeys`");
        return None;
    }
    let mut chain = match p.chain.take() {
        Some(c) => c,
        None => {
            let ring = p.ring();
            let pruned = std::mem::take(&mut p.pruned);
            Chain::new(p.tenant.clone(), p.anchor.as_ref().expect("checked above"), ring, pruned)
        }
    };
    for e in p.held.take().unwrap_or_default() {
        chain.check(e);
    }
    chain.take_pruned_below(u64::MAX);
    if p.pruned_late {
        report.line(false, "prunedLeaves comes before receipts (as Tollgate writes it)");
    }
    if let Some(f) = p.key_failure.take() {
        report.line(false, f);
    }
    // The per-receipt failure names the seq: it goes first, before the summary lines.
    if let Some(f) = chain.failure.take() {
        report.fail(f);
    }
    Some(chain)
}

/// The period, hash, signature and link lines of the walk.
fn chain_lines(report: &mut Report, chain: &Chain, period: &Value, self_keyed: bool) {
    let keys_note = if self_keyed {
        "keys as listed in the bundle; pass --key to pin trusted public keys"
    } else {
        "keys pinned with --key"
    };
    let anchor_seq = chain.anchor_seq;
    let (from_seq, to_seq) = (period["fromSeq"].as_u64(), period["toSeq"].as_u64());
    let expected = from_seq.zip(to_seq).map(|(f, t)| (t + 1).saturating_sub(f));
    let (n, pruned) = (chain.count, chain.pruned_count);
    let shown = |v: Option<u64>| v.map_or("?".into(), |v| v.to_string());
    report.line(
        expected == Some(n + pruned) && from_seq.is_some_and(|f| f == anchor_seq + 1),
        format!(
            "period: seq {} to {} holds {n} receipts and {pruned} pruned leaves, anchored at seq {anchor_seq}",
            shown(from_seq),
            shown(to_seq)
        ),
    );
    report.line(
        chain.hashes_ok == n,
        format!("hashes: {} of {n} thisHash values re-derived from the RFC 8785 canonical members", chain.hashes_ok),
    );
    let key_ids = chain.key_ids.iter().cloned().collect::<Vec<_>>().join(", ");
    report.line(
        chain.signatures_ok == n,
        format!(
            "signatures: {} of {n} Ed25519 signatures verified (key ids {key_ids}; {keys_note})",
            chain.signatures_ok
        ),
    );
    report.line(
        chain.links_ok == n && chain.first_seq.is_none_or(|s| s == anchor_seq + 1),
        format!("chain: {} of {n} prevHash links hold, from the anchor at seq {anchor_seq}, no gap", chain.links_ok),
    );
}

/// The Merkle root, attestation and signed-tree-head lines.
fn root_lines(report: &mut Report, p: &Parsed, chain: &Chain, period: &Value, root: &str, leaf_count: u64) {
    let merkle_doc = p.merkle.clone().unwrap_or(Value::Null);
    let att = p.attestation.clone().unwrap_or(Value::Null);
    report.line(
        merkle_doc["algorithm"] == MERKLE_ALGORITHM
            && merkle_doc["root"] == root
            && merkle_doc["leafCount"] == leaf_count
            && att["merkle"]["root"] == root,
        format!("merkle: RFC 6962 root {root} over {leaf_count} leaves equals merkle.root and attestation.merkle.root"),
    );
    report.line(
        att["tenantId"] == p.tenant.as_deref().unwrap_or_default()
            && att["period"]["fromSeq"] == period["fromSeq"]
            && att["period"]["toSeq"] == period["toSeq"]
            && att["totals"]["receipts"].as_u64().unwrap_or(0) + att["totals"]["adminEvents"].as_u64().unwrap_or(0)
                == chain.count
            && att["totals"]["prunedReceipts"].as_u64().unwrap_or(0) == chain.pruned_count,
        "attestation: same tenant, period, receipt (calls + adminEvents) and pruned counts as the bundle",
    );
    report.line(
        tree_head_ok(p, &att, root, leaf_count),
        "signed tree head: attestation.anchor.signature by its keyId over JCS({tenantId, fromSeq, toSeq, leafCount, root})",
    );
}

/// The bundle's `log` member (docs/log.md §6): the checkpoint is signed, under its origin, by a
/// listed (or pinned) key, and the inclusion proof puts the period's last receipt (`last_hash`,
/// seq `to_seq`) in the checkpoint's tree.
fn check_log(report: &mut Report, p: &Parsed, last_hash: &str, to_seq: Option<u64>, tsa: Option<&Roots>) {
    let Some(log) = &p.log else {
        report.line(true, "log: this bundle has no checkpoint (written before the tenant log)");
        return;
    };
    let keys: Vec<[u8; 32]> = p
        .keys
        .iter()
        .flatten()
        .filter_map(|k| base64::engine::general_purpose::STANDARD.decode(&k.public_key).ok()?.try_into().ok())
        .filter(|raw| p.pinned.is_empty() || p.pinned.contains(raw))
        .collect();
    let c = match checkpoint::open(log["checkpoint"].as_str().unwrap_or_default(), &keys) {
        Ok(c) => c,
        Err(e) => return report.line(false, format!("log: checkpoint: {e}")),
    };
    let ok_origin = p.tenant.as_deref().is_some_and(|t| c.origin().ends_with(&format!("/{t}")));
    report.line(ok_origin, format!("log: checkpoint of {} at size {} signed by a listed key", c.origin(), c.size()));
    check_timestamp(report, log, tsa);
    let Some(to) = to_seq else {
        return report.line(log["inclusion"].is_null(), "log: no receipt in the period to prove");
    };
    report.line(
        inclusion_holds(&log["inclusion"], &c, last_hash, to),
        format!("log: receipt seq {to} is in the checkpoint's tree (RFC 9162 inclusion proof)"),
    );
}

/// `log.timestamp` (docs/log.md §6): null, or `{genTime, tsr}` whose token stamps the
/// checkpoint's body at that genTime — and, with `--tsa-ca`, is signed by a TSA certificate that
/// chains to one of those roots.
fn check_timestamp(report: &mut Report, log: &Value, roots: Option<&Roots>) {
    let t = &log["timestamp"];
    if t.is_null() {
        return report.line(true, "log: no RFC 3161 timestamp of the checkpoint yet");
    }
    let body = timestamp::note_body(log["checkpoint"].as_str().unwrap_or_default()).unwrap_or_default();
    let Some(tsr) = t["tsr"].as_str().and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok()) else {
        return report.line(false, "log: timestamp: `tsr` is not base64");
    };
    let stamp = match timestamp::check(&tsr, &body, None, roots) {
        Ok(s) if t["genTime"] == s.gen_time.as_str() => s,
        Ok(s) => {
            return report
                .line(false, format!("log: timestamp: genTime {} is not the token's {}", t["genTime"], s.gen_time))
        }
        Err(e) => return report.line(false, format!("log: timestamp: {e}")),
    };
    let how = if stamp.chain_checked {
        "signed by a TSA certificate that chains to --tsa-ca for timeStamping"
    } else {
        "signature NOT checked: pass --tsa-ca with the TSA's root to check it"
    };
    report.line(true, format!("log: RFC 3161 timestamp of the checkpoint's body at {}, {how}", stamp.gen_time));
}

fn inclusion_holds(inc: &Value, c: &tlog_tiles::checkpoint::Checkpoint, last_hash: &str, to: u64) -> bool {
    let Some(leaf) = merkle::from_hex(last_hash) else { return false };
    let leaf_hash = tlog_tiles::tlog::record_hash(&leaf);
    let proof: Option<Vec<tlog_tiles::tlog::Hash>> = inc["proof"]
        .as_array()
        .map(|a| a.iter().map(|h| merkle::from_hex(h.as_str()?).map(tlog_tiles::tlog::Hash)).collect())
        .unwrap_or_default();
    let Some(proof) = proof else { return false };
    inc["seq"] == to
        && inc["size"] == c.size()
        && inc["leafHash"] == hex::encode(leaf_hash.0)
        && inc["root"] == hex::encode(c.hash().0)
        && tlog_tiles::tlog::check_record(&proof, c.size(), *c.hash(), to - 1, leaf_hash).is_ok()
}

fn tree_head_ok(p: &Parsed, att: &Value, root: &str, leaf_count: u64) -> bool {
    let anchor = &att["anchor"];
    let (Some(tenant), Some(from), Some(to)) =
        (att["tenantId"].as_str(), att["period"]["fromSeq"].as_u64(), att["period"]["toSeq"].as_u64())
    else {
        return false;
    };
    let (Some(key_id), Some(sig)) = (anchor["keyId"].as_str(), anchor["signature"].as_str()) else { return false };
    let keys: HashMap<&str, &KeyDoc> = p.keys.iter().flatten().map(|k| (k.key_id.as_str(), k)).collect();
    let Some(key) = keys.get(key_id) else { return false };
    let ring = KeyRing::new(&[RegisteredKey {
        key_id: key.key_id.clone(),
        algorithm: key.algorithm.clone(),
        public_key: key.public_key.clone(),
        created_at: String::new(),
        retired_at: None,
    }]);
    let pinned_ok = p.pinned.is_empty()
        || base64::engine::general_purpose::STANDARD
            .decode(&key.public_key)
            .ok()
            .and_then(|raw| <[u8; 32]>::try_from(raw.as_slice()).ok())
            .is_some_and(|raw| p.pinned.contains(&raw));
    anchor["root"] == root
        && pinned_ok
        && ring.verify(key_id, &tree_head_bytes(tenant, from, to, leaf_count, root), sig)
}
