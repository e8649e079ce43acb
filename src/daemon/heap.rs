//! The process's own heap, as glibc's allocator holds it: what is in use and what it keeps
//! free without giving it back (`sqlcron_malloc_*_bytes` on `/metrics`), and giving the free
//! part back. A node's resident memory that grows while "in use" stays flat is the allocator's
//! fragmentation, not a leak (docs/benchmarks.md, the long soak).

/// How many malloc arenas the daemon's threads share, unless `MALLOC_ARENA_MAX` or
/// `GLIBC_TUNABLES` says otherwise. glibc gives each new thread an arena of its own up to eight
/// per core; SQLite's connections each run on a worker thread, and each arena kept its own
/// freed fragments, so a SQLite node's resident memory crept up for an hour while the memory
/// in use stayed flat (docs/benchmarks.md, "The sixth hour"). Two arenas keep the tokio thread
/// and the lease thread from contending with the pools' workers, which is all a node needs.
pub const ARENAS: i32 = 2;

/// Caps the allocator's arenas at [`ARENAS`]; called once at the daemon's start, before any
/// thread but the main one exists.
pub fn limit_arenas() {
    if std::env::var_os("MALLOC_ARENA_MAX").is_some()
        || std::env::var_os("GLIBC_TUNABLES").is_some()
    {
        return;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt takes two integers and changes only how later arenas are created.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, ARENAS);
    }
}

/// Bytes in use and bytes held free by the allocator, summed over its arenas (0, 0 where the
/// C library is not glibc).
pub fn malloc_bytes() -> (u64, u64) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 takes no argument and returns a struct by value; it reads the
        // allocator's counters under its own locks.
        let info = unsafe { libc::mallinfo2() };
        ((info.uordblks + info.hblkhd) as u64, info.fordblks as u64)
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        (0, 0)
    }
}

/// Gives the allocator's free memory back to the system, in every arena (not only at the top
/// of the main heap). Cheap when there is little to give; called once per housekeeping round,
/// off the run path's thread.
pub fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases memory glibc's allocator holds free.
    unsafe {
        libc::malloc_trim(0);
    }
}
