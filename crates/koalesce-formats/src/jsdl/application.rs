//! The application element of a JSDL job: POSIX Application, HPC Profile Application
//! (GFD.111) or SPMD Application (GFD.115), onto the job's executable, arguments, standard
//! streams, working directory, environment and limits (moved out of mod.rs as it was).

use std::collections::BTreeMap;

use koalesce_api::fields::{format_seconds, format_size};
use koalesce_api::JobDescription;
use roxmltree::Node;

use super::{local_path, qname, spmd, Reader, JOB_DIR, NS_HPCPA, NS_POSIX, NS_SPMD};
use crate::common::{relative_name, FormatError};

/// The POSIX / HPC Profile / SPMD application; returns POSIX MemoryLimit (bytes) if given,
/// and the SPMD elements of an SPMD application.
pub(super) fn application<'a>(
    rd: &Reader<'a>,
    app: Node<'a, 'a>,
    job: &mut JobDescription,
    fs: &[String],
) -> Result<(Option<u64>, Option<spmd::Spmd<'a>>), FormatError> {
    rd.attrs(app, &["name"])?;
    let mut memory = None;
    let mut env = BTreeMap::new();
    let is_spmd = app.tag_name().namespace() == Some(NS_SPMD);
    // GFD.115 §4: SPMDApplication holds the POSIX elements Executable … UserName (no
    // limits) and its own NumberOfProcesses, ProcessesPerHost, ThreadsPerProcess and
    // SPMDVariation; limits are refused like HPC Profile Application's.
    let hpc = app.tag_name().namespace() == Some(NS_HPCPA) || is_spmd;
    let mut sp = is_spmd.then(spmd::Spmd::default);
    for e in rd.elements(app)? {
        let ns = e.tag_name().namespace();
        if let (Some(sp), Some(NS_SPMD)) = (sp.as_mut(), ns) {
            sp.element(rd, e)?;
            continue;
        }
        if ns != Some(NS_POSIX) && ns != Some(NS_HPCPA) {
            return Err(rd.unknown(e));
        }
        let name = e.tag_name().name();
        let fs_attr: &[&str] = if matches!(name, "Executable" | "Argument" | "Input" | "Output" | "Error" | "WorkingDirectory") {
            &["filesystemName"]
        } else if name == "Environment" {
            &["name", "filesystemName"]
        } else {
            &[]
        };
        rd.attrs(e, fs_attr)?;
        let limit = |rd: &Reader| -> Result<u64, FormatError> {
            let v = rd.number(e)?;
            Ok(v.ceil().min(u64::MAX as f64) as u64)
        };
        match name {
            "Executable" => job.executable = local_exec(&rd.path(e, fs)?),
            "Argument" => job.arguments.push(rd.path(e, fs)?),
            "Input" => {
                let p = rd.path(e, fs)?;
                if p != "/dev/null" {
                    job.stdin = Some(relative_name("jsdl-posix:Input", &local_path(&p)).map_err(|m| rd.err(e, m))?);
                }
            }
            "Output" | "Error" => {
                let p = rd.path(e, fs)?;
                if p != "/dev/null" {
                    let v = relative_name(&qname(e), &local_path(&p)).map_err(|m| rd.err(e, m))?;
                    if name == "Output" {
                        job.stdout = Some(v);
                    } else {
                        job.stderr = Some(v);
                    }
                }
            }
            "WorkingDirectory" => {
                // An absolute directory is the job's own directory: a job reaches nothing
                // outside it.
                let p = local_path(&rd.path(e, fs)?);
                if !p.starts_with('/') && !p.is_empty() && p != "." {
                    job.working_directory = Some(relative_name("jsdl-posix:WorkingDirectory", &p).map_err(|m| rd.err(e, m))?);
                }
            }
            "Environment" => {
                let Some(var) = e.attribute("name") else {
                    return Err(rd.err(e, format!("{} has no name attribute", qname(e))));
                };
                env.insert(var.to_string(), rd.path(e, fs)?);
            }
            "WallTimeLimit" if !hpc => job.walltime = Some(format_seconds(limit(rd)?)),
            "CPUTimeLimit" if !hpc => job.cputime = Some(format_seconds(limit(rd)?)),
            "MemoryLimit" if !hpc => memory = Some(limit(rd)?),
            "VirtualMemoryLimit" if !hpc => job.limits.virtual_memory = Some(format_size(limit(rd)?)),
            "FileSizeLimit" if !hpc => job.limits.file_size = Some(format_size(limit(rd)?)),
            "CoreDumpLimit" if !hpc => job.limits.core_dump = Some(format_size(limit(rd)?)),
            "DataSegmentLimit" if !hpc => job.limits.data_segment = Some(format_size(limit(rd)?)),
            "LockedMemoryLimit" if !hpc => job.limits.locked_memory = Some(format_size(limit(rd)?)),
            "StackSizeLimit" if !hpc => job.limits.stack = Some(format_size(limit(rd)?)),
            "OpenDescriptorsLimit" if !hpc => job.limits.open_files = Some(limit(rd)?),
            "ProcessCountLimit" if !hpc => job.limits.processes = Some(limit(rd)?),
            "PipeSizeLimit" | "ThreadCountLimit" if !hpc => {
                return Err(rd.err(e, format!("{}: Linux has no such per-process limit", qname(e))))
            }
            "UserName" | "GroupName" => {
                return Err(rd.err(
                    e,
                    format!("{}: the job runs as the account of your token; it cannot choose another", qname(e)),
                ))
            }
            _ => return Err(rd.unknown(e)),
        }
    }
    if job.executable.trim().is_empty() {
        return Err(rd.err(app, format!("{} has no Executable", qname(app))));
    }
    job.environment = env;
    if let Some(sp) = &sp {
        sp.check(rd, app)?;
    }
    Ok((memory, sp))
}

/// An executable in the job's directory runs as `./name`.
fn local_exec(p: &str) -> String {
    match p.strip_prefix(JOB_DIR) {
        Some(rest) => format!("./{}", rest.trim_start_matches('/')),
        None => p.to_string(),
    }
}
