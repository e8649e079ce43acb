//! The process's own heap, as glibc's allocator holds it: what is in use and what it keeps
//! free without giving it back (`sqlcron_malloc_*_bytes` on `/metrics`), and giving the free
//! part back. A node's resident memory that grows while "in use" stays flat is the allocator's
//! fragmentation, not a leak (docs/benchmarks.md, the long soak).

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
