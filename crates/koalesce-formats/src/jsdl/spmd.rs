//! The JSDL SPMD Application extension (GFD.115, namespace
//! `http://schemas.ogf.org/jsdl/2007/02/jsdl-spmd`): a parallel program of
//! NumberOfProcesses processes, ProcessesPerHost of them on each host, each with
//! ThreadsPerProcess threads, started by the SPMDVariation's launcher (MPI and friends).
//!
//! Mapping: one coupled component per host (processes per host × threads per process
//! processors); without ProcessesPerHost one one-process component per process, packed on
//! few sites (CM), as GT2 RSL's jobType=mpi.

use koalesce_api::{ComponentDescription, JobDescription, Runner};
use roxmltree::Node;

use super::{qname, Reader, Resources};
use crate::common::FormatError;

/// Largest number of processes accepted (a bound on the components built).
const MAX_PROCESSES: u64 = 100_000;

/// The SPMD elements of a jsdl-spmd:SPMDApplication.
#[derive(Default)]
pub(super) struct Spmd<'a> {
    processes: Option<(Option<u64>, Node<'a, 'a>)>,
    /// NumberOfProcesses@actualtotalcpucount="true": as many processes as TotalCPUCount.
    actual_total: bool,
    per_host: Option<(u64, Node<'a, 'a>)>,
    threads: Option<(Option<u64>, Node<'a, 'a>)>,
    /// ThreadsPerProcess@actualindividualcpucount="true": as many threads as
    /// IndividualCPUCount.
    actual_individual: bool,
    variation: Option<(String, Node<'a, 'a>)>,
}

fn flag(v: Option<&str>) -> bool {
    matches!(v.map(str::trim), Some("true" | "1"))
}

impl<'a> Spmd<'a> {
    /// Reads one element of the jsdl-spmd namespace.
    pub fn element(&mut self, rd: &Reader<'a>, e: Node<'a, 'a>) -> Result<(), FormatError> {
        let positive = |rd: &Reader, allow_empty: bool| -> Result<Option<u64>, FormatError> {
            let t = rd.text(e)?;
            if t.is_empty() && allow_empty {
                return Ok(None);
            }
            match t.parse::<u64>() {
                Ok(n) if (1..=MAX_PROCESSES).contains(&n) => Ok(Some(n)),
                _ => Err(rd.err(e, format!("{}: '{t}' is not a whole number from 1 to {MAX_PROCESSES}", qname(e)))),
            }
        };
        match e.tag_name().name() {
            "NumberOfProcesses" => {
                rd.attrs(e, &["actualtotalcpucount"])?;
                self.actual_total = flag(e.attribute("actualtotalcpucount"));
                self.processes = Some((positive(rd, self.actual_total)?, e));
            }
            "ProcessesPerHost" => {
                rd.attrs(e, &[])?;
                self.per_host = Some((positive(rd, false)?.unwrap_or(1), e));
            }
            "ThreadsPerProcess" => {
                rd.attrs(e, &["actualindividualcpucount"])?;
                self.actual_individual = flag(e.attribute("actualindividualcpucount"));
                self.threads = Some((positive(rd, self.actual_individual)?, e));
            }
            "SPMDVariation" => {
                rd.attrs(e, &[])?;
                self.variation = Some((rd.text(e)?, e));
            }
            _ => return Err(rd.unknown(e)),
        }
        Ok(())
    }

    /// GFD.115 §4: NumberOfProcesses and SPMDVariation are required (the former may be
    /// left to TotalCPUCount with actualtotalcpucount).
    pub fn check(&self, rd: &Reader, app: Node) -> Result<(), FormatError> {
        let Some((uri, node)) = &self.variation else {
            return Err(rd.err(
                app,
                "jsdl-spmd:SPMDApplication has no jsdl-spmd:SPMDVariation (GFD.115 §4.4 requires one)",
            ));
        };
        // GFD.115 §4.4 names the variations by URI,
        // http://www.ogf.org/jsdl/2007/02/jsdl-spmd/<Name>.
        let name = uri.trim_end_matches('/').rsplit('/').next().unwrap_or_default();
        let known_mpi = ["MPI", "GridMPI", "IntelMPI", "LAM-MPI", "MPICH1", "MPICH2", "OpenMPI", "POE"];
        if !known_mpi.iter().any(|k| k.eq_ignore_ascii_case(name)) && !name.eq_ignore_ascii_case("None") {
            return Err(rd.err(
                *node,
                format!(
                    "jsdl-spmd:SPMDVariation '{uri}' cannot be honoured: koalesce starts MPI programs (MPI, MPICH1, MPICH2, OpenMPI, LAM-MPI, IntelMPI, GridMPI, POE) or plain copies (None)"
                ),
            ));
        }
        if self.processes.is_none() {
            return Err(rd.err(app, "jsdl-spmd:SPMDApplication has no jsdl-spmd:NumberOfProcesses"));
        }
        Ok(())
    }

    fn is_mpi(&self) -> bool {
        let uri = self.variation.as_ref().map(|v| v.0.as_str()).unwrap_or_default();
        !uri.trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .eq_ignore_ascii_case("None")
    }
}

/// The components of an SPMD job, checked against the Resources' CPU counts.
pub(super) fn components(rd: &Reader, sp: &Spmd, res: &Resources, job: &mut JobDescription) -> Result<(), FormatError> {
    let (n_opt, n_node) = sp.processes.expect("checked by Spmd::check");
    let n = match (n_opt, sp.actual_total, res.total_cpus) {
        (_, true, Some(total)) => total,
        (None, true, None) => {
            return Err(rd.err(
                n_node,
                "jsdl-spmd:NumberOfProcesses@actualtotalcpucount needs jsdl:TotalCPUCount in jsdl:Resources",
            ))
        }
        (Some(v), _, _) => v,
        (None, false, _) => unreachable!("an empty NumberOfProcesses is refused without actualtotalcpucount"),
    };
    if n > MAX_PROCESSES {
        return Err(rd.err(n_node, format!("{n} processes is too many")));
    }
    let threads = match sp.threads {
        None => 1,
        Some((_, node)) if sp.actual_individual => res.individual_cpus.ok_or_else(|| {
            rd.err(
                node,
                "jsdl-spmd:ThreadsPerProcess@actualindividualcpucount needs jsdl:IndividualCPUCount in jsdl:Resources",
            )
        })?,
        Some((Some(t), _)) => t,
        Some((None, node)) => return Err(rd.err(node, "jsdl-spmd:ThreadsPerProcess is empty")),
    };
    // GFD.115 §4.1: "the total number of processes" — with TotalCPUCount too, the two must
    // agree (each process takes ThreadsPerProcess CPUs).
    if let Some(total) = res.total_cpus {
        if !sp.actual_total && n.checked_mul(threads) != Some(total) {
            return Err(rd.err(
                n_node,
                format!("jsdl-spmd:NumberOfProcesses {n} × {threads} thread(s) disagrees with jsdl:TotalCPUCount {total}"),
            ));
        }
    }
    let per_host = match (sp.per_host, res.individual_cpus, res.resource_count) {
        (Some((p, _)), _, _) => Some(p),
        // Hosts of IndividualCPUCount CPUs each hold that many processes' threads.
        (None, Some(each), _) if !sp.actual_individual => Some((each / threads).max(1)),
        (None, _, Some(r)) => Some(n.div_ceil(r)),
        (None, _, None) => None,
    };
    let mut comps = Vec::new();
    match per_host {
        Some(p) => {
            let p = p.min(n);
            let hosts = n.div_ceil(p);
            if let Some(r) = res.resource_count {
                if r != hosts {
                    let at = sp.per_host.map_or(n_node, |x| x.1);
                    return Err(rd.err(
                        at,
                        format!("{n} processes at {p} per host need {hosts} hosts, but jsdl:TotalResourceCount is {r}"),
                    ));
                }
            }
            for h in 0..hosts {
                let procs = if h + 1 == hosts { n - p * (hosts - 1) } else { p };
                let cpus = procs
                    .checked_mul(threads)
                    .and_then(|c| u32::try_from(c).ok())
                    .ok_or_else(|| rd.err(n_node, "too many CPUs per host"))?;
                comps.push(ComponentDescription::new(cpus));
            }
        }
        None => {
            let cpus = u32::try_from(threads).map_err(|_| rd.err(n_node, "too many threads per process"))?;
            comps = (0..n).map(|_| ComponentDescription::new(cpus)).collect();
            job.policy = Some("cm".into());
        }
    }
    job.components = comps;
    job.flexible = None;
    job.runner = if sp.is_mpi() { Runner::Coupled } else { Runner::Independent };
    Ok(())
}
