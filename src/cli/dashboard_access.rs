//! The dashboard's credentials from the command line: `sqlcron web-token` (a bearer token kept
//! as a hash in the database) and `sqlcron web-user` (a users file line).

use super::{Failure, connect};
use crate::config::Config;

/// A dashboard user's or token's name: 1 to 64 letters, digits and . _ @ - (nothing that
/// could end a users file's field or line).
fn dashboard_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._@-".contains(c))
}

/// `sqlcron web-token NAME --role ROLE [--expires D]`, or `--revoke`.
pub(super) async fn web_token(
    config: &Config,
    name: &str,
    role: &str,
    expires: Option<&str>,
    revoke: bool,
) -> Result<u8, Failure> {
    use crate::model::access::Role;
    if !dashboard_name(name) {
        return Err(Failure::usage(
            "a token name is 1 to 64 letters, digits and . _ @ -",
        ));
    }
    let actor = crate::exec::account::this_process(None);
    let store = connect(config).await?;
    if revoke {
        let done = store
            .revoke_web_token(name, &actor)
            .await
            .map_err(Failure::runtime)?;
        if !done {
            return Err(Failure::usage(format!("no token named \"{name}\"")));
        }
        println!("{name}: revoked");
        return Ok(0);
    }
    let role = Role::parse(role)
        .ok_or_else(|| Failure::usage(format!("--role {role}: viewer, operator or admin")))?;
    let lifetime = expires
        .map(|e| {
            crate::model::duration::parse_duration(e)
                .map(|d| d.as_millis() as i64)
                .map_err(|_| Failure::usage(format!("--expires {e}: a duration such as 90d")))
        })
        .transpose()?;
    let (token, row) = crate::service::web::new_token(name, role);
    let made = store
        .create_web_token(&row, lifetime, &actor)
        .await
        .map_err(Failure::runtime)?;
    if !made {
        return Err(Failure::usage(format!(
            "a token named \"{name}\" exists (sqlcron web-token {name} --revoke first)"
        )));
    }
    println!("{token}");
    Ok(0)
}

/// `sqlcron web-user NAME --role ROLE`: a users file line, the password read from stdin.
pub(super) fn web_user(name: &str, role: &str) -> Result<u8, Failure> {
    use crate::model::access::{Role, parse_users};
    let role = Role::parse(role)
        .ok_or_else(|| Failure::usage(format!("--role {role}: viewer, operator or admin")))?;
    if !dashboard_name(name) {
        return Err(Failure::usage(
            "a user name is 1 to 64 letters, digits and . _ @ -",
        ));
    }
    let mut password = String::new();
    std::io::stdin()
        .read_line(&mut password)
        .map_err(Failure::runtime)?;
    let password = password.trim_end_matches(['\n', '\r']);
    if password.len() < 8 {
        return Err(Failure::usage(
            "the password (the first line of standard input) must have at least 8 characters",
        ));
    }
    let hash = crate::service::web::hash_password(password).map_err(Failure::runtime)?;
    let line = format!("{name}:{role}:{hash}");
    parse_users(&line).map_err(Failure::usage)?;
    println!("{line}");
    Ok(0)
}
