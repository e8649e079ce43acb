//! Who a job may run as on this node. A daemon running as root runs each job as a named user
//! ([`run_as`]: the job's `user`, else `[daemon] default_user`), and only as a user this node
//! allows ([`Allowed`]: `[daemon] allowed_users` and `allowed_groups`): a row of `cron_table` is
//! untrusted input, whoever wrote it. Pure: the accounts are looked up by the caller.

use std::collections::BTreeSet;

/// The account the daemon itself runs as, as far as [`run_as`] needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Daemon {
    /// The user name (`root`, `sqlcron`).
    pub name: String,
    /// The numeric user id: 0 is root, who may switch users.
    pub uid: u32,
}

/// Which account a job runs as: `(user, group)` to switch to, or `None` to run as the daemon.
/// A daemon running as root runs a job only as a named user (the job's `user`, else
/// `[daemon] default_user`), as cron runs each crontab as its owner; any other daemon runs jobs
/// only as itself, and `default_user` (the root daemon's answer to "as whom?") does not apply to
/// it: one configuration then works for a root service and for a user trying it out.
pub fn run_as(
    user: Option<&str>,
    group: Option<&str>,
    default_user: Option<&str>,
    daemon: &Daemon,
) -> Result<Option<(String, Option<String>)>, String> {
    if daemon.uid == 0 {
        return match user.or(default_user) {
            Some(u) => Ok(Some((u.to_string(), group.map(str::to_string)))),
            None => Err(
                "user: a job must name the user it runs as when the daemon runs as root: add \
                 `default_user = \"nobody\"` under [daemon] (any account without a login), or \
                 `user = \"...\"` to the job"
                    .into(),
            ),
        };
    }
    if let Some(u) = user
        && u != daemon.name
        && u != daemon.uid.to_string()
    {
        return Err(format!(
            "user: \"{u}\": this daemon runs as \"{}\" and can run jobs only as itself (a \
             daemon running as root can switch users)",
            daemon.name
        ));
    }
    if let Some(g) = group {
        return Err(format!(
            "group: \"{g}\": only a daemon running as root can switch groups"
        ));
    }
    Ok(None)
}

/// The accounts this node lets a job switch to: `[daemon] allowed_users` and `allowed_groups`.
/// Checked for every run, whatever wrote the row (TOML, SQL, `sqlcron at`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allowed {
    /// User names a job may run as. Root only when listed by name (`"root"`), never by default.
    pub users: BTreeSet<String>,
    /// Groups a job may name besides the groups its user belongs to.
    pub groups: BTreeSet<String>,
}

/// The account a run would switch to, as looked up on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target<'a> {
    /// The user's name, as the system knows it (a numeric `user` is looked up first).
    pub user: &'a str,
    pub uid: u32,
    /// The job's `group`, if it names one: its name and id.
    pub group: Option<(&'a str, u32)>,
    /// The groups the user belongs to (primary and supplementary).
    pub user_groups: &'a [u32],
}

impl Allowed {
    /// The node's list: `allowed_users` when the file sets it; else `default_user` and every
    /// user the node's own TOML jobs name, root excepted (root is allowed only when listed).
    pub fn new<'a>(
        allowed_users: Option<&[String]>,
        allowed_groups: &[String],
        default_user: Option<&'a str>,
        toml_users: impl IntoIterator<Item = &'a str>,
    ) -> Allowed {
        let users = match allowed_users {
            Some(list) => list.iter().cloned().collect(),
            None => default_user
                .into_iter()
                .chain(toml_users)
                .filter(|u| !is_root_name(u))
                .map(str::to_string)
                .collect(),
        };
        Allowed {
            users,
            groups: allowed_groups.iter().cloned().collect(),
        }
    }

    /// Whether a row may run as `user` (and `group`) as written, before any look-up: the user
    /// must be listed by that name, and root only when `"root"` is listed.
    pub fn check_names(&self, user: &str, group: Option<&str>) -> Result<(), String> {
        if is_root_name(user) && !self.users.contains("root") {
            return Err(format!(
                "user: \"{user}\" is root, which this node runs jobs as only when [daemon] \
                 allowed_users lists \"root\""
            ));
        }
        let listed =
            self.users.contains(user) || (is_root_name(user) && self.users.contains("root"));
        if !listed {
            return Err(format!(
                "user: \"{user}\" is not in [daemon] allowed_users of this node ({}); add it \
                 there to let jobs run as it",
                self.describe_users()
            ));
        }
        if let Some(g) = group
            && is_root_name(g)
            && !self.groups.contains("root")
        {
            return Err(format!(
                "group: \"{g}\" is root's group, which a job may name only when [daemon] \
                 allowed_groups lists \"root\""
            ));
        }
        Ok(())
    }

    /// Whether a run may switch to the looked-up account: root (uid 0, whatever its name) only
    /// when `"root"` is listed, the user by its name, and a group only among the user's own
    /// groups or when listed.
    pub fn check(&self, t: &Target<'_>) -> Result<(), String> {
        if t.uid == 0 && !self.users.contains("root") {
            return Err(format!(
                "user: \"{}\" has uid 0 (root), which this node runs jobs as only when \
                 [daemon] allowed_users lists \"root\"",
                t.user
            ));
        }
        if t.uid != 0 && !self.users.contains(t.user) {
            return Err(format!(
                "user: \"{}\" is not in [daemon] allowed_users of this node ({}); add it there \
                 to let jobs run as it",
                t.user,
                self.describe_users()
            ));
        }
        if let Some((name, gid)) = t.group
            && !t.user_groups.contains(&gid)
            && !self.groups.contains(name)
        {
            return Err(format!(
                "group: \"{name}\" is not a group of \"{}\" and not in [daemon] \
                 allowed_groups of this node",
                t.user
            ));
        }
        Ok(())
    }

    fn describe_users(&self) -> String {
        if self.users.is_empty() {
            "none".into()
        } else {
            let names: Vec<&str> = self.users.iter().map(String::as_str).collect();
            format!("allowed: {}", names.join(", "))
        }
    }
}

/// `root` or uid `0` as written.
fn is_root_name(name: &str) -> bool {
    name == "root" || name.trim_start_matches('0').is_empty() && !name.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn account(name: &str, uid: u32) -> Daemon {
        Daemon {
            name: name.into(),
            uid,
        }
    }

    #[test]
    fn root_daemon_needs_a_user_and_others_run_as_themselves() {
        let root = account("root", 0);
        let e = run_as(None, None, None, &root).unwrap_err();
        assert!(e.starts_with("user: a job must name the user"), "{e}");
        assert_eq!(
            run_as(None, None, Some("nobody"), &root).unwrap(),
            Some(("nobody".into(), None))
        );
        assert_eq!(
            run_as(Some("backup"), Some("disk"), Some("nobody"), &root).unwrap(),
            Some(("backup".into(), Some("disk".into())))
        );
        let svc = account("sqlcron", 998);
        assert_eq!(run_as(None, None, None, &svc).unwrap(), None);
        // default_user is for a root daemon: another runs such a job as itself.
        assert_eq!(run_as(None, None, Some("nobody"), &svc).unwrap(), None);
        assert_eq!(run_as(Some("sqlcron"), None, None, &svc).unwrap(), None);
        assert_eq!(run_as(Some("998"), None, None, &svc).unwrap(), None);
        let e = run_as(Some("postgres"), None, None, &svc).unwrap_err();
        assert!(
            e.starts_with("user: \"postgres\": this daemon runs as \"sqlcron\""),
            "{e}"
        );
        assert!(run_as(None, Some("disk"), None, &svc).is_err());
    }

    fn allowed(users: &[&str], groups: &[&str]) -> Allowed {
        Allowed {
            users: users.iter().map(|u| u.to_string()).collect(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }

    #[test]
    fn the_default_list_is_the_default_user_and_the_toml_users_but_never_root() {
        let a = Allowed::new(None, &[], Some("nobody"), ["backup", "root", "0"]);
        assert_eq!(a, allowed(&["backup", "nobody"], &[]));
        let a = Allowed::new(
            Some(&["root".into()]),
            &["disk".into()],
            Some("nobody"),
            ["x"],
        );
        assert_eq!(a, allowed(&["root"], &["disk"]));
    }

    #[test]
    fn rows_naming_root_or_an_unlisted_user_are_refused_by_name() {
        let a = allowed(&["nobody"], &[]);
        for root in ["root", "0", "00"] {
            let e = a.check_names(root, None).unwrap_err();
            assert!(e.contains("allowed_users lists \"root\""), "{e}");
        }
        let e = a.check_names("postgres", None).unwrap_err();
        assert!(
            e.contains("not in [daemon] allowed_users") && e.contains("allowed: nobody"),
            "{e}"
        );
        assert!(a.check_names("nobody", None).is_ok());
        assert!(a.check_names("nobody", Some("root")).is_err());
        assert!(a.check_names("nobody", Some("0")).is_err());
        let r = allowed(&["root"], &[]);
        assert!(r.check_names("root", None).is_ok());
        assert!(r.check_names("0", None).is_ok());
    }

    #[test]
    fn looked_up_accounts_are_checked_by_uid_and_group_membership() {
        let a = allowed(&["nobody", "toor"], &["adm"]);
        let t = |user, uid, group, groups: &'static [u32]| Target {
            user,
            uid,
            group,
            user_groups: groups,
        };
        // A second name for uid 0 is still root.
        let e = a.check(&t("toor", 0, None, &[0])).unwrap_err();
        assert!(e.contains("uid 0"), "{e}");
        assert!(a.check(&t("nobody", 65534, None, &[65534])).is_ok());
        // Its own group, a listed group, and another group.
        assert!(
            a.check(&t("nobody", 65534, Some(("nogroup", 65534)), &[65534]))
                .is_ok()
        );
        assert!(
            a.check(&t("nobody", 65534, Some(("adm", 4)), &[65534]))
                .is_ok()
        );
        let e = a
            .check(&t("nobody", 65534, Some(("shadow", 42)), &[65534]))
            .unwrap_err();
        assert!(e.starts_with("group: \"shadow\""), "{e}");
        assert!(a.check(&t("mallory", 1001, None, &[1001])).is_err());
    }
}
