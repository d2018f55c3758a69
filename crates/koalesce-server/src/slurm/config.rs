//! `[sites.slurm]`: how a site maps onto a Slurm cluster.
//!
//! ```toml
//! [[sites]]
//! name = "alpha"
//! kind = "slurm"
//! processors = 64                 # checked against sinfo (SlurmBackend::verify)
//! [sites.slurm]
//! conf = "/etc/slurm-alpha/slurm.conf"   # the cluster's slurm.conf (SLURM_CONF)
//! partition = "debug"
//! account = "grid"                # optional: sbatch --account
//! qos = "normal"                  # optional: sbatch --qos
//! sbatch_args = ["--constraint=ib"]   # optional: more sbatch options, as given
//! command_timeout_ms = 5000       # longest wait for one Slurm command
//! claim_timeout_ms = 20000        # longest wait from sbatch to allocation (a failed claim after)
//! supervisor = "/opt/koalesce/bin/koalesce"   # koalesce on the cluster's nodes (default: this one)
//! ```

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Default for [`SlurmSiteConfig::command_timeout_ms`].
pub const DEFAULT_COMMAND_TIMEOUT_MS: u64 = 5000;
/// Default for [`SlurmSiteConfig::claim_timeout_ms`]: about 20 scheduling ticks of an idle
/// controller (submit → check-in takes 0.7–1.1 s on the test bed, a fresh controller's first
/// pass about 3 s).
pub const DEFAULT_CLAIM_TIMEOUT_MS: u64 = 20_000;

/// The Slurm side of a site: cluster (through its slurm.conf), partition and submission
/// options.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlurmSiteConfig {
    /// The cluster's slurm.conf (what `SLURM_CONF` would point at). Several sites may share a
    /// cluster (one per partition); koalesce then asks the cluster once per tick for all.
    pub conf: PathBuf,
    /// The partition the site's components run in.
    pub partition: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<String>,
    /// More `sbatch` options, appended as given. Options koalesce sets itself are refused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sbatch_args: Vec<String>,
    /// Longest wait for one Slurm command; a controller that has not answered by then is a
    /// fault of the site (a soft error), never a hang.
    #[serde(default = "default_timeout")]
    pub command_timeout_ms: u64,
    /// How long a component may wait from `sbatch` until Slurm has allocated its processors
    /// and its supervisor checked in (003's claim). A launch with a component that is not
    /// allocated by then is cancelled as a whole and the job goes back to placement (a
    /// claiming failure; a soft error of the site only when its controller does not answer).
    #[serde(default = "default_claim_timeout")]
    pub claim_timeout_ms: u64,
    /// Path of the `koalesce` program on the cluster's nodes, which runs each component's
    /// supervisor (`koalesce supervise`). Default: the daemon's own executable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supervisor: Option<PathBuf>,
}

fn default_timeout() -> u64 {
    DEFAULT_COMMAND_TIMEOUT_MS
}

fn default_claim_timeout() -> u64 {
    DEFAULT_CLAIM_TIMEOUT_MS
}

/// sbatch options koalesce sets itself (they would break the supervisor protocol or the
/// accounting of processors).
const RESERVED_OPTIONS: &[&str] = &[
    "--parsable",
    "-n",
    "--ntasks",
    "-p",
    "--partition",
    "-D",
    "--chdir",
    "-o",
    "--output",
    "-e",
    "--error",
    "-H",
    "--hold",
    "--wrap",
    "--reservation",
    "-J",
    "--job-name",
    "-A",
    "--account",
    "-q",
    "--qos",
    "--requeue",
    "--no-requeue",
    "-M",
    "--clusters",
    "--array",
    "-a",
    "--export",
    "--uid",
    "--gid",
    "-W",
    "--wait",
];

impl SlurmSiteConfig {
    /// A site on `conf`, partition `partition`, defaults otherwise.
    pub fn new(conf: impl Into<PathBuf>, partition: impl Into<String>) -> Self {
        SlurmSiteConfig {
            conf: conf.into(),
            partition: partition.into(),
            account: None,
            qos: None,
            sbatch_args: Vec::new(),
            command_timeout_ms: DEFAULT_COMMAND_TIMEOUT_MS,
            claim_timeout_ms: DEFAULT_CLAIM_TIMEOUT_MS,
            supervisor: None,
        }
    }

    /// Checks the values (not the cluster: see `SlurmBackend::verify`). `site` names the site
    /// in errors.
    pub fn validate(&self, site: &str) -> Result<(), SlurmConfigError> {
        let bad = |problem: SlurmConfigProblem| {
            Err(SlurmConfigError {
                site: site.to_string(),
                problem,
            })
        };
        if !self.conf.is_absolute() {
            return bad(SlurmConfigProblem::RelativeConf(self.conf.clone()));
        }
        let plain = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        for (key, v) in [
            ("partition", Some(&self.partition)),
            ("account", self.account.as_ref()),
            ("qos", self.qos.as_ref()),
        ] {
            if let Some(v) = v {
                if !plain(v) {
                    return bad(SlurmConfigProblem::NotPlainName { key, value: v.clone() });
                }
            }
        }
        for a in &self.sbatch_args {
            let name = a.split('=').next().unwrap_or(a);
            if !a.starts_with('-') {
                return bad(SlurmConfigProblem::NotAnOption(a.clone()));
            }
            if RESERVED_OPTIONS.contains(&name) || (name.len() > 2 && !name.starts_with("--") && RESERVED_OPTIONS.contains(&&name[..2])) {
                return bad(SlurmConfigProblem::ReservedOption(name.to_string()));
            }
        }
        if !(500..=600_000).contains(&self.command_timeout_ms) {
            return bad(SlurmConfigProblem::CommandTimeout(self.command_timeout_ms));
        }
        if !(1000..=86_400_000).contains(&self.claim_timeout_ms) {
            return bad(SlurmConfigProblem::ClaimTimeout(self.claim_timeout_ms));
        }
        if let Some(s) = &self.supervisor {
            if !s.is_absolute() {
                return bad(SlurmConfigProblem::RelativeSupervisor(s.clone()));
            }
        }
        Ok(())
    }
}

/// A `[sites.slurm]` table refused by [`SlurmSiteConfig::validate`]: the site and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("site '{site}': [sites.slurm] {problem}")]
pub struct SlurmConfigError {
    pub site: String,
    pub problem: SlurmConfigProblem,
}

/// What is wrong in a `[sites.slurm]` table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlurmConfigProblem {
    #[error("conf '{}' must be an absolute path", .0.display())]
    RelativeConf(PathBuf),
    /// `partition`, `account` or `qos` (the key) is not a plain name.
    #[error("{key} '{value}' must be a plain name")]
    NotPlainName { key: &'static str, value: String },
    #[error("sbatch_args entry '{0}' is not an option (write '--opt=value')")]
    NotAnOption(String),
    #[error("sbatch_args may not set '{0}': koalesce sets it itself")]
    ReservedOption(String),
    #[error("command_timeout_ms {0} must be within 500..=600000")]
    CommandTimeout(u64),
    #[error("claim_timeout_ms {0} must be within 1000..=86400000")]
    ClaimTimeout(u64),
    #[error("supervisor '{}' must be an absolute path", .0.display())]
    RelativeSupervisor(PathBuf),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_table() {
        let t: SlurmSiteConfig = toml::from_str(
            r#"conf = "/b/alpha/slurm.conf"
partition = "debug"
account = "grid"
sbatch_args = ["--constraint=ib"]
"#,
        )
        .unwrap();
        assert_eq!(t.command_timeout_ms, DEFAULT_COMMAND_TIMEOUT_MS);
        assert_eq!(t.account.as_deref(), Some("grid"));
        t.validate("alpha").unwrap();
        let e = toml::from_str::<SlurmSiteConfig>("conf = \"/x\"\npartition = \"p\"\nparition = \"q\"\n").unwrap_err();
        assert!(e.to_string().contains("parition"), "{e}");
        assert!(toml::from_str::<SlurmSiteConfig>("partition = \"p\"\n").is_err());
    }

    #[test]
    fn validation_names_the_problem() {
        let ok = SlurmSiteConfig::new("/b/slurm.conf", "debug");
        ok.validate("a").unwrap();
        assert_eq!(
            SlurmSiteConfig::new("/b/slurm.conf", "de bug")
                .validate("a")
                .unwrap_err()
                .to_string(),
            "site 'a': [sites.slurm] partition 'de bug' must be a plain name"
        );
        assert_eq!(
            SlurmSiteConfig {
                sbatch_args: vec!["-n4".into()],
                ..ok.clone()
            }
            .validate("a")
            .unwrap_err()
            .problem,
            SlurmConfigProblem::ReservedOption("-n4".into())
        );
        let cases: Vec<(SlurmSiteConfig, &str)> = vec![
            (SlurmSiteConfig::new("rel/slurm.conf", "debug"), "absolute"),
            (SlurmSiteConfig::new("/b/slurm.conf", "de bug"), "partition"),
            (
                SlurmSiteConfig {
                    sbatch_args: vec!["--partition=x".into()],
                    ..ok.clone()
                },
                "--partition",
            ),
            (
                SlurmSiteConfig {
                    sbatch_args: vec!["-n4".into()],
                    ..ok.clone()
                },
                "-n",
            ),
            (
                SlurmSiteConfig {
                    sbatch_args: vec!["constraint".into()],
                    ..ok.clone()
                },
                "not an option",
            ),
            (
                SlurmSiteConfig {
                    account: Some("a;b".into()),
                    ..ok.clone()
                },
                "account",
            ),
            (
                SlurmSiteConfig {
                    command_timeout_ms: 10,
                    ..ok.clone()
                },
                "command_timeout_ms",
            ),
            (
                SlurmSiteConfig {
                    claim_timeout_ms: 10,
                    ..ok.clone()
                },
                "claim_timeout_ms",
            ),
        ];
        for (cfg, needle) in cases {
            let e = cfg.validate("alpha").unwrap_err();
            assert_eq!(e.site, "alpha");
            let e = e.to_string();
            assert!(e.contains(needle) && e.contains("alpha"), "{e}");
        }
        let fine = SlurmSiteConfig {
            sbatch_args: vec!["--constraint=ib".into(), "--mem-per-cpu=100".into()],
            ..ok
        };
        fine.validate("a").unwrap();
    }
}
