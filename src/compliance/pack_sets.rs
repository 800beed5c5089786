//! Pack sets over time: each set that was ever in force is recorded (members and YAML), so the
//! `receiptPackVersion` stamped on an old receipt resolves to the packs in force when it was
//! written, even after a tenant pack changed or a new binary shipped new baseline packs.

use std::sync::Arc;

use crate::compliance::pack::{Member, Pack, PackSet, Source};
use crate::store::packs::{self, BASELINE_TENANT};
use crate::store::{Store, StoreError};

/// Records `set` for `tenant` (`""` for the baseline-only set). Idempotent.
pub async fn record(store: &Store, tenant: &str, set: &PackSet) -> Result<(), StoreError> {
    let members = serde_json::to_string(&set.members()).map_err(|e| StoreError::Other(e.to_string()))?;
    // Baseline YAML is kept under the baseline tenant, tenant YAML under the tenant.
    let blobs = |source: Source| -> Vec<(String, String)> {
        set.packs.iter().filter(|p| p.source == source).map(|p| (p.hash.clone(), p.raw.to_string())).collect()
    };
    packs::record_blobs(store, BASELINE_TENANT, blobs(Source::Baseline)).await?;
    if tenant != BASELINE_TENANT {
        packs::record_blobs(store, tenant, blobs(Source::Tenant)).await?;
    }
    packs::record_set(store, tenant, &set.version, &members).await
}

/// How a receipt's stamp resolved.
pub enum Resolution {
    /// The stamp names a recorded pack set: these are the packs that were in force.
    Stamped(Arc<PackSet>),
    /// No stamp (stamping off, or a receipt older than packs): the packs in force now.
    Unstamped(Arc<PackSet>),
    /// A stamp no recorded set matches (e.g. a database restored without its pack tables):
    /// the packs in force now.
    Unknown(Arc<PackSet>),
}

impl Resolution {
    pub fn label(&self) -> &'static str {
        match self {
            Resolution::Stamped(_) => "stamped",
            Resolution::Unstamped(_) => "unstamped",
            Resolution::Unknown(_) => "unknown",
        }
    }
    pub fn set(&self) -> &Arc<PackSet> {
        match self {
            Resolution::Stamped(s) | Resolution::Unstamped(s) | Resolution::Unknown(s) => s,
        }
    }
}

/// Resolves `stamp` for `tenant`; `current` is the set in force now.
pub async fn resolve(
    store: &Store,
    tenant: &str,
    stamp: &str,
    current: &Arc<PackSet>,
) -> Result<Resolution, StoreError> {
    if stamp.is_empty() {
        return Ok(Resolution::Unstamped(current.clone()));
    }
    if stamp == current.version {
        return Ok(Resolution::Stamped(current.clone()));
    }
    let Some(members) = packs::set_members(store, tenant, stamp).await? else {
        return Ok(Resolution::Unknown(current.clone()));
    };
    let Ok(members) = serde_json::from_str::<Vec<Member>>(&members) else {
        return Ok(Resolution::Unknown(current.clone()));
    };
    let mut set = Vec::with_capacity(members.len());
    for m in members {
        let source = Source::parse(&m.source).unwrap_or(Source::Tenant);
        let Some(yaml) = packs::blob(store, tenant, &m.pack_hash).await? else {
            return Ok(Resolution::Unknown(current.clone()));
        };
        match Pack::parse(&yaml, &format!("pack {}", m.framework), source) {
            Ok(p) => set.push(Arc::new(p)),
            Err(_) => return Ok(Resolution::Unknown(current.clone())),
        }
    }
    let set = PackSet::new(set);
    if set.version != stamp {
        return Ok(Resolution::Unknown(current.clone()));
    }
    Ok(Resolution::Stamped(Arc::new(set)))
}
