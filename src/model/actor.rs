//! Who acted: the Unix user, host and process behind a change, as the audit trail records it.
//! The executing side fills one in for this process (`exec/account.rs`).

/// Who acted, for the audit trail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    /// The Unix user (with the `sudo` caller when there is one), or a daemon's description.
    pub who: String,
    pub host: Option<String>,
    pub pid: Option<i64>,
}
