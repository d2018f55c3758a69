//! What an sbatch job runs inside its koalesce sandbox: `koalesce slurm-commands batch-step
//! SPEC`. It gives the script the environment Slurm gives a batch script (the exported
//! variables, `SLURM_JOB_ID`, `SLURM_JOB_NODELIST`, `SLURM_NTASKS`, ...), changes into the
//! working directory, opens the output files (filename patterns: `%j` `%J` `%x` `%u` `%N` `%n`
//! `%t` `%s` `%A` `%a` `%%`, with zero-padding widths), writes the script into the job's own
//! directory and executes it with its `#!` interpreter.

use std::fs::OpenOptions;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use anyhow::Context;
use base64::Engine;
use clap::Args;
use serde::{Deserialize, Serialize};

/// Everything sbatch hands to the job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchSpec {
    pub script: String,
    pub args: Vec<String>,
    /// The propagated environment (`--export`); None: `--export=NONE`.
    pub environment: Option<Vec<(String, String)>>,
    /// Absolute working directory.
    pub chdir: String,
    pub output: Option<String>,
    pub error: Option<String>,
    pub input: Option<String>,
    pub open_append: bool,
    pub job_name: String,
    pub ntasks: u32,
    pub cpus_per_task: u32,
    pub nodes: u32,
    pub submit_dir: String,
    pub submit_host: String,
    pub partition: String,
    pub mem_per_node_mb: Option<u64>,
}

impl BatchSpec {
    /// One argument: base64 of the JSON (no `${...}` the server would expand).
    pub fn encode(&self) -> String {
        let json = serde_json::to_vec(self).expect("a BatchSpec always serializes");
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(json)
    }

    pub fn decode(text: &str) -> anyhow::Result<BatchSpec> {
        let json = base64::engine::general_purpose::STANDARD_NO_PAD
            .decode(text.trim())
            .context("the batch step's argument is not base64")?;
        serde_json::from_slice(&json).context("the batch step's argument is not a batch spec")
    }
}

/// Arguments of the hidden `koalesce slurm-commands batch-step`.
#[derive(Debug, Args)]
pub struct BatchStepArgs {
    /// The encoded batch spec sbatch wrote.
    #[arg(value_name = "SPEC")]
    pub spec: String,
}

/// Values known only inside the job.
#[derive(Debug, Clone)]
pub struct Runtime {
    pub job_id: String,
    pub user: String,
    pub host: String,
    pub node_id: u32,
    pub node_list: String,
    /// The array's id and this task's index, for a task of an array.
    pub array: Option<(String, String)>,
}

impl BatchStepArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let spec = BatchSpec::decode(&self.spec)?;
        let var = |k: &str| std::env::var(k).unwrap_or_default();
        let rank: u32 = var("KOALESCE_RANK").parse().unwrap_or(0);
        let host = super::sbatch::hostname();
        let components: u32 = var("KOALESCE_SIZE").parse().unwrap_or(1).max(1);
        // A co-allocated job's components are its nodes: one per rank.
        let node_list = if components > 1 {
            (0..components).map(|r| format!("{host}-{r}")).collect::<Vec<_>>().join(",")
        } else {
            host.clone()
        };
        let rt = Runtime {
            job_id: var("KOALESCE_JOB_ID"),
            user: var("USER"),
            host: host.clone(),
            node_id: rank,
            node_list,
            array: std::env::var("KOALESCE_ARRAY_JOB_ID")
                .ok()
                .zip(std::env::var("KOALESCE_TASK_ID").ok()),
        };
        let work = std::env::current_dir().context("reading the job's directory")?;
        let script_path = work.join("slurm_script");
        {
            let mut f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o700)
                .open(&script_path)
                .with_context(|| format!("writing {}", script_path.display()))?;
            std::io::Write::write_all(&mut f, spec.script.as_bytes())?;
        }
        std::fs::set_permissions(&script_path, std::fs::Permissions::from_mode(0o700))?;
        let env = job_environment(&spec, &rt, std::env::vars().collect(), &work);
        let chdir = PathBuf::from(&spec.chdir);
        let open = |pattern: &str, write: bool| -> anyhow::Result<std::fs::File> {
            let p = chdir.join(expand_pattern(pattern, &spec, &rt));
            let mut o = OpenOptions::new();
            if write {
                o.create(true).write(true).mode(0o644);
                if spec.open_append {
                    o.append(true);
                } else {
                    o.truncate(true);
                }
            } else {
                o.read(true);
            }
            o.open(&p).with_context(|| format!("opening {}", p.display()))
        };
        let out_pattern = spec.output.clone().unwrap_or_else(|| "slurm-%j.out".into());
        let stdout = open(&out_pattern, true)?;
        let stderr = match &spec.error {
            Some(e) => open(e, true)?,
            None => stdout.try_clone()?,
        };
        let stdin: Stdio = match &spec.input {
            Some(i) => open(i, false)?.into(),
            None => Stdio::null(),
        };
        let err = Command::new(&script_path)
            .args(&spec.args)
            .env_clear()
            .envs(env)
            .current_dir(&chdir)
            .stdin(stdin)
            .stdout(stdout)
            .stderr(stderr)
            .exec();
        anyhow::bail!("cannot run the batch script in {}: {err}", chdir.display())
    }
}

/// The script's environment: the exported variables (or the job's own clean environment
/// for `--export=NONE`), the job's `KOALESCE_*` variables and `TMPDIR` (its own directory),
/// and Slurm's `SLURM_*` variables.
pub fn job_environment(spec: &BatchSpec, rt: &Runtime, own: Vec<(String, String)>, work: &Path) -> Vec<(String, String)> {
    let mut env: std::collections::BTreeMap<String, String> = match &spec.environment {
        Some(exported) => {
            let mut m: std::collections::BTreeMap<String, String> = exported.iter().cloned().collect();
            for (k, v) in &own {
                if k.starts_with("KOALESCE_") {
                    m.insert(k.clone(), v.clone());
                }
            }
            m
        }
        None => own.into_iter().collect(),
    };
    env.insert("TMPDIR".into(), work.to_string_lossy().into_owned());
    env.insert("PWD".into(), spec.chdir.clone());
    let tasks_per_node = (spec.ntasks / spec.nodes.max(1)).max(1);
    let cpus_on_node = tasks_per_node * spec.cpus_per_task;
    let mut slurm = vec![
        ("SLURM_JOB_ID", rt.job_id.clone()),
        ("SLURM_JOBID", rt.job_id.clone()),
        ("SLURM_JOB_NAME", spec.job_name.clone()),
        ("SLURM_JOB_USER", rt.user.clone()),
        ("SLURM_JOB_NODELIST", rt.node_list.clone()),
        ("SLURM_NODELIST", rt.node_list.clone()),
        ("SLURM_JOB_NUM_NODES", spec.nodes.to_string()),
        ("SLURM_NNODES", spec.nodes.to_string()),
        ("SLURM_NTASKS", spec.ntasks.to_string()),
        ("SLURM_NPROCS", spec.ntasks.to_string()),
        ("SLURM_CPUS_PER_TASK", spec.cpus_per_task.to_string()),
        ("SLURM_CPUS_ON_NODE", cpus_on_node.to_string()),
        ("SLURM_JOB_CPUS_PER_NODE", cpus_on_node.to_string()),
        ("SLURM_TASKS_PER_NODE", tasks_per_node.to_string()),
        ("SLURM_NODEID", rt.node_id.to_string()),
        ("SLURM_PROCID", "0".into()),
        ("SLURM_LOCALID", "0".into()),
        ("SLURMD_NODENAME", rt.host.clone()),
        ("SLURM_SUBMIT_DIR", spec.submit_dir.clone()),
        ("SLURM_SUBMIT_HOST", spec.submit_host.clone()),
        ("SLURM_JOB_PARTITION", spec.partition.clone()),
        ("SLURM_CLUSTER_NAME", "koalesce".into()),
    ];
    if let Some((a, t)) = &rt.array {
        slurm.push(("SLURM_ARRAY_JOB_ID", a.clone()));
        slurm.push(("SLURM_ARRAY_TASK_ID", t.clone()));
    }
    if let Some(m) = spec.mem_per_node_mb {
        slurm.push(("SLURM_MEM_PER_NODE", m.to_string()));
    }
    for (k, v) in slurm {
        env.insert(k.into(), v);
    }
    env.into_iter().collect()
}

/// Expands sbatch's filename pattern (`%j`, `%4j`, `%x`, ...); a `\\` anywhere turns
/// expansion off.
pub fn expand_pattern(pattern: &str, spec: &BatchSpec, rt: &Runtime) -> String {
    if pattern.contains("\\\\") {
        return pattern.replace("\\\\", "");
    }
    let mut out = String::new();
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut digits = String::new();
        while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
            digits.push(*d);
            chars.next();
        }
        let width: usize = digits.parse().unwrap_or(0).min(64);
        let Some(letter) = chars.next() else {
            out.push('%');
            out.push_str(&digits);
            break;
        };
        let num = |v: &str| format!("{v:0>width$}");
        match letter {
            '%' => out.push('%'),
            // For the batch script, %J is the job id alone (checked on Slurm 22.05).
            'j' | 'J' => out.push_str(&num(&rt.job_id)),
            'A' => out.push_str(&num(rt.array.as_ref().map_or(&rt.job_id, |(a, _)| a))),
            'a' => out.push_str(&num(rt.array.as_ref().map_or("4294967294", |(_, t)| t))),
            'x' => out.push_str(&spec.job_name),
            'u' => out.push_str(&rt.user),
            'N' => out.push_str(&rt.host),
            'n' => out.push_str(&num(&rt.node_id.to_string())),
            't' => out.push_str(&num("0")),
            's' => out.push_str("batch"),
            other => {
                out.push('%');
                out.push_str(&digits);
                out.push(other);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> BatchSpec {
        BatchSpec {
            script: "#!/bin/sh\necho ${KOALESCE_JOB_ID} $HOME\n".into(),
            args: vec!["a b".into()],
            environment: Some(vec![("HOME".into(), "/home/u".into()), ("TMPDIR".into(), "/tmp".into())]),
            chdir: "/w".into(),
            output: None,
            error: None,
            input: None,
            open_append: false,
            job_name: "nm".into(),
            ntasks: 4,
            cpus_per_task: 2,
            nodes: 2,
            submit_dir: "/s".into(),
            submit_host: "h".into(),
            partition: "any".into(),
            mem_per_node_mb: Some(1024),
        }
    }

    fn rt() -> Runtime {
        Runtime {
            job_id: "42".into(),
            user: "alice".into(),
            host: "node".into(),
            node_id: 0,
            node_list: "node".into(),
            array: None,
        }
    }

    #[test]
    fn spec_round_trips_without_dollar_braces() {
        let s = spec();
        let enc = s.encode();
        assert!(!enc.contains("${"));
        assert_eq!(BatchSpec::decode(&enc).unwrap(), s);
        assert!(BatchSpec::decode("not base64!").is_err());
    }

    #[test]
    fn patterns_expand_like_slurm() {
        let (s, r) = (spec(), rt());
        assert_eq!(expand_pattern("slurm-%j.out", &s, &r), "slurm-42.out");
        assert_eq!(expand_pattern("w-%J.err", &s, &r), "w-42.err");
        assert_eq!(expand_pattern("%x_%u_%N_%5j_%%", &s, &r), "nm_alice_node_00042_%");
        assert_eq!(expand_pattern("a\\\\%j", &s, &r), "a%j");
        assert_eq!(expand_pattern("odd%", &s, &r), "odd%");
        assert_eq!(expand_pattern("%q", &s, &r), "%q");
    }

    #[test]
    fn environment_has_slurm_variables() {
        let own = vec![
            ("KOALESCE_JOB_ID".to_string(), "42".to_string()),
            ("PATH".to_string(), "/usr/bin".to_string()),
        ];
        let env = job_environment(&spec(), &rt(), own.clone(), Path::new("/work"));
        let get = |k: &str| env.iter().find(|(x, _)| x == k).map(|(_, v)| v.clone());
        assert_eq!(get("SLURM_JOB_ID").as_deref(), Some("42"));
        assert_eq!(get("SLURM_NTASKS").as_deref(), Some("4"));
        assert_eq!(get("SLURM_CPUS_ON_NODE").as_deref(), Some("4"), "2 tasks per node x 2 CPUs");
        assert_eq!(get("HOME").as_deref(), Some("/home/u"), "exported");
        assert_eq!(get("TMPDIR").as_deref(), Some("/work"), "the job's own directory");
        assert_eq!(get("KOALESCE_JOB_ID").as_deref(), Some("42"));
        assert_eq!(get("PATH"), None, "not exported, not kept");
        let mut none = spec();
        none.environment = None;
        let env = job_environment(&none, &rt(), own, Path::new("/work"));
        assert!(
            env.iter().any(|(k, v)| k == "PATH" && v == "/usr/bin"),
            "NONE keeps the job's clean environment"
        );
    }
}
