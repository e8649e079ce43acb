//! The Unix accounts jobs run as: looking up a user and a group by name, with the user's
//! supplementary groups, home and shell. I/O through the C library's name service (so LDAP and
//! other NSS sources work as they do for cron); no database, no processes.

use crate::model::actor::Actor;
use crate::model::run_as::{Allowed, Target};

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// An account a job's process can run as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    /// The user's name (`LOGNAME` and `USER` of the job).
    pub name: String,
    pub uid: u32,
    /// The primary group: the user's own, or the job's `group`.
    pub gid: u32,
    /// Supplementary groups, as `initgroups` would set them (the primary group included).
    pub groups: Vec<u32>,
    /// `HOME` of the job.
    pub home: String,
    /// `SHELL` of the job (`/bin/sh` when the account names none).
    pub shell: String,
}

impl Account {
    /// This account as the daemon's identity in [`crate::model::run_as::run_as`].
    pub fn as_daemon(&self) -> crate::model::run_as::Daemon {
        crate::model::run_as::Daemon {
            name: self.name.clone(),
            uid: self.uid,
        }
    }

    /// Whether a process running as `other` already has this account's identity (user,
    /// primary group and groups): then nothing needs switching.
    pub fn same_identity(&self, other: &Account) -> bool {
        let set = |a: &Account| {
            let mut g: Vec<u32> = a.groups.iter().copied().chain([a.gid]).collect();
            g.sort_unstable();
            g.dedup();
            g
        };
        self.uid == other.uid && self.gid == other.gid && set(self) == set(other)
    }
}

/// Whether this process may switch to another account.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The account this process runs as.
pub fn current() -> Result<Account, String> {
    // SAFETY: as above.
    let uid = unsafe { libc::geteuid() };
    let account = passwd(Key::Uid(uid))?.ok_or_else(|| format!("uid {uid} has no account"))?;
    // The groups this process already has, not those of the account's entry: a daemon started
    // with fewer groups does not gain any.
    // SAFETY: a zero-length query returns the count only.
    let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    let mut groups = vec![0 as libc::gid_t; n.max(0) as usize];
    // SAFETY: the buffer holds n entries.
    let got = unsafe { libc::getgroups(n, groups.as_mut_ptr()) };
    groups.truncate(got.max(0) as usize);
    // SAFETY: as geteuid.
    let gid = unsafe { libc::getegid() };
    Ok(Account {
        gid,
        groups,
        ..account
    })
}

/// The account named `user` (a name or a numeric uid), with `group` (a name or a numeric gid)
/// as its primary group when given.
pub fn lookup(user: &str, group: Option<&str>) -> Result<Account, String> {
    find(user, group).map_err(Refused::message)
}

/// [`lookup`], telling an account or group this host does not have ([`Refused::Missing`]) from
/// a look-up that failed ([`Refused::Lookup`]).
fn find(user: &str, group: Option<&str>) -> Result<Account, Refused> {
    let key = match user.parse::<u32>() {
        Ok(uid) => Key::Uid(uid),
        Err(_) => Key::Name(user),
    };
    let mut account = passwd(key)
        .map_err(Refused::Lookup)?
        .ok_or_else(|| Refused::Missing(format!("user \"{user}\" does not exist")))?;
    if let Some(g) = group {
        account.gid = match group_id(g) {
            Ok(Some(gid)) => gid,
            Ok(None) => return Err(Refused::Missing(format!("group \"{g}\" does not exist"))),
            Err(e) => return Err(Refused::Lookup(e)),
        };
    }
    account.groups = group_list(&account.name, account.gid).map_err(Refused::Lookup)?;
    Ok(account)
}

/// How long an account looked up for a run is used again for other runs: in a burst, one
/// lookup (the name service, then every group for the supplementary ones) per user and second
/// instead of one per run. A change to an account reaches runs that start a second later.
const RECENT_FOR: Duration = Duration::from_secs(1);

/// The accounts [`checked`] found and let through lately, by (user, group): the user's own
/// account and the one the job runs as, looked up together. Failures and refusals are not kept:
/// an account created a moment ago is found by the next run, and a refused one is looked up
/// (and refused) again.
static RECENT: Mutex<Option<Recent<(Account, Account)>>> = Mutex::new(None);

/// Answers kept for a while, by (user, group).
struct Recent<T> {
    entries: HashMap<(String, Option<String>), (Instant, T)>,
}

impl<T> Default for Recent<T> {
    fn default() -> Self {
        Recent {
            entries: HashMap::new(),
        }
    }
}

impl<T: Clone> Recent<T> {
    /// The answer for `key` if it was put less than `keep` before `now`.
    fn get(&self, key: &(String, Option<String>), now: Instant, keep: Duration) -> Option<T> {
        self.entries
            .get(key)
            .filter(|(at, _)| now.saturating_duration_since(*at) < keep)
            .map(|(_, v)| v.clone())
    }

    /// Keeps `value` for `key` from `now`; answers older than `keep` go when many are kept,
    /// and all of them if that is not enough (at most [`Recent::MOST`] are kept).
    fn put(&mut self, key: (String, Option<String>), now: Instant, keep: Duration, value: T) {
        if self.entries.len() >= Self::MOST {
            self.entries
                .retain(|_, (at, _)| now.saturating_duration_since(*at) < keep);
            if self.entries.len() >= Self::MOST {
                self.entries.clear();
            }
        }
        self.entries.insert(key, (now, value));
    }

    const MOST: usize = 256;
}

/// Why [`checked`] refused an account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// This node's allow-list does not let jobs run as it (the row is parked).
    NotAllowed(String),
    /// The account or group could not be looked up on this node (the run fails).
    Lookup(String),
    /// This node has no such account or group: deleted, or never created here (the run fails,
    /// naming the node; other nodes may have it).
    Missing(String),
}

impl Refused {
    /// The message, starting with the key it concerns (`user: `, `group: `).
    pub fn message(self) -> String {
        match self {
            Refused::NotAllowed(m) | Refused::Lookup(m) | Refused::Missing(m) => m,
        }
    }

    /// The same refusal with `prefix` before its message.
    fn prefixed(self, prefix: &str) -> Refused {
        match self {
            Refused::NotAllowed(m) => Refused::NotAllowed(format!("{prefix}{m}")),
            Refused::Lookup(m) => Refused::Lookup(format!("{prefix}{m}")),
            Refused::Missing(m) => Refused::Missing(format!("{prefix}{m}")),
        }
    }
}

/// The account a job switches to, looked up and checked against this node's allow-list
/// ([`Allowed`]): the name as written, then the account found (root by uid, a group among the
/// user's own unless listed).
pub fn checked(user: &str, group: Option<&str>, allowed: &Allowed) -> Result<Account, Refused> {
    allowed
        .check_names(user, group)
        .map_err(Refused::NotAllowed)?;
    let key = (user.to_string(), group.map(str::to_string));
    let now = Instant::now();
    let kept = RECENT
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .and_then(|r| r.get(&key, now, RECENT_FOR));
    let fresh = kept.is_none();
    let (own, account) = match kept {
        Some(pair) => pair,
        // Looked up without the lock: a slow name service holds up no other lookup.
        None => {
            let own = find(user, None).map_err(|e| e.prefixed("user: "))?;
            let account = match group {
                Some(g) => find(user, Some(g)).map_err(|e| e.prefixed("group: "))?,
                None => own.clone(),
            };
            (own, account)
        }
    };
    // The account run as must be the user checked (the two lookups could straddle a change
    // of the user's entry).
    if account.uid != own.uid || account.name != own.name {
        return Err(Refused::Lookup(format!(
            "user: the entry of \"{user}\" changed while it was looked up; try again"
        )));
    }
    allowed
        .check(&Target {
            user: &own.name,
            uid: own.uid,
            group: group.map(|g| (g, account.gid)),
            user_groups: &own.groups,
        })
        .map_err(Refused::NotAllowed)?;
    if fresh {
        RECENT
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert_with(Recent::default)
            .put(key, now, RECENT_FOR, (own, account.clone()));
    }
    Ok(account)
}

/// The name of the account `uid` (its number when it has none).
pub fn name_of(uid: u32) -> String {
    match passwd(Key::Uid(uid)) {
        Ok(Some(a)) => a.name,
        _ => uid.to_string(),
    }
}

/// The name of the group `gid` (its number when it has none).
pub fn group_name_of(gid: u32) -> String {
    let mut buf = vec![0 as libc::c_char; 64 * 1024];
    // SAFETY: zeroed group is a valid out-parameter.
    let mut gr: libc::group = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::group = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; buf's length is passed.
    let rc = unsafe { libc::getgrgid_r(gid, &mut gr, buf.as_mut_ptr(), buf.len(), &mut result) };
    if rc != 0 || result.is_null() || gr.gr_name.is_null() {
        return gid.to_string();
    }
    // SAFETY: getgrgid_r succeeded: gr_name points at a NUL-terminated name inside buf.
    unsafe { std::ffi::CStr::from_ptr(gr.gr_name) }
        .to_string_lossy()
        .into_owned()
}

/// This host's name, as the kernel has it (`None` when it cannot be read).
pub fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
}

enum Key<'a> {
    Name(&'a str),
    Uid(u32),
}

/// One passwd entry (groups not filled in yet).
fn passwd(key: Key<'_>) -> Result<Option<Account>, String> {
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: zeroed passwd is a valid out-parameter for getpw*_r.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    let rc = match key {
        Key::Name(name) => {
            let c = CString::new(name).map_err(|_| format!("user \"{name}\" has a NUL byte"))?;
            // SAFETY: every pointer is valid for the call; buf's length is passed.
            unsafe {
                libc::getpwnam_r(
                    c.as_ptr(),
                    &mut pw,
                    buf.as_mut_ptr(),
                    buf.len(),
                    &mut result,
                )
            }
        }
        // SAFETY: as above.
        Key::Uid(uid) => unsafe {
            libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut result)
        },
    };
    if rc != 0 {
        return Err(format!(
            "looking up the user failed: {}",
            std::io::Error::from_raw_os_error(rc)
        ));
    }
    if result.is_null() {
        return Ok(None);
    }
    // SAFETY: on success the strings point into buf, NUL-terminated.
    let text = |p: *const libc::c_char| unsafe {
        if p.is_null() {
            String::new()
        } else {
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    };
    let shell = text(pw.pw_shell);
    Ok(Some(Account {
        name: text(pw.pw_name),
        uid: pw.pw_uid,
        gid: pw.pw_gid,
        groups: vec![],
        home: text(pw.pw_dir),
        shell: if shell.is_empty() {
            "/bin/sh".into()
        } else {
            shell
        },
    }))
}

/// A group's id from its name or number (`None`: no such group).
fn group_id(group: &str) -> Result<Option<u32>, String> {
    if let Ok(gid) = group.parse::<u32>() {
        return Ok(Some(gid));
    }
    let c = CString::new(group).map_err(|_| format!("group \"{group}\" has a NUL byte"))?;
    let mut buf = vec![0 as libc::c_char; 64 * 1024];
    // SAFETY: zeroed group is a valid out-parameter.
    let mut gr: libc::group = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::group = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; buf's length is passed.
    let rc = unsafe {
        libc::getgrnam_r(
            c.as_ptr(),
            &mut gr,
            buf.as_mut_ptr(),
            buf.len(),
            &mut result,
        )
    };
    if rc != 0 {
        return Err(format!(
            "looking up group \"{group}\" failed: {}",
            std::io::Error::from_raw_os_error(rc)
        ));
    }
    if result.is_null() {
        return Ok(None);
    }
    Ok(Some(gr.gr_gid))
}

/// The supplementary groups of `user`, with `gid` among them.
fn group_list(user: &str, gid: u32) -> Result<Vec<u32>, String> {
    let c = CString::new(user).map_err(|_| format!("user \"{user}\" has a NUL byte"))?;
    let mut n: libc::c_int = 64;
    loop {
        let mut groups = vec![0 as libc::gid_t; n as usize];
        let mut count = n;
        // SAFETY: groups holds `count` entries; getgrouplist writes at most that many and sets
        // count to the number needed.
        let rc = unsafe { libc::getgrouplist(c.as_ptr(), gid, groups.as_mut_ptr(), &mut count) };
        if rc >= 0 {
            groups.truncate(count as usize);
            return Ok(groups);
        }
        if count <= n || count > 65_536 {
            return Err(format!("cannot list the groups of user \"{user}\""));
        }
        n = count;
    }
}

/// This process as an [`Actor`] of the audit trail: its real Unix user (with `$SUDO_USER` when
/// run through sudo), host name and pid; `role` is added after the user (`"root (daemon web-1)"`).
pub fn this_process(role: Option<&str>) -> Actor {
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    let mut who = lookup(&uid.to_string(), None)
        .map(|a| a.name)
        .unwrap_or_else(|_| uid.to_string());
    if let Ok(sudo) = std::env::var("SUDO_USER")
        && !sudo.is_empty()
    {
        who = format!("{who} (sudo by {sudo})");
    }
    if let Some(role) = role {
        who = format!("{who} ({role})");
    }
    let host = hostname();
    Actor {
        who,
        host,
        pid: Some(i64::from(std::process::id())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_used_again_for_a_second_only() {
        let mut recent: Recent<u32> = Recent::default();
        let t0 = Instant::now();
        let key = ("alice".to_string(), None);
        let keep = Duration::from_secs(1);
        assert_eq!(recent.get(&key, t0, keep), None);
        recent.put(key.clone(), t0, keep, 7);
        assert_eq!(
            recent.get(&key, t0 + Duration::from_millis(999), keep),
            Some(7)
        );
        assert_eq!(recent.get(&key, t0 + keep, keep), None);
        // Another group is another answer.
        assert_eq!(
            recent.get(&("alice".into(), Some("adm".into())), t0, keep),
            None
        );
        // Many answers: the old ones go.
        for i in 0..300 {
            recent.put(
                (format!("u{i}"), None),
                t0 + Duration::from_secs(2),
                keep,
                i,
            );
        }
        assert!(recent.entries.len() <= Recent::<u32>::MOST);
        assert_eq!(recent.get(&key, t0 + Duration::from_secs(2), keep), None);
        assert!(!recent.entries.contains_key(&key));
    }

    #[test]
    fn same_identity_compares_user_and_every_group() {
        let a = Account {
            name: "a".into(),
            uid: 10,
            gid: 20,
            groups: vec![30],
            home: "/".into(),
            shell: "/bin/sh".into(),
        };
        // The primary group counts whether or not the list repeats it.
        let b = Account {
            groups: vec![30, 20],
            ..a.clone()
        };
        assert!(a.same_identity(&b));
        for other in [
            Account {
                uid: 11,
                ..a.clone()
            },
            Account {
                gid: 21,
                ..a.clone()
            },
            Account {
                groups: vec![],
                ..a.clone()
            },
        ] {
            assert!(!a.same_identity(&other), "{other:?}");
        }
    }

    #[test]
    fn root_exists_and_unknown_users_are_named() {
        let root = lookup("root", None).unwrap();
        assert_eq!((root.uid, root.gid), (0, 0));
        assert!(root.groups.contains(&0));
        assert_eq!(lookup("0", None).unwrap().name, "root");
        let e = lookup("no-such-user-sqlcron", None).unwrap_err();
        assert_eq!(e, "user \"no-such-user-sqlcron\" does not exist");
        let e = lookup("root", Some("no-such-group-sqlcron")).unwrap_err();
        assert_eq!(e, "group \"no-such-group-sqlcron\" does not exist");
    }

    #[test]
    fn current_account_is_this_process() {
        let me = current().unwrap();
        assert_eq!(me.uid, unsafe { libc::geteuid() });
    }
}
