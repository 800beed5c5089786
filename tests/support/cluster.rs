//! Several gateway processes on one fresh PostgreSQL database (tests/cluster.rs and the
//! shared-state tests): one tenant, one manager key, one master key (a provider credential
//! sealed by one instance opens on the others); each instance has its own data dir and ports.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::{drop_postgres, fresh_postgres, http, Backend, Gateway, Standin};

pub struct Cluster {
    pub nodes: Vec<Gateway>,
    pub db_url: String,
    /// The tenant's manager key (valid on every instance).
    pub key: String,
    pub tenant_id: String,
}

impl Cluster {
    /// Starts `n` instances with `extra_env` for all (e.g. `TOLLGATE_REDIS_URL`); None (with a
    /// printed reason) when there is no PostgreSQL and TOLLGATE_REQUIRE_POSTGRES is not 1.
    pub fn start(n: usize, extra_env: &[(&str, &str)]) -> Option<Cluster> {
        Self::start_then(n, extra_env, |_| ()).map(|(c, ())| c)
    }

    /// [`Cluster::start`], running `setup` on the first instance before the others start, so
    /// they start with what it made (keys, limits, policies, providers) in their snapshot.
    pub fn start_then<T>(
        n: usize,
        extra_env: &[(&str, &str)],
        setup: impl FnOnce(&Gateway) -> T,
    ) -> Option<(Cluster, T)> {
        assert!(n >= 1);
        let db_url = fresh_postgres()?;
        let backend = Backend::Postgres(db_url.clone());
        let master = master_key();
        let mut env: Vec<(&str, &str)> = vec![("TOLLGATE_MASTER_KEY", &master)];
        env.extend_from_slice(extra_env);
        let first = Gateway::start(&backend, &env);
        let (key, tenant_id) = (first.key.clone(), first.tenant_id.clone());
        let made = setup(&first);
        let mut nodes = vec![first];
        for _ in 1..n {
            let mut g = Gateway::start_with(&backend, &env, false);
            g.key = key.clone();
            g.tenant_id = tenant_id.clone();
            nodes.push(g);
        }
        Some((Cluster { nodes, db_url, key, tenant_id }, made))
    }

    pub fn node(&self, i: usize) -> &Gateway {
        &self.nodes[i]
    }

    pub fn node_mut(&mut self, i: usize) -> &mut Gateway {
        &mut self.nodes[i]
    }

    /// Every instance's gateway address, in order.
    pub fn gateways(&self) -> Vec<SocketAddr> {
        self.nodes.iter().map(|g| g.gw).collect()
    }
}

impl Drop for Cluster {
    /// Stops every instance before the database goes (each `Gateway` drops it too; the first
    /// drop would otherwise pull it from under the instances still running).
    fn drop(&mut self) {
        for g in &mut self.nodes {
            g.stop();
        }
        self.nodes.clear();
        drop_postgres(&self.db_url);
    }
}

/// Three instances sharing `env` (e.g. Redis) and one stand-in provider (the tenant's
/// `openai`); `setup` ran on the first before the other two started.
pub fn three<T>(env: &[(&str, &str)], setup: impl FnOnce(&Gateway) -> T) -> Option<(Cluster, Standin, T)> {
    let up = Standin::start();
    let (c, made) = Cluster::start_then(3, env, |g| {
        g.set_provider(&g.key, "openai", &up.url(), "sk-provider-secret");
        setup(g)
    })?;
    Some((c, up, made))
}

/// Waits until every instance knows `key` (a key made on one reaches the others with the next
/// snapshot change), with a request that passes no check that counts.
pub fn known_everywhere(all: &[Gateway], key: &str) {
    for g in all {
        let deadline = Instant::now() + Duration::from_secs(15);
        let auth = format!("Bearer {key}");
        while http::request(g.gw, "GET", "/v1/models", &[("authorization", &auth)], b"").status == 401 {
            assert!(Instant::now() < deadline, "instance {} never accepted the key", g.gw);
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Rate windows are aligned minutes: a burst that must land in one window starts early in one
/// (the wait is scheduling, not an assertion on time).
pub fn early_in_a_minute() {
    let ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64 % 60_000;
    if ms > 45_000 {
        std::thread::sleep(Duration::from_millis(60_000 - ms + 200));
    }
}

/// A random master key (base64 of 32 bytes), as `TOLLGATE_MASTER_KEY` takes it.
fn master_key() -> String {
    use base64::Engine;
    let mut raw = [0u8; 32];
    raw[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
    raw[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
    base64::engine::general_purpose::STANDARD.encode(raw)
}
