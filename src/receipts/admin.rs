//! `admin` receipts (docs/log.md §8): the record of one management write or evidence read,
//! appended to the tenant's log by the store in the write's own transaction (`store::audit`).
//! `actor` is the acting key, `provider` `tollgate`, `model` the action (`policies.create`),
//! tokens and cost 0, `checks` `[{"name": "authz", "result": "pass"}]` (`deny` when refused),
//! `upstreamStatus` `skipped`, and the signed `subject`: the resource acted on.

use std::sync::Arc;

use super::rows::{Sealing, RULES};
use super::signer::Signer;
use super::vocabulary::{Check, CheckName, CheckResult, Term, UpstreamStatus};
use super::{receipt_ts, CacheSide, Draft, Kind};
use crate::store::audit::AdminEntry;
use crate::store::receipts::{ChainRules, Head, Record, Seal};

/// `provider` of every admin receipt.
pub const PROVIDER: &str = "tollgate";

/// One management call's admin receipt, waiting for its subject.
pub struct Entry {
    draft: Draft,
    signer: Arc<Signer>,
}

/// Who did what, as the management router knows it before the call runs.
pub struct Call<'a> {
    pub tenant: &'a str,
    /// The acting key's id.
    pub actor: &'a str,
    /// `<resource>.<verb>`, e.g. `policies.create`.
    pub action: &'a str,
    /// The call's `X-Request-Id`, else one generated.
    pub request_id: String,
    /// Whether `authz` let the call through (`pass`) or refused it (`deny`).
    pub granted: bool,
}

impl Entry {
    pub fn new(call: Call<'_>, signer: Arc<Signer>) -> Entry {
        let result = if call.granted { CheckResult::Granted } else { CheckResult::Deny };
        let actor: Arc<str> = call.actor.into();
        let draft = Draft {
            tenant_id: call.tenant.into(),
            receipt_id: uuid::Uuid::now_v7().to_string(),
            request_id: call.request_id,
            actor: actor.clone(),
            provider: PROVIDER.into(),
            model: call.action.to_string(),
            prompt_tokens: 0,
            completion_tokens: 0,
            cost_usd: 0.0,
            checks: vec![Check { name: Term::Known(CheckName::Authz), result: Term::Known(result) }],
            upstream_status: UpstreamStatus::Skipped,
            ts: receipt_ts(chrono::Utc::now()),
            kind: Kind::Admin,
            pack_version: String::new(),
            cache: CacheSide::default(),
            events: Vec::new(),
            key_id: actor,
            outbox: Vec::new(),
            attempts: Vec::new(),
            subject: None,
            latency_us: None,
        };
        Entry { draft, signer }
    }
}

impl AdminEntry for Entry {
    fn tenant(&self) -> &Arc<str> {
        &self.draft.tenant_id
    }

    fn rules(&self) -> ChainRules {
        RULES
    }

    fn seal(&self, head: Head, subject: &str) -> Record {
        let mut draft = self.draft.clone();
        draft.subject = Some(subject.to_string());
        // Sealed when its head is locked, so its `ts` is its place in the log's time order.
        draft.ts = receipt_ts(chrono::Utc::now());
        let mut sealing = Sealing::new(std::slice::from_ref(&draft), &self.signer);
        sealing.seal(vec![head]).pop().expect("one draft seals into one record")
    }
}
