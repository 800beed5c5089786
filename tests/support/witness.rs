//! A stand-in C2SP `tlog-witness` on a real socket, in place of an outside witness: it keeps,
//! per log origin it trusts, the newest checkpoint it cosigned, and answers `add-checkpoint` as
//! the protocol says — `404` for an origin it does not know, `403` for a checkpoint its key for
//! that origin did not sign, `409` (with its size) when `old` is not its size, `422` for a
//! consistency proof that does not hold, else `200` with a `tlog-cosignature/v1` line made with
//! the product's own `cosign` (the same bytes the C2SP spec defines). `set_down` answers 503.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use base64::Engine;
use ed25519_dalek::SigningKey;
use tlog_tiles::checkpoint::Checkpoint;
use tlog_tiles::tlog::{self, Hash};
use tollgate::tenant_log::cosignature::{cosign, CosignatureKey};

use super::receiver::{Received, Receiver};

pub struct Witness {
    pub name: String,
    key: SigningKey,
    receiver: Receiver,
    trusted: Arc<Mutex<HashMap<String, String>>>,
    down: Arc<AtomicBool>,
}

type Seen = Arc<Mutex<HashMap<String, (u64, Hash)>>>;

impl Witness {
    pub fn start(name: &str, seed: u8) -> Witness {
        let key = SigningKey::from_bytes(&[seed; 32]);
        let trusted: Arc<Mutex<HashMap<String, String>>> = Arc::default();
        let seen: Seen = Arc::default();
        let down = Arc::new(AtomicBool::new(false));
        let (n, k, t, d) = (name.to_string(), key.clone(), trusted.clone(), down.clone());
        let script = Box::new(move |_: usize, r: &Received| {
            if d.load(Ordering::SeqCst) {
                return (503, "down for maintenance\n".to_string());
            }
            add_checkpoint(&n, &k, &t.lock().unwrap(), &seen, r)
        });
        let receiver = Receiver::start_typed(script, "text/plain; charset=utf-8");
        Witness { name: name.to_string(), key, receiver, trusted, down }
    }

    pub fn url(&self) -> String {
        self.receiver.url("")
    }

    /// Its verifier key (C2SP tlog-cosignature), for the gateway's `log.witnesses`.
    pub fn verifier_key(&self) -> String {
        CosignatureKey::verifier_key(&self.name, &self.key.verifying_key())
    }

    /// Trusts the log `origin` signed by `log_vkey` (signed-note verifier key).
    pub fn trust(&self, origin: &str, log_vkey: &str) {
        self.trusted.lock().unwrap().insert(origin.to_string(), log_vkey.to_string());
    }

    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    pub fn received(&self) -> Vec<Received> {
        self.receiver.received()
    }
}

fn add_checkpoint(
    name: &str,
    key: &SigningKey,
    trusted: &HashMap<String, String>,
    seen: &Seen,
    r: &Received,
) -> (u16, String) {
    let text = r.text();
    if r.method != "POST" || r.path != "/add-checkpoint" {
        return (404, "not found\n".into());
    }
    let Some((head, note)) = text.split_once("\n\n") else { return (400, "no blank line\n".into()) };
    let mut lines = head.lines();
    let Some(old) = lines.next().and_then(|l| l.strip_prefix("old ")).and_then(|n| n.parse::<u64>().ok()) else {
        return (400, "no old line\n".into());
    };
    let proof: Vec<Hash> =
        lines.map(|l| Hash(base64::engine::general_purpose::STANDARD.decode(l).unwrap().try_into().unwrap())).collect();
    let parsed = signed_note::Note::from_bytes(note.as_bytes()).unwrap();
    let c = Checkpoint::from_bytes(parsed.text()).unwrap();
    let Some(vkey) = trusted.get(c.origin()) else { return (404, "unknown origin\n".into()) };
    let v = signed_note::StandardVerifier::new(vkey).unwrap();
    if parsed.verify(&signed_note::VerifierList::new(vec![Box::new(v)])).is_err() {
        return (403, "not signed by the trusted key\n".into());
    }
    let mut seen = seen.lock().unwrap();
    let (size, root) = seen.get(c.origin()).copied().unwrap_or((0, tlog::EMPTY_HASH));
    if old != size {
        return (409, format!("{size}\n"));
    }
    if size > 0 && tlog::check_tree(&proof, c.size(), *c.hash(), size, root).is_err() {
        return (422, "consistency proof does not hold\n".into());
    }
    seen.insert(c.origin().to_string(), (c.size(), *c.hash()));
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    (200, cosign(name, key, now, parsed.text()) + "\n")
}
