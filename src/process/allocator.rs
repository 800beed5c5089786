//! Settings of the global allocator (mimalloc), applied first thing in `main`.

/// How long mimalloc keeps memory it no longer uses before handing it back to the OS.
///
/// Its default (1 s) is shorter than the intervals of the gateway's periodic work (the snapshot
/// refresh every 2 s, the receipt writer's batches, the chain auditor), so under steady load
/// the same memory was returned and faulted in again: one page fault per ~55 requests, each
/// clearing fresh (often huge) pages, about 1.3% of the CPU. After 10 s of disuse memory still
/// goes back. `MIMALLOC_PURGE_DELAY` in the environment overrides this.
pub const PURGE_DELAY_MS: i64 = 10_000;

/// `mi_option_purge_delay` in mimalloc v3's `mi_option_e` (libmimalloc-sys names only the
/// options of older versions). A unit test holds the number to the option's documented default.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Whether mimalloc commits a whole arena chunk (and asks for transparent huge pages on it) when
/// it reserves one, or commits memory as it is used: 0, as used.
///
/// Its default (2: eagerly, where Linux overcommits) made every touched 2 MiB region resident:
/// the gateway sat at 48 MiB idle, 86–104 MiB under c=32 load and 240 MiB with 1 000 client
/// connections, against 26, 50–53 and 131 MiB committing as used (session 40; the figures and
/// their cost in CPU are in docs/benchmarks.md). `MIMALLOC_ARENA_EAGER_COMMIT` in the
/// environment overrides this.
pub const ARENA_EAGER_COMMIT: i64 = 0;

/// `mi_option_arena_eager_commit` in mimalloc v3's `mi_option_e`; a unit test holds it to its
/// documented default (2).
const MI_OPTION_ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;

/// Applies the settings above and gives SQLite the same allocator ([`sqlite_on_mimalloc`]); call
/// before any work starts. (The binary also calls [`set_options`] before `main`, so that the
/// first arena is made with them.)
pub fn configure() {
    set_options();
    sqlite_on_mimalloc();
}

/// Sets mimalloc's options above, where the environment did not set them; allocates nothing
/// (safe in a constructor before `main`).
pub extern "C" fn set_options() {
    // SAFETY: each call sets one integer option; mimalloc reads options atomically at each use.
    unsafe {
        libmimalloc_sys::mi_option_set_default(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS as _);
        libmimalloc_sys::mi_option_set_default(MI_OPTION_ARENA_EAGER_COMMIT, ARENA_EAGER_COMMIT as _);
    }
}

/// Makes SQLite allocate with mimalloc instead of the C library's `malloc`, which it calls
/// directly (Rust's global allocator does not reach C code). Why: flat out, the receipt journal's
/// applier spent ~14 % of its time in glibc's `malloc`, `free` and their consolidation (~2.7 µs
/// a receipt, session 28), where mimalloc's thread-local free lists take a fraction of that.
/// Returns false when SQLite was already initialised (`sqlite3_config` may only run before
/// `sqlite3_initialize`), which leaves SQLite as it was.
pub fn sqlite_on_mimalloc() -> bool {
    use rusqlite::ffi;
    use std::ffi::{c_int, c_void};
    use std::sync::OnceLock;

    // SQLite asks for at least 8-byte alignment; mimalloc gives 16. Sizes are `c_int`s.
    unsafe extern "C" fn malloc(n: c_int) -> *mut c_void {
        unsafe { libmimalloc_sys::mi_malloc(n.max(0) as usize) }
    }
    unsafe extern "C" fn free(p: *mut c_void) {
        unsafe { libmimalloc_sys::mi_free(p) }
    }
    unsafe extern "C" fn realloc(p: *mut c_void, n: c_int) -> *mut c_void {
        unsafe { libmimalloc_sys::mi_realloc(p, n.max(0) as usize) }
    }
    unsafe extern "C" fn size(p: *mut c_void) -> c_int {
        unsafe { libmimalloc_sys::mi_usable_size(p).min(c_int::MAX as usize) as c_int }
    }
    unsafe extern "C" fn roundup(n: c_int) -> c_int {
        unsafe { libmimalloc_sys::mi_good_size(n.max(0) as usize).min(c_int::MAX as usize) as c_int }
    }
    unsafe extern "C" fn init(_: *mut c_void) -> c_int {
        ffi::SQLITE_OK
    }
    unsafe extern "C" fn shutdown(_: *mut c_void) {}

    static DONE: OnceLock<bool> = OnceLock::new();
    *DONE.get_or_init(|| {
        let methods = ffi::sqlite3_mem_methods {
            xMalloc: Some(malloc),
            xFree: Some(free),
            xRealloc: Some(realloc),
            xSize: Some(size),
            xRoundup: Some(roundup),
            xInit: Some(init),
            xShutdown: Some(shutdown),
            pAppData: std::ptr::null_mut(),
        };
        // SAFETY: SQLITE_CONFIG_MALLOC copies the struct; the functions are plain C-ABI
        // wrappers of mimalloc's, valid for the whole process. SQLite refuses (SQLITE_MISUSE)
        // once initialised, which is reported, not undefined.
        unsafe {
            ffi::sqlite3_config(ffi::SQLITE_CONFIG_MALLOC, &methods as *const ffi::sqlite3_mem_methods)
                == ffi::SQLITE_OK
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In a process of its own (the test binary's threads may have opened SQLite already): the
    /// routing takes, and SQLite then works on it, statements, blobs and reallocations included.
    #[test]
    fn sqlite_runs_on_mimalloc() {
        if std::env::var_os("TOLLGATE_SQLITE_ALLOC_CHILD").is_none() {
            let me = std::env::current_exe().unwrap();
            let out = std::process::Command::new(me)
                .args([
                    "--exact",
                    "process::allocator::tests::sqlite_runs_on_mimalloc",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("TOLLGATE_SQLITE_ALLOC_CHILD", "1")
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && text.contains("sqlite on mimalloc: ok"),
                "{text}{}",
                String::from_utf8_lossy(&out.stderr)
            );
            return;
        }
        assert!(sqlite_on_mimalloc(), "SQLite took the allocator before its first use");
        assert!(sqlite_on_mimalloc(), "a second call reports the same");
        // SQLite's own allocations come from mimalloc's heap, not the C library's.
        let p = unsafe { rusqlite::ffi::sqlite3_malloc(1000) };
        assert!(!p.is_null() && unsafe { libmimalloc_sys::mi_is_in_heap_region(p) }, "sqlite3_malloc is mimalloc's");
        unsafe { rusqlite::ffi::sqlite3_free(p) };
        let db = rusqlite::Connection::open_in_memory().unwrap();
        db.execute_batch("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT); CREATE INDEX t_v ON t(v);").unwrap();
        let tx = db.unchecked_transaction().unwrap();
        for i in 0..5000 {
            tx.execute("INSERT INTO t (v) VALUES (?1)", [format!("{i:0>width$}", width = 1 + i % 700)]).unwrap();
        }
        tx.commit().unwrap();
        let (n, len): (i64, i64) =
            db.query_row("SELECT count(*), sum(length(v)) FROM t", [], |r| Ok((r.get(0)?, r.get(1)?))).unwrap();
        assert_eq!(n, 5000);
        assert_eq!(len, (0..5000i64).map(|i| (1 + i % 700).max(i.to_string().len() as i64)).sum::<i64>());
        println!("sqlite on mimalloc: ok");
    }

    /// The option numbers are mimalloc's: each option's documented default before `configure`
    /// (one test: `configure` changes both), ours after it, unless the environment set it.
    #[test]
    fn the_option_numbers_are_mimallocs_purge_delay_and_arena_eager_commit() {
        let options = [
            ("MIMALLOC_PURGE_DELAY", MI_OPTION_PURGE_DELAY, 1000, PURGE_DELAY_MS),
            ("MIMALLOC_ARENA_EAGER_COMMIT", MI_OPTION_ARENA_EAGER_COMMIT, 2, ARENA_EAGER_COMMIT),
        ];
        let by_env = |var: &str| std::env::var_os(var).is_some();
        for (var, option, default, _) in options {
            let now = unsafe { libmimalloc_sys::mi_option_get(option) } as i64;
            assert!(by_env(var) || now == default, "option {option} is not {var}'s option in this mimalloc: {now}");
        }
        configure();
        for (var, option, _, ours) in options {
            let now = unsafe { libmimalloc_sys::mi_option_get(option) } as i64;
            assert!(by_env(var) || now == ours, "{var}: {now}, not {ours}");
        }
    }
}
