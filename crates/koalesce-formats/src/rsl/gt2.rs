//! Globus GT2 RSL (GRAM attributes, GRAM5 `rsl(5)`) and DUROC multi-requests onto the native
//! description. A multi-request `+(&…)(&…)` is one co-allocated job: each subjob becomes a
//! component (fixed to a site when its resourceManagerContact names one of koalesce's sites),
//! started together behind the coupled runner's barrier unless subjobStartType=no-barrier.

use std::collections::BTreeMap;

use koalesce_api::fields::{InputFile, OutputFile};
use koalesce_api::{ComponentDescription, JobDescription, Runner};

use super::{Pos, RVal, Rel, Req, GASS};
use crate::common::push_input;
use crate::common::{
    blank_job, default_name, job_type_components, locate, relative_name, site_of_contact, staged, FormatError, Location, Requirements,
};
use crate::Format;

const FMT: Format = Format::Rsl;
const JOB_DIR: &str = "${KOALESCE_JOB_DIR}";

/// One GRAM request (a job, or a subjob of a multi-request).
#[derive(Debug, Default, Clone)]
struct Parts {
    executable: Option<(String, Pos)>,
    arguments: Option<Vec<String>>,
    environment: BTreeMap<String, String>,
    directory: Option<String>,
    stdin: Option<String>,
    stdout: Option<String>,
    stderr: Option<String>,
    count: Option<u32>,
    jobtype: Option<String>,
    walltime_min: Option<u64>,
    cputime_min: Option<u64>,
    memory_mb: Option<u64>,
    min_memory_mb: Option<u64>,
    queue: Option<String>,
    inputs: Vec<InputFile>,
    outputs: Vec<OutputFile>,
    /// Absolute staging destinations → their name in the job's directory.
    aliases: BTreeMap<String, String>,
    contact: Option<String>,
    label: Option<String>,
    start_type: Option<String>,
    host_count: Option<u64>,
    library_path: Vec<String>,
    cleanup: Vec<(String, Pos)>,
}

/// A path as the job sees it: `$(HOME)/x` → `x`, absolute staging destinations → their local
/// name, other paths unchanged.
fn in_job_dir(p: &str, aliases: &BTreeMap<String, String>) -> String {
    if let Some(local) = aliases.get(p) {
        return local.clone();
    }
    match p.strip_prefix(JOB_DIR) {
        Some(rest) => rest.trim_start_matches('/').to_string(),
        None => p.to_string(),
    }
}

fn parts(rels: &[Rel]) -> Result<Parts, FormatError> {
    let mut p = Parts::default();
    // Staging first: other attributes refer to the staged names.
    for r in rels
        .iter()
        .filter(|r| matches!(r.canon.as_str(), "filestagein" | "filestageinshared"))
    {
        r.require_eq(FMT)?;
        for t in r.tuples(FMT)? {
            let [src, dst] = t.as_slice() else {
                return Err(r.err(FMT, "expects (\"remote URL\" \"local file\") pairs"));
            };
            if src.starts_with(GASS) {
                return Err(r.err(
                    FMT,
                    "files on the client's GASS server cannot be staged; register them with `koalesce files add`",
                ));
            }
            let logical = match locate(src).map_err(|m| r.err(FMT, m))? {
                Location::Catalogue(l) => l,
                Location::Absolute(a) => return Err(r.err(FMT, format!("'{a}' is a path, not a URL or logical name"))),
            };
            let local = match dst.strip_prefix(JOB_DIR) {
                Some(rest) => rest.trim_start_matches('/').to_string(),
                None if dst.starts_with('/') => {
                    // The job cannot write outside its directory: the file is staged there
                    // and references to the absolute name are rewritten.
                    let base = dst.rsplit('/').next().unwrap_or_default().to_string();
                    p.aliases.insert(dst.clone(), base.clone());
                    base
                }
                None => dst.clone(),
            };
            let local = relative_name("file_stage_in", &local).map_err(|m| r.err(FMT, m))?;
            push_input(&mut p.inputs, staged(&logical, Some(&local), false));
        }
    }
    for r in rels {
        let canon = r.canon.as_str();
        match canon {
            "filestagein" | "filestageinshared" | "rslsubstitution" => continue,
            _ => {}
        }
        if canon != "queue" {
            r.require_eq(FMT)?;
        }
        match canon {
            "executable" => p.executable = Some((r.one(FMT)?, r.pos)),
            "arguments" => p.arguments = Some(r.strings(FMT)?),
            "environment" => {
                for t in r.tuples(FMT)? {
                    match t.as_slice() {
                        [k, v] => {
                            p.environment.insert(k.clone(), v.clone());
                        }
                        _ => return Err(r.err(FMT, "expects (NAME value) pairs")),
                    }
                }
            }
            "directory" => p.directory = Some(r.one(FMT)?),
            "stdin" => p.stdin = Some(r.one(FMT)?),
            "stdout" | "stderr" => {
                // One destination, or a sequence of destinations (GRAM5): all must agree.
                let dests: Vec<String> = match r.values.as_slice() {
                    [RVal::Str(s)] => vec![s.clone()],
                    _ => r.tuples(FMT)?.into_iter().map(|t| t.first().cloned().unwrap_or_default()).collect(),
                };
                let first = dests.first().cloned().unwrap_or_default();
                if dests.iter().any(|d| *d != first) {
                    return Err(r.err(FMT, "several different destinations cannot be honoured; give one"));
                }
                if canon == "stdout" {
                    p.stdout = Some(first);
                } else {
                    p.stderr = Some(first);
                }
            }
            "count" => {
                let n = r.number(FMT)?;
                if n == 0 || n > u32::MAX as u64 {
                    return Err(r.err(FMT, format!("{n} is not a valid count")));
                }
                p.count = Some(n as u32);
            }
            "jobtype" => {
                let t = r.one(FMT)?.to_ascii_lowercase();
                if job_type_components(&t, 1).is_none() {
                    return Err(r.err(FMT, format!("'{t}' cannot be honoured (single, multiple and mpi can)")));
                }
                p.jobtype = Some(t);
            }
            "maxwalltime" | "maxtime" => p.walltime_min = Some(r.number(FMT)?),
            "maxcputime" => p.cputime_min = Some(r.number(FMT)?),
            "maxmemory" => p.memory_mb = Some(r.number(FMT)?),
            "minmemory" => p.min_memory_mb = Some(r.number(FMT)?),
            "queue" => {
                if r.op != "=" && r.op != "!=" {
                    return Err(r.err(FMT, format!("only '=' and '!=' are supported, not '{}'", r.op)));
                }
                let q = r.one(FMT)?;
                p.queue = Some(format!("QUEUE_NAME {} \"{}\"", r.op, q.replace('"', "")));
            }
            "filestageout" => {
                for t in r.tuples(FMT)? {
                    let [local, remote] = t.as_slice() else {
                        return Err(r.err(FMT, "expects (\"local file\" \"remote URL\") pairs"));
                    };
                    let file = relative_name("file_stage_out", &in_job_dir(local, &p.aliases)).map_err(|m| r.err(FMT, m))?;
                    if remote.starts_with(GASS) {
                        return Err(r.err(
                            FMT,
                            "outputs cannot go to the client's GASS server; give a logical name for the replica catalogue",
                        ));
                    }
                    let to = match locate(remote).map_err(|m| r.err(FMT, m))? {
                        Location::Catalogue(l) => l,
                        Location::Absolute(a) => {
                            return Err(r.err(FMT, format!("'{a}' is a path; give a logical name for the replica catalogue")))
                        }
                    };
                    p.outputs.push(OutputFile { file, to: Some(to) });
                }
            }
            "filecleanup" => {
                for f in r.strings(FMT)? {
                    p.cleanup.push((f, r.pos));
                }
            }
            "resourcemanagercontact" => p.contact = Some(r.one(FMT)?),
            "label" => p.label = Some(r.one(FMT)?),
            "subjobstarttype" => {
                let t = r.one(FMT)?.to_ascii_lowercase();
                if !matches!(t.as_str(), "strict-barrier" | "loose-barrier" | "no-barrier") {
                    return Err(r.err(FMT, format!("'{t}': expected strict-barrier, loose-barrier or no-barrier")));
                }
                p.start_type = Some(t);
            }
            "subjobcommstype" => {
                let t = r.one(FMT)?.to_ascii_lowercase();
                if !matches!(t.as_str(), "blocking-join" | "independent") {
                    return Err(r.err(FMT, format!("'{t}': expected blocking-join or independent")));
                }
            }
            "hostcount" => p.host_count = Some(r.number(FMT)?),
            "librarypath" => p.library_path.extend(r.strings(FMT)?),
            // Obsolete in GRAM itself, or a submission protocol koalesce's durable submit
            // already gives (acknowledged only once stored; state survives restarts).
            "grammyjob" | "proxytimeout" | "savestate" | "twophase" | "scratchdir" => {}
            "dryrun" => {
                if !r.one(FMT)?.eq_ignore_ascii_case("no") {
                    return Err(r.err(FMT, "a dry run cannot be submitted; use `koalesce convert` to check a file"));
                }
            }
            "stdoutposition" | "stderrposition" => {
                if r.number(FMT)? != 0 {
                    return Err(r.err(FMT, "only 0 (no restart of streaming) is supported"));
                }
            }
            "project" => return Err(r.err(FMT, "koalesce has no accounting projects")),
            "restart" => return Err(r.err(FMT, "koalesce restarts jobs itself; a restart request cannot be submitted")),
            "username" => return Err(r.err(FMT, "the job runs as the account of your token; it cannot choose another")),
            "gasscache" | "remoteiourl" => return Err(r.err(FMT, "GASS is not available in koalesce")),
            "expiration" | "loglevel" | "logpattern" | "savejobdescription" => {
                return Err(r.err(FMT, "a GRAM job manager setting koalesce cannot honour"))
            }
            "rslsubstitution" => {}
            other => {
                let hint = if super::XRSL_ONLY.contains(&other) {
                    " (an xRSL attribute: use --format xrsl)"
                } else {
                    ""
                };
                return Err(r.err(FMT, format!("unknown RSL attribute{hint}")));
            }
        }
    }
    Ok(p)
}

impl Parts {
    fn working_directory(&self) -> Option<String> {
        let d = self.directory.as_deref()?;
        // An absolute directory is the job's own directory: a job reaches nothing outside it.
        if d.starts_with('/') {
            return None;
        }
        let rel = in_job_dir(d, &self.aliases);
        (!rel.is_empty() && rel != ".").then_some(rel)
    }

    fn stream(&self, what: &str, v: &Option<String>, pos: Pos) -> Result<Option<String>, FormatError> {
        let Some(v) = v else { return Ok(None) };
        if v.starts_with(GASS) {
            if what == "stdin" {
                return Err(FormatError::at(
                    FMT,
                    pos.line,
                    Some(pos.col),
                    "stdin from the client's GASS server cannot be honoured; stage the file",
                ));
            }
            // Streamed back to the submitter: koalesce keeps the stream for `koalesce status`.
            return Ok(None);
        }
        if v == "/dev/null" {
            return Ok(None);
        }
        let p = in_job_dir(v, &self.aliases);
        relative_name(what, &p)
            .map(Some)
            .map_err(|m| FormatError::at(FMT, pos.line, Some(pos.col), m))
    }

    fn executable(&mut self, pos: Pos) -> Result<String, FormatError> {
        let Some((exe, epos)) = self.executable.clone() else {
            return Err(FormatError::at(FMT, pos.line, Some(pos.col), "the request has no executable"));
        };
        let err = |m: String| FormatError::at(FMT, epos.line, Some(epos.col), format!("executable: {m}"));
        if exe.starts_with(GASS) || exe.contains("://") {
            return Err(err(format!(
                "'{}' cannot be fetched; stage the program with file_stage_in from the replica catalogue",
                exe.replace(GASS, "$(GLOBUSRUN_GASS_URL)")
            )));
        }
        let local = in_job_dir(&exe, &self.aliases);
        if let Some(f) = self.inputs.iter_mut().find(|f| f.local_name() == local) {
            f.executable = true;
            return Ok(format!("./{local}"));
        }
        Ok(if exe.starts_with(JOB_DIR) { exe } else { local })
    }

    /// Memory per processor in MB: maxMemory (or minMemory) is per process.
    fn memory_per_processor(&self) -> Option<u64> {
        let m = self.memory_mb.or(self.min_memory_mb)?;
        let per_process_procs = if self.jobtype.as_deref().unwrap_or("single") == "single" {
            self.count.unwrap_or(1) as u64
        } else {
            1
        };
        Some(m.div_ceil(per_process_procs.max(1)))
    }

    fn check_cleanup(&self) -> Result<(), FormatError> {
        for (f, pos) in &self.cleanup {
            let local = in_job_dir(f, &self.aliases);
            if !self.inputs.iter().any(|i| i.local_name() == local) {
                return Err(FormatError::at(
                    FMT,
                    pos.line,
                    Some(pos.col),
                    format!("file_clean_up: '{f}' is not a staged file (only the job's own staged copies can be cleaned up)"),
                ));
            }
        }
        Ok(())
    }
}

/// Converts GT2 RSL; `sites` are koalesce's site names for resourceManagerContact.
pub fn convert_gt2(text: &str, name_hint: Option<&str>) -> Result<JobDescription, FormatError> {
    convert_gt2_for_sites(text, name_hint, &[])
}

/// As [`convert_gt2`], fixing subjobs whose contact names one of `sites` to that site.
pub fn convert_gt2_for_sites(text: &str, name_hint: Option<&str>, sites: &[String]) -> Result<JobDescription, FormatError> {
    match super::resolve(text, FMT)? {
        Req::Or(pos) => Err(FormatError::at(
            FMT,
            pos.line,
            Some(pos.col),
            "'|' (a disjunction) is not used by GRAM and cannot be honoured",
        )),
        Req::And(rels, pos) => single(&rels, pos, name_hint, sites),
        Req::Multi(subs, pos) => multi(&subs, pos, name_hint, sites),
    }
}

fn base_job(p: &mut Parts, pos: Pos, name_hint: Option<&str>) -> Result<JobDescription, FormatError> {
    let executable = p.executable(pos)?;
    p.check_cleanup()?;
    let mut job = blank_job(default_name(name_hint, "rsl-job"), executable);
    job.arguments = p.arguments.clone().unwrap_or_default();
    job.environment = p.environment.clone();
    if !p.library_path.is_empty() {
        job.environment.insert("LD_LIBRARY_PATH".into(), p.library_path.join(":"));
    }
    job.working_directory = p.working_directory();
    job.stdin = p.stream("stdin", &p.stdin, pos)?;
    job.stdout = p.stream("stdout", &p.stdout, pos)?;
    job.stderr = p.stream("stderr", &p.stderr, pos)?;
    job.walltime = p.walltime_min.map(|m| format!("{m}m"));
    job.cputime = p.cputime_min.map(|m| format!("{m}m"));
    job.memory = p.memory_per_processor().map(|m| format!("{m}M"));
    let mut req = Requirements::default();
    if let Some(q) = &p.queue {
        req.add(q.clone());
    }
    job.requirements = req.build();
    job.inputs = p.inputs.clone();
    job.outputs = p.outputs.clone();
    Ok(job)
}

fn single(rels: &[Rel], pos: Pos, name_hint: Option<&str>, sites: &[String]) -> Result<JobDescription, FormatError> {
    let mut p = parts(rels)?;
    let mut job = base_job(&mut p, pos, name_hint)?;
    let count = p.count.unwrap_or(1);
    let kind = p.jobtype.clone().unwrap_or_else(|| "single".into());
    // rsl(5): "host_count: only applies to clusters of SMP computers … the number of nodes
    // to distribute the count processes across". A layout of the count processes, which
    // koalesce places as processors of a site (packed, for multiple and mpi, on few sites):
    // accepted when it can be honoured at all (no more hosts than processes), as GRAM
    // glidein descriptions (hostCount, count, jobType=multiple) use it.
    if let Some(h) = p.host_count {
        if h == 0 || h > u64::from(count) {
            let r = rels
                .iter()
                .find(|r| r.canon == "hostcount")
                .expect("host_count came from a relation");
            return Err(r.err(FMT, format!("{h} hosts for {count} process(es) cannot be honoured (1 to count)")));
        }
    }
    let (mut components, mut runner, policy) =
        job_type_components(&kind, count)
            .expect("checked job type")
            .map_err(|m| match rels.iter().find(|r| r.canon == "count") {
                Some(r) => r.err(FMT, m),
                None => FormatError::at(FMT, pos.line, Some(pos.col), m),
            })?;
    for comp in &mut components {
        comp.label = p.label.clone();
    }
    if components.len() > 1 && p.start_type.as_deref().is_some_and(|t| t != "no-barrier") {
        runner = Runner::Coupled;
    }
    if let Some(c) = &p.contact {
        if let Some(site) = site_of_contact(c, sites) {
            for comp in &mut components {
                comp.site = Some(site.clone());
            }
        }
    }
    job.components = components;
    job.runner = runner;
    job.policy = policy;
    Ok(job)
}

fn multi(subs: &[Req], pos: Pos, name_hint: Option<&str>, sites: &[String]) -> Result<JobDescription, FormatError> {
    let mut all = Vec::new();
    for s in subs {
        match s {
            Req::And(rels, p) => all.push((parts(rels)?, *p)),
            Req::Multi(_, p) | Req::Or(p) => {
                return Err(FormatError::at(
                    FMT,
                    p.line,
                    Some(p.col),
                    "each subjob of a multi-request must be a conjunction &(…)",
                ))
            }
        }
    }
    let (mut first, fpos) = all[0].clone();
    let mut job = base_job(&mut first, fpos, name_hint)?;
    let mut runner = None;
    for (i, (p, spos)) in all.iter_mut().enumerate() {
        let err = |m: String| FormatError::at(FMT, spos.line, Some(spos.col), format!("subjob {i}: {m}"));
        let sub = base_job(p, *spos, name_hint)?;
        for (what, a, b) in [
            ("directory", &sub.working_directory, &job.working_directory),
            ("stdin", &sub.stdin, &job.stdin),
            ("stdout", &sub.stdout, &job.stdout),
            ("stderr", &sub.stderr, &job.stderr),
            ("queue", &sub.requirements, &job.requirements),
        ] {
            if a != b {
                return Err(err(format!("{what} differs from subjob 0's; koalesce's components share it")));
            }
        }
        // The job's limits are the largest of its subjobs'.
        job.walltime = max_by_number(&job.walltime, &sub.walltime);
        job.cputime = max_by_number(&job.cputime, &sub.cputime);
        job.memory = max_by_number(&job.memory, &sub.memory);
        for f in sub.inputs {
            if let Some(other) = job.inputs.iter().find(|x| x.local_name() == f.local_name()) {
                if other.file != f.file {
                    return Err(err(format!("stages a different file as '{}'", f.local_name())));
                }
            } else {
                job.inputs.push(f);
            }
        }
        for o in sub.outputs {
            if !job.outputs.contains(&o) {
                job.outputs.push(o);
            }
        }
        let start = p.start_type.clone().unwrap_or_else(|| "strict-barrier".into());
        let r = if start == "no-barrier" {
            Runner::Independent
        } else {
            Runner::Coupled
        };
        if runner.is_some_and(|x| x != r) {
            return Err(err("subjobStartType differs between subjobs".into()));
        }
        runner = Some(r);
        if p.jobtype.as_deref().is_some_and(|t| t != "single" && t != "mpi" && t != "multiple") {
            return Err(err("jobType cannot be honoured".into()));
        }
        let mut c = ComponentDescription::new(p.count.unwrap_or(1));
        c.label = p.label.clone();
        c.site = p.contact.as_deref().and_then(|x| site_of_contact(x, sites));
        if sub.executable != job.executable {
            c.executable = Some(sub.executable.clone());
        }
        if sub.arguments != job.arguments {
            c.arguments = Some(sub.arguments.clone());
        }
        c.environment = sub.environment.clone();
        job.components.push(c);
    }
    // Variables every subjob sets alike belong to the job; the rest to their component.
    let shared: BTreeMap<String, String> = job
        .environment
        .iter()
        .filter(|(k, v)| job.components.iter().all(|c| c.environment.get(*k) == Some(*v)))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for c in &mut job.components {
        c.environment.retain(|k, _| !shared.contains_key(k));
    }
    let _ = pos;
    job.environment = shared;
    job.runner = runner.unwrap_or(Runner::Coupled);
    Ok(job)
}

/// The larger of two "Nm"/"NM" strings (same unit).
fn max_by_number(a: &Option<String>, b: &Option<String>) -> Option<String> {
    let n = |s: &String| s.trim_end_matches(char::is_alphabetic).parse::<u64>().unwrap_or(0);
    match (a, b) {
        (Some(x), Some(y)) => Some(if n(y) > n(x) { y.clone() } else { x.clone() }),
        (x, y) => x.clone().or_else(|| y.clone()),
    }
}
