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
}
