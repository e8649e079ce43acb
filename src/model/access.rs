//! Who may do what in the web dashboard: the roles and the rule for each action. Pure, so each
//! rule is a unit test; the server asks it on every request (docs/dashboard.md).

use std::fmt;

/// A dashboard user's role, from least to most.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Reads every view; acts on nothing.
    Viewer,
    /// Runs, pauses and resumes jobs, drains and undrains nodes.
    Operator,
    /// Also breaks locks and backfills (the actions that cannot be undone).
    Admin,
}

impl Role {
    pub fn parse(text: &str) -> Option<Role> {
        match text {
            "viewer" => Some(Role::Viewer),
            "operator" => Some(Role::Operator),
            "admin" => Some(Role::Admin),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a request asks to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Read,
    RunNow,
    Pause,
    Resume,
    Drain,
    Undrain,
    /// Break a lock or semaphore hold: its holder is stopped; cannot be undone.
    BreakLock,
    /// Deliver a failed event again.
    RetryEvent,
    /// Stop a run in progress: its node stops it; cannot be undone.
    StopRun,
    /// Queue a one-off run for each past slot of a range without a successful run.
    Backfill,
    /// Create, change or clone a job defined with SQL (the dashboard's editor).
    EditJob,
    /// Remove a job defined with SQL; its history stays.
    DeleteJob,
}

impl Action {
    /// The least role that may do it.
    pub fn needs(self) -> Role {
        match self {
            Action::Read => Role::Viewer,
            Action::RunNow
            | Action::Pause
            | Action::Resume
            | Action::Drain
            | Action::Undrain
            | Action::RetryEvent
            | Action::StopRun
            | Action::EditJob => Role::Operator,
            Action::BreakLock | Action::Backfill | Action::DeleteJob => Role::Admin,
        }
    }
}

/// Why a request is refused, or `None` when `role` may do `action`. With `read_only` (the
/// dashboard's global switch) nobody acts.
pub fn refusal(role: Role, action: Action, read_only: bool) -> Option<String> {
    if action == Action::Read {
        return None;
    }
    if read_only {
        return Some("the dashboard is read-only ([web] read_only = true)".into());
    }
    let needs = action.needs();
    (role < needs).then(|| format!("{action:?} needs the {needs} role; you are a {role}"))
}

/// One line of `[web] users_file`: `name:role:$argon2id$...` (the PHC string of an Argon2id
/// hash, as `sqlcron web-user` prints it).
#[derive(Clone, PartialEq, Eq)]
pub struct WebUser {
    pub name: String,
    pub role: Role,
    pub hash: String,
}

/// The hash stays out of `{:?}`.
impl fmt::Debug for WebUser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WebUser({}, {})", self.name, self.role)
    }
}

/// Parses a users file: one `name:role:hash` per line, `#` comments and blank lines ignored.
/// Errors name the line number, never its text (it holds a hash).
pub fn parse_users(text: &str) -> Result<Vec<WebUser>, String> {
    let mut users: Vec<WebUser> = vec![];
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut parts = line.splitn(3, ':');
        let (Some(name), Some(role), Some(hash)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(format!("line {n}: expected name:role:hash"));
        };
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._@-".contains(c))
        {
            return Err(format!(
                "line {n}: a user name is letters, digits and . _ @ -"
            ));
        }
        let role = Role::parse(role)
            .ok_or_else(|| format!("line {n}: the role must be viewer, operator or admin"))?;
        if !hash.starts_with("$argon2id$") {
            return Err(format!(
                "line {n}: the hash must be an Argon2id PHC string ($argon2id$...; sqlcron web-user prints one)"
            ));
        }
        check_cost(hash).map_err(|why| format!("line {n}: {why}"))?;
        if users.iter().any(|u| u.name == name) {
            return Err(format!("line {n}: user {name} is named twice"));
        }
        users.push(WebUser {
            name: name.to_string(),
            role,
            hash: hash.to_string(),
        });
    }
    Ok(users)
}

/// The most memory (KiB), passes and lanes a hash of the users file may ask for: each sign-in
/// pays them, so a file cannot make the node exhaust itself.
const MAX_MEMORY_KIB: u64 = 256 * 1024;
const MAX_PASSES: u64 = 10;
const MAX_LANES: u64 = 8;

/// Reads `m=`, `t=`, `p=` of an `$argon2id$v=19$m=..,t=..,p=..$salt$hash` string and checks
/// that the string has its five parts.
fn check_cost(hash: &str) -> Result<(), String> {
    let parts: Vec<&str> = hash.split('$').collect();
    // "", "argon2id", "v=19", "m=..,t=..,p=..", salt, hash
    if parts.len() != 6 || parts[4].is_empty() || parts[5].is_empty() {
        return Err("the hash is not a whole Argon2id PHC string".into());
    }
    for kv in parts[3].split(',') {
        let (k, v) = kv
            .split_once('=')
            .ok_or("the hash's parameters are not m=,t=,p=")?;
        let v: u64 = v
            .parse()
            .map_err(|_| "the hash's parameters are not numbers")?;
        let max = match k {
            "m" => MAX_MEMORY_KIB,
            "t" => MAX_PASSES,
            "p" => MAX_LANES,
            _ => return Err(format!("the hash has an unknown parameter {k}")),
        };
        if v == 0 || v > max {
            return Err(format!("the hash's {k}={v} is beyond {max}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_role_may_do_what_its_rank_allows() {
        assert_eq!(refusal(Role::Viewer, Action::Read, false), None);
        assert_eq!(refusal(Role::Viewer, Action::Read, true), None);
        let e = refusal(Role::Viewer, Action::Pause, false).unwrap();
        assert!(
            e.contains("needs the operator role; you are a viewer"),
            "{e}"
        );
        assert_eq!(refusal(Role::Operator, Action::RunNow, false), None);
        assert_eq!(refusal(Role::Admin, Action::Drain, false), None);
        let e = refusal(Role::Operator, Action::BreakLock, false).unwrap();
        assert!(e.contains("needs the admin role"), "{e}");
        assert_eq!(refusal(Role::Admin, Action::BreakLock, false), None);
        let e = refusal(Role::Admin, Action::Resume, true).unwrap();
        assert!(e.contains("read-only"), "{e}");
    }

    #[test]
    fn a_users_file_is_read_and_its_errors_hide_the_hash() {
        let users = parse_users(
            "# comment\n\nalice:admin:$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA\nbob:viewer:$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA\n",
        )
        .unwrap();
        assert_eq!(users.len(), 2);
        assert_eq!(users[0].role, Role::Admin);
        assert!(!format!("{users:?}").contains("argon2id"));
        for (text, why) in [
            ("carol:root:$argon2id$x", "line 1: the role"),
            (
                "carol:viewer:$argon2id$x",
                "line 1: the hash is not a whole",
            ),
            (
                "carol:viewer:$argon2id$v=19$m=4194304,t=2,p=1$c2FsdA$aGFzaA",
                "line 1: the hash's m=4194304",
            ),
            ("carol:viewer:secretpassword", "line 1: the hash must be"),
            ("a b:viewer:$argon2id$x", "line 1: a user name"),
            (
                "bob:viewer:$argon2id$v=19$m=8,t=1,p=1$c2FsdA$aGFzaA\nbob:admin:$argon2id$v=19$m=8,t=1,p=1$c2FsdA$aGFzaA",
                "line 2: user bob is named twice",
            ),
            ("justaname", "line 1: expected"),
        ] {
            let e = parse_users(text).unwrap_err();
            assert!(e.starts_with(why), "{text}: {e}");
            assert!(!e.contains("secretpassword"), "{e}");
        }
    }
}
