//! The sbatch options real scripts carry that koalesce cannot act on: accepted with one
//! `sbatch: warning: koalesce ignores ...` line where leaving them out cannot make the job
//! wrong (task placement on cores, accounting, scheduling hints), refused where running
//! without them would be (GPUs). Also Slurm's `SBATCH_*` input environment variables.

use clap::Args;

use super::{SResult, SlurmError};

/// Options accepted for compatibility (see `warnings` and `check`).
#[derive(Debug, Default, Clone, Args)]
pub struct CompatArgs {
    /// Accepted with a warning: koalesce places no tasks on cores.
    #[arg(long = "ntasks-per-core", value_name = "N")]
    pub ntasks_per_core: Option<String>,
    /// Accepted with a warning: koalesce places no tasks on sockets.
    #[arg(long = "ntasks-per-socket", value_name = "N")]
    pub ntasks_per_socket: Option<String>,
    /// Accepted with a warning: koalesce places no tasks on sockets.
    #[arg(long = "sockets-per-node", value_name = "N")]
    pub sockets_per_node: Option<String>,
    /// Accepted with a warning: koalesce places no tasks on cores.
    #[arg(long = "cores-per-socket", value_name = "N")]
    pub cores_per_socket: Option<String>,
    /// Accepted with a warning: koalesce places no tasks on hardware threads.
    #[arg(long = "threads-per-core", value_name = "N")]
    pub threads_per_core: Option<String>,
    /// Accepted with a warning: koalesce places no tasks on sockets, cores or threads.
    #[arg(short = 'B', long = "extra-node-info", value_name = "S[:C[:T]]")]
    pub extra_node_info: Option<String>,
    /// Accepted with a warning: koalesce does not distribute tasks over nodes itself.
    #[arg(short = 'm', long = "distribution", value_name = "TYPE")]
    pub distribution: Option<String>,
    /// Accepted with a warning: koalesce gives each task its CPUs.
    #[arg(short = 'O', long = "overcommit")]
    pub overcommit: bool,
    /// Accepted with a warning: koalesce never shares a job's processors.
    #[arg(short = 's', long = "oversubscribe", alias = "share")]
    pub oversubscribe: bool,
    /// Accepted with a warning: koalesce orders jobs by --qos priority.
    #[arg(long = "nice", num_args = 0..=1, require_equals = true, value_name = "ADJ")]
    pub nice: Option<Option<String>>,
    /// Accepted with a warning: koalesce orders jobs by --qos priority.
    #[arg(long = "priority", value_name = "VALUE")]
    pub priority: Option<String>,
    /// Accepted with a warning: a job whose dependency can no longer hold is cancelled anyway.
    #[arg(long = "kill-on-invalid-dep", value_name = "yes|no")]
    pub kill_on_invalid_dep: Option<String>,
    /// Accepted with a warning: koalesce takes no HDF5 profiles.
    #[arg(long = "profile", value_name = "TYPE")]
    pub profile: Option<String>,
    /// Accepted with a warning: koalesce keeps no accounting samples.
    #[arg(long = "acctg-freq", value_name = "SPEC")]
    pub acctg_freq: Option<String>,
    /// Accepted with a warning: resource limits come from the job's site.
    #[arg(long = "propagate", num_args = 0..=1, require_equals = true, value_name = "RLIMIT")]
    pub propagate: Option<Option<String>>,
    /// Accepted with a warning: the job gets its full --time.
    #[arg(long = "time-min", value_name = "TIME")]
    pub time_min: Option<String>,
    /// Accepted with a warning: koalesce sites state no temporary disk space.
    #[arg(long = "tmp", value_name = "SIZE")]
    pub tmp: Option<String>,
    /// Accepted with a warning: koalesce counts no licences.
    #[arg(short = 'L', long = "licenses", alias = "license", value_name = "LIST")]
    pub licenses: Option<String>,
    /// Accepted with a warning: koalesce keeps no accounts.
    #[arg(long = "wckey", value_name = "KEY")]
    pub wckey: Option<String>,
    /// Accepted with a warning: koalesce reserves no cores for the system.
    #[arg(short = 'S', long = "core-spec", value_name = "N")]
    pub core_spec: Option<String>,
    /// Accepted with a warning: koalesce reserves no threads for the system.
    #[arg(long = "thread-spec", value_name = "N")]
    pub thread_spec: Option<String>,
    /// Accepted with a warning: koalesce sites have no network topology.
    #[arg(long = "switches", value_name = "COUNT[@TIME]")]
    pub switches: Option<String>,
    /// Accepted with a warning: koalesce sites have no network options.
    #[arg(long = "network", value_name = "TYPE")]
    pub network: Option<String>,
    /// Accepted with a warning: koalesce gives the CPUs of --ntasks × --cpus-per-task.
    #[arg(long = "mincpus", value_name = "N")]
    pub mincpus: Option<String>,
    /// Accepted with a warning: koalesce sites have no node order.
    #[arg(long = "contiguous")]
    pub contiguous: bool,
    /// Accepted with a warning: koalesce does not place tasks on nodes itself.
    #[arg(long = "spread-job")]
    pub spread_job: bool,
    /// Accepted with a warning: koalesce gives the minimum node count.
    #[arg(long = "use-min-nodes")]
    pub use_min_nodes: bool,
    /// Accepted with a warning: koalesce resubmits failed jobs by its own retry policy.
    #[arg(short = 'k', long = "no-kill", num_args = 0..=1, require_equals = true, value_name = "off")]
    pub no_kill: Option<Option<String>>,
    /// Accepted (koalesce reads no #PBS lines anyway).
    #[arg(long = "ignore-pbs")]
    pub ignore_pbs: bool,
    /// Accepted with a warning: koalesce sites boot no nodes.
    #[arg(long = "delay-boot", value_name = "MINUTES")]
    pub delay_boot: Option<String>,
    /// Accepted with a warning: koalesce has no MCS labels.
    #[arg(long = "mcs-label", value_name = "MCS")]
    pub mcs_label: Option<String>,
    /// Accepted with a warning: koalesce sets no CPU frequency.
    #[arg(long = "cpu-freq", value_name = "SPEC")]
    pub cpu_freq: Option<String>,
    /// Accepted with a warning when no generic resource is asked for.
    #[arg(long = "gres-flags", value_name = "TYPE")]
    pub gres_flags: Option<String>,
    /// Accepted with a warning: koalesce sites have no named nodes, so none is excluded.
    #[arg(short = 'x', long = "exclude", value_name = "NODES")]
    pub exclude: Option<String>,
    /// Refused: GPUs.
    #[arg(long = "mem-per-gpu", value_name = "SIZE")]
    pub mem_per_gpu: Option<String>,
    /// Refused: GPUs.
    #[arg(long = "cpus-per-gpu", value_name = "N")]
    pub cpus_per_gpu: Option<String>,
    /// Refused: GPUs.
    #[arg(long = "gpu-bind", value_name = "TYPE")]
    pub gpu_bind: Option<String>,
    /// Refused: GPUs.
    #[arg(long = "gpu-freq", value_name = "SPEC")]
    pub gpu_freq: Option<String>,
    /// Accepted with a warning: koalesce binds no tasks to CPUs.
    #[arg(long = "cpu-bind", value_name = "TYPE")]
    pub cpu_bind: Option<String>,
    /// Accepted with a warning: koalesce binds no memory to NUMA nodes.
    #[arg(long = "mem-bind", value_name = "TYPE")]
    pub mem_bind: Option<String>,
    /// The job must be able to end by then (--begin's forms): its start deadline is this
    /// instant less --time.
    #[arg(long = "deadline", value_name = "TIME")]
    pub deadline: Option<String>,
    /// Validate the job and print what would be submitted, without submitting it.
    #[arg(long = "test-only")]
    pub test_only: bool,
}

impl CompatArgs {
    /// One warning line for each option given (sbatch prints them as `sbatch: warning: ...`).
    pub fn warnings(&self) -> Vec<String> {
        let placement = "koalesce places no tasks on sockets, cores or threads";
        let opt = |v: &Option<String>| v.clone();
        let flag = |b: bool| b.then(String::new);
        let optopt = |v: &Option<Option<String>>| v.as_ref().map(|x| x.clone().unwrap_or_default());
        let items: Vec<(&str, Option<String>, &str)> = vec![
            ("ntasks-per-core", opt(&self.ntasks_per_core), placement),
            ("ntasks-per-socket", opt(&self.ntasks_per_socket), placement),
            ("sockets-per-node", opt(&self.sockets_per_node), placement),
            ("cores-per-socket", opt(&self.cores_per_socket), placement),
            ("threads-per-core", opt(&self.threads_per_core), placement),
            ("extra-node-info", opt(&self.extra_node_info), placement),
            ("distribution", opt(&self.distribution), placement),
            ("overcommit", flag(self.overcommit), "each task gets its CPUs"),
            ("oversubscribe", flag(self.oversubscribe), "it never shares a job's processors"),
            ("nice", optopt(&self.nice), "it orders jobs by --qos priority"),
            ("priority", opt(&self.priority), "it orders jobs by --qos priority"),
            (
                "kill-on-invalid-dep",
                opt(&self.kill_on_invalid_dep),
                "a job whose dependency fails is cancelled",
            ),
            ("profile", opt(&self.profile), "it takes no profiles"),
            ("acctg-freq", opt(&self.acctg_freq), "it keeps no accounting samples"),
            ("propagate", optopt(&self.propagate), "resource limits come from the job's site"),
            ("time-min", opt(&self.time_min), "the job gets its full --time"),
            ("tmp", opt(&self.tmp), "its sites state no temporary disk space"),
            ("licenses", opt(&self.licenses), "it counts no licences"),
            ("wckey", opt(&self.wckey), "it keeps no accounts"),
            ("core-spec", opt(&self.core_spec), "it reserves no cores for the system"),
            ("thread-spec", opt(&self.thread_spec), "it reserves no threads for the system"),
            ("switches", opt(&self.switches), "its sites have no network topology"),
            ("network", opt(&self.network), "its sites have no network options"),
            ("mincpus", opt(&self.mincpus), "the job gets --ntasks × --cpus-per-task CPUs"),
            ("contiguous", flag(self.contiguous), "its sites have no node order"),
            ("spread-job", flag(self.spread_job), placement),
            ("use-min-nodes", flag(self.use_min_nodes), "it gives the minimum node count"),
            ("no-kill", optopt(&self.no_kill), "it resubmits failed jobs by its own retry policy"),
            ("delay-boot", opt(&self.delay_boot), "its sites boot no nodes"),
            ("mcs-label", opt(&self.mcs_label), "it has no MCS labels"),
            ("cpu-freq", opt(&self.cpu_freq), "it sets no CPU frequency"),
            ("gres-flags", opt(&self.gres_flags), "no generic resource is asked for"),
            ("exclude", opt(&self.exclude), "its sites have no named nodes, so none is excluded"),
            ("cpu-bind", opt(&self.cpu_bind), "it binds no tasks to CPUs"),
            ("mem-bind", opt(&self.mem_bind), "it binds no memory to NUMA nodes"),
        ];
        items
            .into_iter()
            .filter_map(|(name, v, why)| {
                let v = v?;
                let shown = if v.is_empty() {
                    format!("--{name}")
                } else {
                    format!("--{name}={v}")
                };
                Some(format!("koalesce ignores {shown} ({why})"))
            })
            .collect()
    }

    /// The options that cannot be honoured: an error naming the first.
    pub fn check(&self) -> SResult<()> {
        for (name, v) in [
            ("mem-per-gpu", &self.mem_per_gpu),
            ("cpus-per-gpu", &self.cpus_per_gpu),
            ("gpu-bind", &self.gpu_bind),
            ("gpu-freq", &self.gpu_freq),
        ] {
            if let Some(v) = v {
                return Err(SlurmError::msg(format!(
                    "koalesce cannot honour --{name}={v}: koalesce sites offer no GPUs or generic resources"
                )));
            }
        }
        Ok(())
    }
}

/// Whether a `--gres` / `--gpus*` value asks for any GPU or generic resource: `gpu:0`,
/// `gpu:a100:0`, `0` and `none` do not (Slurm takes them as "none").
pub fn asks_for_resources(spec: &str) -> bool {
    spec.split(',').map(str::trim).filter(|s| !s.is_empty()).any(|item| {
        if item.eq_ignore_ascii_case("none") {
            return false;
        }
        // A trailing "(S:0)" socket list is not the count; `gpu` alone is one.
        let item = item.split('(').next().unwrap_or(item);
        let count = item.rsplit(':').next().unwrap_or(item);
        let digits: String = count.chars().take_while(|c| c.is_ascii_digit()).collect();
        match digits.parse::<u64>() {
            Ok(n) => n > 0,
            Err(_) => true,
        }
    })
}

/// `--deadline=TIME` as the job file's `deadline` (the time from submission by which the job
/// must have started): Slurm removes a job that cannot end by TIME, so a job with a time limit
/// must start that much earlier. `at_ms`: the instant TIME names.
pub fn deadline_field(text: &str, at_ms: u64, now_ms: u64, walltime_secs: Option<u64>) -> SResult<String> {
    let left_ms = at_ms.saturating_sub(now_ms);
    if left_ms == 0 {
        return Err(SlurmError::msg(format!("Invalid --deadline specification: {text} (in the past)")));
    }
    let start_by_ms = left_ms.saturating_sub(walltime_secs.unwrap_or(0).saturating_mul(1000));
    if start_by_ms < 1000 {
        return Err(SlurmError::msg(format!(
            "Batch job submission failed: the job cannot end by its --deadline={text}: its time limit is longer than the time left"
        )));
    }
    Ok(format!("{}s", start_by_ms / 1000))
}

/// sbatch(1)'s input environment variables koalesce reads, as options. Slurm's order:
/// the command line wins over these, and these over the script's `#SBATCH` lines.
const INPUT_ENV: &[(&str, &str)] = &[
    ("SBATCH_ACCOUNT", "--account"),
    ("SBATCH_ACCTG_FREQ", "--acctg-freq"),
    ("SBATCH_ARRAY_INX", "--array"),
    ("SBATCH_CLUSTERS", "--clusters"),
    ("SBATCH_CONSTRAINT", "--constraint"),
    ("SBATCH_CPU_FREQ_REQ", "--cpu-freq"),
    ("SBATCH_DEADLINE", "--deadline"),
    ("SBATCH_DISTRIBUTION", "--distribution"),
    ("SBATCH_EXPORT", "--export"),
    ("SBATCH_GPUS", "--gpus"),
    ("SBATCH_GRES", "--gres"),
    ("SBATCH_GRES_FLAGS", "--gres-flags"),
    ("SBATCH_HINT", "--hint"),
    ("SBATCH_JOB_NAME", "--job-name"),
    ("SBATCH_MEM_PER_CPU", "--mem-per-cpu"),
    ("SBATCH_MEM_PER_GPU", "--mem-per-gpu"),
    ("SBATCH_MEM_PER_NODE", "--mem"),
    ("SBATCH_OPEN_MODE", "--open-mode"),
    ("SBATCH_PARTITION", "--partition"),
    ("SBATCH_PROFILE", "--profile"),
    ("SBATCH_QOS", "--qos"),
    ("SBATCH_RESERVATION", "--reservation"),
    ("SBATCH_SIGNAL", "--signal"),
    ("SBATCH_TIMELIMIT", "--time"),
    ("SBATCH_WCKEY", "--wckey"),
];

/// Flags set by a variable of any value.
const INPUT_ENV_FLAGS: &[(&str, &str)] = &[
    ("SBATCH_EXCLUSIVE", "--exclusive"),
    ("SBATCH_NO_REQUEUE", "--no-requeue"),
    ("SBATCH_REQUEUE", "--requeue"),
    ("SBATCH_WAIT", "--wait"),
];

/// The options the `SBATCH_*` variables of this environment stand for (empty values unset).
pub fn env_options(env: &[(String, String)]) -> Vec<String> {
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let mut out = Vec::new();
    for (var, opt) in INPUT_ENV {
        if let Some(v) = get(var).filter(|v| !v.is_empty()) {
            out.push(format!("{opt}={v}"));
        }
    }
    for (var, opt) in INPUT_ENV_FLAGS {
        if get(var).is_some() {
            out.push(opt.to_string());
        }
    }
    out
}

/// The script as sbatch reads it: a UTF-8 byte order mark (editors on Windows write one)
/// would hide the `#!` line, so it is dropped.
pub fn strip_bom(text: &str) -> &str {
    text.strip_prefix('\u{feff}').unwrap_or(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_gpus_ask_for_nothing() {
        for s in ["gpu:0", "gpu:a100:0", "0", "none", "gpu:0,shard:0"] {
            assert!(!asks_for_resources(s), "{s}");
        }
        for s in ["gpu", "gpu:1", "gpu:a100:3", "h100:1", "shard:1", "gpu:1(S:0)", "gpu:0,gpu:2", "4"] {
            assert!(asks_for_resources(s), "{s}");
        }
    }

    #[test]
    fn deadlines_leave_room_for_the_time_limit() {
        let now = 1_000_000_000_000;
        assert_eq!(deadline_field("x", now + 8 * 3_600_000, now, None).unwrap(), "28800s");
        assert_eq!(deadline_field("x", now + 8 * 3_600_000, now, Some(900)).unwrap(), "27900s");
        let e = deadline_field("x", now + 600_000, now, Some(3600)).unwrap_err();
        assert!(e.message.contains("cannot end by its --deadline=x"), "{}", e.message);
        assert!(deadline_field("x", now - 1, now, None).unwrap_err().message.contains("in the past"));
    }

    #[test]
    fn input_environment_becomes_options() {
        let env: Vec<(String, String)> = [
            ("SBATCH_TIMELIMIT", "10"),
            ("SBATCH_JOB_NAME", "envname"),
            ("SBATCH_ACCOUNT", ""),
            ("SBATCH_EXCLUSIVE", ""),
            ("SBATCH_UNKNOWN", "x"),
            ("PATH", "/bin"),
        ]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        assert_eq!(env_options(&env), ["--job-name=envname", "--time=10", "--exclusive"]);
    }

    #[test]
    fn warnings_name_option_and_value() {
        let c = CompatArgs {
            ntasks_per_core: Some("1".into()),
            overcommit: true,
            nice: Some(None),
            ..Default::default()
        };
        let w = c.warnings();
        assert_eq!(w.len(), 3, "{w:?}");
        assert!(w[0].starts_with("koalesce ignores --ntasks-per-core=1 ("), "{w:?}");
        assert!(w[1].starts_with("koalesce ignores --overcommit ("), "{w:?}");
        assert!(w[2].starts_with("koalesce ignores --nice ("), "{w:?}");
        assert!(CompatArgs::default().warnings().is_empty());
        let g = CompatArgs {
            mem_per_gpu: Some("8G".into()),
            ..Default::default()
        };
        assert!(g.check().unwrap_err().message.contains("--mem-per-gpu=8G"));
    }
}
