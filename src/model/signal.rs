//! Signal numbers as people read them.

/// The name of signal `n` (`SIGKILL`), or `signal n` for one without a common name.
pub fn name(n: i64) -> String {
    let known = [
        (libc::SIGHUP, "SIGHUP"),
        (libc::SIGINT, "SIGINT"),
        (libc::SIGQUIT, "SIGQUIT"),
        (libc::SIGILL, "SIGILL"),
        (libc::SIGTRAP, "SIGTRAP"),
        (libc::SIGABRT, "SIGABRT"),
        (libc::SIGBUS, "SIGBUS"),
        (libc::SIGFPE, "SIGFPE"),
        (libc::SIGKILL, "SIGKILL"),
        (libc::SIGUSR1, "SIGUSR1"),
        (libc::SIGSEGV, "SIGSEGV"),
        (libc::SIGUSR2, "SIGUSR2"),
        (libc::SIGPIPE, "SIGPIPE"),
        (libc::SIGALRM, "SIGALRM"),
        (libc::SIGTERM, "SIGTERM"),
        (libc::SIGXCPU, "SIGXCPU"),
        (libc::SIGXFSZ, "SIGXFSZ"),
    ];
    known
        .iter()
        .find(|(k, _)| i64::from(*k) == n)
        .map_or_else(|| format!("signal {n}"), |(_, name)| (*name).to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_common_signals_and_numbers_the_rest() {
        assert_eq!(super::name(9), "SIGKILL");
        assert_eq!(super::name(15), "SIGTERM");
        assert_eq!(super::name(77), "signal 77");
    }
}
