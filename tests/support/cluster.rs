//! Several gateway processes on one fresh PostgreSQL database (tests/cluster.rs and the
//! shared-state tests): one tenant, one manager key, one master key (a provider credential
//! sealed by one instance opens on the others); each instance has its own data dir and ports.

use std::net::SocketAddr;

use super::{drop_postgres, fresh_postgres, Backend, Gateway};

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

/// A random master key (base64 of 32 bytes), as `TOLLGATE_MASTER_KEY` takes it.
fn master_key() -> String {
    use base64::Engine;
    let mut raw = [0u8; 32];
    raw[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
    raw[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
    base64::engine::general_purpose::STANDARD.encode(raw)
}
