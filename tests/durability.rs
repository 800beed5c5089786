//! `receipts.durability` (issue 44): with `fsync` no answer's last bytes leave before the flush
//! that covers its receipt's commit; with `page-cache` (the default) nothing is flushed per batch.
//!
//! A test cannot cut the power, but it can record the order of the system calls: the server runs
//! under `strace -f` (tests/support/strace.rs) while several clients ask at once, streamed and
//! not. Each answer names its receipt (`x-tollgate-receipt-id`); the trace shows the first write
//! of that receipt to a file (the journal segment, or SQLite's WAL), the first flush of that same
//! file descriptor after it, and the client socket's writes from the answer's head up to its last
//! bytes. The flush must have returned before the last bytes were sent.
//!
//! Skipped without `strace` unless `TOLLGATE_REQUIRE_STRACE=1` (CI installs it).

mod support;

use serde_json::json;
use support::strace::{self, Call, Tracer};
use support::{http, Backend, Gateway};

const FSYNC: (&str, &str) = ("TOLLGATE_RECEIPTS_DURABILITY", "fsync");
const JOURNAL: (&str, &str) = ("TOLLGATE_RECEIPTS_JOURNAL", "1");
const NO_JOURNAL: (&str, &str) = ("TOLLGATE_RECEIPTS_JOURNAL", "0");

/// One answer a client received whole.
struct Answer {
    id: String,
    stream: bool,
}

fn ask(g: &Gateway, stream: bool) -> Answer {
    let auth = format!("Bearer {}", g.key);
    let body = json!({"model": "gpt-4o-mini", "stream": stream, "messages": [{"role": "user", "content": "hi"}]});
    let body = body.to_string().into_bytes();
    if !stream {
        let r = http::request(g.gw, "POST", "/v1/chat/completions", &[("Authorization", &auth)], &body);
        assert_eq!(r.status, 200, "{}", r.text());
        return Answer { id: r.receipt_id(), stream };
    }
    let (status, headers, s) = http::stream(g.gw, "/v1/chat/completions", &[("Authorization", &auth)], &body);
    assert_eq!(status, 200);
    let text = String::from_utf8(s.rest()).unwrap();
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    let id = headers.iter().find(|(k, _)| k == "x-tollgate-receipt-id").map(|(_, v)| v.clone()).unwrap();
    Answer { id, stream }
}

/// `threads` clients at once, each asking `each` times, streamed and not in turn.
fn burst(g: &Gateway, threads: usize, each: usize) -> Vec<Answer> {
    std::thread::scope(|s| {
        let clients: Vec<_> = (0..threads)
            .map(|t| s.spawn(move || (0..each).map(|i| ask(g, (t + i) % 2 == 0)).collect::<Vec<_>>()))
            .collect();
        clients.into_iter().flat_map(|c| c.join().unwrap()).collect()
    })
}

/// Where an answer's receipt was first written, the first flush of that file after it, and the
/// write that carried the answer's last bytes.
struct Order {
    commit: Call,
    flush: Option<Call>,
    last: Call,
}

impl Order {
    /// The flush returned before the last bytes were sent.
    fn covered(&self) -> bool {
        self.flush.as_ref().is_some_and(|f| f.exit < self.last.enter)
    }
}

fn order_of(calls: &[Call], a: &Answer) -> Order {
    let head = calls
        .iter()
        .find(|c| c.is_write() && c.is_http_head() && c.args.contains(&a.id))
        .unwrap_or_else(|| panic!("the head of the answer of {} is not in the trace", a.id));
    // The connection's writes from the head on, until the next HTTP message on that descriptor.
    let answer: Vec<&Call> = std::iter::once(head)
        .chain(
            calls
                .iter()
                .filter(|c| c.enter > head.enter && c.fd == head.fd && c.is_write())
                .take_while(|c| !c.is_http_head()),
        )
        .collect();
    let bytes: String = answer.iter().map(|c| c.args.as_str()).collect();
    let end = if a.stream { "data: [DONE]" } else { "chat.completion" };
    assert!(bytes.contains(end), "the answer of {} in the trace lacks its end: {bytes}", a.id);
    let commit = calls
        .iter()
        .find(|c| c.is_write() && !c.is_http_head() && c.fd > 2 && c.args.contains(&a.id))
        .unwrap_or_else(|| panic!("no write of the receipt {} to a file in the trace", a.id));
    let flush = calls.iter().find(|c| c.is_sync() && c.fd == commit.fd && c.enter > commit.exit).cloned();
    Order { commit: commit.clone(), flush, last: answer[answer.len() - 1].clone() }
}

/// A burst traced: each answer's order and the whole trace. The server (and the trace, in its
/// directory, kept when a test fails) lives as long as this.
struct Traced {
    orders: Vec<Order>,
    calls: Vec<Call>,
    _server: (Gateway, support::Standin),
}

/// Runs a burst on SQLite under strace.
fn traced_burst(env: &[(&str, &str)]) -> Option<Traced> {
    strace::available()?;
    let (g, up) = support::with_standin(&Backend::Sqlite, env);
    let trace = g.dir.join("strace.txt");
    let tracer = Tracer::attach(g.pid().unwrap(), &trace)?;
    let answers = burst(&g, 6, 8);
    let calls = tracer.finish();
    eprintln!("trace: {}", trace.display());
    let orders = answers.iter().map(|a| order_of(&calls, a)).collect();
    Some(Traced { orders, calls, _server: (g, up) })
}

/// Each flush with the number of answers it was the first to cover: group commit's groups.
fn groups(orders: &[Order]) -> Vec<usize> {
    let mut by_flush = std::collections::BTreeMap::new();
    for o in orders.iter().filter(|o| o.covered()) {
        *by_flush.entry(o.flush.as_ref().unwrap().enter).or_insert(0) += 1;
    }
    by_flush.into_values().collect()
}

fn assert_every_answer_waited_for_its_flush(orders: &[Order], what: &str) {
    for o in orders {
        let f = o.flush.as_ref();
        assert!(
            o.covered(),
            "{what}: an answer's last bytes (trace line {}) left before its receipt's write (line {}, fd {}) was \
             flushed (flush {:?})",
            o.last.enter + 1,
            o.commit.enter + 1,
            o.commit.fd,
            f.map(|f| (f.name.as_str(), f.enter + 1, f.exit + 1))
        );
    }
    let g = groups(orders);
    eprintln!(
        "{what}: {} answers, {} flushes covered them, largest group {}",
        orders.len(),
        g.len(),
        g.iter().max().unwrap_or(&0)
    );
}

/// The receipt journal (SQLite's default) with `fsync`: the batch's one `write` to the segment,
/// then one `fdatasync` of it, then the answers' last bytes. Every journal write is flushed before
/// the next one: one flush per batch, whatever its size.
#[test]
fn with_fsync_no_answer_ends_before_the_fdatasync_of_its_journal_write() {
    let Some(Traced { orders, calls, _server }) = traced_burst(&[FSYNC, JOURNAL]) else { return };
    assert_every_answer_waited_for_its_flush(&orders, "journal, fsync");
    for o in &orders {
        assert_eq!(o.flush.as_ref().unwrap().name, "fdatasync");
    }
    let journal: std::collections::BTreeSet<i64> = orders.iter().map(|o| o.commit.fd).collect();
    let on_journal: Vec<&Call> = calls.iter().filter(|c| journal.contains(&c.fd)).collect();
    for pair in on_journal.windows(2) {
        if pair[0].is_write() {
            assert!(pair[1].is_sync(), "a journal write not flushed before the next: {:?} then {:?}", pair[0], pair[1]);
        }
    }
}

/// Without the journal (`receipts.journal: false`) with `fsync`: the batch's transaction is
/// flushed by SQLite (`synchronous=FULL`: the WAL is synced at commit) before the answers end.
#[test]
fn with_fsync_and_no_journal_no_answer_ends_before_sqlite_syncs_its_commit() {
    let Some(Traced { orders, _server, .. }) = traced_burst(&[FSYNC, NO_JOURNAL]) else { return };
    assert_every_answer_waited_for_its_flush(&orders, "SQLite, fsync");
}

/// The default (`page-cache`): the receipt is written to the journal and the answer ends, with no
/// flush of the journal at all. The check above would fail here.
#[test]
fn with_page_cache_nothing_is_flushed_per_batch() {
    let Some(Traced { orders, calls, _server }) = traced_burst(&[]) else { return };
    let journal: std::collections::BTreeSet<i64> = orders.iter().map(|o| o.commit.fd).collect();
    let flushed: Vec<&Call> = calls.iter().filter(|c| c.is_sync() && journal.contains(&c.fd)).collect();
    assert!(flushed.is_empty(), "page-cache flushed the journal: {flushed:?}");
    assert!(orders.iter().all(|o| !o.covered()), "no answer waits for a flush");
}

/// PostgreSQL commits with `synchronous_commit=on` by default, so its receipts survive a power
/// loss in either mode; with `fsync` the gateway pins it on for its own sessions, even where the
/// database says `off`, and its answers keep their receipts.
#[test]
fn with_fsync_postgres_commits_with_synchronous_commit_on_whatever_the_database_says() {
    use tollgate::store::{ChainPool, Durability, Store};
    let Some(url) = support::fresh_postgres() else { return };
    let name = url.rsplit('/').next().unwrap().to_string();
    let rt = tollgate::store::db_runtime();
    rt.block_on(async {
        let admin = Store::connect(&url).await.unwrap();
        let sql = format!("ALTER DATABASE {name} SET synchronous_commit = off");
        admin
            .run(|pool, _| async move {
                use sqlx::Executor;
                Ok(pool.execute(sqlx::AssertSqlSafe(sql)).await.map(drop)?)
            })
            .await
            .unwrap();
    });
    let setting = |durability| {
        rt.block_on(async {
            let store = Store::connect_with(&url, durability).await.unwrap();
            let shared: String = store
                .run(|pool, _| async move { Ok(sqlx::query_scalar("SHOW synchronous_commit").fetch_one(&pool).await?) })
                .await
                .unwrap();
            let ChainPool::Postgres(chain) = store.chain_pool() else { panic!("not PostgreSQL") };
            let writer: String = sqlx::query_scalar("SHOW synchronous_commit").fetch_one(&chain).await.unwrap();
            (shared, writer)
        })
    };
    assert_eq!(setting(Durability::PageCache), ("off".to_string(), "off".to_string()), "the database's own setting");
    assert_eq!(setting(Durability::Fsync), ("on".to_string(), "on".to_string()), "pinned on");

    let (g, _up) = support::with_standin(&Backend::Postgres(url.clone()), &[FSYNC]);
    let a = ask(&g, false);
    assert_eq!(g.receipt(&a.id)["receiptId"], a.id.as_str());
    drop(g);
    support::drop_postgres(&url);
}

/// The trace reader: a call split by another thread's keeps its entry and exit lines apart, and
/// the order check compares the flush's exit with the send's entry.
#[test]
fn the_trace_reader_keeps_entry_and_exit_of_split_calls() {
    let trace = "10 write(5, \"{\\\"r\\\":[\\\"id-1\\\"]}\\n\", 16) = 16\n\
                 10 fdatasync(5 <unfinished ...>\n\
                 11 sendto(9, \"HTTP/1.1 200 OK\\r\\nx-tollgate-receipt-id: id-1\\r\\n\\r\\nchat.completion\", 60, 0, NULL, 0) = 60\n\
                 10 <... fdatasync resumed>) = 0\n";
    let calls = strace::parse(trace);
    let names: Vec<(&str, i64, usize, usize)> =
        calls.iter().map(|c| (c.name.as_str(), c.fd, c.enter, c.exit)).collect();
    assert_eq!(names, [("write", 5, 0, 0), ("fdatasync", 5, 1, 3), ("sendto", 9, 2, 2)]);
    let early = order_of(&calls, &Answer { id: "id-1".into(), stream: false });
    assert!(!early.covered(), "sent while the flush had not returned");
    let lines: Vec<&str> = trace.lines().collect();
    let in_order = [lines[0], "10 fdatasync(5) = 0", lines[2]].join("\n");
    let calls = strace::parse(&in_order);
    assert!(order_of(&calls, &Answer { id: "id-1".into(), stream: false }).covered());
}
