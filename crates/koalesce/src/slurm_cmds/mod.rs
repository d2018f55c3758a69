//! Slurm-compatible commands: `sbatch`, `squeue`, `scancel`, `sacct` and `scontrol` (show job,
//! show hostnames) that talk to a koalesce server, so that workflow tools written for Slurm
//! (PSI/J's slurm executor, Parsl's SlurmProvider, dask-jobqueue's SLURMCluster, Snakemake)
//! send their work to a koalesce grid unchanged.
//!
//! `koalesce slurm-commands install DIR` links each name to the koalesce binary; `main`
//! dispatches on the name it was started as ([`dispatch`]). The commands print exactly the
//! formats Slurm 22.05 prints (squeue `-o`/`-O`, sacct `--format`, `--parsable2`, scontrol's
//! key=value records) with Slurm's state names and codes, and answer what they cannot honour
//! with an error in Slurm's style (`sbatch: error: ...`, exit 1), never a silently different
//! job. docs/slurm-commands.md lists what maps to what.
//!
//! The server is found as the other client commands find it (`KOALESCE_URL`,
//! `KOALESCE_TOKEN`), else in `koalesce-client.toml` beside the installed commands (written
//! by `install --url/--token-file`), else in `~/.config/koalesce/client.toml`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde::Deserialize;

use crate::client_cmds::api::{ApiError, Client, JobDetail};
use jobview::SlurmJob;

mod batch_step;
pub mod begin;
mod constraint;
mod control;
mod jobview;
mod nodecount;
mod sacct;
mod sbatch;
mod sbatch_compat;
mod sbatch_script;
mod scontrol_words;
mod showconfig;
mod squeue;
mod timefmt;

/// The command names installed (scontrol answers `show job` and `show hostnames`).
pub const COMMANDS: [&str; 5] = ["sbatch", "squeue", "scancel", "sacct", "scontrol"];

/// The Slurm release whose commands' formats koalesce's match (checked against Debian 12's
/// slurm-wlm 22.05.8 on the test bed): `CMD --version` prints `slurm-wlm 22.05.8` as Debian's
/// build does (its package name; upstream's says `slurm`), `scontrol show config` its
/// `SLURM_VERSION`.
pub const SLURM_VERSION: &str = "22.05.8";

/// The package name Debian's Slurm commands print before their version.
pub const SLURM_PACKAGE: &str = "slurm-wlm";

/// What `CMD -V`, `CMD --version` and `scontrol version` print.
pub(crate) fn print_version() {
    println!("{SLURM_PACKAGE} {SLURM_VERSION}");
}

/// The one cluster koalesce is to Slurm's commands (`SLURM_CLUSTER_NAME`, `-M`).
pub const CLUSTER_NAME: &str = "koalesce";

/// `-M/--clusters LIST` (Snakemake passes `--clusters all`, Parsl `--clusters=NAME`), read as
/// Slurm 22.05 reads it (`slurmdb_get_info_cluster`): the whole value `all` (any case), or no
/// name at all, is every cluster; otherwise the names are lower-cased and deduplicated, each
/// unknown one is reported on standard error (`No cluster 'x' known by database.`) and passed
/// over, and an error only when none is known. koalesce is one cluster, [`CLUSTER_NAME`], so
/// any list resolves to at most that one: the forms Slurm keeps for several clusters (squeue's
/// CLUSTER column under `-h`) never apply. Returns whether `-M` was given.
pub(crate) fn check_clusters(command: &str, list: Option<&str>) -> SResult<bool> {
    let Some(list) = list else { return Ok(false) };
    let unknown = resolve_clusters(list)?;
    for c in unknown {
        eprintln!("{command}: error: No cluster '{c}' known by database.");
    }
    Ok(true)
}

/// The names of `-M LIST` that are not koalesce (to report), or Slurm's error when no name is
/// known.
fn resolve_clusters(list: &str) -> SResult<Vec<String>> {
    if list.trim().eq_ignore_ascii_case("all") {
        return Ok(Vec::new());
    }
    let mut names: Vec<String> = Vec::new();
    for c in list.split(',').map(|c| c.trim().to_ascii_lowercase()).filter(|c| !c.is_empty()) {
        if !names.contains(&c) {
            names.push(c);
        }
    }
    // No name at all (`-M ''`): Slurm's query without a name, every cluster.
    if names.is_empty() || names.iter().any(|c| c == CLUSTER_NAME) {
        return Ok(names.into_iter().filter(|c| c != CLUSTER_NAME).collect());
    }
    // Slurm reports each name, then that the list reaches nothing (print_db_notok).
    let esc = crate::client_cmds::format::escape;
    let mut message = String::new();
    for c in &names {
        message.push_str(&format!("No cluster '{}' known by database.\n", esc(c)));
    }
    message.push_str(&format!(
        "'{}' can't be reached now, or it is an invalid entry for --cluster.  Use 'sacctmgr list clusters' to see available clusters. (koalesce is one cluster: -M {CLUSTER_NAME} or -M all)",
        esc(list)
    ));
    Err(SlurmError::msg(message))
}

/// `-u USER_LIST` as a filter on koalesce user names; `None` for the caller's own jobs. koalesce
/// users are token owners, not Unix accounts: the submitting Unix account's own name alone
/// (Nextflow's `squeue -u $USER`) means the caller's jobs.
pub(crate) fn user_filter(list: Option<&str>) -> Option<Vec<String>> {
    let users: Vec<String> = list?.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
    match (users.as_slice(), unix_user()) {
        ([one], Some(me)) if *one == me => None,
        _ => Some(users),
    }
}

/// The Unix account running the command: `$USER`, `$LOGNAME`, else the password database's.
fn unix_user() -> Option<String> {
    for var in ["USER", "LOGNAME"] {
        if let Some(v) = std::env::var(var).ok().filter(|v| !v.is_empty()) {
            return Some(v);
        }
    }
    // SAFETY: getpwuid returns a pointer into static storage or NULL; we copy the name at once.
    unsafe {
        let pw = libc::getpwuid(libc::geteuid());
        if pw.is_null() || (*pw).pw_name.is_null() {
            return None;
        }
        Some(std::ffi::CStr::from_ptr((*pw).pw_name).to_string_lossy().into_owned())
    }
}

/// Name of the connection file `install` writes beside the commands.
pub const CLIENT_CONFIG_FILE: &str = "koalesce-client.toml";

/// The Slurm command this binary was started as (argv\[0\]'s file name is one of
/// [`COMMANDS`]), if any.
pub fn invoked_as() -> Option<String> {
    let argv0 = std::env::args_os().next()?;
    let name = Path::new(&argv0).file_name()?.to_str()?.to_string();
    COMMANDS.contains(&name.as_str()).then_some(name)
}

/// Runs the Slurm command `name` with the process's arguments.
pub fn dispatch(name: &str) -> ExitCode {
    let mut args = std::env::args_os();
    let argv0 = args.next().unwrap_or_default();
    let rest: Vec<String> = match args.map(OsString::into_string).collect() {
        Ok(v) => v,
        Err(bad) => {
            eprintln!("{name}: error: argument {bad:?} is not valid UTF-8");
            return ExitCode::from(1);
        }
    };
    if started_by_koalesce() {
        // A koalesce server whose Slurm sites' commands resolve to these would submit to
        // itself without end.
        eprintln!(
            "{name}: error: this is koalesce's {name}, started by koalesce itself: put the real Slurm commands first on the koalesce server's PATH"
        );
        return ExitCode::from(1);
    }
    let invoked = invoked_path(&argv0);
    run_named(name, &rest, invoked.as_deref())
}

/// Whether the parent process is a koalesce server of this same binary.
fn started_by_koalesce() -> bool {
    let parent = std::os::unix::process::parent_id();
    let same_binary = match (
        std::fs::read_link("/proc/self/exe"),
        std::fs::read_link(format!("/proc/{parent}/exe")),
    ) {
        (Ok(me), Ok(p)) => me == p,
        _ => false,
    };
    same_binary && std::fs::read(format!("/proc/{parent}/cmdline")).is_ok_and(|c| c.split(|b| *b == 0).nth(1) == Some(b"server".as_slice()))
}

/// Runs the Slurm command `name` with `args` (without argv\[0\]).
pub fn run_named(name: &str, args: &[String], invoked: Option<&Path>) -> ExitCode {
    let conn = || connection(invoked);
    // `CMD -V` / `CMD --version` are options like the others ([`parse_options`], scontrol's
    // flags); `scontrol version` (and its abbreviations) is scontrol's keyword.
    let result = match name {
        "sbatch" => sbatch::run(args, conn),
        "squeue" => squeue::run(args, conn),
        "sacct" => sacct::run(args, conn),
        "scancel" => control::scancel(args, conn),
        "scontrol" => control::scontrol(args, conn),
        other => Err(SlurmError::msg(format!("unknown command {other}"))),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprint!("{}", e.render(name));
            ExitCode::from(e.code)
        }
    }
}

/// A failure of a Slurm command, printed the way Slurm prints it.
#[derive(Debug)]
pub struct SlurmError {
    /// The text after `NAME: error: ` (or the whole text when `raw`).
    pub message: String,
    /// Printed as it is (usage errors: `sbatch: unrecognized option ...` plus the hint).
    pub raw: bool,
    pub code: u8,
}

impl SlurmError {
    pub fn msg(message: impl Into<String>) -> Self {
        SlurmError {
            message: message.into(),
            raw: false,
            code: 1,
        }
    }

    /// A usage error as Slurm's getopt prints it.
    pub fn usage(name: &str, message: impl std::fmt::Display) -> Self {
        SlurmError {
            message: format!("{name}: {message}\nTry \"{name} --help\" for more information\n"),
            raw: true,
            code: 1,
        }
    }

    fn render(&self, name: &str) -> String {
        if self.raw {
            self.message.clone()
        } else {
            let mut out = String::new();
            for line in self.message.lines() {
                out.push_str(&format!("{name}: error: {line}\n"));
            }
            out
        }
    }
}

impl From<anyhow::Error> for SlurmError {
    fn from(e: anyhow::Error) -> Self {
        // Connection failures read like Slurm's "Unable to contact slurm controller".
        let message = match e.downcast_ref::<ApiError>() {
            Some(ApiError::Connect { url, reason }) => {
                format!("Unable to contact the koalesce server at {url} ({reason})")
            }
            _ => format!("{e:#}"),
        };
        SlurmError::msg(message)
    }
}

pub type SResult<T> = Result<T, SlurmError>;

/// The path the command was started by: argv\[0\] itself when it has a slash, else the first
/// match on PATH.
fn invoked_path(argv0: &OsString) -> Option<PathBuf> {
    let p = Path::new(argv0);
    if p.components().count() > 1 {
        return Some(p.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(p)).find(|c| c.is_file())
}

/// `koalesce-client.toml`: where the server is.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientConfig {
    pub url: Option<String>,
    pub token: Option<String>,
    /// A file holding the token (first line), instead of `token`.
    pub token_file: Option<PathBuf>,
}

impl ClientConfig {
    fn read(path: &Path) -> anyhow::Result<Option<ClientConfig>> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        let c: ClientConfig = toml::from_str(&text).with_context(|| format!("{}", path.display()))?;
        Ok(Some(c))
    }

    fn token(&self) -> anyhow::Result<Option<String>> {
        if let Some(t) = &self.token {
            return Ok(Some(t.clone()));
        }
        match &self.token_file {
            Some(f) => {
                let text = std::fs::read_to_string(f).with_context(|| format!("reading the token file {}", f.display()))?;
                Ok(text.lines().next().map(|l| l.trim().to_string()).filter(|t| !t.is_empty()))
            }
            None => Ok(None),
        }
    }
}

/// The server connection: `KOALESCE_URL` / `KOALESCE_TOKEN`, else the config beside the
/// command, else `~/.config/koalesce/client.toml` (`$XDG_CONFIG_HOME`), else the default URL.
pub fn connection(invoked: Option<&Path>) -> SResult<Client> {
    let mut candidates = Vec::new();
    if let Some(dir) = invoked.and_then(Path::parent) {
        candidates.push(dir.join(CLIENT_CONFIG_FILE));
    }
    let config_home = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")));
    if let Some(c) = config_home {
        candidates.push(c.join("koalesce").join("client.toml"));
    }
    let mut file = ClientConfig::default();
    for c in candidates {
        if let Some(cfg) = ClientConfig::read(&c)? {
            file = cfg;
            break;
        }
    }
    let url = std::env::var("KOALESCE_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .or(file.url.clone())
        .unwrap_or_else(|| crate::client_cmds::DEFAULT_URL.to_string());
    let token = match std::env::var("KOALESCE_TOKEN").ok().filter(|t| !t.is_empty()) {
        Some(t) => Some(t),
        None => file.token()?,
    };
    Ok(Client::new(&url, token, Duration::from_secs(30)))
}

/// The jobs a command shows, as Slurm sees them: the ids asked for (`ids`; unknown ones are
/// left out), else every job the caller may see (`all_users`: every user's, for an admin).
/// Failed jobs' details are fetched to tell their state and exit code.
pub(crate) fn load_jobs(client: &Client, ids: Option<&[u64]>, all_users: bool) -> SResult<Vec<SlurmJob>> {
    let mut out = Vec::new();
    match ids {
        Some(ids) => {
            let mut seen = std::collections::BTreeSet::new();
            for &id in ids {
                if !seen.insert(id) {
                    continue;
                }
                if let Some(d) = fetch_detail(client, id)? {
                    out.push(SlurmJob::new(&d.summary(), Some(&d)));
                }
            }
        }
        None => {
            for s in client.jobs(None, all_users)? {
                let detail = if jobview::needs_detail(&s.state) {
                    fetch_detail(client, s.id)?
                } else {
                    None
                };
                out.push(SlurmJob::new(&s, detail.as_ref()));
            }
        }
    }
    out.sort_by_key(|j| j.id);
    Ok(out)
}

/// `GET /api/v1/jobs/{id}`; a job the caller may not see (or that does not exist) is `None`.
pub(crate) fn fetch_detail(client: &Client, id: u64) -> SResult<Option<JobDetail>> {
    match client.job(id) {
        Ok(d) => Ok(Some(d)),
        Err(e) if matches!(e.downcast_ref::<ApiError>(), Some(ApiError::Status { status: 404, .. })) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Parses a comma-separated job id list (`12,13`, also `12_0` array-task forms are refused).
pub(crate) fn parse_job_ids(list: &str) -> SResult<Vec<u64>> {
    let mut out = Vec::new();
    for part in list.split([',', ' ']).map(str::trim).filter(|p| !p.is_empty()) {
        // Slurm accepts `ID.batch` / `ID.0` step ids: the job's id is what we know.
        let base = part.split('.').next().unwrap_or(part);
        match base.parse::<u64>() {
            Ok(id) => out.push(id),
            Err(_) => return Err(SlurmError::msg(format!("Invalid job id {part}"))),
        }
    }
    Ok(out)
}

/// Parses a command's options with clap, reporting errors as Slurm's getopt does (`--help`
/// prints the help and exits 0). Long options may be abbreviated (`--job` for `--jobs`), and a
/// repeated option takes its last value, as with getopt. `-V` / `--version` prints the version
/// and exits 0 wherever it stands among the options (getopt's order: an option before it that
/// is wrong is reported instead; after sbatch's script it is the script's argument).
pub(crate) fn parse_options<T: clap::Parser>(name: &'static str, args: &[String]) -> SResult<T> {
    use clap::error::{ContextKind, ErrorKind};
    let cmd = T::command()
        .name(name)
        .args_override_self(true)
        .infer_long_args(true)
        .version(SLURM_VERSION)
        .arg(
            clap::Arg::new("slurm-version")
                .short('V')
                .long("version")
                .action(clap::ArgAction::Version)
                .help("Print the Slurm release these commands match"),
        )
        // getopt gives an option that requires a value the next word whatever it is
        // (`sbatch -J --version` names the job `--version`; `squeue -o -h` formats with `-h`).
        .mut_args(|a| {
            let optional = a.is_require_equals_set() || a.get_num_args().is_some_and(|n| n.min_values() == 0);
            if a.is_positional() || optional || !a.get_action().takes_values() {
                a
            } else {
                a.allow_hyphen_values(true)
            }
        });
    let argv = std::iter::once(name.to_string()).chain(args.iter().cloned());
    let done = || SlurmError {
        message: String::new(),
        raw: true,
        code: 0,
    };
    let matches = cmd.try_get_matches_from(argv).map_err(|e| match e.kind() {
        ErrorKind::DisplayVersion => {
            print_version();
            done()
        }
        ErrorKind::DisplayHelp => {
            print!("{}", e.render());
            done()
        }
        ErrorKind::UnknownArgument => {
            let arg = e.get(ContextKind::InvalidArg).map(|v| v.to_string()).unwrap_or_default();
            SlurmError::usage(name, format!("unrecognized option '{arg}'"))
        }
        _ => {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("").trim_start_matches("error: ").to_string();
            SlurmError::usage(name, first)
        }
    })?;
    T::from_arg_matches(&matches).map_err(|e| SlurmError::usage(name, e.to_string().lines().next().unwrap_or("").to_string()))
}

/// `koalesce slurm-commands ...`.
#[derive(Debug, Subcommand)]
pub enum SlurmCommandsCommand {
    /// Put sbatch, squeue, scancel, sacct and scontrol into DIR (links to this binary, which
    /// acts as the command it is started as); put DIR first on PATH to use them.
    Install(InstallArgs),
    /// Run a batch script inside a koalesce job (what sbatch's jobs execute; not for users).
    #[command(hide = true)]
    BatchStep(batch_step::BatchStepArgs),
}

impl SlurmCommandsCommand {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            SlurmCommandsCommand::Install(a) => a.run(),
            SlurmCommandsCommand::BatchStep(a) => a.run(),
        }
    }
}

/// Arguments of `koalesce slurm-commands install`.
#[derive(Debug, Args)]
pub struct InstallArgs {
    /// Directory to put the commands in (created if missing).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Write DIR/koalesce-client.toml with this server URL (the commands read it when
    /// KOALESCE_URL is not set).
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// Write the path of this token file into DIR/koalesce-client.toml (KOALESCE_TOKEN wins).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Replace existing files of those names in DIR.
    #[arg(long)]
    pub force: bool,
}

impl InstallArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let exe = std::env::current_exe().context("finding the koalesce executable")?;
        install(&exe, &self.dir, self.force)?;
        if self.url.is_some() || self.token_file.is_some() {
            let mut text = String::from("# Where koalesce's Slurm-compatible commands find the server.\n");
            if let Some(u) = &self.url {
                text.push_str(&format!("url = {}\n", toml::Value::String(u.clone())));
            }
            if let Some(t) = &self.token_file {
                let abs = std::path::absolute(t)?;
                text.push_str(&format!("token_file = {}\n", toml::Value::String(abs.display().to_string())));
            }
            std::fs::write(self.dir.join(CLIENT_CONFIG_FILE), text)?;
        }
        println!(
            "installed {} in {} (linked to {}); put it first on PATH: export PATH={}:$PATH",
            COMMANDS.join(", "),
            self.dir.display(),
            exe.display(),
            std::path::absolute(&self.dir)?.display()
        );
        Ok(ExitCode::SUCCESS)
    }
}

/// Links each of [`COMMANDS`] in `dir` to `exe` (symbolic links: the binary stays one file).
pub fn install(exe: &Path, dir: &Path, force: bool) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for name in COMMANDS {
        let link = dir.join(name);
        if link.symlink_metadata().is_ok() {
            if !force {
                anyhow::bail!("{} exists (use --force to replace it)", link.display());
            }
            std::fs::remove_file(&link).with_context(|| format!("removing {}", link.display()))?;
        }
        std::os::unix::fs::symlink(exe, &link).with_context(|| format!("linking {} to {}", link.display(), exe.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_cluster_and_the_unix_account_as_the_caller() {
        // As Slurm 22.05's slurmdb_get_info_cluster: `all` alone, names in any case and
        // repeated, an unknown name beside a known one reported but passed over.
        for (list, unknown) in [
            ("all", vec![]),
            ("ALL", vec![]),
            ("koalesce", vec![]),
            ("KOALESCE,koalesce", vec![]),
            ("koalesce,Alpha,alpha", vec!["alpha"]),
            ("koalesce,all", vec!["all"]),
            ("", vec![]),
            (",", vec![]),
        ] {
            assert_eq!(resolve_clusters(list).unwrap(), unknown, "{list:?}");
        }
        let e = resolve_clusters("all,Alpha").unwrap_err();
        let lines: Vec<&str> = e.message.lines().collect();
        assert_eq!(
            lines[..2],
            ["No cluster 'all' known by database.", "No cluster 'alpha' known by database."]
        );
        assert!(
            lines[2].starts_with("'all,Alpha' can't be reached now, or it is an invalid entry for --cluster."),
            "{}",
            e.message
        );
        assert!(!check_clusters("squeue", None).unwrap(), "no -M");
        assert!(check_clusters("squeue", Some("koalesce,alpha")).unwrap());
        let me = unix_user().expect("the test runs as some account");
        assert_eq!(user_filter(Some(&me)), None, "-u $USER: the caller's own jobs");
        assert_eq!(user_filter(None), None);
        let other = format!("{me}-not");
        assert_eq!(user_filter(Some(&other)), Some(vec![other.clone()]));
        assert_eq!(
            user_filter(Some(&format!("{me},{other}"))),
            Some(vec![me, other]),
            "a list filters by names"
        );
    }

    #[test]
    fn errors_print_in_slurm_style() {
        let e = SlurmError::msg("Invalid job id specified");
        assert_eq!(e.render("scancel"), "scancel: error: Invalid job id specified\n");
        let e = SlurmError::usage("sbatch", "unrecognized option '--frobnicate'");
        assert_eq!(
            e.render("sbatch"),
            "sbatch: unrecognized option '--frobnicate'\nTry \"sbatch --help\" for more information\n"
        );
    }

    /// Slurm's getopt takes `-V` / `--version` anywhere among the options (Slurm 22.05 on the
    /// test bed: `squeue -h --version` and `sbatch --wrap true -V` print the version, exit 0).
    #[test]
    fn version_is_an_option_anywhere() {
        fn parse<T: clap::Parser>(name: &'static str, args: &[&str]) -> SResult<T> {
            parse_options(name, &args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        }
        for args in [
            &["-h", "--version"][..],
            &["-h", "-V"],
            &["-t", "all", "--vers"],
            &["-V", "--bogus"],
        ] {
            let e = parse::<squeue::SqueueArgs>("squeue", args).unwrap_err();
            assert_eq!((e.code, e.message.as_str()), (0, ""), "squeue {args:?}");
        }
        let e = parse::<squeue::SqueueArgs>("squeue", &["--bogus", "-V"]).unwrap_err();
        assert_eq!(e.code, 1, "an error before -V is reported, as by getopt");
        let e = parse::<sbatch::SbatchArgs>("sbatch", &["--wrap", "true", "-V"]).unwrap_err();
        assert_eq!(e.code, 0);
        // As an option's value, getopt's: the value (Slurm 22.05: `squeue -o --version` asks
        // the controller with that format; `sbatch -J --version` submits a job of that name).
        let s = parse::<sbatch::SbatchArgs>("sbatch", &["-J", "--version", "--wrap", "true"]).unwrap();
        assert_eq!(s.job_name.as_deref(), Some("--version"));
        let s = parse::<sbatch::SbatchArgs>("sbatch", &["-J", "-V", "--wrap", "true"]).unwrap();
        assert_eq!(s.job_name.as_deref(), Some("-V"));
        assert!(parse::<squeue::SqueueArgs>("squeue", &["-o", "--version"]).is_ok());
        let s = parse::<sbatch::SbatchArgs>("sbatch", &["job.sh", "-V"]).unwrap();
        assert_eq!(s.script, ["job.sh", "-V"], "after the script, the script's argument");
        assert_eq!(parse::<sacct::SacctArgs>("sacct", &["-X", "-V"]).unwrap_err().code, 0);
        assert_eq!(parse::<control::ScancelArgs>("scancel", &["-v", "--version"]).unwrap_err().code, 0);
        let no_server = || -> SResult<Client> { panic!("no server is needed") };
        for args in [&["-o", "-V"][..], &["show", "job", "--version"], &["--vers"]] {
            let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
            assert!(control::scontrol(&args, no_server).is_ok(), "scontrol {args:?}");
        }
    }

    #[test]
    fn job_id_lists() {
        assert_eq!(parse_job_ids("3,4, 5").unwrap(), vec![3, 4, 5]);
        assert_eq!(parse_job_ids("7.batch").unwrap(), vec![7]);
        assert!(parse_job_ids("x").is_err());
    }

    #[test]
    fn install_links_every_command_and_refuses_to_clobber() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("koalesce");
        std::fs::write(&exe, "").unwrap();
        let bin = dir.path().join("bin");
        install(&exe, &bin, false).unwrap();
        for c in COMMANDS {
            assert_eq!(std::fs::read_link(bin.join(c)).unwrap(), exe);
        }
        assert!(install(&exe, &bin, false).is_err());
        install(&exe, &bin, true).unwrap();
    }

    #[test]
    fn client_config_reads_token_file() {
        let dir = tempfile::tempdir().unwrap();
        let tok = dir.path().join("tok");
        std::fs::write(&tok, "koa_secret\n").unwrap();
        let cfg_path = dir.path().join(CLIENT_CONFIG_FILE);
        std::fs::write(&cfg_path, format!("url = \"http://h:1\"\ntoken_file = {:?}\n", tok)).unwrap();
        let c = ClientConfig::read(&cfg_path).unwrap().unwrap();
        assert_eq!(c.url.as_deref(), Some("http://h:1"));
        assert_eq!(c.token().unwrap().as_deref(), Some("koa_secret"));
        std::fs::write(&cfg_path, "bogus = 1\n").unwrap();
        assert!(ClientConfig::read(&cfg_path).is_err(), "unknown keys are errors");
        assert!(ClientConfig::read(&dir.path().join("none")).unwrap().is_none());
    }
}
