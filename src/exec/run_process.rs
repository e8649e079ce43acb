//! A run's main process and what it is started with: the child the standard library starts
//! (`posix_spawn`, or `fork` where there is no pidfd) or the one `clone_spawn` starts, the
//! whole environment it gets, and `/dev/null` for its standard input.

use std::process::Stdio;

use tokio::io::AsyncRead;

/// `/dev/null`, opened once.
pub(crate) fn null_file() -> Option<&'static std::fs::File> {
    static NULL: std::sync::OnceLock<Option<std::fs::File>> = std::sync::OnceLock::new();
    NULL.get_or_init(|| std::fs::File::open("/dev/null").ok())
        .as_ref()
}

/// A descriptor of `/dev/null` for a run's standard input: a copy of one opened once (a
/// `dup`, not a path lookup per run). `None` when it cannot be had; the run then opens its own.
pub(crate) fn null_stdin() -> Option<Stdio> {
    Some(Stdio::from(null_file()?.try_clone().ok()?))
}

/// The descriptor of `/dev/null` opened once, for a child that shares the daemon's memory
/// (it only reads it into its standard input).
pub(crate) fn null_fd() -> Option<std::os::fd::RawFd> {
    use std::os::fd::AsRawFd;
    null_file().map(|f| f.as_raw_fd())
}

/// The whole environment `cmd` gives its process: this process's (none when `clear`), with
/// what `cmd` sets and removes.
pub(crate) fn environment(
    cmd: &std::process::Command,
    clear: bool,
) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    let mut env: std::collections::BTreeMap<_, _> = if clear {
        Default::default()
    } else {
        std::env::vars_os().collect()
    };
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => env.insert(k.to_owned(), v.to_owned()),
            None => env.remove(k),
        };
    }
    env.into_iter().collect()
}

/// A run's main process, started by the standard library (`posix_spawn`, or `fork` where
/// there is no pidfd) or by `clone_spawn`.
pub(crate) enum RunProcess {
    Std(tokio::process::Child),
    Cloned(crate::exec::clone_spawn::Child),
}

pub(crate) type Output = Box<dyn AsyncRead + Unpin + Send>;

impl RunProcess {
    pub(crate) fn id(&self) -> Option<u32> {
        match self {
            RunProcess::Std(c) => c.id(),
            RunProcess::Cloned(c) => Some(c.id()),
        }
    }

    pub(crate) async fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        match self {
            RunProcess::Std(c) => c.wait().await,
            RunProcess::Cloned(c) => c.wait().await,
        }
    }

    /// The read ends of its standard output and error, when they are pipes.
    pub(crate) fn output(&mut self) -> (Option<Output>, Option<Output>) {
        fn boxed(r: impl AsyncRead + Unpin + Send + 'static) -> Output {
            Box::new(r)
        }
        match self {
            RunProcess::Std(c) => (c.stdout.take().map(boxed), c.stderr.take().map(boxed)),
            RunProcess::Cloned(c) => (c.stdout.take().map(boxed), c.stderr.take().map(boxed)),
        }
    }
}
