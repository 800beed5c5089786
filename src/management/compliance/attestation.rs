//! `GET /v1/compliance/attestation`, `.../attestation/receipts/{id}/inclusion` and
//! `GET /v1/compliance/evidence-bundle`: one period syntax, one walk, one signed tree head.

use async_trait::async_trait;
use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use super::super::handler::{number, BodyStream, Caller, Handled, Reply, Req};
use super::super::openapi_parts::{Authenticated, Missing};
use crate::app::App;
use crate::compliance::attestation::{self, Attestation, MERKLE_ALGORITHM};
use crate::compliance::bundle::BundleWriter;
use crate::compliance::memo::MemoKey;
use crate::compliance::period::{self, Period, PeriodSpec, DEFAULT_DAYS, MAX_DAYS};
use crate::compliance::{inclusion, DISCLAIMER, SCOPE};
use crate::error::ApiError;
use crate::receipts::merkle;
use crate::receipts::signer::{self, Signer};
use crate::receipts::stored;

const SEQ_MAX: u64 = u64::MAX >> 11;

fn instant(req: &Req, name: &str) -> Result<Option<chrono::DateTime<chrono::Utc>>, ApiError> {
    match req.query(name) {
        None | Some("") => Ok(None),
        Some(v) => chrono::DateTime::parse_from_rfc3339(v).map(|t| Some(t.with_timezone(&chrono::Utc))).map_err(|_| {
            ApiError::invalid(format!("query `{name}` must be an RFC 3339 timestamp such as 2026-01-31T12:00:00Z"))
        }),
    }
}

/// The period of an attestation, an inclusion proof or an evidence bundle: one style per call.
#[derive(IntoParams)]
#[into_params(parameter_in = Query, rename_all = "camelCase")]
#[allow(dead_code)] // describes the query string; `period_spec` reads it
pub(in super::super) struct PeriodQuery {
    /// The last N days (default 30 when no period is given).
    #[param(minimum = 1, maximum = 3650)]
    days: Option<u32>,
    /// From this instant (RFC 3339).
    #[param(format = DateTime)]
    from: Option<String>,
    /// Up to this instant (RFC 3339).
    #[param(format = DateTime)]
    to: Option<String>,
    /// From this seq.
    #[param(minimum = 1)]
    from_seq: Option<u64>,
    /// Up to this seq.
    #[param(minimum = 1)]
    to_seq: Option<u64>,
}

/// `days=N`, or `from`/`to`, or `fromSeq`/`toSeq` (one style per call); none = the last 30 days.
pub fn period_spec(req: &Req) -> Result<PeriodSpec, ApiError> {
    let given = |n: &str| req.query(n).is_some_and(|v| !v.is_empty());
    let styles = [given("days"), given("from") || given("to"), given("fromSeq") || given("toSeq")];
    if styles.iter().filter(|s| **s).count() > 1 {
        return Err(ApiError::invalid(
            "give the period one way: `days`, or `from`/`to` (RFC 3339), or `fromSeq`/`toSeq`",
        ));
    }
    if let Some(n) = number(req, "days", 1, u64::from(MAX_DAYS))? {
        return Ok(PeriodSpec::Days(n as u32));
    }
    if styles[1] {
        let (from, to) = (instant(req, "from")?, instant(req, "to")?);
        if from.zip(to).is_some_and(|(f, t)| f > t) {
            return Err(ApiError::invalid("query `from` must not be later than `to`"));
        }
        return Ok(PeriodSpec::Time { from, to });
    }
    if styles[2] {
        let (from, to) = (number(req, "fromSeq", 1, SEQ_MAX)?, number(req, "toSeq", 1, SEQ_MAX)?);
        if from.zip(to).is_some_and(|(f, t)| f > t) {
            return Err(ApiError::invalid("query `fromSeq` must not be greater than `toSeq`"));
        }
        return Ok(PeriodSpec::Seq { from, to });
    }
    Ok(PeriodSpec::Days(DEFAULT_DAYS))
}

fn packs_in_force(app: &App, tenant: &str) -> Value {
    serde_json::to_value(app.snapshot.load().packs(tenant).in_force()).unwrap_or_default()
}

/// The signed attestation of a period
#[utoipa::path(get, path = "/v1/compliance/attestation", operation_id = "getAttestation", tag = "compliance",
    params(PeriodQuery),
    responses((status = 200, description = "The attestation document", body = Attestation), Authenticated))]
pub async fn attestation(app: &App, caller: &Caller, req: &Req) -> Handled {
    let spec = period_spec(req)?;
    let tenant = caller.tenant();
    let period = period::resolve(&app.store, tenant, &spec).await?;
    let registry = signer::registry(&app.store).await?;
    let memo_key = MemoKey::from_master(&app.master);
    let (walked, _recording) =
        attestation::walk_period(&app.store, tenant, &period, &registry, Some(&memo_key)).await?;
    let doc = attestation::document(
        tenant,
        &period,
        &walked,
        packs_in_force(app, tenant),
        &app.signer,
        &attestation::now_rfc3339(),
    );
    app.store.note(format!("{}-{}", period.from_seq, period.to_seq)).await?;
    Ok(Reply::Json(200, doc))
}

/// The period an inclusion proof is in.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(in super::super) struct ProofPeriod<'a> {
    from_seq: u64,
    to_seq: u64,
    label: &'a str,
}

/// The signed tree head the proof's `root` must equal.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(in super::super) struct SignedTreeHead<'a> {
    tenant_id: &'a str,
    from_seq: u64,
    to_seq: u64,
    leaf_count: u64,
    root: &'a str,
    key_id: &'a str,
    /// base64 Ed25519 over the JCS of `{tenantId, fromSeq, toSeq, leafCount, root}`.
    signature: String,
}

/// An RFC 6962 inclusion proof of one receipt in a period's Merkle tree.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(in super::super) struct InclusionProof<'a> {
    receipt_id: &'a str,
    this_hash: &'a str,
    seq: u64,
    index: u64,
    tree_size: u64,
    algorithm: &'static str,
    /// Sibling hashes (hex), leaf to root.
    proof: Vec<String>,
    root: &'a str,
    verified: bool,
    period: ProofPeriod<'a>,
    signed_tree_head: SignedTreeHead<'a>,
    scope: &'static str,
    disclaimer: &'static str,
}

/// An inclusion proof of one receipt in a period
#[utoipa::path(get, path = "/v1/compliance/attestation/receipts/{id}/inclusion", operation_id = "getInclusionProof",
    tag = "compliance", params(("id" = String, Path, description = "Receipt id"), PeriodQuery),
    responses((status = 200, description = "The proof and the signed tree head", body = InclusionProof),
        Missing, Authenticated))]
pub async fn inclusion(app: &App, caller: &Caller, id: &str, req: &Req) -> Handled {
    let spec = period_spec(req)?;
    let tenant = caller.tenant();
    let r = stored::by_id(&app.store, tenant, id).await?.ok_or_else(|| ApiError::not_found("receipt"))?;
    let period = period::resolve(&app.store, tenant, &spec).await?;
    let seq = r.receipt.seq;
    let not_in_period = || {
        ApiError::new(
            crate::error::ErrorKind::NotFound,
            format!(
                "receipt {id} (seq {seq}) is not in the period ({}: seq {} to {}); ask with `fromSeq`/`toSeq`, \
                 `from`/`to` or `days` that include it",
                period.label, period.from_seq, period.to_seq
            ),
        )
    };
    let proof = inclusion::prove(&app.store, tenant, &period, seq).await?.ok_or_else(not_in_period)?;
    let root = merkle::to_hex(&proof.root);
    let signed_tree_head = signed_tree_head(&app.signer, tenant, &period, proof.tree_size, &root);
    let body = InclusionProof {
        receipt_id: &r.receipt.receipt_id,
        this_hash: &r.this_hash,
        seq,
        index: proof.index,
        tree_size: proof.tree_size,
        algorithm: MERKLE_ALGORITHM,
        proof: proof.proof.iter().map(merkle::to_hex).collect(),
        root: &root,
        verified: proof.verified,
        period: ProofPeriod { from_seq: period.from_seq, to_seq: period.to_seq, label: &period.label },
        signed_tree_head,
        scope: SCOPE,
        disclaimer: DISCLAIMER,
    };
    Ok(Reply::json(200, &body))
}

/// The signed head of the period's tree, which the inclusion proof leads up to.
fn signed_tree_head<'a>(
    signer: &'a Signer,
    tenant: &'a str,
    period: &Period,
    tree_size: u64,
    root: &'a str,
) -> SignedTreeHead<'a> {
    let head = attestation::tree_head_bytes(tenant, period.from_seq, period.to_seq, tree_size, root);
    SignedTreeHead {
        tenant_id: tenant,
        from_seq: period.from_seq,
        to_seq: period.to_seq,
        leaf_count: tree_size,
        root,
        key_id: &signer.key_id,
        signature: sign_b64(signer, &head),
    }
}

fn sign_b64(signer: &Signer, bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(signer.sign(bytes))
}

/// The evidence bundle of a period, streamed
///
/// One JSON document (docs/receipts.md): the attestation, every receipt of the period with its hash
/// and signature, the signing keys and the packs in force; `tollgate verify` checks it offline.
#[utoipa::path(get, path = "/v1/compliance/evidence-bundle", operation_id = "getEvidenceBundle", tag = "compliance",
    params(PeriodQuery),
    responses((status = 200, description = "The bundle, as a file attachment", body = super::super::openapi_parts::Object,
            headers(("content-disposition" = String, description = "attachment; filename=\"evidence-bundle-seq-F-T.json\""))),
        Authenticated))]
pub async fn evidence_bundle(app: &App, caller: &Caller, req: &Req) -> Handled {
    let spec = period_spec(req)?;
    let tenant = caller.tenant();
    let period = period::resolve(&app.store, tenant, &spec).await?;
    let registry = signer::registry(&app.store).await?;
    let filename = format!("evidence-bundle-seq-{}-{}.json", period.from_seq, period.to_seq);
    let subject = format!("{}-{}", period.from_seq, period.to_seq);
    let packs = packs_in_force(app, tenant);
    let memo_key = MemoKey::from_master(&app.master);
    let writer = BundleWriter::start(&app.store, tenant, period, registry, packs, app.signer.clone(), Some(&memo_key))
        .await?
        .with_log(&app.log_origin);
    app.store.note(subject).await?;
    let headers = vec![
        ("content-type", "application/json".to_string()),
        ("content-disposition", format!("attachment; filename=\"{filename}\"")),
    ];
    Ok(Reply::Stream { headers, body: Box::new(BundleBody(writer)) })
}

struct BundleBody(BundleWriter);

#[async_trait]
impl BodyStream for BundleBody {
    async fn next(&mut self) -> Result<Option<Bytes>, ApiError> {
        Ok(self.0.next_chunk().await?.map(Bytes::from))
    }
}
