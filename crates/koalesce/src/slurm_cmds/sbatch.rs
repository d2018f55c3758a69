//! `sbatch`: a batch script with `#SBATCH` directives becomes one koalesce job.
//!
//! The job's program is this binary's hidden `slurm-commands batch-step`, which, inside the
//! job's sandbox, sets the `SLURM_*` variables, changes into `--chdir`, opens `--output` /
//! `--error` / `--input` (filename patterns expanded with the job id known by then) and
//! executes the script with its interpreter. Script, environment and settings travel as one
//! base64 argument, so no `${KOALESCE_...}` text of the user's is expanded by the server.
//!
//! What koalesce cannot honour (any-of dependencies, GPUs, named nodes, ...) is refused with
//! `sbatch: error: ...` and exit 1, before anything is submitted.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use koalesce_api::jobdesc::{ComponentDescription, JobDescription, Runner};

use super::batch_step::BatchSpec;
pub(crate) use super::nodecount::node_count;
use super::sbatch_compat::{asks_for_resources, env_options, strip_bom, CompatArgs};
pub use super::sbatch_script::directives;
use super::sbatch_script::read_script;
use super::timefmt::parse_time_limit;
use super::{parse_options, SResult, SlurmError};
use crate::client_cmds::api::Client;

/// sbatch - submit a batch script to the koalesce grid.
#[derive(Debug, Default, Parser)]
#[command(disable_version_flag = true)]
pub struct SbatchArgs {
    /// Job name (default: the script's file name).
    #[arg(short = 'J', long = "job-name", value_name = "NAME")]
    pub job_name: Option<String>,
    /// Number of tasks.
    #[arg(short = 'n', long = "ntasks", value_name = "N")]
    pub ntasks: Option<u32>,
    /// Number of nodes (N or MIN-MAX; koalesce gives MIN).
    #[arg(short = 'N', long = "nodes", value_name = "N")]
    pub nodes: Option<String>,
    /// CPUs per task.
    #[arg(short = 'c', long = "cpus-per-task", value_name = "N")]
    pub cpus_per_task: Option<u32>,
    /// Tasks per node.
    #[arg(long = "ntasks-per-node", alias = "tasks-per-node", value_name = "N")]
    pub ntasks_per_node: Option<u32>,
    /// Memory per node (K, M, G, T suffix; default megabytes; 0: no limit).
    #[arg(long = "mem", value_name = "SIZE")]
    pub mem: Option<String>,
    /// Memory per CPU.
    #[arg(long = "mem-per-cpu", value_name = "SIZE")]
    pub mem_per_cpu: Option<String>,
    /// Time limit (minutes, MM:SS, HH:MM:SS, D-HH[:MM[:SS]]).
    #[arg(short = 't', long = "time", value_name = "TIME")]
    pub time: Option<String>,
    /// Standard output file pattern (default slurm-%j.out).
    #[arg(short = 'o', long = "output", value_name = "PATTERN")]
    pub output: Option<String>,
    /// Standard error file pattern (default: with standard output).
    #[arg(short = 'e', long = "error", value_name = "PATTERN")]
    pub error: Option<String>,
    /// Standard input file pattern (default /dev/null).
    #[arg(short = 'i', long = "input", value_name = "PATTERN")]
    pub input: Option<String>,
    /// Working directory of the script (default: the current directory).
    #[arg(short = 'D', long = "chdir", alias = "workdir", value_name = "DIR")]
    pub chdir: Option<PathBuf>,
    /// Print only the job id.
    #[arg(long = "parsable")]
    pub parsable: bool,
    /// Job array: task indexes (1-100, 0-30:10, 1,3,5, %M at most M at once); one koalesce job per task.
    #[arg(short = 'a', long = "array", value_name = "INDEXES")]
    pub array: Option<String>,
    /// Dependencies: after, afterany, afterok, afternotok:ID[:ID...][,...].
    #[arg(short = 'd', long = "dependency", value_name = "LIST")]
    pub dependency: Option<String>,
    /// Environment to propagate: ALL (default), NONE, or [ALL,]VAR[=value],...
    #[arg(long = "export", value_name = "VARS")]
    pub export: Option<String>,
    /// koalesce sites (one, or several to choose from) or a placement policy (wf, cf, cm, fcm, ttd, tts).
    #[arg(short = 'p', long = "partition", value_name = "NAMES")]
    pub partition: Option<String>,
    /// Account (accepted; koalesce keeps no accounts).
    #[arg(short = 'A', long = "account", value_name = "ACCOUNT")]
    pub account: Option<String>,
    /// Clusters: koalesce is one (`koalesce`, or `all`).
    #[arg(short = 'M', long = "clusters", alias = "cluster", value_name = "CLUSTERS")]
    pub clusters: Option<String>,
    /// Quality of service: a koalesce priority (super-high, high, low, super-low; normal = default).
    #[arg(short = 'q', long = "qos", value_name = "QOS")]
    pub qos: Option<String>,
    /// Exclusive nodes (accepted: koalesce never shares a job's processors).
    #[arg(long = "exclusive", num_args = 0..=1, require_equals = true, value_name = "user|mcs|topo")]
    pub exclusive: Option<Option<String>>,
    /// Wrap this command line in a shell script instead of a script file.
    #[arg(long = "wrap", value_name = "COMMAND")]
    pub wrap: Option<String>,
    /// Wait until the job ends; exit with its exit code.
    #[arg(short = 'W', long = "wait")]
    pub wait: bool,
    /// Output files: append or truncate (default).
    #[arg(long = "open-mode", value_name = "append|truncate")]
    pub open_mode: Option<String>,
    /// Comment (accepted, not stored).
    #[arg(long = "comment", value_name = "TEXT")]
    pub comment: Option<String>,
    /// Accepted (the submitting environment is what --export propagates).
    #[arg(long = "get-user-env", num_args = 0..=1, require_equals = true)]
    pub get_user_env: Option<Option<String>>,
    /// Accepted: koalesce does not requeue on node failure.
    #[arg(long = "no-requeue")]
    pub no_requeue: bool,
    /// Quiet.
    #[arg(short = 'Q', long = "quiet")]
    pub quiet: bool,
    /// Verbose.
    #[arg(short = 'v', long = "verbose")]
    pub verbose: bool,
    /// koalesce extension: co-allocate the nodes across sites, one component per node; the
    /// script runs once per component (SLURM_NODEID = its rank), started together.
    #[arg(long = "koalesce-coallocate")]
    pub coallocate: bool,
    /// Refused: GPUs (accepted when it asks for none: `gpu:0`, `0`, `none`).
    #[arg(
        short = 'G',
        long = "gpus",
        alias = "gpus-per-task",
        alias = "gpus-per-node",
        alias = "gres",
        value_name = "SPEC"
    )]
    pub gpus: Option<String>,
    /// Run in this advance reservation of yours (`koalesce reservations create` gives its
    /// id, e.g. `R3`).
    #[arg(long = "reservation", value_name = "ID")]
    pub reservation: Option<String>,
    /// Sites with these features only (a, a&b, a|b, [a|b]; the sites' `features`).
    #[arg(short = 'C', long = "constraint", value_name = "LIST")]
    pub constraint: Option<String>,
    /// Defer the job until this time (HH:MM[:SS] [AM|PM], MMDD[YY], MM/DD[/YY],
    /// YYYY-MM-DD[THH:MM[:SS]], now+COUNT[seconds|minutes|hours|days|weeks], midnight, noon,
    /// elevenses, fika, teatime, today, tomorrow), in this host's time zone.
    #[arg(short = 'b', long = "begin", value_name = "TIME")]
    pub begin: Option<String>,
    /// Submit held (release with `koalesce release ID`).
    #[arg(short = 'H', long = "hold")]
    pub hold: bool,
    /// Send signal SIG SECONDS (default 60) before the time limit: [B:]SIG[@SECONDS]
    /// (B: the batch shell only; else every process of the job).
    #[arg(long = "signal", value_name = "[B:]SIG[@SECONDS]")]
    pub signal: Option<String>,
    /// Accepted with a warning: koalesce sends no e-mail (NONE, BEGIN, END, FAIL, REQUEUE,
    /// ALL, INVALID_DEPEND, STAGE_OUT, TIME_LIMIT, TIME_LIMIT_90/80/50, ARRAY_TASKS).
    #[arg(long = "mail-type", value_name = "TYPE")]
    pub mail_type: Option<String>,
    /// Accepted with a warning: koalesce sends no e-mail.
    #[arg(long = "mail-user", value_name = "USER")]
    pub mail_user: Option<String>,
    /// Accepted with a warning: koalesce places no tasks on cores or threads
    /// (compute_bound, memory_bound, multithread, nomultithread).
    #[arg(long = "hint", value_name = "TYPE")]
    pub hint: Option<String>,
    /// Accepted with a warning: koalesce resubmits failed jobs by its own retry policy.
    #[arg(long = "requeue")]
    pub requeue: bool,
    /// Refused: nodes by name.
    #[arg(short = 'w', long = "nodelist", value_name = "NODES")]
    pub nodelist: Option<String>,
    /// Options accepted with a warning or refused (sbatch_compat).
    #[command(flatten)]
    pub compat: CompatArgs,
    /// Script file (default: standard input) and its arguments.
    #[arg(value_name = "SCRIPT", trailing_var_arg = true)]
    pub script: Vec<String>,
}

pub fn run(args: &[String], conn: impl FnOnce() -> SResult<Client>) -> SResult<ExitCode> {
    let cmdline: SbatchArgs = parse_options("sbatch", args)?;
    let (script_text, script_name, script_args) = read_script(&cmdline)?;
    let script_text = strip_bom(&script_text).to_string();
    let env: Vec<(String, String)> = std::env::vars().collect();
    // Directives first, then the SBATCH_* variables, the command line last: it wins.
    let script_words = directives(&script_text)?;
    let env_words = env_options(&env);
    let opts = merge_layers(&script_words, &env_words, args)?;
    let submit_dir = std::env::current_dir().map_err(|e| SlurmError::msg(format!("cannot read the current directory: {e}")))?;
    // --test-only needs the server only for the site names of -p and -C.
    let needs_sites = opts.partition.is_some() || opts.constraint.as_deref().is_some_and(|c| !c.trim().is_empty());
    let client = match opts.compat.test_only && !needs_sites {
        true => None,
        false => Some(conn()?),
    };
    let infos = match (&client, needs_sites) {
        (Some(c), true) => c.sites()?,
        _ => Vec::new(),
    };
    let sites: Vec<String> = infos.iter().map(|s| s.name.clone()).collect();
    let mut desc = describe(&opts, &script_text, &script_name, &script_args, &submit_dir, &env, &sites)?;
    // `-C ''` (Snakemake's explicitly empty constraint) is no constraint, as Slurm's.
    if let Some(c) = opts.constraint.as_deref().filter(|c| !c.trim().is_empty()) {
        let features = super::constraint::candidate_sites(opts.partition.as_deref(), &infos);
        super::constraint::apply(&mut desc, c, &features).map_err(SlurmError::msg)?;
    }
    // Not with -Q (as Slurm's) nor --parsable: tools that read the job id from the output
    // (some merge standard error into it, as older Snakemake plugins do) get the id alone.
    for w in ignored_options(&opts)? {
        if !opts.quiet && !opts.parsable {
            eprintln!("sbatch: warning: {w}");
        }
    }
    let toml_text = toml::to_string(&desc).map_err(|e| SlurmError::msg(format!("cannot write the job description: {e}")))?;
    let Some(client) = client.filter(|_| !opts.compat.test_only) else {
        eprintln!("sbatch: {}", test_only_summary(&desc, &opts));
        return Ok(ExitCode::SUCCESS);
    };
    // Holds and arrays are submission options of the API (the description has no field for
    // them); dependencies are the job file's `dependency` field.
    let client = client.with_submit_options(opts.hold, None, opts.array.as_deref());
    let id = client
        .submit(&toml_text)
        .map_err(|e| SlurmError::msg(format!("Batch job submission failed: {e:#}")))?;
    if opts.parsable {
        println!("{id}");
    } else if !opts.quiet {
        println!("Submitted batch job {id}");
    }
    if opts.wait {
        return wait_for(&client, id);
    }
    Ok(ExitCode::SUCCESS)
}

/// `--wait`: poll until the job ends; exit 0 if it completed, else its exit code (at least 1).
fn wait_for(client: &Client, id: u64) -> SResult<ExitCode> {
    let mut delay = Duration::from_millis(200);
    loop {
        if let Some(d) = super::fetch_detail(client, id)? {
            if koalesce_api::dto::is_final_state(&d.state) {
                let j = super::jobview::SlurmJob::new(&d.summary(), Some(&d));
                if j.state == super::jobview::State::Completed {
                    return Ok(ExitCode::SUCCESS);
                }
                let code = if j.exit_code.0 > 0 { j.exit_code.0.min(255) as u8 } else { 1 };
                eprintln!(
                    "sbatch: error: Batch job {id} ended {}; exit code {}",
                    j.state.long(),
                    j.exit_code_text()
                );
                return Ok(ExitCode::from(code));
            }
        }
        std::thread::sleep(delay);
        delay = crate::client_cmds::next_backoff(delay);
    }
}

/// The options of the three layers, the later winning: the script's `#SBATCH` lines, the
/// `SBATCH_*` variables, the command line. As Slurm's: `--mem` and `--mem-per-cpu` are
/// exclusive within one layer, but one given by a higher layer replaces the other kind set by
/// a lower one (a tool's `sbatch --mem-per-cpu=...` over a script's `#SBATCH --mem=...`).
pub fn merge_layers(script: &[String], env: &[String], cli: &[String]) -> SResult<SbatchArgs> {
    let all: Vec<String> = script.iter().chain(env).chain(cli).cloned().collect();
    let mut opts: SbatchArgs = parse_options("sbatch", &all)?;
    for layer in [cli, env] {
        let l: SbatchArgs = parse_options("sbatch", layer)?;
        match (l.mem.is_some(), l.mem_per_cpu.is_some()) {
            (true, false) => opts.mem_per_cpu = None,
            (false, true) => opts.mem = None,
            (false, false) => continue,
            (true, true) => {}
        }
        break;
    }
    Ok(opts)
}

pub(crate) fn refuse(what: &str, why: &str) -> SlurmError {
    SlurmError::msg(format!("koalesce cannot honour {what}: {why}"))
}

/// sbatch(1)'s `--mail-type` values, given as a comma-separated list.
const MAIL_TYPES: &[&str] = &[
    "NONE",
    "BEGIN",
    "END",
    "FAIL",
    "REQUEUE",
    "ALL",
    "INVALID_DEPEND",
    "STAGE_OUT",
    "TIME_LIMIT",
    "TIME_LIMIT_90",
    "TIME_LIMIT_80",
    "TIME_LIMIT_50",
    "ARRAY_TASKS",
];
/// sbatch(1)'s `--hint` values.
const HINTS: &[&str] = &["compute_bound", "memory_bound", "multithread", "nomultithread"];

/// The options koalesce accepts but cannot act on, whose omission cannot make the job wrong
/// (notification, task placement on cores, requeueing after a node failure): one warning
/// line each, as `sbatch: warning: ...`. A value Slurm would refuse is an error here too.
pub fn ignored_options(o: &SbatchArgs) -> SResult<Vec<String>> {
    let mut warnings = Vec::new();
    if let Some(t) = &o.mail_type {
        // As Slurm 22.05's sbatch (checked): unknown types beside a known one are dropped;
        // none known is an error.
        if !t.split(',').any(|v| MAIL_TYPES.contains(&v.trim().to_ascii_uppercase().as_str())) {
            return Err(SlurmError::msg(format!("Invalid --mail-type specification: {t}")));
        }
        warnings.push(format!("koalesce ignores --mail-type={t} (no e-mail is sent)"));
    }
    if let Some(u) = &o.mail_user {
        warnings.push(format!("koalesce ignores --mail-user={u} (no e-mail is sent)"));
    }
    if let Some(h) = &o.hint {
        if !HINTS.contains(&h.as_str()) {
            return Err(SlurmError::msg(format!(
                "--hint={h}: invalid hint, expected one of {}",
                HINTS.join(", ")
            )));
        }
        warnings.push(format!("koalesce ignores --hint={h} (it places no tasks on cores or threads)"));
    }
    if o.requeue {
        warnings.push("koalesce ignores --requeue (it resubmits failed jobs by its own retry policy)".into());
    }
    // A site's own QoS names (standby, long, debug, ...): the job keeps the default priority.
    if let Some(q) = o.qos.as_deref().filter(|q| !qos_priority(q)) {
        warnings.push(format!(
            "koalesce ignores --qos={q} (not a koalesce priority: super-high, high, normal, low, super-low)"
        ));
    }
    warnings.extend(o.compat.warnings());
    // Errors of the layout are describe's to report.
    if let Ok((_, _, Some(w))) = layout(o) {
        warnings.push(w);
    }
    Ok(warnings)
}

/// Nodes (the minimum of `-N MIN-MAX`), tasks, and Slurm's warning when there are fewer
/// tasks than nodes: as Slurm's sbatch, the node count is then lowered to the task count.
fn layout(o: &SbatchArgs) -> SResult<(u32, u32, Option<String>)> {
    // Refused as Slurm 22.05's sbatch refuses them, whatever else is given.
    for (given, option) in [(o.ntasks, "ntasks"), (o.ntasks_per_node, "ntasks-per-node")] {
        if given == Some(0) {
            return Err(SlurmError::msg(format!("Invalid numeric value \"0\" for --{option}.")));
        }
    }
    let mut nodes: u32 = match &o.nodes {
        Some(n) => node_count(n)?,
        None => 1,
    };
    if nodes == 0 {
        // Slurm 22.05's controller refuses a job of no nodes, yet its will-run test answers
        // for it (on the test bed, `sbatch -N 0 --test-only`: "Job 2 to start at ... using 0
        // processors on nodes  in partition debug", exit 0): no tasks, on no node, unless
        // `-n N` gives N (on one node: "using 2 processors on nodes alpha1" with `-n 2`) or
        // `-c C` alone one (C processors); `--ntasks-per-node` gives 0 × per node.
        if !o.compat.test_only {
            return Err(SlurmError::msg("Batch job submission failed: Node count specification invalid"));
        }
        let ntasks = match (o.ntasks, o.ntasks_per_node, o.cpus_per_task) {
            (Some(n), _, _) => n,
            (None, None, Some(_)) => 1,
            _ => 0,
        };
        return Ok((ntasks.min(1), ntasks, None));
    }
    let ntasks = match (o.ntasks, o.ntasks_per_node) {
        (Some(n), _) => n,
        (None, Some(per)) => per.checked_mul(nodes).ok_or_else(|| SlurmError::msg("too many tasks"))?,
        (None, None) => nodes,
    };
    if ntasks == 0 {
        return Err(SlurmError::msg("Invalid numeric value \"0\" for --ntasks."));
    }
    let mut warning = None;
    if ntasks < nodes {
        warning = Some(format!("can't run {ntasks} processes on {nodes} nodes, setting nnodes to {ntasks}"));
        nodes = ntasks;
    }
    Ok((nodes, ntasks, warning))
}

/// Whether a `--qos` value is a koalesce priority (or the default, `normal` / empty).
fn qos_priority(q: &str) -> bool {
    matches!(q, "normal" | "") || q.parse::<koalesce_core::Priority>().is_ok()
}

/// `--test-only`: what would be submitted (Slurm prints when and where the job would start;
/// koalesce decides that at the server, so this names the request).
pub fn test_only_summary(d: &JobDescription, o: &SbatchArgs) -> String {
    let procs: Vec<String> = d.components.iter().map(|c| c.processors.to_string()).collect();
    let mut s = format!(
        "Job \"{}\" would be submitted: {} processor(s) in {} component(s) [{}]",
        d.name,
        d.components.iter().map(|c| u64::from(c.processors)).sum::<u64>(),
        d.components.len(),
        procs.join(",")
    );
    s.push_str(&format!(", walltime {}", d.walltime.as_deref().unwrap_or("unlimited")));
    if let Some(m) = &d.memory {
        s.push_str(&format!(", memory {m} per processor"));
    }
    if let Some(site) = d.components.first().and_then(|c| c.site.as_deref()) {
        s.push_str(&format!(", site {site}"));
    }
    if let Some(a) = &o.array {
        s.push_str(&format!(", array {a}"));
    }
    for (what, v) in [("begin", &d.begin), ("start deadline", &d.deadline), ("signal", &d.signal)] {
        if let Some(v) = v {
            s.push_str(&format!(", {what} {v}"));
        }
    }
    s.push_str(" (not submitted: --test-only)");
    s
}

/// The koalesce job for these options and script.
pub fn describe(
    o: &SbatchArgs,
    script: &str,
    script_name: &str,
    script_args: &[String],
    submit_dir: &Path,
    env: &[(String, String)],
    sites: &[String],
) -> SResult<JobDescription> {
    if !script.starts_with("#!") {
        return Err(SlurmError::msg(
            "This does not look like a batch script.  The first line must start with #! followed by the path to an interpreter.\n\
             For instance: #!/bin/sh",
        ));
    }
    // As Slurm's sbatch does: a script saved with CR LF would run "/bin/bash\r" and fail
    // later with an obscure error; it is refused before anything is submitted.
    if script.contains("\r\n") {
        return Err(SlurmError::msg(
            "Batch script contains DOS line breaks (\\r\\n)\ninstead of expected UNIX line breaks (\\n).",
        ));
    }
    if let Some(a) = &o.array {
        koalesce_api::jobdesc::parse_array(a).map_err(|e| SlurmError::msg(format!("Invalid job array specification: {e}")))?;
    }
    // Values Slurm would refuse are refused here too; the warnings are printed by `run`.
    ignored_options(o)?;
    o.compat.check()?;
    super::check_clusters("sbatch", o.clusters.as_deref())?;
    for (set, what, why) in [
        (
            o.gpus.as_deref().is_some_and(asks_for_resources),
            "--gpus/--gres",
            "koalesce sites offer no GPUs or generic resources",
        ),
        (
            o.nodelist.is_some(),
            "--nodelist",
            "koalesce sites have no named nodes; use -p SITE",
        ),
    ] {
        if set {
            return Err(refuse(what, why));
        }
    }
    // user, mcs and topo share nodes less than plain --exclusive forbids; koalesce never
    // shares a job's processors, so each is as good as plain --exclusive.
    if let Some(Some(x)) = &o.exclusive {
        if !["user", "mcs", "topo"].contains(&x.as_str()) {
            return Err(SlurmError::msg(format!(
                "Invalid --exclusive specification: {x} (user, mcs or topo)"
            )));
        }
    }
    let (nodes, ntasks, _) = layout(o)?;
    let cpt = o.cpus_per_task.unwrap_or(1).max(1);
    let cpus = ntasks.checked_mul(cpt).ok_or_else(|| SlurmError::msg("too many CPUs"))?;
    let components: Vec<u32> = if o.coallocate && nodes > 1 {
        if ntasks % nodes != 0 {
            return Err(SlurmError::msg(format!(
                "--koalesce-coallocate needs the tasks ({ntasks}) to divide evenly over the nodes ({nodes})"
            )));
        }
        vec![(ntasks / nodes) * cpt; nodes as usize]
    } else {
        vec![cpus]
    };
    let mut desc = JobDescription {
        name: o.job_name.clone().unwrap_or_else(|| script_name.to_string()),
        executable: String::new(),
        arguments: Vec::new(),
        environment: BTreeMap::new(),
        runner: if components.len() > 1 {
            Runner::Coupled
        } else {
            Runner::Independent
        },
        min_components: None,
        priority: None,
        policy: None,
        runtime_estimate: None,
        walltime: None,
        cputime: None,
        memory: None,
        deadline: None,
        begin: None,
        signal: None,
        retries: Some(0),
        requirements: None,
        rank: None,
        working_directory: None,
        stdin: None,
        stdout: None,
        stderr: None,
        limits: Default::default(),
        inputs: Vec::new(),
        outputs: Vec::new(),
        flexible: None,
        components: components.iter().map(|p| ComponentDescription::new(*p)).collect(),
        after: Vec::new(),
        afterany: Vec::new(),
        afterok: Vec::new(),
        afternotok: Vec::new(),
        dependency: None,
        broker: Default::default(),
        // `koalesce reservations create` gives the id (`R3`); the server checks the owner.
        reservation: o.reservation.clone(),
    };
    if let Some(dep) = &o.dependency {
        apply_dependency(&mut desc, dep)?;
    }
    if let Some(b) = &o.begin {
        let ms = super::begin::begin_ms(b, koalesce_api::timing::now_ms()).map_err(SlurmError::msg)?;
        desc.begin = Some(koalesce_api::timing::format_begin(ms));
    }
    if let Some(sig) = &o.signal {
        let early: koalesce_api::timing::EarlySignal = sig
            .parse()
            .map_err(|e| SlurmError::msg(format!("Invalid signal specification: {e}")))?;
        desc.signal = Some(early.to_string());
    }
    if desc.name.trim().is_empty() {
        desc.name = "sbatch".into();
    }
    if let Some(t) = &o.time {
        if let Some(secs) = parse_time_limit(t).map_err(SlurmError::msg)? {
            desc.walltime = Some(format!("{secs}s"));
        }
    }
    if let Some(t) = &o.compat.deadline {
        let now = koalesce_api::timing::now_ms();
        let at = super::begin::begin_ms(t, now).map_err(|e| SlurmError::msg(e.replace("--begin", "--deadline")))?;
        let limit = match &o.time {
            Some(t) => parse_time_limit(t).map_err(SlurmError::msg)?,
            None => None,
        };
        desc.deadline = Some(super::sbatch_compat::deadline_field(t, at, now, limit)?);
    }
    // Memory: koalesce's `memory` is per processor (one processor per allocated CPU).
    // sbatch(1): "--mem: memory required per node"; "--mem-per-cpu: minimum memory required
    // per usable allocated CPU". So --mem spreads over the CPUs of one node (all CPUs ÷
    // nodes), and --mem-per-cpu is the per-processor figure as it stands.
    match (&o.mem, &o.mem_per_cpu) {
        (Some(_), Some(_)) => return Err(SlurmError::msg("--mem and --mem-per-cpu are mutually exclusive")),
        (Some(m), None) => {
            let bytes = slurm_size(m)?;
            if bytes > 0 {
                let kib_all_nodes = bytes.div_ceil(1024).saturating_mul(u64::from(nodes));
                desc.memory = Some(format!("{}K", kib_all_nodes.div_ceil(u64::from(cpus))));
            }
        }
        (None, Some(m)) => {
            let bytes = slurm_size(m)?;
            if bytes > 0 {
                desc.memory = Some(format!("{}K", bytes.div_ceil(1024)));
            }
        }
        (None, None) => {}
    }
    if let Some(q) = &o.qos {
        match q.as_str() {
            // `--qos ''` (Snakemake's explicitly empty qos): the default, as Slurm's.
            "normal" | "" => {}
            // Other names: warned about by ignored_options.
            other if qos_priority(other) => desc.priority = Some(other.to_string()),
            _ => {}
        }
    }
    if let Some(p) = &o.partition {
        apply_partition(&mut desc, p, sites)?;
    }
    let open_append = match o.open_mode.as_deref() {
        None | Some("truncate") => false,
        Some("append") => true,
        Some(other) => return Err(SlurmError::msg(format!("Invalid --open-mode argument: {other}"))),
    };
    let chdir = match &o.chdir {
        Some(d) => submit_dir.join(d),
        None => submit_dir.to_path_buf(),
    };
    let spec = BatchSpec {
        script: script.to_string(),
        args: script_args.to_vec(),
        environment: export_environment(o.export.as_deref(), env)?,
        chdir: chdir.to_string_lossy().into_owned(),
        output: o.output.clone(),
        error: o.error.clone(),
        input: o.input.clone(),
        open_append,
        job_name: desc.name.clone(),
        ntasks,
        cpus_per_task: cpt,
        nodes,
        submit_dir: submit_dir.to_string_lossy().into_owned(),
        submit_host: hostname(),
        partition: o.partition.clone().unwrap_or_else(|| "any".into()),
        mem_per_node_mb: match &o.mem {
            Some(m) => Some(slurm_size(m)? / (1024 * 1024)),
            None => None,
        },
    };
    let exe = std::env::current_exe().map_err(|e| SlurmError::msg(format!("cannot find the koalesce executable: {e}")))?;
    desc.executable = exe.to_string_lossy().into_owned();
    desc.arguments = vec!["slurm-commands".into(), "batch-step".into(), spec.encode()];
    if desc.arguments[2].len() > 120 * 1024 {
        return Err(SlurmError::msg(
            "the batch script and exported environment are too large for koalesce (over 120 KiB); use --export=NONE or a smaller script",
        ));
    }
    Ok(desc)
}

/// `--dependency`: Slurm's `KIND:ID[:ID...][,...]` with after, afterany, afterok, afternotok
/// (all must hold; `<array>_<task>`: one task of an array); `?` (any of), singleton and
/// aftercorr are refused. Checked by the job file's parser, and carried by its `dependency`
/// field as the list it reads.
fn apply_dependency(desc: &mut JobDescription, dep: &str) -> SResult<()> {
    if dep.contains('?') {
        return Err(refuse("--dependency with '?'", "koalesce waits for all dependencies (use ',')"));
    }
    let list = koalesce_api::jobdesc::parse_dependency_list(dep).map_err(|e| {
        SlurmError::msg(format!(
            "Job dependency problem: {e}\nBatch job submission failed: Job dependency problem"
        ))
    })?;
    let items: Vec<String> = list.iter().map(|d| d.to_string()).collect();
    desc.dependency = (!items.is_empty()).then(|| items.join(","));
    Ok(())
}

/// `-p`: one site (the component's site), several sites (a REQUIREMENTS expression over
/// HOSTNAME) or a placement policy.
fn apply_partition(desc: &mut JobDescription, p: &str, sites: &[String]) -> SResult<()> {
    let names: Vec<&str> = p.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
    let invalid = |n: &str| {
        SlurmError::msg(format!(
            "invalid partition specified: {n}\nBatch job submission failed: Invalid partition name specified (koalesce partitions: the sites {} or a policy wf, cf, cm, fcm, ttd, tts)",
            sites.join(", ")
        ))
    };
    match names.as_slice() {
        [] => Err(invalid(p)),
        [one] if !sites.iter().any(|s| s == one) => {
            let policy = one.parse::<koalesce_core::model::PolicyKind>().map_err(|_| invalid(one))?;
            desc.policy = Some(policy.name().to_string());
            Ok(())
        }
        [one] if desc.components.len() == 1 => {
            desc.components[0].site = Some(one.to_string());
            Ok(())
        }
        many => {
            if let Some(bad) = many.iter().find(|n| !sites.iter().any(|s| s == *n)) {
                return Err(invalid(bad));
            }
            let expr: Vec<String> = many.iter().map(|n| format!("HOSTNAME = \"{n}\"")).collect();
            desc.requirements = Some(expr.join(" | "));
            Ok(())
        }
    }
}

/// A Slurm memory size (`--mem`): a number with K, M, G or T (binary), default megabytes.
pub fn slurm_size(s: &str) -> SResult<u64> {
    // Whole numbers only, as Slurm's (`--mem=2.5G` is refused there).
    if s.contains('.') {
        return Err(SlurmError::msg(format!("Invalid --mem specification: {s}")));
    }
    koalesce_api::fields::parse_size(s).map_err(|_| SlurmError::msg(format!("Invalid --mem specification: {s}")))
}

/// The environment the job gets from `--export` (None: the job's own clean environment plus
/// the SLURM_* variables). KOALESCE_TOKEN never leaves the submitting side.
pub fn export_environment(export: Option<&str>, env: &[(String, String)]) -> SResult<Option<Vec<(String, String)>>> {
    let keep = |k: &str| k != "KOALESCE_TOKEN";
    let spec = export.unwrap_or("ALL").trim();
    let mut all = false;
    let mut none = false;
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    let mut explicit: Vec<(String, String)> = Vec::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        // As Slurm's, ALL and NONE in any case (`--export=all` is common).
        match item {
            _ if item.eq_ignore_ascii_case("ALL") => all = true,
            _ if item.eq_ignore_ascii_case("NONE") => none = true,
            _ => match item.split_once('=') {
                Some((k, v)) => explicit.push((k.to_string(), v.to_string())),
                None => {
                    if let Some((_, v)) = env.iter().find(|(k, _)| k == item) {
                        explicit.push((item.to_string(), v.clone()));
                    }
                }
            },
        }
    }
    if none && all {
        return Err(SlurmError::msg("--export=NONE cannot be combined with ALL"));
    }
    // NONE with variables (Slurm 22.05 takes it): those variables and the SLURM_* ones.
    if none && explicit.is_empty() {
        return Ok(None);
    }
    for (k, v) in explicit {
        out.insert(k, v);
    }
    if all {
        // With ALL, the user's environment takes precedence over explicit values.
        for (k, v) in env {
            out.insert(k.clone(), v.clone());
        }
    } else {
        for (k, v) in env.iter().filter(|(k, _)| k.starts_with("SLURM_")) {
            out.insert(k.clone(), v.clone());
        }
    }
    Ok(Some(out.into_iter().filter(|(k, _)| keep(k)).collect()))
}

/// This host's short name.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into our buffer.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    match std::str::from_utf8(&buf[..end]) {
        Ok(h) if rc == 0 && !h.is_empty() => h.split('.').next().unwrap_or(h).to_string(),
        _ => "localhost".into(),
    }
}

#[cfg(test)]
#[path = "sbatch_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "sbatch_corpus_tests.rs"]
mod corpus_tests;

#[cfg(test)]
#[path = "sbatch_real_corpus_tests.rs"]
mod real_corpus_tests;
