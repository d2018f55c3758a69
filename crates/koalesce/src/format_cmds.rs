//! `koalesce convert FILE` and the job-file formats of `koalesce submit FILE`: JSDL, GridWay
//! job templates (with `--tasks N` bags), GT2 RSL and xRSL are detected from the content
//! (or forced with `--format`), converted here on the client, and sent as native TOML
//! (docs/job-formats.md).

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use koalesce_formats::{convert, detect, Format, Options, TaskContext};

use crate::client_cmds::api::Client;

fn parse_format(s: &str) -> Result<Format, String> {
    s.parse()
}

/// How to read a job file (shared by `submit` and `convert`).
#[derive(Debug, Clone, Args)]
pub struct FormatArgs {
    /// The file's format: jsdl, jt (GridWay job template), rsl (GT2), xrsl or toml (default:
    /// detected from the content).
    #[arg(long, value_name = "FORMAT", value_parser = parse_format)]
    pub format: Option<Format>,
    /// A bag of N tasks (GridWay's array job, `gwsubmit -n N`): ONE job whose N tasks are
    /// each placed and run on their own; each sees its index 0..N-1 in KOALESCE_TASK_ID, and a
    /// GridWay template's ${TASK_ID}, ${TOTAL_TASKS}, ${PARAM}, ... are substituted per task
    /// in every field (native TOML: ${KOALESCE_TASK_ID}, ${KOALESCE_PARAM}, ...). The printed
    /// id is the bag's: `status`, `wait`, `cancel` of it act on the whole bag.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=koalesce_api::jobdesc::MAX_ARRAY_TASKS as i64))]
    pub tasks: Option<u32>,
    /// With --tasks: the bag succeeds when at least K tasks succeed (default: all N); a failed
    /// task never stops the others.
    #[arg(long, value_name = "K", requires = "tasks", value_parser = clap::value_parser!(u32).range(1..))]
    pub min_tasks: Option<u32>,
    /// ${PARAM} of task 0 (gwsubmit -s); ${PARAM} = start + increment × TASK_ID.
    #[arg(long, default_value_t = 0, value_name = "START", allow_negative_numbers = true)]
    pub param_start: i64,
    /// Increment of ${PARAM} per task (gwsubmit -i).
    #[arg(long, default_value_t = 1, value_name = "STEP", allow_negative_numbers = true)]
    pub param_increment: i64,
}

impl FormatArgs {
    fn format_of(&self, text: &str) -> Format {
        self.format.unwrap_or_else(|| detect(text))
    }

    fn options(&self, file: &Path, task: Option<TaskContext>, sites: Vec<String>) -> Options {
        Options {
            name_hint: file.file_stem().map(|s| s.to_string_lossy().into_owned()).filter(|s| s != "-"),
            task,
            sites,
        }
    }

    fn task(&self, id: u32, total: u32, array_id: Option<u64>) -> TaskContext {
        TaskContext {
            task_id: id,
            total_tasks: total,
            array_id,
            param_start: self.param_start,
            param_increment: self.param_increment,
            deferred: false,
        }
    }

    /// The client's submissions as one bag (with --tasks).
    pub fn bag_client(&self, client: Client) -> Client {
        match self.tasks {
            Some(n) => client.with_bag(n, self.min_tasks, self.param_start, self.param_increment),
            None => client,
        }
    }
}

/// Reads FILE, or standard input for `-`.
/// UTF-8, or UTF-16 with a byte-order mark (`koalesce_formats::decode`).
pub fn read_job_file(file: &Path) -> anyhow::Result<String> {
    let (bytes, what) = if file.as_os_str() == "-" {
        let mut b = Vec::new();
        std::io::stdin()
            .read_to_end(&mut b)
            .context("reading the job description from standard input")?;
        (b, "standard input".to_string())
    } else {
        let b = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
        (b, file.display().to_string())
    };
    koalesce_formats::decode(&bytes).map_err(|e| anyhow::anyhow!("reading {what}: {e}"))
}

/// Submits a job file of any format; returns the new jobs' ids in submission order (with
/// --tasks: the bag's id alone; `client` must come from [`FormatArgs::bag_client`]).
pub fn submit(client: &Client, file: &Path, text: &str, args: &FormatArgs) -> anyhow::Result<Vec<u64>> {
    let format = args.format_of(text);
    if format == Format::Toml {
        // Native TOML goes to the server as written (a bag's tasks substitute their
        // ${KOALESCE_TASK_ID} there).
        return Ok(vec![client.submit(text)?]);
    }
    let sites = if format == Format::Rsl {
        client.sites()?.into_iter().map(|s| s.name).collect()
    } else {
        Vec::new()
    };
    // A bag is one description: a template's task variables stay references the server
    // substitutes in each task's copy.
    let task = match (args.tasks, format) {
        (Some(n), Format::GridWay) => Some(TaskContext {
            param_start: args.param_start,
            param_increment: args.param_increment,
            ..TaskContext::bag(n)
        }),
        _ => None,
    };
    let jobs = convert(text, format, &args.options(file, task, sites)).map_err(|e| anyhow::anyhow!("{e}"))?;
    if let Some(n) = args.tasks {
        anyhow::ensure!(
            jobs.len() == 1,
            "--tasks {n} makes one bag of one job's tasks, but {} describes {} jobs",
            file.display(),
            jobs.len()
        );
    }
    let mut ids = Vec::new();
    for j in jobs {
        ids.push(client.submit(&j.to_toml())?);
    }
    Ok(ids)
}

/// Prints the ids `submit` returned: one per line, or `{"id": first, "ids": [...]}`.
pub fn print_ids(ids: &[u64], output: crate::client_cmds::output::Output) -> anyhow::Result<()> {
    let mut v = serde_json::json!({ "id": ids.first() });
    if ids.len() > 1 {
        v["ids"] = serde_json::json!(ids);
    }
    output.print(&v, || Ok(ids.iter().map(|id| format!("{id}\n")).collect()))
}

/// Arguments of `koalesce convert`.
#[derive(Debug, Args)]
pub struct ConvertArgs {
    /// Job file: JSDL, GridWay job template, GT2 RSL, xRSL or koalesce TOML (`-`: standard
    /// input).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    #[command(flatten)]
    pub formats: FormatArgs,
    /// With --tasks: which task to show (0-based).
    #[arg(long, value_name = "K", default_value_t = 0)]
    pub task: u32,
    /// A koalesce site name (repeatable): an RSL subjob whose resourceManagerContact names it
    /// is fixed there, as `koalesce submit` does with the server's sites.
    #[arg(long = "site", value_name = "NAME")]
    pub sites: Vec<String>,
}

impl ConvertArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let text = read_job_file(&self.file)?;
        let format = self.formats.format_of(&text);
        let task = match self.formats.tasks {
            Some(n) => {
                anyhow::ensure!(self.task < n, "--task {} is not one of the {n} tasks (0..{})", self.task, n - 1);
                Some(self.formats.task(self.task, n, None))
            }
            None => None,
        };
        let opts = self.formats.options(&self.file, task, self.sites.clone());
        let jobs = convert(&text, format, &opts).map_err(|e| anyhow::anyhow!("{e}"))?;
        println!("# {} converted from {} ({})", self.file.display(), format.describe(), format.name());
        if let Some(n) = self.formats.tasks {
            println!(
                "# GridWay array of {n} tasks: `koalesce submit --tasks {n}` submits one bag of {n} tasks; task {} shown (--task K for another)",
                self.task
            );
        }
        let many = jobs.len() > 1;
        for (i, j) in jobs.iter().enumerate() {
            if many {
                println!("# --- job {} of {} (each is submitted as its own job) ---", i + 1, jobs.len());
            }
            print!("{}", j.to_toml());
        }
        Ok(ExitCode::SUCCESS)
    }
}
