//! The immutable view the hot path reads: keys by hash, provider credentials, routes, prices,
//! team names and the budget book.
//!
//! Requests pin one `Arc<Snapshot>` (an ArcSwap load, no lock, no I/O). Any change made through
//! the API rebuilds the snapshot from the database and swaps it in before the API call returns;
//! a background refresh picks up changes made by other processes sharing the database.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use sha2::{Digest, Sha256};

use crate::budget::BudgetBook;
use crate::config::{Config, ProviderName};
use crate::pricing::Pricing;
use crate::sealing::MasterKey;
use crate::secret::Secret;
use crate::store::{self, keys::KeyRecord, Store, StoreError};
use crate::upstream::BaseUrl;

/// Per-key state that outlives snapshot rebuilds (the rebuild carries the same Arc over).
#[derive(Debug, Default)]
pub struct KeyState {
    /// Unix ms of the last request; 0 = never. Flushed to `last_used_at` in the background.
    pub last_used_ms: AtomicI64,
    pub flushed_ms: AtomicI64,
}

#[derive(Debug)]
pub struct KeyEntry {
    pub record: KeyRecord,
    pub state: Arc<KeyState>,
}

impl KeyEntry {
    pub fn is_manager(&self) -> bool {
        self.record.role == "manager"
    }
    pub fn tenant_id(&self) -> &str {
        &self.record.tenant_id
    }
    pub fn touch(&self) {
        self.state.last_used_ms.store(chrono::Utc::now().timestamp_millis(), Ordering::Relaxed);
    }
}

/// Decrypted credentials of one tenant for one provider.
#[derive(Debug)]
pub struct ProviderCred {
    pub provider: ProviderName,
    pub api_key: Option<Secret>,
    pub base_url: BaseUrl,
    pub status: String,
}

pub struct Snapshot {
    keys: HashMap<[u8; 32], Arc<KeyEntry>>,
    providers: HashMap<(String, ProviderName), Arc<ProviderCred>>,
    pub config: Arc<Config>,
    pub pricing: Arc<Pricing>,
    /// Which limits apply to which key, team and tenant.
    pub budgets: Arc<BudgetBook>,
    /// Team names by team id, for policies that match on a key's team.
    pub teams: HashMap<String, String>,
}

/// SHA-256 of a presented key: how keys are stored and looked up.
pub fn key_digest(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

impl Snapshot {
    pub fn key(&self, secret: &str) -> Option<&Arc<KeyEntry>> {
        if !secret.starts_with(crate::keys::PREFIX) {
            return None;
        }
        self.keys.get(&key_digest(secret))
    }

    pub fn provider(&self, tenant_id: &str, p: ProviderName) -> Option<&Arc<ProviderCred>> {
        self.providers.get(&(tenant_id.to_string(), p))
    }

    pub fn keys(&self) -> impl Iterator<Item = &Arc<KeyEntry>> {
        self.keys.values()
    }

    pub fn providers(&self) -> impl Iterator<Item = (&str, &Arc<ProviderCred>)> {
        self.providers.iter().map(|((t, _), c)| (t.as_str(), c))
    }

    /// The provider the routing table picks for `model` (first match wins).
    pub fn route(&self, model: &str) -> Option<ProviderName> {
        self.config.routes.iter().find(|r| r.model.matches(model)).map(|r| r.provider)
    }

    pub fn empty(config: Arc<Config>, pricing: Arc<Pricing>) -> Snapshot {
        Snapshot {
            keys: HashMap::new(),
            providers: HashMap::new(),
            config,
            pricing,
            budgets: Arc::new(BudgetBook::default()),
            teams: HashMap::new(),
        }
    }
}

pub struct SnapshotHandle {
    current: ArcSwap<Snapshot>,
    rebuild_lock: tokio::sync::Mutex<()>,
    store: Store,
    master: Arc<MasterKey>,
}

impl SnapshotHandle {
    pub fn new(initial: Snapshot, store: Store, master: Arc<MasterKey>) -> Self {
        SnapshotHandle {
            current: ArcSwap::from_pointee(initial),
            rebuild_lock: tokio::sync::Mutex::new(()),
            store,
            master,
        }
    }

    pub fn load(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// Re-reads keys, credentials, teams and budgets and swaps the new snapshot in. Serialized, so an older
    /// read can never overwrite a newer one.
    pub async fn rebuild(&self) -> Result<(), StoreError> {
        let _guard = self.rebuild_lock.lock().await;
        let old = self.load();
        let key_rows = store::keys::all_active(&self.store).await?;
        let cred_rows = store::providers::all(&self.store).await?;
        let team_rows = store::teams::all(&self.store).await?;
        let budget_rows = store::budgets::all(&self.store).await?;
        let budgets = Arc::new(BudgetBook::build(&budget_rows, &key_rows, &team_rows));
        let teams = team_rows.into_iter().map(|t| (t.id, t.name)).collect();

        let mut keys = HashMap::with_capacity(key_rows.len());
        let old_state: HashMap<&str, &Arc<KeyState>> =
            old.keys.values().map(|k| (k.record.id.as_str(), &k.state)).collect();
        for rec in key_rows {
            let Ok(raw) = hex::decode(&rec.key_hash) else { continue };
            let Ok(digest) = <[u8; 32]>::try_from(raw.as_slice()) else { continue };
            let state = old_state.get(rec.id.as_str()).map(|s| Arc::clone(s)).unwrap_or_default();
            keys.insert(digest, Arc::new(KeyEntry { record: rec, state }));
        }

        let mut providers = HashMap::new();
        for row in cred_rows {
            let Some(p) = ProviderName::parse(&row.provider) else { continue };
            match crate::providers::credentials::open(&self.master, &old.config, &row) {
                Ok(cred) => {
                    providers.insert((row.tenant_id.clone(), p), Arc::new(cred));
                }
                Err(e) => log::error!("provider {} of tenant {}: {e}", row.provider, row.tenant_id),
            }
        }
        let next =
            Snapshot { keys, providers, config: old.config.clone(), pricing: old.pricing.clone(), budgets, teams };
        self.current.store(Arc::new(next));
        Ok(())
    }
}
