//! A small blocking HTTP/1.1 client for tests: real sockets, no client library between the
//! test and the bytes the gateway sends.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    /// The receipt id the answer names (`x-tollgate-receipt-id`); panics with the body if none.
    pub fn receipt_id(&self) -> String {
        self.header("x-tollgate-receipt-id").unwrap_or_else(|| panic!("no receipt id: {}", self.text())).to_string()
    }
}

fn write_request(s: &mut TcpStream, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n", s.peer_addr().unwrap());
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() || method != "GET" {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    s.flush().unwrap();
}

fn read_head(r: &mut BufReader<TcpStream>) -> (u16, Vec<(String, String)>) {
    let mut line = String::new();
    r.read_line(&mut line).expect("status line");
    let status: u16 =
        line.split_whitespace().nth(1).unwrap_or_else(|| panic!("bad status line {line:?}")).parse().unwrap();
    let mut headers = Vec::new();
    loop {
        line.clear();
        r.read_line(&mut line).unwrap();
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let (k, v) = l.split_once(':').unwrap();
        headers.push((k.trim().to_lowercase(), v.trim().to_string()));
    }
    (status, headers)
}

fn is_chunked(headers: &[(String, String)]) -> bool {
    headers.iter().any(|(k, v)| k == "transfer-encoding" && v.to_lowercase().contains("chunked"))
}

pub fn request(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Resp {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write_request(&mut s, method, path, headers, body);
    let mut r = BufReader::new(s);
    let (status, headers) = read_head(&mut r);
    let mut body = Vec::new();
    if is_chunked(&headers) {
        let mut stream = Stream { r, chunked: true, done: false };
        while let Some(c) = stream.next_chunk() {
            body.extend_from_slice(&c);
        }
    } else if let Some(len) = headers.iter().find(|(k, _)| k == "content-length") {
        let len: usize = len.1.parse().unwrap();
        body.resize(len, 0);
        r.read_exact(&mut body).unwrap();
    } else {
        r.read_to_end(&mut body).ok();
    }
    Resp { status, headers, body }
}

/// [`request`], or None when the connection is refused or breaks (a server killed mid-request).
pub fn try_request(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Option<Resp> {
    std::panic::catch_unwind(|| request(addr, method, path, headers, body)).ok()
}

/// A response read piece by piece, to see bytes arrive before the upstream has finished.
pub struct Stream {
    r: BufReader<TcpStream>,
    chunked: bool,
    done: bool,
}

impl Stream {
    /// The next body piece (a chunk of chunked encoding, or whatever one read returns).
    pub fn next_chunk(&mut self) -> Option<Vec<u8>> {
        if self.done {
            return None;
        }
        if !self.chunked {
            let mut buf = vec![0u8; 16 * 1024];
            let n = self.r.read(&mut buf).unwrap_or(0);
            if n == 0 {
                self.done = true;
                return None;
            }
            buf.truncate(n);
            return Some(buf);
        }
        let mut line = String::new();
        if self.r.read_line(&mut line).unwrap_or(0) == 0 {
            self.done = true;
            return None;
        }
        let size = usize::from_str_radix(line.trim().split(';').next().unwrap(), 16).expect("chunk size");
        if size == 0 {
            self.done = true;
            return None;
        }
        let mut buf = vec![0u8; size + 2];
        self.r.read_exact(&mut buf).unwrap();
        buf.truncate(size);
        Some(buf)
    }

    pub fn rest(mut self) -> Vec<u8> {
        let mut all = Vec::new();
        while let Some(c) = self.next_chunk() {
            all.extend_from_slice(&c);
        }
        all
    }
}

pub fn stream(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Vec<(String, String)>, Stream) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write_request(&mut s, "POST", path, headers, body);
    let mut r = BufReader::new(s);
    let (status, headers) = read_head(&mut r);
    let chunked = is_chunked(&headers);
    (status, headers, Stream { r, chunked, done: false })
}
