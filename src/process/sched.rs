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

/// Asks Linux (6.12 and later, EEVDF) for a short time slice for the calling thread, keeping
/// its policy and nice level; its share of CPU time does not change, only how soon it runs
/// after waking. Returns the slice the kernel now reports, or None where the kernel has no
/// custom slices (older kernels ignore the request) or refused it. Best effort, as above.
///
/// Why the receipt writer asks for one: every answer waits for its batch's commit, so the
/// writer is on every request's path. With the default slice (1.4 ms on 2 cores) a writer
/// woken by a queued draft waits behind the running thread's slice, and a running writer is
/// preempted by every thread that wakes (0.31 involuntary switches a request). Session 35, AMD
/// EPYC VM, flat out, bare Pingora in every run, seven interleaved pairs with the slice set
/// from outside (`sched_setattr`): plain 0.75 0.79 0.69 0.78x → 0.77 0.81 0.73 0.85x, every
/// check on 0.59 0.61 0.62x → 0.72 0.70 0.66x; the writer's involuntary switches 0.31 → 0.16
/// a request.
pub fn set_slice(slice: std::time::Duration) -> Option<std::time::Duration> {
    #[cfg(target_os = "linux")]
    {
        let size = std::mem::size_of::<libc::sched_attr>() as libc::c_uint;
        let get = |attr: &mut libc::sched_attr| {
            // SAFETY: the kernel writes at most `size` bytes into `attr`, a live sched_attr.
            unsafe { libc::syscall(libc::SYS_sched_getattr, 0, attr as *mut libc::sched_attr, size, 0) == 0 }
        };
        // SAFETY: sched_attr is plain integers; all zeros is a valid value.
        let mut attr: libc::sched_attr = unsafe { std::mem::zeroed() };
        if !get(&mut attr) {
            return None;
        }
        attr.size = size;
        attr.sched_flags = 0;
        // For a fair-class thread, `sched_runtime` is its slice (0: the default; the kernel
        // clamps to 0.1–100 ms; kernels before 6.12 ignore it and report 0).
        attr.sched_runtime = u64::try_from(slice.as_nanos()).unwrap_or(u64::MAX);
        // SAFETY: plain syscall on the calling thread (pid 0) with a valid sched_attr.
        if unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const libc::sched_attr, 0) } != 0 {
            log::debug!("sched_setattr (slice) refused: {}", std::io::Error::last_os_error());
            return None;
        }
        let ok = get(&mut attr) && attr.sched_runtime != 0;
        ok.then(|| std::time::Duration::from_nanos(attr.sched_runtime))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = slice;
        None
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

    /// Custom slices for fair-class threads came with Linux 6.12.
    #[cfg(target_os = "linux")]
    fn kernel_has_custom_slices() -> bool {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let mut parts = release.trim().split(['.', '-']).map(|p| p.parse::<u32>().unwrap_or(0));
        (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) >= (6, 12)
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn a_thread_gets_the_short_slice_it_asks_for_and_keeps_its_policy_and_nice() {
        let supported = kernel_has_custom_slices();
        let (slice, batch, nice) = std::thread::spawn(|| {
            mark_batch_thread();
            // SAFETY: raises the calling thread's own nice level (always allowed).
            unsafe { libc::setpriority(libc::PRIO_PROCESS, thread_id() as libc::id_t, 3) };
            let slice = set_slice(std::time::Duration::from_micros(100));
            // SAFETY: reads the calling thread's nice level.
            let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, thread_id() as libc::id_t) };
            (slice, is_batch_thread(), nice)
        })
        .join()
        .unwrap();
        assert!(batch, "the policy is kept");
        assert_eq!(nice, 3, "the nice level is kept");
        if supported {
            assert_eq!(slice, Some(std::time::Duration::from_micros(100)));
        } else {
            println!("skipped the slice check: this kernel (before 6.12) has no custom slices");
        }
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
