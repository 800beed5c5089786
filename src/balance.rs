//! `tollgate balance`: a round-robin front for several gateways on one machine (a second Pingora
//! service of this binary; `scripts/cluster` starts it). Not a production load balancer: a way
//! to try a cluster and to test one.
//!
//! Backends come from pingora-load-balancing (`LoadBalancer<RoundRobin>`) with a TCP health
//! check every second, so a stopped instance leaves the rotation; a request whose connection is
//! refused before it was sent is retried on the next instance. Every answer carries
//! `x-tollgate-upstream` (the instance that served it), so the spread can be seen and tested.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pingora::http::ResponseHeader;
use pingora::lb::selection::RoundRobin;
use pingora::lb::{health_check::TcpHealthCheck, LoadBalancer};
use pingora::proxy::{ProxyHttp, Session};
use pingora::server::configuration::ServerConf;
use pingora::server::Server;
use pingora::services::background::background_service;
use pingora::upstreams::peer::HttpPeer;
use pingora::{Error, ErrorType, Result};

/// The response header naming the instance that answered.
pub const UPSTREAM_HEADER: &str = "x-tollgate-upstream";

pub struct Front {
    upstreams: Arc<LoadBalancer<RoundRobin>>,
}

#[derive(Default)]
pub struct Pick {
    tries: usize,
    upstream: String,
}

#[async_trait]
impl ProxyHttp for Front {
    type CTX = Pick;

    fn new_ctx(&self) -> Pick {
        Pick::default()
    }

    async fn upstream_peer(&self, _session: &mut Session, ctx: &mut Pick) -> Result<Box<HttpPeer>> {
        ctx.tries += 1;
        let Some(b) = self.upstreams.select(b"", 256) else {
            return Err(Error::explain(ErrorType::HTTPStatus(502), "no healthy gateway instance"));
        };
        ctx.upstream = b.addr.to_string();
        Ok(Box::new(HttpPeer::new(b, false, String::new())))
    }

    /// Nothing was sent yet: the next instance in the rotation gets the request.
    fn fail_to_connect(&self, _s: &mut Session, _p: &HttpPeer, ctx: &mut Pick, mut e: Box<Error>) -> Box<Error> {
        if ctx.tries < self.upstreams.backends().get_backend().len() {
            e.set_retry(true);
        }
        e
    }

    async fn response_filter(&self, _s: &mut Session, resp: &mut ResponseHeader, ctx: &mut Pick) -> Result<()> {
        resp.insert_header(UPSTREAM_HEADER, ctx.upstream.as_str())?;
        Ok(())
    }
}

/// Runs the front until SIGTERM or SIGINT; returns only on a setup error.
pub fn run(listen: &str, upstreams: &[String]) -> std::result::Result<(), String> {
    std::net::TcpListener::bind(listen).map(drop).map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let mut lb = LoadBalancer::<RoundRobin>::try_from_iter(upstreams.iter().map(String::as_str))
        .map_err(|e| format!("--upstream: {e}"))?;
    lb.set_health_check(TcpHealthCheck::new());
    lb.health_check_frequency = Some(Duration::from_secs(1));
    let tmp = std::env::temp_dir().display().to_string();
    let id = std::process::id();
    let conf = ServerConf {
        threads: 2,
        grace_period_seconds: Some(0),
        graceful_shutdown_timeout_seconds: Some(1),
        pid_file: format!("{tmp}/tollgate-balance-{id}.pid"),
        upgrade_sock: format!("{tmp}/tollgate-balance-{id}.sock"),
        ..Default::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    let health = background_service("health check", lb);
    let mut front = pingora::proxy::http_proxy_service(&server.configuration, Front { upstreams: health.task() });
    front.add_tcp(listen);
    server.add_service(front);
    server.add_service(health);
    log::info!("tollgate balance: {listen} -> {}", upstreams.join(", "));
    server.run_forever()
}
