//! A stand-in HTTP receiver on a real socket, in place of outside services the gateway calls:
//! a tenant's webhook endpoint, Stripe's API. It records every request (with when it arrived)
//! and answers what its script says; keep-alive connections are served request after request.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub at: Instant,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap()
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// What to answer the `n`th request (0-based): status and JSON body.
pub type Script = Box<dyn Fn(usize, &Received) -> (u16, String) + Send + Sync>;

/// What to answer the `n`th request (0-based): status, content type and body bytes.
pub type BytesScript = Box<dyn Fn(usize, &Received) -> (u16, String, Vec<u8>) + Send + Sync>;

pub struct Receiver {
    pub addr: SocketAddr,
    log: Arc<Mutex<Vec<Received>>>,
    script: Arc<Mutex<BytesScript>>,
}

fn json_script(script: Script) -> BytesScript {
    Box::new(move |n, r| {
        let (status, text) = script(n, r);
        (status, "application/json".into(), text.into_bytes())
    })
}

impl Receiver {
    /// Answers 200 `{}` to everything.
    pub fn ok() -> Receiver {
        Receiver::start(Box::new(|_, _| (200, "{}".into())))
    }

    pub fn start(script: Script) -> Receiver {
        Receiver::start_bytes(json_script(script))
    }

    /// [`Receiver::start`] answering with `content_type` instead of JSON's.
    pub fn start_typed(script: Script, content_type: &'static str) -> Receiver {
        Receiver::start_bytes(Box::new(move |n, r| {
            let (status, text) = script(n, r);
            (status, content_type.into(), text.into_bytes())
        }))
    }

    pub fn start_bytes(script: BytesScript) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(Mutex::new(script));
        let (l, s) = (log.clone(), script.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                let (l, s) = (l.clone(), s.clone());
                std::thread::spawn(move || serve(conn, l, s));
            }
        });
        Receiver { addr, log, script }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Replaces what it answers from now on.
    pub fn set_script(&self, script: Script) {
        *self.script.lock().unwrap() = json_script(script);
    }

    pub fn set_bytes_script(&self, script: BytesScript) {
        *self.script.lock().unwrap() = script;
    }

    pub fn received(&self) -> Vec<Received> {
        self.log.lock().unwrap().clone()
    }

    /// Waits (up to `limit`) until `done` holds for what was received; returns it.
    pub fn wait_for(&self, limit: Duration, done: impl Fn(&[Received]) -> bool) -> Vec<Received> {
        let until = Instant::now() + limit;
        loop {
            let got = self.received();
            if done(&got) || Instant::now() > until {
                return got;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn serve(conn: TcpStream, log: Arc<Mutex<Vec<Received>>>, script: Arc<Mutex<BytesScript>>) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
    let mut w = conn.try_clone().unwrap();
    let mut r = BufReader::new(conn);
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let (method, path) = (parts.next().unwrap_or("").to_string(), parts.next().unwrap_or("").to_string());
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.push((k.trim().to_lowercase(), v.trim().to_string()));
            }
        }
        let len: usize =
            headers.iter().find(|(k, _)| k == "content-length").and_then(|(_, v)| v.parse().ok()).unwrap_or(0);
        let mut body = vec![0; len];
        if r.read_exact(&mut body).is_err() {
            return;
        }
        let rec = Received { method, path, headers, body, at: Instant::now() };
        let n = {
            let mut l = log.lock().unwrap();
            l.push(rec.clone());
            l.len() - 1
        };
        let (status, kind, body) = (script.lock().unwrap())(n, &rec);
        let head = format!("HTTP/1.1 {status} X\r\ncontent-type: {kind}\r\ncontent-length: {}\r\n\r\n", body.len());
        if w.write_all(head.as_bytes()).and_then(|_| w.write_all(&body)).is_err() {
            return;
        }
    }
}
