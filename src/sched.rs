//! Scheduling hints for the threads that do background work (the database runtime: the
//! receipt writer's sealing and appends, and the SQLite threads it starts).
//!
//! Under load the gateway's worker threads, the load's clients and the upstreams share the
//! cores. A background thread that wakes (a batch is due, SQLite answered) preempts whichever
//! request thread is running, and every preemption is a context switch the request path pays
//! for. `SCHED_BATCH` tells Linux these threads are throughput work: they keep their full
//! share of CPU time (same nice level, same weight) but do not preempt on wakeup; they run
//! when the running thread's slice ends.

/// Marks the calling thread as batch work. Threads it starts inherit the policy. Best effort:
/// a refusal (a sandbox without the syscall) leaves the thread as it was.
pub fn mark_batch_thread() {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: plain syscall on the calling thread (pid 0) with a valid parameter block.
        let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
        if rc != 0 {
            log::debug!("SCHED_BATCH refused: {}", std::io::Error::last_os_error());
        }
    }
}

/// The calling thread's id, for [`set_idle`] from another thread (0 off Linux).
pub fn thread_id() -> i32 {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid has no preconditions.
        unsafe { libc::gettid() }
    }
    #[cfg(not(target_os = "linux"))]
    {
        0
    }
}

/// Makes thread `tid` (0: the calling thread) idle work (`SCHED_IDLE`: it runs only on a core
/// nothing else wants, and any other thread that wakes takes the core from it at once), or,
/// with `idle` false, batch work again ([`mark_batch_thread`]). Best effort, as there.
pub fn set_idle(tid: i32, idle: bool) {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        let policy = if idle { libc::SCHED_IDLE } else { libc::SCHED_BATCH };
        // SAFETY: plain syscall on one thread of this process with a valid parameter block.
        let rc = unsafe { libc::sched_setscheduler(tid, policy, &param) };
        if rc != 0 {
            log::debug!("scheduling policy {policy} refused: {}", std::io::Error::last_os_error());
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (tid, idle);
}

/// Whether the calling thread runs as batch work (always `false` off Linux).
pub fn is_batch_thread() -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: reads the calling thread's policy.
        unsafe { libc::sched_getscheduler(0) == libc::SCHED_BATCH }
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_os = "linux")]
    fn a_marked_thread_and_its_children_run_as_batch() {
        let before = is_batch_thread();
        std::thread::spawn(|| {
            mark_batch_thread();
            assert!(is_batch_thread());
            assert!(std::thread::spawn(is_batch_thread).join().unwrap(), "policy is inherited");
        })
        .join()
        .unwrap();
        assert_eq!(is_batch_thread(), before, "only the marked thread changed");
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn another_thread_can_make_a_thread_idle_work_and_batch_work_again() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            tx.send(thread_id()).unwrap();
            done_rx.recv().unwrap();
            is_batch_thread()
        });
        let tid = rx.recv().unwrap();
        // SAFETY: reads one thread's policy.
        let policy = || unsafe { libc::sched_getscheduler(tid) };
        set_idle(tid, true);
        assert_eq!(policy(), libc::SCHED_IDLE);
        set_idle(tid, false);
        assert_eq!(policy(), libc::SCHED_BATCH);
        done_tx.send(()).unwrap();
        assert!(t.join().unwrap());
    }
}
