//! The immutable view the hot path reads: keys by hash, provider credentials, compiled tenant
//! policies, routes, prices, team names and the budget book.
//!
//! Requests pin one `Arc<Snapshot>` (an ArcSwap load, no lock, no I/O). Any change made through
//! the API rebuilds the snapshot from the database and swaps it in before the API call returns
//! ([`SnapshotHandle::changed`]); on PostgreSQL it also sends a change notice, on which the other
//! processes sharing the database rebuild at once (`crate::notices`). A background refresh
//! stays as the safety net for notices lost while a listener was reconnecting.

use foldhash::{HashMap, HashMapExt};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::checks::budget::BudgetBook;
use crate::checks::policy::files::PolicyFiles;
use crate::checks::policy::{validate, CompiledPolicy, TenantPolicy};
use crate::compliance::pack::{self, Pack, PackSet, Source};
use crate::config::{Config, Glob};
use crate::providers::pricing::Pricing;
use crate::providers::ProviderCred;
use crate::providers::ProviderName;
use crate::routing::ModelRoute;
use crate::secrets::at_rest::MasterKey;
use crate::secrets::Secret;
use crate::store::{self, keys::KeyRecord, Store, StoreError};
use crate::tool_servers::{self, ToolServer};

/// Per-key state that outlives snapshot rebuilds (the rebuild carries the same Arc over).
#[derive(Debug, Default)]
pub struct KeyState {
    /// Unix ms of the last request; 0 = never. Flushed to `last_used_at` in the background.
    pub last_used_ms: AtomicI64,
    pub flushed_ms: AtomicI64,
    /// Requests and tokens per minute (`ratelimit`).
    pub rate: Arc<crate::checks::rate_limit::Windows>,
    /// `count_tokens` calls per minute, apart from `rate` (`limits.count_tokens_rpm`).
    pub count_tokens: Arc<crate::checks::rate_limit::Windows>,
    /// Each end user's requests and tokens per minute (`endUserRpmLimit` / `endUserTpmLimit`).
    pub end_users: crate::checks::rate_limit::EndUserWindows,
}

#[derive(Debug)]
pub struct KeyEntry {
    pub record: KeyRecord,
    pub state: Arc<KeyState>,
    /// The record's tenant and key ids, shared: every receipt carries them.
    pub tenant: Arc<str>,
    pub id: Arc<str>,
}

impl KeyEntry {
    pub fn new(record: KeyRecord, state: Arc<KeyState>) -> KeyEntry {
        KeyEntry { tenant: record.tenant_id.as_str().into(), id: record.id.as_str().into(), record, state }
    }

    pub fn is_manager(&self) -> bool {
        self.record.role == "manager"
    }
    /// An auditor key (docs/log.md §8): reads evidence, calls nothing, changes nothing.
    pub fn is_auditor(&self) -> bool {
        self.record.role == "auditor"
    }
    pub fn tenant_id(&self) -> &str {
        &self.record.tenant_id
    }
    pub fn touch(&self) {
        self.state.last_used_ms.store(chrono::Utc::now().timestamp_millis(), Ordering::Relaxed);
    }
}

pub struct Snapshot {
    keys: HashMap<[u8; 32], Arc<KeyEntry>>,
    /// Per tenant, then per provider: looked up by `&str` on every request, without building
    /// an owned key.
    providers: HashMap<String, HashMap<ProviderName, Arc<ProviderCred>>>,
    /// Named credentials (every name but `default`), per tenant, provider and name.
    named: HashMap<String, HashMap<ProviderName, HashMap<String, Arc<ProviderCred>>>>,
    /// Model routes per tenant, by the model name clients use: config's, overlaid by the
    /// tenant's own. Empty when no route exists anywhere (then a lookup hashes nothing).
    model_routes: HashMap<String, HashMap<String, Arc<ModelRoute>>>,
    /// Merged policies by tenant id; tenants without any are absent.
    policies: HashMap<String, Arc<TenantPolicy>>,
    /// Compiled enabled API policies by policy id, reused by the next rebuild while unchanged.
    api_policies: HashMap<String, Arc<CompiledPolicy>>,
    tenant_names: HashMap<String, String>,
    no_policy: Arc<TenantPolicy>,
    pub config: Arc<Config>,
    /// `config.routes` with each provider key resolved to its provider, once for the config.
    routes: Arc<[(Glob, ProviderName)]>,
    pub pricing: Arc<Pricing>,
    /// Which limits apply to which key, team and tenant.
    pub budgets: Arc<BudgetBook>,
    /// Team names by team id, for policies that match on a key's team.
    pub teams: HashMap<String, String>,
    /// Pack sets of tenants with packs of their own; the others have the baseline set.
    packs: HashMap<String, Arc<PackSet>>,
    /// MCP tool servers per tenant, then by name (config entries and API registrations).
    tool_servers: HashMap<String, HashMap<String, Arc<ToolServer>>>,
}

impl Snapshot {
    /// The key whose SHA-256 is `digest` (a console session names its key so, never by secret).
    pub fn key_by_digest(&self, digest: &[u8; 32]) -> Option<&Arc<KeyEntry>> {
        self.keys.get(digest)
    }

    pub fn key(&self, secret: &str) -> Option<&Arc<KeyEntry>> {
        if !secret.starts_with(crate::keys::PREFIX) {
            return None;
        }
        self.keys.get(&crate::keys::key_digest(secret))
    }

    pub fn provider(&self, tenant_id: &str, p: ProviderName) -> Option<&Arc<ProviderCred>> {
        self.providers.get(tenant_id)?.get(&p)
    }

    /// The tenant's credential `name` for `p` (`default` is the one `PUT /v1/providers/{p}` sets).
    pub fn credential(&self, tenant_id: &str, p: ProviderName, name: &str) -> Option<&Arc<ProviderCred>> {
        match name {
            store::providers::DEFAULT => self.provider(tenant_id, p),
            _ => self.named.get(tenant_id)?.get(&p)?.get(name),
        }
    }

    /// The tenant's route for the model a client asked for. One hash lookup per level, none
    /// while no route exists.
    pub fn model_route(&self, tenant_id: &str, model: &str) -> Option<&Arc<ModelRoute>> {
        if self.model_routes.is_empty() {
            return None;
        }
        self.model_routes.get(tenant_id)?.get(model)
    }

    /// Every route of every tenant (for `/status` and the metrics).
    pub fn model_routes(&self) -> impl Iterator<Item = &Arc<ModelRoute>> {
        self.model_routes.values().flat_map(|by| by.values())
    }

    pub fn keys(&self) -> impl Iterator<Item = &Arc<KeyEntry>> {
        self.keys.values()
    }

    pub fn providers(&self) -> impl Iterator<Item = (&str, &Arc<ProviderCred>)> {
        self.providers.iter().flat_map(|(t, by)| by.values().map(move |c| (t.as_str(), c)))
    }

    /// The provider the routing table picks for `model` (first match wins).
    pub fn route(&self, model: &str) -> Option<ProviderName> {
        self.routes.iter().find(|(glob, _)| glob.matches(model)).map(|(_, p)| *p)
    }

    /// The tenant's merged policies (an empty policy when it has none).
    pub fn policy(&self, tenant_id: &str) -> Arc<TenantPolicy> {
        self.policies.get(tenant_id).unwrap_or(&self.no_policy).clone()
    }

    /// The compliance packs the tenant has in force.
    pub fn packs(&self, tenant_id: &str) -> &Arc<PackSet> {
        self.packs.get(tenant_id).unwrap_or_else(|| pack::baseline_set())
    }

    /// The tenant's tool server of this name; another tenant's is never found.
    pub fn tool_server(&self, tenant_id: &str, name: &str) -> Option<&Arc<ToolServer>> {
        self.tool_servers.get(tenant_id)?.get(name)
    }

    /// Every tool server, over all tenants (for `/status`).
    pub fn tool_servers(&self) -> impl Iterator<Item = &Arc<ToolServer>> {
        self.tool_servers.values().flat_map(|by| by.values())
    }

    /// The tenant's tool servers, by name.
    pub fn tenant_tool_servers(&self, tenant_id: &str) -> Vec<&Arc<ToolServer>> {
        let mut v: Vec<_> = self.tool_servers.get(tenant_id).map(|m| m.values().collect()).unwrap_or_default();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    pub fn tenant_name(&self, tenant_id: &str) -> Option<&str> {
        self.tenant_names.get(tenant_id).map(String::as_str)
    }

    /// Enabled API policies in force, over all tenants.
    pub fn api_policy_count(&self) -> usize {
        self.api_policies.len()
    }

    /// The same snapshot with these tenant policies (fixtures and benchmarks).
    pub fn with_policies(mut self, policies: impl IntoIterator<Item = (String, Arc<TenantPolicy>)>) -> Snapshot {
        self.policies = policies.into_iter().collect();
        self
    }

    pub fn empty(config: Arc<Config>, pricing: Arc<Pricing>) -> Snapshot {
        Snapshot {
            keys: HashMap::new(),
            providers: HashMap::new(),
            named: HashMap::new(),
            model_routes: HashMap::new(),
            policies: HashMap::new(),
            api_policies: HashMap::new(),
            tenant_names: HashMap::new(),
            no_policy: Arc::new(TenantPolicy::empty()),
            routes: resolve_routes(&config),
            config,
            pricing,
            budgets: Arc::new(BudgetBook::default()),
            teams: HashMap::new(),
            packs: HashMap::new(),
            tool_servers: HashMap::new(),
        }
    }
}

pub struct SnapshotHandle {
    current: ArcSwap<Snapshot>,
    rebuild_lock: tokio::sync::Mutex<()>,
    store: Store,
    master: Arc<MasterKey>,
    /// Policy files of `policies.dir`; scanned by the policy watcher, read by every rebuild.
    pub files: Arc<PolicyFiles>,
    /// This process's id in change notices: its listener skips the notices it sent itself.
    pub instance: String,
}

impl SnapshotHandle {
    pub fn new(initial: Snapshot, store: Store, master: Arc<MasterKey>) -> Self {
        let files = Arc::new(PolicyFiles::new(initial.config.policies.dir.clone()));
        SnapshotHandle {
            current: ArcSwap::from_pointee(initial),
            rebuild_lock: tokio::sync::Mutex::new(()),
            store,
            master,
            files,
            instance: uuid::Uuid::new_v4().simple().to_string(),
        }
    }

    /// The seam of every change made through the management API, after its transaction
    /// committed: tells the other processes sharing the database (a notice on PostgreSQL; nothing
    /// on SQLite, which one process owns), then rebuilds this one's snapshot. A notice that cannot
    /// be sent is logged, not returned: the change is made, and the others' periodic refresh
    /// still picks it up.
    pub async fn changed(&self) -> Result<(), StoreError> {
        if self.store.backend() == store::Backend::Postgres {
            // Sent before the local rebuild, so the other processes rebuild in parallel with this one.
            match store::notices::send(&self.store, &self.instance).await {
                Ok(()) => crate::metrics::METRICS.change_notices.with_label_values(&["sent"]).inc(),
                Err(e) => log::warn!("change notice not sent (the others' periodic refresh catches up): {e}"),
            }
        }
        self.rebuild().await
    }

    pub fn load(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// Re-reads keys, credentials, policies, teams and budgets and swaps the new snapshot in.
    /// Serialized, so an older read can never overwrite a newer one.
    pub async fn rebuild(&self) -> Result<(), StoreError> {
        let _guard = self.rebuild_lock.lock().await;
        let old = self.load();
        let key_rows = store::keys::all_active(&self.store).await?;
        let cred_rows = store::providers::all(&self.store).await?;
        let policy_rows = store::policies::all_enabled(&self.store).await?;
        let tenants = store::tenants::all(&self.store).await?;
        let pack_rows = store::packs::all_current(&self.store).await?;
        let team_rows = store::teams::all(&self.store).await?;
        let budget_rows = store::budgets::all(&self.store).await?;
        let tool_rows = store::tool_servers::all(&self.store).await?;
        let route_rows = store::routes::all(&self.store).await?;
        let budgets = Arc::new(BudgetBook::build(&budget_rows, &key_rows, &team_rows));
        let teams = team_rows.into_iter().map(|t| (t.id, t.name)).collect();

        let keys = key_entries(&old, key_rows);

        let (providers, named) = self.credentials(&old, cred_rows);
        let model_routes = model_routes(&old, &tenants, route_rows);
        let (api_policies, by_tenant) = api_policies(&old, policy_rows);
        let files = self.files.current().compiled();
        let policies = crate::checks::policy::compiled::build_all(&tenants, &by_tenant, &files, &old.policies);
        let tenant_names = tenants.into_iter().map(|t| (t.id, t.name)).collect();
        let packs = tenant_pack_sets(&old, pack_rows);
        let tool_servers = tool_servers(&old, &self.master, tool_rows);

        let next = Snapshot {
            keys,
            providers,
            named,
            model_routes,
            policies,
            api_policies,
            tenant_names,
            no_policy: old.no_policy.clone(),
            config: old.config.clone(),
            routes: old.routes.clone(),
            pricing: old.pricing.clone(),
            budgets,
            teams,
            packs,
            tool_servers,
        };
        self.current.store(Arc::new(next));
        Ok(())
    }
}

/// Default credentials and named ones, per tenant.
type Credentials = (
    HashMap<String, HashMap<ProviderName, Arc<ProviderCred>>>,
    HashMap<String, HashMap<ProviderName, HashMap<String, Arc<ProviderCred>>>>,
);

impl SnapshotHandle {
    /// The stored credentials, opened: `default` ones and named ones apart.
    fn credentials(&self, old: &Snapshot, rows: Vec<store::providers::CredentialRow>) -> Credentials {
        let (mut providers, mut named) = (HashMap::new(), HashMap::new());
        for row in rows {
            let Some(p) = ProviderName::parse(&row.provider) else { continue };
            let cred = match crate::providers::encrypted::decrypt(&self.master, &old.config, &row) {
                Ok(cred) => Arc::new(cred),
                Err(e) => {
                    log::error!("provider {} credential {} of tenant {}: {e}", row.provider, row.name, row.tenant_id);
                    continue;
                }
            };
            if row.name == store::providers::DEFAULT {
                providers.entry(row.tenant_id).or_insert_with(HashMap::new).insert(p, cred);
            } else {
                let by: &mut HashMap<ProviderName, HashMap<String, Arc<ProviderCred>>> =
                    named.entry(row.tenant_id).or_insert_with(HashMap::new);
                by.entry(p).or_default().insert(row.name, cred);
            }
        }
        (providers, named)
    }
}

/// Each tenant's model routes: config's, then the tenant's own (which win). Each target's
/// health carries over from `old` by tenant, route, provider, credential and model.
fn model_routes(
    old: &Snapshot,
    tenants: &[store::tenants::Tenant],
    rows: Vec<store::routes::RouteRow>,
) -> HashMap<String, HashMap<String, Arc<ModelRoute>>> {
    let mut out: HashMap<String, HashMap<String, Arc<ModelRoute>>> = HashMap::new();
    if old.config.routes.models.is_empty() && rows.is_empty() {
        return out;
    }
    let mut health: HashMap<String, Arc<crate::routing::Health>> = HashMap::new();
    for (tenant, by) in &old.model_routes {
        health.extend(by.values().flat_map(|r| r.health_keys(tenant)));
    }
    let of = |k: &str| health.get(k).cloned();
    for t in tenants {
        for spec in &old.config.routes.models {
            let r = ModelRoute::compile(spec, &t.id, &of);
            out.entry(t.id.clone()).or_default().insert(spec.model.clone(), Arc::new(r));
        }
    }
    for row in rows {
        match serde_json::from_str::<crate::config::RouteSpec>(&row.spec) {
            Ok(spec) => {
                let r = ModelRoute::compile(&spec, &row.tenant_id, &of);
                out.entry(row.tenant_id).or_default().insert(row.model, Arc::new(r));
            }
            Err(e) => log::error!("route {} of tenant {} is not in force: {e}", row.model, row.tenant_id),
        }
    }
    out
}

/// The routing table with its providers resolved. Config read each key against the providers'
/// vocabulary, whose names are `ProviderName`'s, so none is dropped unless the config was read
/// against another vocabulary.
fn resolve_routes(config: &Config) -> Arc<[(Glob, ProviderName)]> {
    let mut routes = Vec::with_capacity(config.routes.rules.len());
    for r in &config.routes.rules {
        match ProviderName::parse(r.provider.as_str()) {
            Some(p) => routes.push((r.model.clone(), p)),
            None => log::error!("route `{}` names no known provider `{}`: left out", r.model.as_str(), r.provider),
        }
    }
    routes.into()
}

/// The active keys by digest; a key's counters carry over from the snapshot before.
fn key_entries(old: &Snapshot, key_rows: Vec<KeyRecord>) -> HashMap<[u8; 32], Arc<KeyEntry>> {
    let mut keys = HashMap::with_capacity(key_rows.len());
    let old_state: HashMap<&str, &Arc<KeyState>> =
        old.keys.values().map(|k| (k.record.id.as_str(), &k.state)).collect();
    for rec in key_rows {
        let Ok(raw) = hex::decode(&rec.key_hash) else { continue };
        let Ok(digest) = <[u8; 32]>::try_from(raw.as_slice()) else { continue };
        let state = old_state.get(rec.id.as_str()).map(|s| Arc::clone(s)).unwrap_or_default();
        keys.insert(digest, Arc::new(KeyEntry::new(rec, state)));
    }
    keys
}

/// Compiled policies per tenant, in evaluation order.
type PerTenant = HashMap<String, Vec<Arc<CompiledPolicy>>>;

/// The enabled API policies compiled (reused when their YAML did not change), by id and per
/// tenant. Rows come ordered by tenant, then id (creation order): the evaluation order.
fn api_policies(
    old: &Snapshot,
    policy_rows: Vec<store::policies::PolicyRecord>,
) -> (HashMap<String, Arc<CompiledPolicy>>, PerTenant) {
    let mut api_policies = HashMap::with_capacity(policy_rows.len());
    let mut by_tenant: PerTenant = HashMap::new();
    for row in policy_rows {
        let reused = old.api_policies.get(&row.id).filter(|c| c.yaml() == row.yaml).cloned();
        let compiled = match reused {
            Some(c) => c,
            None => {
                match validate::parse_api(&row.yaml).and_then(|doc| CompiledPolicy::compile(&row.id, &row.yaml, doc)) {
                    Ok(c) => Arc::new(c),
                    Err(e) => {
                        // Only possible for rows written around the API (validation on write).
                        log::error!("policy {} of tenant {} is not in force: {e}", row.id, row.tenant_id);
                        continue;
                    }
                }
            }
        };
        by_tenant.entry(row.tenant_id).or_default().push(compiled.clone());
        api_policies.insert(row.id, compiled);
    }
    (api_policies, by_tenant)
}

/// Each tenant's tool servers: config entries first, then registrations (a registration never
/// shadows a config entry: the API refuses the name). Counters carry over by tenant and name.
fn tool_servers(
    old: &Snapshot,
    master: &MasterKey,
    rows: Vec<store::tool_servers::ToolServerRow>,
) -> HashMap<String, HashMap<String, Arc<ToolServer>>> {
    let mut out: HashMap<String, HashMap<String, Arc<ToolServer>>> = HashMap::new();
    let state = |t: &str, n: &str| old.tool_server(t, n).map(|s| s.state.clone()).unwrap_or_default();
    for c in &old.config.tool_servers {
        let headers = c
            .headers
            .iter()
            .filter_map(|(k, v)| Some((http::HeaderName::from_bytes(k.as_bytes()).ok()?, Secret::new(v.clone()))))
            .collect();
        match tool_servers::server(
            &c.tenant,
            &c.name,
            &c.url,
            headers,
            tool_servers::Source::Config,
            state(&c.tenant, &c.name),
        ) {
            Ok(s) => {
                out.entry(c.tenant.clone()).or_default().insert(c.name.clone(), Arc::new(s));
            }
            Err(e) => log::error!("tool server {} of tenant {} (config): {e}", c.name, c.tenant),
        }
    }
    for row in rows {
        let by = out.entry(row.tenant_id.clone()).or_default();
        if by.contains_key(&row.name) {
            continue;
        }
        let opened =
            tool_servers::decrypt_headers(master, &row.tenant_id, &row.name, &row.sealed_headers).and_then(|h| {
                let st = state(&row.tenant_id, &row.name);
                tool_servers::server(&row.tenant_id, &row.name, &row.url, h, tool_servers::Source::Api, st)
            });
        match opened {
            Ok(s) => {
                by.insert(row.name.clone(), Arc::new(s));
            }
            Err(e) => log::error!("tool server {} of tenant {}: {e}", row.name, row.tenant_id),
        }
    }
    out
}

/// Each tenant's pack set from its packs in force; packs unchanged since `old` are reused.
fn tenant_pack_sets(old: &Snapshot, rows: Vec<store::packs::PackRow>) -> HashMap<String, Arc<PackSet>> {
    let mut by_tenant: HashMap<String, Vec<Arc<Pack>>> = HashMap::new();
    for row in rows {
        let reused =
            old.packs.get(&row.tenant_id).and_then(|s| s.get(&row.framework)).filter(|p| p.hash == row.pack_hash);
        let parsed = match reused {
            Some(p) => p.clone(),
            None => match Pack::parse(&row.yaml, &format!("pack {}", row.framework), Source::Tenant) {
                Ok(p) => Arc::new(p),
                Err(e) => {
                    // Only possible for rows written around the API (validation on write).
                    log::error!("compliance pack {} of tenant {} is not in force: {e}", row.framework, row.tenant_id);
                    continue;
                }
            },
        };
        by_tenant.entry(row.tenant_id).or_default().push(parsed);
    }
    by_tenant.into_iter().map(|(t, packs)| (t, Arc::new(PackSet::with_tenant_packs(packs)))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::pricing::Pricing;
    use crate::store::policies::PolicyInput;

    const GUARDED: &str = "guardrails:\n  applyTo: [request]\n  pii: {email: redact}\n";

    /// The routing table is resolved to providers when the snapshot is built, first match
    /// winning as in config's order.
    #[test]
    fn routes_resolve_to_providers_in_order() {
        let yaml = "routes:\n  - { model: \"claude-x*\", provider: bedrock }\n  - { model: \"claude-*\", provider: anthropic }\n";
        let config = Arc::new(Config::parse(yaml, "t.yaml", &crate::providers::VOCABULARY).unwrap());
        let pricing = Arc::new(Pricing::from_config(&config).unwrap());
        let snap = Snapshot::empty(config, pricing);
        assert_eq!(snap.route("claude-xl"), Some(ProviderName::Bedrock));
        assert_eq!(snap.route("claude-3"), Some(ProviderName::Anthropic));
        assert_eq!(snap.route("gpt-4o"), None, "a file's routes replace the default ones");
        let defaults = Arc::new(Config::defaults(&crate::providers::VOCABULARY));
        let snap = Snapshot::empty(defaults.clone(), Arc::new(Pricing::from_config(&defaults).unwrap()));
        assert_eq!(snap.route("gpt-4o"), Some(ProviderName::OpenAi));
        assert_eq!(snap.route("vertex/gemini-2.0-flash"), Some(ProviderName::Vertex));
        assert_eq!(snap.route("mistral-large"), None);
    }

    /// A refresh that finds the same policies keeps the merged policy (and its compiled
    /// guardrails) as it was; a changed policy is merged anew.
    #[test]
    fn a_refresh_keeps_a_tenant_policy_whose_sources_did_not_change() {
        let (store, dir) = store::temp_sqlite("snapshot");
        store::db_runtime().block_on(async {
            let tenant = store::tenants::create(&store, "acme").await.unwrap();
            let input = |yaml: &str| PolicyInput { name: "p".into(), enabled: true, yaml: yaml.into() };
            let p = store::policies::insert(&store, &tenant.id, input(GUARDED)).await.unwrap();

            let mut config = Config::defaults(&crate::providers::VOCABULARY);
            config.policies.dir = dir.join("no-policy-files");
            let config = Arc::new(config);
            let pricing = Arc::new(Pricing::from_config(&config).unwrap());
            let master = Arc::new(MasterKey::from_bytes(&[3; 32]));
            let handle = SnapshotHandle::new(Snapshot::empty(config, pricing), store.clone(), master);

            handle.rebuild().await.unwrap();
            let first = handle.load().policy(&tenant.id);
            assert!(first.guardrails().is_some(), "the policy is in force");
            handle.rebuild().await.unwrap();
            assert!(Arc::ptr_eq(&first, &handle.load().policy(&tenant.id)), "unchanged: the same merged policy");

            let edited = GUARDED.replace("redact", "block");
            store::policies::replace(&store, &tenant.id, &p.id, input(&edited)).await.unwrap().unwrap();
            handle.rebuild().await.unwrap();
            let after = handle.load().policy(&tenant.id);
            assert!(!Arc::ptr_eq(&first, &after), "changed: merged anew");
            assert_ne!(first.id(), after.id());
        });
        let _ = std::fs::remove_dir_all(dir);
    }
}
