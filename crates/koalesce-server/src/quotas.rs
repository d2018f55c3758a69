//! Per-user quotas: jobs not ended yet, and bytes of stored files. Over a quota, a submission
//! or an upload answers 429 naming the quota, its limit and the user's use, and nothing is
//! stored.
//!
//! ```toml
//! [quotas]
//! max_queued_jobs = 10000            # every user; absent: unlimited
//! max_stored_bytes = 107374182400
//! [quotas.users.alice]               # one user's own limits
//! max_queued_jobs = 100
//! ```
//!
//! Jobs are counted from the core's live jobs (those not ended); bytes are the sizes of the
//! replicas of the files the user owns (outputs of their jobs count as theirs). The counts are
//! taken only when a quota is configured.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::daemon::{JobMeta, State};

/// One set of limits (`None`: unlimited).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    pub max_queued_jobs: Option<u64>,
    pub max_stored_bytes: Option<u64>,
}

/// `[quotas]`: the limits every user has, and per-user ones that replace them field by field.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QuotaConfig {
    pub max_queued_jobs: Option<u64>,
    pub max_stored_bytes: Option<u64>,
    pub users: BTreeMap<String, Limits>,
}

/// A quota a request would go over.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("quota exceeded: user '{user}' may have at most {limit} {what}; has {used}{adding}")]
pub struct QuotaExceeded {
    pub user: String,
    pub what: &'static str,
    pub limit: u64,
    pub used: u64,
    adding: String,
}

impl QuotaConfig {
    /// The limits of `user`.
    pub fn of(&self, user: &str) -> Limits {
        let own = self.users.get(user).copied().unwrap_or_default();
        Limits {
            max_queued_jobs: own.max_queued_jobs.or(self.max_queued_jobs),
            max_stored_bytes: own.max_stored_bytes.or(self.max_stored_bytes),
        }
    }

    /// Whether `user` may have `adding` more jobs that have not ended (an array's tasks count
    /// one each; call under the state lock).
    pub fn check_submit(&self, st: &State, user: &str, adding: u64) -> Result<(), QuotaExceeded> {
        let Some(limit) = self.of(user).max_queued_jobs else {
            return Ok(());
        };
        let used = live_jobs_of(st, user);
        if used.saturating_add(adding) <= limit {
            return Ok(());
        }
        Err(QuotaExceeded {
            user: user.to_string(),
            what: "jobs that have not ended",
            limit,
            used,
            adding: if adding > 1 { format!(" and adds {adding}") } else { String::new() },
        })
    }

    /// Whether `user` may store `adding` more bytes (call under the state lock).
    pub fn check_bytes(&self, st: &State, user: &str, adding: u64) -> Result<(), QuotaExceeded> {
        let Some(limit) = self.of(user).max_stored_bytes else {
            return Ok(());
        };
        let used = stored_bytes_of(st, user);
        if used.saturating_add(adding) <= limit {
            return Ok(());
        }
        Err(QuotaExceeded {
            user: user.to_string(),
            what: "bytes of stored files",
            limit,
            used,
            adding: format!(" and adds {adding}"),
        })
    }

    /// Bytes `user` may still store (`None`: unlimited).
    pub fn bytes_left(&self, st: &State, user: &str) -> Option<u64> {
        self.of(user)
            .max_stored_bytes
            .map(|limit| limit.saturating_sub(stored_bytes_of(st, user)))
    }
}

fn live_jobs_of(st: &State, user: &str) -> u64 {
    let mine = |(id, m): (&u64, &JobMeta)| m.user == user && st.core.job(koalesce_core::JobId(*id)).is_some_and(|j| !j.state.is_terminal());
    st.meta.iter().filter(|e| mine(*e)).count() as u64
}

fn stored_bytes_of(st: &State, user: &str) -> u64 {
    st.files
        .values()
        .filter(|f| f.owner.as_deref() == Some(user))
        .map(|f| f.size_bytes.saturating_mul(f.replicas.len().max(1) as u64))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_limit_replaces_the_default_field_by_field() {
        let mut q = QuotaConfig {
            max_queued_jobs: Some(10),
            max_stored_bytes: Some(1000),
            users: BTreeMap::new(),
        };
        q.users.insert(
            "alice".into(),
            Limits {
                max_queued_jobs: Some(2),
                max_stored_bytes: None,
            },
        );
        assert_eq!(
            q.of("alice"),
            Limits {
                max_queued_jobs: Some(2),
                max_stored_bytes: Some(1000)
            }
        );
        assert_eq!(q.of("bob").max_queued_jobs, Some(10));
    }
}
