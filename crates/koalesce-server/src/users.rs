//! Which Unix account a koalesce user's components run as.
//!
//! A server run as root maps each koalesce user to a Unix account, as Slurm runs a job as
//! its submitter: by default the account of the same name, or the one the server config's
//! `[users]` table names (`"*"` names the account for users not listed). A job of a user
//! without an account fails with that reason (not a fault of the site). No job runs as root
//! (uid 0) unless `allow_root_jobs = true`. A server not run as root cannot switch users:
//! every component runs as the server's own account, confined by Landlock (see
//! [`crate::sandbox`]).

use std::collections::BTreeMap;
use std::ffi::CString;
use std::path::PathBuf;

use nix::unistd::{Gid, Uid, User};

/// The key of the `[users]` table that names the account of every user not listed.
pub const DEFAULT_KEY: &str = "*";

/// A resolved Unix account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub name: String,
    pub uid: Uid,
    pub gid: Gid,
    /// Supplementary groups (from the group database, as `initgroups` would set them).
    pub groups: Vec<Gid>,
    pub home: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccountError {
    #[error("Unix account '{account}' does not exist on this machine")]
    NoSuchAccount { account: String },
    #[error("Unix account '{account}' is root (uid 0): jobs do not run as root unless the server config says allow_root_jobs = true")]
    Root { account: String },
    #[error("cannot look up Unix account '{account}': {reason}")]
    Lookup { account: String, reason: String },
}

/// The Unix account name a koalesce user maps to under `table` (the `[users]` table).
pub fn account_name<'a>(table: &'a BTreeMap<String, String>, user: &'a str) -> &'a str {
    table
        .get(user)
        .or_else(|| table.get(DEFAULT_KEY))
        .map(String::as_str)
        .unwrap_or(user)
}

/// Looks an account up by name, with its supplementary groups; refuses uid 0 unless
/// `allow_root`.
pub fn resolve(account: &str, allow_root: bool) -> Result<Account, AccountError> {
    let user = match User::from_name(account) {
        Ok(Some(u)) => u,
        Ok(None) => {
            return Err(AccountError::NoSuchAccount {
                account: account.to_string(),
            })
        }
        Err(e) => {
            return Err(AccountError::Lookup {
                account: account.to_string(),
                reason: e.to_string(),
            })
        }
    };
    if user.uid.is_root() && !allow_root {
        return Err(AccountError::Root {
            account: account.to_string(),
        });
    }
    let cname = CString::new(account).map_err(|e| AccountError::Lookup {
        account: account.to_string(),
        reason: e.to_string(),
    })?;
    let groups = nix::unistd::getgrouplist(&cname, user.gid).map_err(|e| AccountError::Lookup {
        account: account.to_string(),
        reason: format!("groups: {e}"),
    })?;
    Ok(Account {
        name: user.name,
        uid: user.uid,
        gid: user.gid,
        groups,
        home: user.dir,
    })
}

/// How long a looked-up account is reused by [`resolve_cached`].
pub const ACCOUNT_CACHE_TTL: std::time::Duration = std::time::Duration::from_secs(30);

type AccountCache = std::collections::HashMap<(String, bool), (std::time::Instant, Account)>;
static ACCOUNTS: std::sync::Mutex<Option<AccountCache>> = std::sync::Mutex::new(None);

/// [`resolve`], reusing an answer of this process (or of the resident launcher it was forked
/// from) younger than [`ACCOUNT_CACHE_TTL`]: an NSS lookup with the groups costs a supervisor
/// about as much as the rest of its records. Failures are not kept (an account added is seen
/// at once); an account removed or changed is seen within the TTL.
pub fn resolve_cached(account: &str, allow_root: bool) -> Result<Account, AccountError> {
    let key = (account.to_string(), allow_root);
    let now = std::time::Instant::now();
    {
        let mut cache = ACCOUNTS.lock().unwrap_or_else(|p| p.into_inner());
        let cache = cache.get_or_insert_with(Default::default);
        cache.retain(|_, (at, _)| now.duration_since(*at) < ACCOUNT_CACHE_TTL);
        if let Some((_, a)) = cache.get(&key) {
            return Ok(a.clone());
        }
    }
    let a = resolve(account, allow_root)?;
    ACCOUNTS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert_with(Default::default)
        .insert(key, (now, a.clone()));
    Ok(a)
}

/// The account this process runs as (for USER/LOGNAME when no switch happens).
pub fn current_name() -> Option<String> {
    User::from_uid(nix::unistd::geteuid()).ok().flatten().map(|u| u.name)
}

/// Whether this process can switch users (it runs as root).
pub fn can_switch() -> bool {
    nix::unistd::geteuid().is_root()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapping_uses_the_table_then_the_default_then_the_name() {
        let mut t = BTreeMap::new();
        assert_eq!(account_name(&t, "alice"), "alice");
        t.insert("alice".to_string(), "u1001".to_string());
        t.insert("*".to_string(), "nobody".to_string());
        assert_eq!(account_name(&t, "alice"), "u1001");
        assert_eq!(account_name(&t, "bob"), "nobody");
    }

    #[test]
    fn root_is_refused_unless_allowed_and_unknown_accounts_are_named() {
        assert_eq!(resolve("root", false), Err(AccountError::Root { account: "root".into() }));
        assert!(resolve("root", true).unwrap().uid.is_root());
        let e = resolve("no-such-koalesce-account", false).unwrap_err();
        assert!(e.to_string().contains("'no-such-koalesce-account' does not exist"), "{e}");
        let nobody = resolve("nobody", false).unwrap();
        assert_eq!(resolve_cached("nobody", false).unwrap(), nobody);
        assert_eq!(resolve_cached("nobody", false).unwrap(), nobody, "from the cache");
        assert_eq!(resolve_cached("root", false), Err(AccountError::Root { account: "root".into() }));
        assert!(!nobody.uid.is_root() && nobody.groups.contains(&nobody.gid));
    }
}
