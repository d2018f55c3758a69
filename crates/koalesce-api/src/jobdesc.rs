//! The native job description (TOML, docs/server-contract.md) and its translation to the
//! core's [`JobSpec`].

use std::collections::BTreeMap;

use koalesce_core::expr::{Expr, JobExpr};
use koalesce_core::model::{ComponentSpec, FileMode, FlexibleRequest, PolicyKind};
use koalesce_core::scheduler::{Dependency, DependencyKind};
use koalesce_core::{JobId, JobSpec, Millis, Priority, SiteId};
use serde::{Deserialize, Serialize};

use crate::broker_fields::BrokerDescription;
use crate::fields::{check_relative_path, check_runtime_refs, expand_runtime, parse_size, TASK_VARIABLES};
pub use crate::fields::{FlexibleDescription, InputFile, Limits, OutputFile};
pub use crate::slurm_syntax::{parse_array, parse_dependency_list, ArraySpec, MAX_ARRAY_TASKS};

/// How the components of a job run (003 §3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Runner {
    /// Components run independently (KRunner).
    #[default]
    Independent,
    /// Components start together behind a barrier and learn their rank and peers (DRunner).
    Coupled,
    /// Bag of tasks: at least `min_components` must succeed.
    Bag,
}

/// One component: its processors, optionally a fixed site, and per-component overrides of the
/// program (an RSL multi-request's subjobs may differ in them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComponentDescription {
    pub processors: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site: Option<String>,
    /// A name for the component (RSL's `label`), shown with its state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Runs this program instead of the job's `executable`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executable: Option<String>,
    /// Replaces the job's `arguments`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Vec<String>>,
    /// Added to (and overriding) the job's `environment`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub environment: BTreeMap<String, String>,
}

impl ComponentDescription {
    /// `processors` processors anywhere, no overrides.
    pub fn new(processors: u32) -> Self {
        ComponentDescription {
            processors,
            site: None,
            label: None,
            executable: None,
            arguments: None,
            environment: BTreeMap::new(),
        }
    }
}

/// A job as the user writes it. Unknown keys are errors naming the key. Every field beyond
/// `name`, `executable` and the request (`components` or `flexible`) is optional; see
/// docs/server-contract.md.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobDescription {
    pub name: String,
    pub executable: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub arguments: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub environment: BTreeMap<String, String>,
    #[serde(default)]
    pub runner: Runner,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_components: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_estimate: Option<String>,
    /// Hard limit on each component's run time (duration); also the runtime estimate when
    /// `runtime_estimate` is not given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub walltime: Option<String>,
    /// CPU time limit of each process (duration; RLIMIT_CPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cputime: Option<String>,
    /// Memory per processor ("2G", "512M"; a bare number is megabytes): a component of p
    /// processors may use p times this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// The job must have started this long after submission, or it fails (duration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<String>,
    /// Not placed before this instant: RFC 3339 in UTC, `2026-11-28T10:00:00Z` (Slurm's
    /// `--begin`); the job waits held until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub begin: Option<String>,
    /// A signal before the wall-time limit: Slurm's `[B:]SIG[@SECONDS]` (`B:USR1@90`; default 60
    /// seconds; `B:` only the program, else every other process of the component, as Slurm spares
    /// the batch shell).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    /// How many times a failed job is resubmitted (0: fail at the first failure); default: the
    /// server's threshold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<u32>,
    /// Sites a component may run on: GridWay's REQUIREMENTS expression (core::expr).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requirements: Option<String>,
    /// Preference among qualifying sites, highest first: GridWay's RANK expression.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<String>,
    /// Directory the program starts in, relative to the component's own directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_directory: Option<String>,
    /// Standard input, a file in the working directory (default: empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<String>,
    /// Standard output, a file in the working directory (default: kept by the supervisor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout: Option<String>,
    /// Standard error; the same name as `stdout` joins the two streams.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
    #[serde(default, skip_serializing_if = "Limits::is_empty")]
    pub limits: Limits,
    /// Input files from the replica catalogue.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<InputFile>,
    /// Output files copied back and registered in the catalogue.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<OutputFile>,
    /// Only a total of processors: the scheduler chooses the split (instead of `components`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flexible: Option<FlexibleDescription>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub components: Vec<ComponentDescription>,
    /// The broker's job preferences (001 §2.4): benchmarks, stage-in/out, start window.
    #[serde(default, skip_serializing_if = "BrokerDescription::is_empty")]
    pub broker: BrokerDescription,
    /// Run inside this advance reservation of the submitting user (`koalesce reservations
    /// create` gives its id, e.g. `R3`): at its site, on its processors, from its start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<String>,
    /// Start once these jobs started (Slurm's `--dependency=after:ID`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<u64>,
    /// Start once these jobs ended, however (`afterany`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub afterany: Vec<u64>,
    /// Start once these jobs succeeded (`afterok`); if one does not, this job fails.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub afterok: Vec<u64>,
    /// Start once these jobs ended without success (`afternotok`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub afternotok: Vec<u64>,
    /// Dependencies written as `sbatch --dependency` takes them, read by the same parser
    /// ([`parse_dependency_list`]): `afterok:12:40_3,afterany:9` (`40_3`: task 3 of array 40
    /// alone; an array's id: every task). They add to the four lists above.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependency: Option<String>,
}

/// What one component runs, with overrides applied and runtime variables expanded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Process {
    pub executable: String,
    pub arguments: Vec<String>,
    pub environment: BTreeMap<String, String>,
}

/// Why a description is refused: `Malformed` → 400, `Invalid` → 422.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DescriptionError {
    #[error("malformed TOML: {0}")]
    Malformed(String),
    #[error("{0}")]
    Invalid(String),
}

/// Default runtime estimate when the user gives none.
pub const DEFAULT_RUNTIME_MS: Millis = 3_600_000;

/// The smallest `memory` accepted (a process does not start in less).
pub const MIN_MEMORY_BYTES: u64 = 1 << 20;

impl JobDescription {
    /// Parses TOML text: syntax errors are `Malformed`, schema errors (unknown key, wrong type,
    /// missing field) are `Invalid` and name the field.
    pub fn parse(text: &str) -> Result<Self, DescriptionError> {
        let table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| DescriptionError::Malformed(one_line(&e.to_string())))?;
        let desc =
            JobDescription::deserialize(toml::Value::Table(table)).map_err(|e| DescriptionError::Invalid(one_line(&e.to_string())))?;
        desc.check()?;
        Ok(desc)
    }

    fn check(&self) -> Result<(), DescriptionError> {
        self.check_fields().map_err(DescriptionError::Invalid)
    }

    fn check_fields(&self) -> Result<(), String> {
        if self.name.trim().is_empty() {
            return Err("field 'name': must not be empty".into());
        }
        if self.executable.trim().is_empty() {
            return Err("field 'executable': must not be empty".into());
        }
        check_runtime_refs("executable", &self.executable)?;
        match (&self.flexible, self.components.is_empty()) {
            (None, true) => return Err("field 'components': at least one component is required (or a [flexible] total)".into()),
            (Some(_), false) => return Err("field 'flexible': give either 'components' or 'flexible', not both".into()),
            (Some(f), true) => {
                if f.total == 0 {
                    return Err("field 'flexible.total': must be at least 1".into());
                }
                if f.min_component == Some(0) || f.min_component.is_some_and(|m| m > f.total) {
                    return Err(format!("field 'flexible.min_component': must be in 1..={}", f.total));
                }
                if f.max_components == Some(0) {
                    return Err("field 'flexible.max_components': must be at least 1".into());
                }
                if self.runner == Runner::Bag {
                    return Err("field 'flexible': a flexible job cannot be a bag (use components)".into());
                }
            }
            (None, false) => {}
        }
        for (i, c) in self.components.iter().enumerate() {
            if c.processors == 0 {
                return Err(format!("field 'components[{i}].processors': must be at least 1"));
            }
            if let Some(e) = &c.executable {
                if e.trim().is_empty() {
                    return Err(format!("field 'components[{i}].executable': must not be empty"));
                }
                check_runtime_refs(&format!("components[{i}].executable"), e)?;
            }
            for a in c.arguments.iter().flatten() {
                check_runtime_refs(&format!("components[{i}].arguments"), a)?;
            }
            check_environment(&format!("components[{i}].environment"), &c.environment)?;
        }
        match (self.runner, self.min_components) {
            (Runner::Bag, Some(k)) if k == 0 || k as usize > self.components.len() => {
                return Err(format!("field 'min_components': {k} is not in 1..={}", self.components.len()));
            }
            (Runner::Bag, _) | (_, None) => {}
            (_, Some(_)) => return Err("field 'min_components': only allowed with runner = \"bag\"".into()),
        }
        if let Some(p) = &self.priority {
            p.parse::<Priority>().map_err(|e| format!("field 'priority': {e}"))?;
        }
        if let Some(p) = &self.policy {
            p.parse::<PolicyKind>().map_err(|e| format!("field 'policy': {e}"))?;
        }
        for (field, v) in [
            ("runtime_estimate", &self.runtime_estimate),
            ("walltime", &self.walltime),
            ("cputime", &self.cputime),
            ("deadline", &self.deadline),
        ] {
            if let Some(v) = v {
                parse_duration(v).map_err(|e| format!("field '{field}': {e}"))?;
            }
        }
        if let Some(b) = &self.begin {
            crate::timing::parse_begin(b).map_err(|e| format!("field 'begin': {e}"))?;
        }
        if let Some(sig) = &self.signal {
            sig.parse::<crate::timing::EarlySignal>()
                .map_err(|e| format!("field 'signal': {e}"))?;
        }
        if let Some(m) = &self.memory {
            let bytes = parse_size(m).map_err(|e| format!("field 'memory': {e}"))?;
            if bytes < MIN_MEMORY_BYTES {
                return Err(format!("field 'memory': '{m}' is below the least a process needs (1M)"));
            }
        }
        if let Some(w) = &self.walltime {
            if parse_duration(w).map_err(|e| format!("field 'walltime': {e}"))? == 0 {
                return Err("field 'walltime': must be longer than 0".into());
            }
        }
        self.broker.preferences()?;
        self.limits.check()?;
        for (field, ids) in [
            ("after", &self.after),
            ("afterany", &self.afterany),
            ("afterok", &self.afterok),
            ("afternotok", &self.afternotok),
        ] {
            if ids.contains(&0) {
                return Err(format!("field '{field}': job ids start at 1"));
            }
        }
        if let Some(d) = &self.dependency {
            parse_dependency_list(d).map_err(|e| format!("field 'dependency': {e}"))?;
        }
        for (field, v) in [("requirements", &self.requirements), ("rank", &self.rank)] {
            if let Some(v) = v {
                // A task's variables are substituted before the expression is compiled.
                let v = expand_runtime(v, |n| TASK_VARIABLES.contains(&n).then(|| "0".to_string()));
                Expr::compile(&v).map_err(|e| format!("field '{field}': {e}"))?;
            }
        }
        for a in &self.arguments {
            check_runtime_refs("arguments", a)?;
        }
        check_environment("environment", &self.environment)?;
        for (field, v) in [
            ("working_directory", &self.working_directory),
            ("stdin", &self.stdin),
            ("stdout", &self.stdout),
            ("stderr", &self.stderr),
        ] {
            if let Some(v) = v {
                check_relative_path(field, v)?;
            }
        }
        for (i, f) in self.inputs.iter().enumerate() {
            if f.file.trim().is_empty() {
                return Err(format!("field 'inputs[{i}]': the logical name must not be empty"));
            }
            if let Some(a) = &f.as_name {
                check_relative_path(&format!("inputs[{i}].as"), a)?;
            }
        }
        let mut locals = std::collections::BTreeSet::new();
        for f in &self.inputs {
            if !locals.insert(f.local_name()) {
                return Err(format!("field 'inputs': two inputs are staged as '{}'", f.local_name()));
            }
        }
        for (i, o) in self.outputs.iter().enumerate() {
            check_relative_path(&format!("outputs[{i}]"), &o.file)?;
            if o.file == "." || o.file.ends_with('/') {
                return Err(format!("field 'outputs[{i}]': '{}' must name a file", o.file));
            }
            if let Some(t) = &o.to {
                if t.trim().is_empty() {
                    return Err(format!("field 'outputs[{i}].to': must not be empty"));
                }
                check_runtime_refs(&format!("outputs[{i}].to"), t)?;
            }
        }
        Ok(())
    }

    /// What component `index` runs: the job's program with the component's overrides, and
    /// `${KOALESCE_*}` references in the executable, arguments and environment values
    /// replaced from `runtime` (the component's `KOALESCE_*` environment).
    pub fn process(&self, index: usize, runtime: &BTreeMap<String, String>) -> Process {
        let c = self.components.get(index);
        let exp = |s: &str| expand_runtime(s, |n| runtime.get(n).cloned());
        let executable = exp(c.and_then(|c| c.executable.as_deref()).unwrap_or(&self.executable));
        let arguments = c
            .and_then(|c| c.arguments.as_ref())
            .unwrap_or(&self.arguments)
            .iter()
            .map(|a| exp(a))
            .collect();
        let mut environment: BTreeMap<String, String> = self.environment.iter().map(|(k, v)| (k.clone(), exp(v))).collect();
        if let Some(c) = c {
            for (k, v) in &c.environment {
                environment.insert(k.clone(), exp(v));
            }
        }
        Process {
            executable,
            arguments,
            environment,
        }
    }

    /// The description of one task of an array or bag: `${KOALESCE_TASK_ID}` and the other
    /// [`TASK_VARIABLES`] found in `values` substituted in every string of the description
    /// (arguments, environment, file names, REQUIREMENTS, RANK, …), as GridWay substitutes a
    /// template's variables per task. The result is checked again (two tasks' inputs may
    /// differ only by the substitution).
    pub fn for_task(&self, values: &BTreeMap<String, String>) -> Result<JobDescription, DescriptionError> {
        fn walk(v: &mut toml::Value, values: &BTreeMap<String, String>) {
            match v {
                toml::Value::String(s) => {
                    *s = expand_runtime(s, |n| TASK_VARIABLES.contains(&n).then(|| values.get(n).cloned()).flatten());
                }
                toml::Value::Array(a) => a.iter_mut().for_each(|x| walk(x, values)),
                toml::Value::Table(t) => t.iter_mut().for_each(|(_, x)| walk(x, values)),
                _ => {}
            }
        }
        let mut v = toml::Value::try_from(self).map_err(|e| DescriptionError::Invalid(e.to_string()))?;
        walk(&mut v, values);
        let desc = JobDescription::deserialize(v).map_err(|e| DescriptionError::Invalid(one_line(&e.to_string())))?;
        desc.check()?;
        Ok(desc)
    }

    /// The job's dependencies as the fields `after`, `afterany`, `afterok`, `afternotok` and
    /// `dependency` give them (duplicates dropped).
    pub fn dependencies(&self) -> Vec<Dependency> {
        let mut out: Vec<Dependency> = [
            (DependencyKind::After, &self.after),
            (DependencyKind::AfterAny, &self.afterany),
            (DependencyKind::AfterOk, &self.afterok),
            (DependencyKind::AfterNotOk, &self.afternotok),
        ]
        .into_iter()
        .flat_map(|(kind, ids)| ids.iter().map(move |&id| Dependency::on(JobId(id), kind)))
        .collect();
        // Checked when the description was parsed.
        out.extend(
            self.dependency
                .as_deref()
                .and_then(|d| parse_dependency_list(d).ok())
                .unwrap_or_default(),
        );
        out.sort();
        out.dedup();
        out
    }

    /// The wall-time limit of each component: `walltime`, else the runtime estimate (the
    /// default one when none is given) times `factor`, as a site's default time limit. `None`
    /// when `factor` is 0 or less and no `walltime` is given (no limit).
    pub fn walltime_ms(&self, factor: f64) -> Option<Millis> {
        if let Some(w) = self.walltime.as_deref().and_then(|w| parse_duration(w).ok()) {
            return Some(w);
        }
        if factor.is_nan() || factor <= 0.0 {
            return None;
        }
        let estimate = self
            .runtime_estimate
            .as_deref()
            .and_then(|r| parse_duration(r).ok())
            .unwrap_or(DEFAULT_RUNTIME_MS);
        Some((estimate as f64 * factor).ceil().min(Millis::MAX as f64) as Millis)
    }

    /// `begin` as Unix milliseconds.
    pub fn begin_ms(&self) -> Result<Option<Millis>, DescriptionError> {
        self.begin
            .as_deref()
            .map(|b| crate::timing::parse_begin(b).map_err(|e| DescriptionError::Invalid(format!("field 'begin': {e}"))))
            .transpose()
    }

    /// `signal`, parsed (`None` also when invalid: a parsed description has a valid one).
    pub fn early_signal(&self) -> Option<crate::timing::EarlySignal> {
        self.signal.as_deref().and_then(|s| s.parse().ok())
    }

    /// The memory limit of a component of `processors` processors: `memory` per processor.
    pub fn memory_limit(&self, processors: u32) -> Option<u64> {
        let per = parse_size(self.memory.as_deref()?).ok()?;
        Some(per.saturating_mul(u64::from(processors.max(1))))
    }

    /// The description as native TOML (what `koalesce convert` prints).
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("a job description always serializes")
    }

    /// The core's view of the job; `site_of` resolves site names (unknown → 422 naming it).
    pub fn to_spec(&self, site_of: impl Fn(&str) -> Option<SiteId>) -> Result<JobSpec, DescriptionError> {
        let mut components = Vec::with_capacity(self.components.len());
        for (i, c) in self.components.iter().enumerate() {
            let fixed_site = match &c.site {
                None => None,
                Some(name) => Some(
                    site_of(name)
                        .ok_or_else(|| DescriptionError::Invalid(format!("field 'components[{i}].site': site '{name}' does not exist")))?,
                ),
            };
            components.push(ComponentSpec {
                processors: c.processors,
                fixed_site,
            });
        }
        let flexible = self.flexible.as_ref().map(|f| FlexibleRequest {
            total: f.total,
            min_component: f.min_component.unwrap_or(1),
            max_components: f.max_components.unwrap_or(f.total),
        });
        Ok(JobSpec {
            name: self.name.clone(),
            components,
            flexible,
            input_files: self.inputs.iter().map(|f| f.file.clone()).collect(),
            file_mode: FileMode::Whole,
            runtime_estimate_ms: match (&self.runtime_estimate, &self.walltime) {
                (Some(r), _) => parse_duration(r).map_err(|e| DescriptionError::Invalid(format!("field 'runtime_estimate': {e}")))?,
                (None, Some(w)) => parse_duration(w).map_err(|e| DescriptionError::Invalid(format!("field 'walltime': {e}")))?,
                (None, None) => DEFAULT_RUNTIME_MS,
            },
            priority: match &self.priority {
                Some(p) => p.parse().map_err(|e| DescriptionError::Invalid(format!("field 'priority': {e}")))?,
                None => Priority::default(),
            },
            policy: match &self.policy {
                Some(p) => Some(p.parse().map_err(|e| DescriptionError::Invalid(format!("field 'policy': {e}")))?),
                None => None,
            },
            // A bag of tasks tells the core how many tasks must be placed and succeed (all of
            // them unless `min_components` says otherwise); other runners are atomic.
            min_components: match self.runner {
                Runner::Bag => Some(self.min_components.unwrap_or(self.components.len() as u32)),
                Runner::Independent | Runner::Coupled => None,
            },
            requirements: expression("requirements", self.requirements.as_deref())?,
            rank: expression("rank", self.rank.as_deref())?,
            deadline_ms: match &self.deadline {
                Some(d) => Some(parse_duration(d).map_err(|e| DescriptionError::Invalid(format!("field 'deadline': {e}")))?),
                None => None,
            },
            begin_ms: self.begin_ms()?,
            preferences: self.broker.preferences().map_err(DescriptionError::Invalid)?,
            // Dependents wait until the declared outputs are registered (stage-out).
            stages_out: !self.outputs.is_empty(),
            ..JobSpec::default()
        })
    }
}

/// A REQUIREMENTS or RANK field compiled for the core (the error names the field and column).
fn expression(field: &str, text: Option<&str>) -> Result<Option<JobExpr>, DescriptionError> {
    text.map(|t| JobExpr::new(t).map_err(|e| DescriptionError::Invalid(format!("field '{field}': {e}"))))
        .transpose()
}

fn check_environment(field: &str, env: &BTreeMap<String, String>) -> Result<(), String> {
    for (k, v) in env {
        if k.is_empty() || k.contains('=') || k.contains('\0') {
            return Err(format!("field '{field}': invalid variable name '{k}'"));
        }
        if v.contains('\0') {
            return Err(format!("field '{field}': the value of {k} contains a NUL character"));
        }
        check_runtime_refs(field, v)?;
    }
    Ok(())
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A duration as the job description writes it, in milliseconds (see [`crate::duration`]).
pub fn parse_duration(s: &str) -> Result<Millis, crate::duration::DurationError> {
    crate::duration::parse_ms(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_estimates_use_the_shared_syntax() {
        assert_eq!(parse_duration("01:00:05").unwrap(), 3_605_000);
        let toml = |d: &str| format!("name='a'\nexecutable='/bin/true'\nruntime_estimate='{d}'\n[[components]]\nprocessors=1\n");
        assert!(JobDescription::parse(&toml("2h")).is_ok());
        let e = JobDescription::parse(&toml("99999999999999999999:00:00")).unwrap_err().to_string();
        assert!(e.contains("runtime_estimate") && e.contains("too long"), "{e}");
    }

    #[test]
    fn unknown_key_is_named() {
        let e = JobDescription::parse("name='a'\nexecutable='/bin/true'\nbogus=1\n[[components]]\nprocessors=1\n").unwrap_err();
        assert!(matches!(&e, DescriptionError::Invalid(m) if m.contains("bogus")), "{e}");
        let e = JobDescription::parse("name = = 'a'").unwrap_err();
        assert!(matches!(e, DescriptionError::Malformed(_)));
    }

    const FULL: &str = r#"
name = "full"
executable = "./sim"
arguments = ["-o", "out.${KOALESCE_JOB_ID}"]
environment = { MODE = "fast", WHERE = "${KOALESCE_SITE}" }
walltime = "2h"
cputime = "90m"
memory = "2G"
deadline = "1d"
retries = 3
requirements = 'ARCH = "x86_64" & CPU_MHZ > 1000'
rank = 'CPU_MHZ + SIZE_CLOSE_DATA("data.bin") / 135'
working_directory = "run"
stdin = "in.txt"
stdout = "out.${KOALESCE_JOB_ID}"
stderr = "out.${KOALESCE_JOB_ID}"
limits = { open_files = 1024, stack = "8M" }
inputs = ["data.bin", { file = "params/3", as = "params", executable = false }, { file = "sim", executable = true }]
outputs = ["result.txt", { file = "log", to = "logs/${KOALESCE_JOB_ID}.log" }]

[[components]]
processors = 4
label = "master"
environment = { ROLE = "master" }

[[components]]
processors = 8
site = "vu"
arguments = ["--worker"]
"#;

    #[test]
    fn new_fields_parse_validate_and_round_trip() {
        let d = JobDescription::parse(FULL).unwrap();
        assert_eq!(d.inputs[1].local_name(), "params");
        assert_eq!(d.inputs[0].local_name(), "data.bin");
        assert!(d.inputs[2].executable);
        assert_eq!(d.outputs[1].logical_name(17), "logs/17.log");
        assert_eq!(d.outputs[0].logical_name(17), "17/result.txt");
        let again = JobDescription::parse(&d.to_toml()).unwrap();
        assert_eq!(again, d);
        let spec = d.to_spec(|n| (n == "vu").then_some(SiteId(0))).unwrap();
        assert_eq!(
            spec.runtime_estimate_ms, 7_200_000,
            "walltime is the estimate without runtime_estimate"
        );
        assert_eq!(spec.input_files, ["data.bin", "params/3", "sim"]);
        let rt: BTreeMap<String, String> = [("KOALESCE_JOB_ID", "9"), ("KOALESCE_SITE", "vu")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let p0 = d.process(0, &rt);
        assert_eq!(p0.arguments, ["-o", "out.9"]);
        assert_eq!(p0.environment["WHERE"], "vu");
        assert_eq!(p0.environment["ROLE"], "master");
        let p1 = d.process(1, &rt);
        assert_eq!(p1.arguments, ["--worker"]);
        assert!(!p1.environment.contains_key("ROLE"));
    }

    #[test]
    fn walltime_defaults_to_the_estimate_times_the_factor() {
        let base = "name='a'\nexecutable='/bin/true'\n";
        let comp = "[[components]]\nprocessors=4\n";
        let d = |line: &str| JobDescription::parse(&format!("{base}{line}\n{comp}")).unwrap();
        assert_eq!(d("walltime = '90s'").walltime_ms(2.0), Some(90_000), "walltime wins");
        assert_eq!(d("runtime_estimate = '3s'").walltime_ms(2.0), Some(6_000));
        assert_eq!(d("runtime_estimate = '3s'").walltime_ms(1.5), Some(4_500));
        assert_eq!(d("").walltime_ms(2.0), Some(2 * DEFAULT_RUNTIME_MS));
        assert_eq!(d("").walltime_ms(0.0), None, "factor 0: no default limit");
        assert_eq!(d("memory = '2G'").memory_limit(4), Some(8 << 30), "memory is per processor");
        assert_eq!(d("").memory_limit(4), None);
        for (line, want) in [("memory = '0'", "memory"), ("walltime = '0s'", "walltime")] {
            let e = JobDescription::parse(&format!("{base}{line}\n{comp}")).unwrap_err().to_string();
            assert!(e.contains(want), "{line}: {e}");
        }
    }

    #[test]
    fn flexible_request_reaches_the_core() {
        let d = JobDescription::parse("name='f'\nexecutable='/bin/true'\n[flexible]\ntotal = 32\nmin_component = 4\n").unwrap();
        let spec = d.to_spec(|_| None).unwrap();
        let f = spec.flexible.unwrap();
        assert_eq!((f.total, f.min_component, f.max_components), (32, 4, 32));
        assert!(spec.components.is_empty());
        let both = "name='f'\nexecutable='/bin/true'\n[flexible]\ntotal = 32\n[[components]]\nprocessors=1\n";
        assert!(JobDescription::parse(both).unwrap_err().to_string().contains("either"));
    }

    #[test]
    fn bad_new_fields_are_named() {
        let base = "name='a'\nexecutable='/bin/true'\n";
        let comp = "[[components]]\nprocessors=1\n";
        for (line, want) in [
            ("walltime = 'soon'", "walltime"),
            ("memory = 'lots'", "memory"),
            ("requirements = 'CPU_MHZ > '", "requirements': column 11"),
            ("rank = 'FOO'", "unknown variable 'FOO'"),
            ("stdout = '/etc/passwd'", "stdout"),
            ("working_directory = '../up'", "working_directory"),
            ("stderr = 'e.${KOALESCE_NOPE}'", "KOALESCE_NOPE"),
            ("inputs = [{ name = 'x' }]", "name"),
            ("inputs = ['a/x', 'b/x']", "two inputs"),
            ("outputs = ['/abs']", "outputs[0]"),
            ("limits = { open_file = 3 }", "open_file"),
            ("limits = { stack = 'big' }", "limits.stack"),
        ] {
            let e = JobDescription::parse(&format!("{base}{line}\n{comp}")).unwrap_err().to_string();
            assert!(e.contains(want), "{line}: {e}");
        }
    }
}
