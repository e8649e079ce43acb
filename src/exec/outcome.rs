//! How a run ended ([`RunOutcome`]) and how it is asked to stop ([`StopRequest`]): shared by
//! the process runner (`runner.rs`) and the HTTP client (`http.rs`), which each end a run.

/// Why a run was stopped from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopRequest {
    None,
    /// Stop now (lease lost, or the shutdown grace ran out): SIGTERM, then SIGKILL.
    Kill,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOutcome {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    /// Stopped on request (see [`StopRequest`]).
    pub stopped: bool,
    /// The last `output_tail` bytes of stdout and stderr, interleaved as read.
    pub output: String,
    /// For the run's history: a limit that ended the run, a limit not applied, or how much
    /// output was left out of the log.
    pub note: Option<String>,
    /// An HTTP job's answer: whether its status is one of the job's `success` statuses
    /// (`exit_code` holds the status). `None` for a process.
    pub http_ok: Option<bool>,
}

impl RunOutcome {
    pub fn success(&self) -> bool {
        let answered = match self.http_ok {
            Some(ok) => ok,
            None => self.exit_code == Some(0),
        };
        answered && !self.timed_out && !self.stopped
    }
}
