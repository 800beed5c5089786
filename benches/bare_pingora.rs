//! The benchmark baseline: a bare Pingora passthrough proxy with no logic at all
//! (`benches/load.sh`). What Tollgate adds on top of this is Tollgate's own cost.
//!
//! Usage: `bare_pingora LISTEN UPSTREAM [THREADS]`, e.g.
//! `bare_pingora 127.0.0.1:18092 127.0.0.1:18091`.
//!
//! THREADS defaults to 2, the same as Tollgate's default `server.threads`, so that both
//! proxies get the same number of worker threads. The upstream is plain HTTP; upstream
//! connections are pooled with a 60 s idle timeout (Tollgate's default `idle_pool_seconds`).

use std::net::SocketAddr;
use std::time::Duration;

use async_trait::async_trait;

// The same allocator as the `tollgate` binary, so the comparison measures Tollgate's own work.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use pingora::proxy::{http_proxy_service, ProxyHttp, Session};
use pingora::server::configuration::ServerConf;
use pingora::server::Server;
use pingora::upstreams::peer::HttpPeer;

struct Passthrough {
    upstream: SocketAddr,
}

#[async_trait]
impl ProxyHttp for Passthrough {
    type CTX = ();

    fn new_ctx(&self) -> Self::CTX {}

    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut ()) -> pingora::Result<Box<HttpPeer>> {
        let mut peer = HttpPeer::new(self.upstream, false, String::new());
        peer.options.idle_timeout = Some(Duration::from_secs(60));
        Ok(Box::new(peer))
    }
}

fn usage() -> ! {
    eprintln!("usage: bare_pingora LISTEN UPSTREAM [THREADS]   e.g. bare_pingora 127.0.0.1:18092 127.0.0.1:18091");
    std::process::exit(2)
}

fn main() {
    // The same allocator settings as Tollgate's, so the comparison is of the proxies alone.
    tollgate::process::allocator::configure();
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        usage();
    }
    let listen = args[1].clone();
    let upstream: SocketAddr = args[2].parse().unwrap_or_else(|_| usage());
    let threads: usize = args.get(3).map(|t| t.parse().unwrap_or_else(|_| usage())).unwrap_or(2);

    let tmp = std::env::temp_dir().join(format!("bare_pingora.{}", std::process::id()));
    let conf = ServerConf {
        threads,
        grace_period_seconds: Some(0),
        graceful_shutdown_timeout_seconds: Some(1),
        pid_file: format!("{}.pid", tmp.display()),
        upgrade_sock: format!("{}.sock", tmp.display()),
        ..Default::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    let mut proxy = http_proxy_service(&server.configuration, Passthrough { upstream });
    proxy.add_tcp(&listen);
    server.add_service(proxy);
    eprintln!("bare_pingora listening on {listen} -> http://{upstream} ({threads} threads)");
    server.run_forever()
}
