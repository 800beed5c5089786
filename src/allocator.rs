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

/// Applies the settings above; call before any work starts.
pub fn configure() {
    // SAFETY: sets one integer option; mimalloc reads options atomically at each use.
    unsafe { libmimalloc_sys::mi_option_set_default(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS as _) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_option_number_is_mimallocs_purge_delay() {
        // mimalloc v3 documents purge_delay's default as 1000 ms; no neighbouring option has it.
        let default = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        let set_by_env = std::env::var_os("MIMALLOC_PURGE_DELAY").is_some();
        if !set_by_env {
            assert_eq!(default, 1000, "option {MI_OPTION_PURGE_DELAY} is not purge_delay in this mimalloc");
        }
        configure();
        let now = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        assert_eq!(now as i64, if set_by_env { now as i64 } else { PURGE_DELAY_MS });
    }
}
