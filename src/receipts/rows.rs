//! The rows a sealed receipt writes, built once for every backend: its `receipts` row (values
//! in the store's column order), its guardrail events, its webhook outbox rows and the key its
//! cost adds to (a [`Record`]). The store's append paths (sqlx on PostgreSQL and SQLite, the
//! writer's own SQLite connection, the receipt journal) lock the chain heads, call
//! [`Sealing`] and execute what it returns; none of them builds a row itself.

use std::sync::Arc;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use foldhash::HashMap;

use super::canonical::{Check, GENESIS};
use super::seal::{self, Batch, SealedBatch};
use super::signer::Signer;
use super::Draft;
use crate::checks::budget::TOTAL;
use crate::store::receipts::{self as stored, ChainRules, Head, Record, Seal, Value, RECEIPT_COLUMNS};
use crate::store::{self, Store, StoreError};

/// The chain rules every append follows: chains start at the genesis hash, and a receipt's
/// cost adds to its key's all-time spend and to its month's (`YYYY-MM` of its `ts`).
pub const RULES: ChainRules = ChainRules { genesis: GENESIS, spend_periods };

fn spend_periods(ts: &str) -> [&str; 2] {
    [TOTAL, ts.get(..7).unwrap_or_default()]
}

/// A batch of drafts to seal once the store has locked its tenants' heads (the receipt
/// writer's side of every append).
pub struct Sealing<'a> {
    batch: Batch<'a>,
    signer: &'a Signer,
    /// Leave the signatures to the receipt journal's applier ([`sign_records`]).
    deferred: bool,
}

impl<'a> Sealing<'a> {
    pub fn new(drafts: &'a [Draft], signer: &'a Signer) -> Sealing<'a> {
        Sealing { batch: Batch::new(drafts), signer, deferred: false }
    }

    /// A sealing whose records are chained and hashed but not signed yet: for the receipt
    /// journal, whose applier signs them with `signer` before they reach the database.
    ///
    /// Why: the signature was the largest part of the receipt's cost on the answer's path (at
    /// 3 000 req/s, p50 added over bare Pingora +0.237 ms signed there, +0.138 ms unsigned,
    /// session 42). `thisHash` fixes the receipt's bytes in the chain when the line is written;
    /// Ed25519 is deterministic, so the signature the applier adds is the one sealing would
    /// have made, and every read waits for the applier (`Progress::settled`).
    pub fn deferred(drafts: &'a [Draft], signer: &'a Signer) -> Sealing<'a> {
        Sealing { batch: Batch::new(drafts), signer, deferred: true }
    }
}

impl Seal for Sealing<'_> {
    fn tenants(&self) -> impl Iterator<Item = &Arc<str>> + Send {
        self.batch.tenants().map(|t| &t[0].tenant_id)
    }

    fn seal(&mut self, heads: Vec<Head>) -> Vec<Record> {
        let sealed = if self.deferred { self.batch.chain(heads) } else { self.batch.seal(heads, self.signer) };
        records(&sealed, &self.signer.key_id)
    }
}

/// Signs the records that [`Sealing::deferred`] left unsigned (the receipt journal's applier,
/// and its replay at start): each one's canonical bytes are rebuilt from its row as a verifier
/// rebuilds them from the stored row, and signed with `signer`, whose key id the row then
/// names. Records signed already are left as they are. A row whose bytes do not hash to its
/// `thisHash` is logged: it would fail verification however it is signed.
pub fn sign_records(records: &mut [Record], signer: &Signer) {
    seal::for_each_parallel(records, |r| {
        if !r.unsigned() {
            return;
        }
        let bytes = match super::stored::canonical_of(r.as_row()) {
            Ok(b) => b,
            Err(e) => {
                log::error!("receipt {} of tenant {}: {e}; stored unsigned", r.seq(), r.tenant_id());
                return;
            }
        };
        if super::canonical::sha256_hex(&bytes) != r.this_hash() {
            log::error!("receipt {} of tenant {}: its row does not hash to its thisHash", r.seq(), r.tenant_id());
        }
        r.set_signature(signature_b64(&signer.sign(&bytes)), signer.key_id.as_str().into());
    });
}

/// Appends `drafts` in one transaction through sqlx (PostgreSQL, or SQLite without the
/// writer's own connection), on a task of the database runtime. Returns how many receipts
/// were written. The drafts are shared, not consumed: a failed batch is retried from the same
/// drafts.
pub async fn append_batch(
    store: &Store,
    drafts: impl Into<Arc<[Draft]>>,
    signer: Arc<Signer>,
) -> Result<usize, StoreError> {
    let drafts: Arc<[Draft]> = drafts.into();
    let here = store.clone();
    store.run(move |_, _| async move { append_batch_here(&here, &drafts, &signer).await }).await
}

/// [`append_batch`] on the calling task, which must run on the database runtime (the receipt
/// writer does): dropping the future rolls the transaction back (`store::receipts::append_sealed`).
pub async fn append_batch_here(store: &Store, drafts: &[Draft], signer: &Signer) -> Result<usize, StoreError> {
    store::receipts::append_sealed(store, RULES, &mut Sealing::new(drafts, signer)).await
}

/// A column's value for one sealed row (shared values come from the batch's [`Binder`]).
type ColumnValue = for<'a> fn(&mut Binder<'a>, &seal::Row<'a>) -> Value;

/// Each `receipts` column's value for a sealed row, in the store's column order (the build
/// fails if the names differ from `RECEIPT_COLUMNS`).
const COLUMN_VALUES: [(&str, ColumnValue); 26] = {
    use Value::{Int, Null, Real, Static, Text};
    [
        ("tenant_id", |_, r| Text(r.draft.tenant_id.clone())),
        ("seq", |_, r| Int(r.seq as i64)),
        ("receipt_id", |_, r| Text(r.draft.receipt_id.as_str().into())),
        ("v", |_, _| Int(1)),
        ("request_id", |_, r| Text(r.draft.request_id.as_str().into())),
        ("actor", |_, r| Text(r.draft.actor.clone())),
        ("provider", |b, r| Text(b.get(&r.draft.provider))),
        ("model", |b, r| Text(b.get(&r.draft.model))),
        ("prompt_tokens", |_, r| Int(r.draft.prompt_tokens as i64)),
        ("completion_tokens", |_, r| Int(r.draft.completion_tokens as i64)),
        ("cost_usd", |_, r| Real(r.draft.cost_usd)),
        ("checks", |b, r| Text(b.checks(&r.draft.checks))),
        ("upstream_status", |b, r| Text(b.get(r.draft.upstream_status.as_str()))),
        ("ts", |_, r| Text(r.draft.ts.as_str().into())),
        ("prev_hash", |_, r| Text(r.prev_hash.clone())),
        ("this_hash", |_, r| Text(r.this_hash.clone())),
        ("signature", |b, r| if b.signed { Text(signature_b64(&r.signature)) } else { Static("") }),
        ("key_id", |b, _| Text(b.key_id.clone())),
        ("kind", |_, r| Static(r.draft.kind.as_str())),
        ("receipt_pack_version", |b, r| Text(b.get(&r.draft.pack_version))),
        ("check_names", |b, r| Text(b.check_names(&r.draft.checks))),
        ("cache_result", |_, r| Static(r.draft.cache.result)),
        ("saved_tokens", |_, r| Int(r.draft.cache.saved_tokens as i64)),
        ("saved_usd", |_, r| Real(r.draft.cache.saved_usd)),
        ("subject", |_, r| match &r.draft.subject {
            Some(s) => Text(s.as_str().into()),
            None => Static(""),
        }),
        ("latency_us", |_, r| r.draft.latency_us.map_or(Null, |us| Int(us.min(i64::MAX as u64) as i64))),
    ]
};

const _: () = {
    let mut i = 0;
    while i < RECEIPT_COLUMNS.len() {
        assert!(stored::same(COLUMN_VALUES[i].0, RECEIPT_COLUMNS[i].name), "a value for every column, in order");
        i += 1;
    }
};

/// The records of a sealed batch, in sealing order.
pub fn records(sealed: &SealedBatch<'_>, key_id: &str) -> Vec<Record> {
    let mut binder = Binder::new(key_id, sealed.signed());
    sealed.rows().iter().map(|row| record(&mut binder, row)).collect()
}

/// One sealed row's record: its column values, guardrail events and webhook outbox rows.
fn record<'a>(binder: &mut Binder<'a>, row: &seal::Row<'a>) -> Record {
    let d = row.draft;
    let events = d
        .events
        .iter()
        .map(|e| {
            // Every column but `check_name` (always GUARDRAIL): `store::receipts::EVENT_VALUES`.
            vec![
                Value::Text(uuid::Uuid::now_v7().to_string().into()),
                Value::Text(d.tenant_id.clone()),
                Value::Text(d.ts.as_str().into()),
                Value::Text(d.receipt_id.as_str().into()),
                Value::Text(d.actor.clone()),
                Value::Text(binder.get(&d.model)),
                Value::Static(e.result),
                Value::Text(e.category.as_str().into()),
                Value::Static(e.direction),
            ]
        })
        .collect();
    let values = COLUMN_VALUES.iter().map(|(_, value)| value(binder, row)).collect();
    let outbox = d.outbox.iter().map(store::webhooks::outbox_values).collect();
    let mut r = Record::new(values, events, outbox, d.key_id.clone());
    r.attempts = d.attempts.iter().enumerate().map(|(n, a)| attempt_values(d, n, a)).collect();
    r
}

/// An attempt's `receipt_attempts` values (`store::receipts::ATTEMPT_VALUES`).
fn attempt_values(d: &super::Draft, n: usize, a: &super::Attempt) -> Vec<Value> {
    vec![
        Value::Text(d.receipt_id.as_str().into()),
        Value::Int(n as i64),
        Value::Text(d.tenant_id.clone()),
        Value::Static(a.provider),
        Value::Text(a.credential.clone()),
        Value::Text(a.model.clone()),
        Value::Int(i64::from(a.status)),
        Value::Static(a.outcome),
        Value::Int(a.ms.min(i64::MAX as u64) as i64),
    ]
}

/// The `signature` column: the raw Ed25519 signature in base64.
pub fn signature_b64(signature: &[u8; 64]) -> Arc<str> {
    let mut b64 = [0u8; 88];
    B64.encode_slice(signature, &mut b64).expect("64 bytes are 88 base64 characters");
    Arc::from(std::str::from_utf8(&b64).expect("base64 is ASCII"))
}

/// Makes a batch's column values. Values shared by many receipts (provider, model, checks...)
/// are made once and bound by reference count.
struct Binder<'a> {
    borrowed: HashMap<&'a str, Arc<str>>,
    built: HashMap<String, Arc<str>>,
    text: Vec<u8>,
    key_id: Arc<str>,
    /// The batch's rows carry signatures (else the `signature` column is left empty).
    signed: bool,
}

impl<'a> Binder<'a> {
    fn new(key_id: &str, signed: bool) -> Self {
        Binder {
            borrowed: HashMap::default(),
            built: HashMap::default(),
            text: Vec::new(),
            key_id: key_id.into(),
            signed,
        }
    }

    fn get(&mut self, s: &'a str) -> Arc<str> {
        self.borrowed.entry(s).or_insert_with(|| Arc::from(s)).clone()
    }

    /// The `checks` column: the JSON array of `{name, result}`.
    fn checks(&mut self, checks: &[Check]) -> Arc<str> {
        self.text.clear();
        serde_json::to_writer(&mut self.text, checks).expect("checks are plain strings");
        self.get_built()
    }

    /// The `check_names` column: `,NAME1,NAME2,` for the `check` filter.
    fn check_names(&mut self, checks: &[Check]) -> Arc<str> {
        self.text.clear();
        for c in checks {
            self.text.push(b',');
            self.text.extend_from_slice(c.name.as_str().as_bytes());
        }
        self.text.push(b',');
        self.get_built()
    }

    /// The value of the text just written, which is UTF-8 (written from strings).
    fn get_built(&mut self) -> Arc<str> {
        let s = std::str::from_utf8(&self.text).unwrap_or_default();
        if let Some(v) = self.built.get(s) {
            return v.clone();
        }
        let v: Arc<str> = Arc::from(s);
        self.built.insert(s.to_string(), v.clone());
        v
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::receipts::canonical::verify_signature;
    use crate::receipts::stored::canonical_of;
    use crate::store::receipts::tests::draft;

    /// Seals after every tenant's genesis head.
    pub(crate) fn seal(sealing: &mut Sealing<'_>) -> Vec<Record> {
        let heads = sealing.tenants().map(|_| Head::genesis()).collect();
        sealing.seal(heads)
    }

    /// The receipt journal's deferred signing gives the records sealing signs at once: the same
    /// signatures and key id, over the bytes `thisHash` fixed when the line was written.
    #[test]
    fn records_signed_later_are_the_records_signed_at_once() {
        let drafts: Vec<Draft> = (0..40).map(|i| draft(if i % 3 == 0 { "b" } else { "a" }, i)).collect();
        let signer = Signer::from_seed(&[7u8; 32]);
        let signed = seal(&mut Sealing::new(&drafts, &signer));
        let mut later = seal(&mut Sealing::deferred(&drafts, &signer));
        assert!(later.iter().all(Record::unsigned) && !signed.iter().any(Record::unsigned));
        // The receipt rows (the guardrail events' and webhook messages' ids are fresh each time).
        let rows =
            |records: &[Record]| -> Vec<String> { records.iter().map(|r| format!("{:?}", r.as_row())).collect() };
        assert_ne!(rows(&later), rows(&signed));
        sign_records(&mut later, &signer);
        assert_eq!(rows(&later), rows(&signed), "signed later = signed at once");
        // A record signed already is left as it is, whatever key signs the rest.
        let mut again = signed.clone();
        sign_records(&mut again, &Signer::from_seed(&[9u8; 32]));
        assert_eq!(again, signed);
    }

    /// A journal replayed after the signing key was rotated: the new key signs, and the row
    /// names it, so the receipt verifies against the key registry.
    #[test]
    fn a_record_signed_later_names_the_key_that_signed_it() {
        let drafts: Vec<Draft> = (0..3).map(|i| draft("a", i)).collect();
        let (old, new) = (Signer::from_seed(&[7u8; 32]), Signer::from_seed(&[9u8; 32]));
        let mut records = seal(&mut Sealing::deferred(&drafts, &old));
        assert_eq!(records[0].as_row().key_id, old.key_id);
        sign_records(&mut records, &new);
        let public = new.signing_key().verifying_key().to_bytes();
        for r in &records {
            let row = r.as_row();
            assert_eq!(row.key_id, new.key_id);
            let bytes = canonical_of(r.as_row()).unwrap();
            assert_eq!(crate::receipts::canonical::sha256_hex(&bytes), row.this_hash);
            assert!(verify_signature(&bytes, row.signature, &public), "seq {}", row.seq);
        }
    }
}
