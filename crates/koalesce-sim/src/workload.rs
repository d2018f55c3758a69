//! Grid workloads: the KOALA generators (000 §4.2 W30/W50, 003 §5.2, 003 Table 6.1), Poisson
//! arrivals scaled to a target utilization, and explicitly listed jobs.

use koalesce_core::expr::JobExpr;
use koalesce_core::model::{ComponentSpec, FileMode, JobSpec, Millis, Priority, ReplicaCatalogue, SiteId};

use crate::rng::Rng;
use crate::scenario::{GeneratedSpec, Scenario, ScenarioError, WorkloadSpec};

const GB: f64 = 1e9;

/// One grid job to submit during the simulation.
#[derive(Debug, Clone, PartialEq)]
pub struct GridArrival {
    pub submit_ms: Millis,
    pub spec: JobSpec,
    /// Actual runtime of every component on a site of speed 1.
    pub runtime_ms: Millis,
    /// Components that end with an application error.
    pub failing_components: Vec<u32>,
    /// The bag of tasks the job is a task of.
    pub bag: Option<BagTask>,
}

/// A task's bag (an explicit job with `tasks`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BagTask {
    /// The explicit job the bag is (its index in the workload's list).
    pub job: usize,
    /// The bag's name (its job's).
    pub bag: String,
    /// Successful tasks the bag needs.
    pub needed: u32,
}

/// The seeds' workload parameters, filled into a [`GeneratedSpec`] where it leaves them out.
pub fn preset(name: &str) -> Option<GeneratedSpec> {
    let sizes = |pairs: &[(u32, f64)]| Some(pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect());
    let koala_5_1 = |u: f64| GeneratedSpec {
        jobs: Some(200),
        // 1, 2 or 4 components of 8 or 16 processors, all combinations equally likely.
        shapes: Some(vec![(1, 8), (1, 16), (2, 8), (2, 16), (4, 8), (4, 16)]),
        runtime_s: sizes(&[(8, 192.0), (16, 90.0)]),
        file_sizes_gb: Some(vec![2.0, 4.0, 6.0]),
        replicas: Some(1),
        utilization: Some(u),
        priorities: Some(vec![Priority::High]),
        ..GeneratedSpec::default()
    };
    match name {
        "w30" => Some(koala_5_1(0.30)),
        "w50" => Some(koala_5_1(0.50)),
        // 003 §5.2: total size 36 (3 or 4 components) or 72 (3, 4, 6, 8), component size > 8.
        "unreliable" => Some(GeneratedSpec {
            jobs: Some(500),
            shapes: Some(vec![(3, 12), (4, 9), (3, 24), (4, 18), (6, 12), (8, 9)]),
            runtime_s: sizes(&[(9, 99.0), (12, 127.0), (18, 51.0), (24, 37.0)]),
            file_sizes_gb: Some(vec![4.0, 8.0]),
            replicas: Some(2),
            utilization: Some(0.5),
            priorities: Some(vec![Priority::High, Priority::Low]),
            ..GeneratedSpec::default()
        }),
        // 003 Table 6.1: sizes 8, 32, 48; W_nc single-component, W_c co-allocated.
        "wnc" => Some(GeneratedSpec {
            jobs: Some(400),
            shapes: Some(vec![(1, 8), (1, 32), (1, 48)]),
            default_runtime_s: Some(120.0),
            file_sizes_gb: Some(vec![]),
            arrivals_per_min: Some(2.4),
            priorities: Some(vec![Priority::High]),
            ..GeneratedSpec::default()
        }),
        "wc" => Some(GeneratedSpec {
            jobs: Some(400),
            shapes: Some(vec![(2, 4), (4, 2), (4, 8), (8, 4), (6, 8), (12, 4)]),
            default_runtime_s: Some(120.0),
            file_sizes_gb: Some(vec![]),
            arrivals_per_min: Some(2.4),
            priorities: Some(vec![Priority::High]),
            ..GeneratedSpec::default()
        }),
        _ => None,
    }
}

/// Fills unset fields of `spec` from its preset.
fn resolve(spec: &GeneratedSpec, scenario: &Scenario) -> Result<GeneratedSpec, ScenarioError> {
    let Some(name) = &spec.preset else { return Ok(spec.clone()) };
    let base = preset(name).ok_or_else(|| {
        scenario.workload_error(
            "preset",
            format!("unknown preset '{name}' (expected w30, w50, unreliable, wc or wnc)"),
        )
    })?;
    macro_rules! pick {
        ($($f:ident),*) => { GeneratedSpec { preset: spec.preset.clone(), $($f: spec.$f.clone().or(base.$f.clone())),* } };
    }
    let mut merged = pick!(
        jobs,
        shapes,
        runtime_s,
        default_runtime_s,
        file_sizes_gb,
        replicas,
        utilization,
        arrivals_per_min,
        priorities,
        start_s,
        estimate_factor
    );
    if spec.arrivals_per_min.is_some() && spec.utilization.is_none() {
        merged.utilization = None;
    }
    Ok(merged)
}

/// Builds the grid arrivals and registers the files they need in `catalogue`.
pub fn build(scenario: &Scenario, rng: &mut Rng, catalogue: &mut ReplicaCatalogue) -> Result<Vec<GridArrival>, ScenarioError> {
    for (i, f) in scenario.files.iter().enumerate() {
        let replicas = f
            .replicas
            .iter()
            .map(|r| {
                let site = scenario
                    .site_index(r)
                    .ok_or_else(|| scenario.invalid(format!("files[{i}].replicas"), format!("unknown site '{r}'")))?;
                Ok(SiteId(site as u32))
            })
            .collect::<Result<Vec<_>, ScenarioError>>()?;
        catalogue.insert(f.name.clone(), (f.size_gb * GB).round() as u64, replicas);
    }
    let largest = scenario.sites.iter().map(|s| s.processors).max().unwrap_or(0);
    match &scenario.workload {
        WorkloadSpec::Jobs { jobs } => {
            let mut out = Vec::with_capacity(jobs.len());
            for (i, j) in jobs.iter().enumerate() {
                let field = |f: &str| format!("jobs[{i}].{f}");
                if j.components.is_empty() {
                    return Err(scenario.workload_error(&field("components"), "a job needs at least one component"));
                }
                if !(j.runtime_s.is_finite() && j.runtime_s >= 0.0 && j.submit_s.is_finite() && j.submit_s >= 0.0) {
                    return Err(scenario.workload_error(&field("runtime_s"), "submit_s and runtime_s must be non-negative numbers"));
                }
                if !j.sites.is_empty() && j.sites.len() != j.components.len() {
                    return Err(scenario.workload_error(&field("sites"), "needs one entry per component (\"\" for not fixed)"));
                }
                let mut comps = Vec::new();
                for (k, &p) in j.components.iter().enumerate() {
                    let fixed = match j.sites.get(k).map(String::as_str) {
                        None | Some("") => None,
                        Some(name) => Some(SiteId(
                            scenario
                                .site_index(name)
                                .ok_or_else(|| scenario.workload_error(&field("sites"), format!("unknown site '{name}'")))?
                                as u32,
                        )),
                    };
                    if fixed.is_none() && p > largest {
                        return Err(scenario.workload_error(
                            &field("components"),
                            format!("component {k} requests {p} processors, more than any site has (largest: {largest})"),
                        ));
                    }
                    comps.push(ComponentSpec {
                        processors: p,
                        fixed_site: fixed,
                    });
                }
                for f in &j.files {
                    if catalogue.get(f).is_none() {
                        return Err(scenario.workload_error(&field("files"), format!("file '{f}' is not in [[files]]")));
                    }
                }
                let runtime_ms = (j.runtime_s * 1000.0).round() as Millis;
                let expr = |name: &str, text: &Option<String>| {
                    text.as_deref()
                        .map(JobExpr::new)
                        .transpose()
                        .map_err(|e| scenario.workload_error(&field(name), e.to_string()))
                };
                let (requirements, rank) = (expr("requirements", &j.requirements)?, expr("rank", &j.rank)?);
                let name = j.name.clone().unwrap_or_else(|| format!("job{i}"));
                let arrival = GridArrival {
                    submit_ms: (j.submit_s * 1000.0).round() as Millis,
                    spec: JobSpec {
                        name: name.clone(),
                        components: comps,
                        flexible: None,
                        input_files: j.files.clone(),
                        file_mode: FileMode::Whole,
                        runtime_estimate_ms: runtime_ms,
                        priority: j.priority,
                        policy: None,
                        requirements,
                        rank,
                        min_components: j.min_components,
                        preferences: Default::default(),
                        ..JobSpec::default()
                    },
                    runtime_ms,
                    failing_components: j.failing_components.clone(),
                    bag: None,
                };
                match j.tasks {
                    None if j.min_tasks.is_some() || !j.failing_tasks.is_empty() => {
                        return Err(scenario.workload_error(&field("tasks"), "min_tasks and failing_tasks need tasks"));
                    }
                    None => out.push(arrival),
                    Some(n) => {
                        let needed = j.min_tasks.unwrap_or(n);
                        if n == 0 || needed == 0 || needed > n {
                            return Err(scenario.workload_error(
                                &field("min_tasks"),
                                format!("tasks must be at least 1 and min_tasks in 1..=tasks ({n})"),
                            ));
                        }
                        if let Some(t) = j.failing_tasks.iter().find(|&&t| t >= n) {
                            return Err(scenario.workload_error(&field("failing_tasks"), format!("task {t} is not one of the {n} tasks")));
                        }
                        // Each task is a job of its own; the bag's verdict is the core's.
                        for t in 0..n {
                            let mut task = arrival.clone();
                            task.spec.name = format!("{name}-{t}");
                            if j.failing_tasks.contains(&t) {
                                task.failing_components = (0..j.components.len() as u32).collect();
                            }
                            task.bag = Some(BagTask {
                                job: i,
                                bag: name.clone(),
                                needed,
                            });
                            out.push(task);
                        }
                    }
                }
            }
            out.sort_by_key(|a| a.submit_ms);
            Ok(out)
        }
        WorkloadSpec::Generated(spec) => generate(scenario, &resolve(spec, scenario)?, rng, catalogue, largest),
    }
}

fn generate(
    scenario: &Scenario,
    spec: &GeneratedSpec,
    rng: &mut Rng,
    catalogue: &mut ReplicaCatalogue,
    largest: u32,
) -> Result<Vec<GridArrival>, ScenarioError> {
    let jobs = spec
        .jobs
        .ok_or_else(|| scenario.workload_error("jobs", "missing (or give a preset)"))?;
    let shapes = spec.shapes.clone().unwrap_or_default();
    if shapes.is_empty() {
        return Err(scenario.workload_error("shapes", "missing or empty (or give a preset)"));
    }
    for &(n, size) in &shapes {
        if n == 0 || size == 0 {
            return Err(scenario.workload_error("shapes", "components and sizes must be positive"));
        }
        if size > largest {
            return Err(scenario.workload_error(
                "shapes",
                format!("component size {size} is larger than every site (largest: {largest})"),
            ));
        }
    }
    let runtime_of = |size: u32| -> Result<f64, ScenarioError> {
        spec.runtime_s
            .as_ref()
            .and_then(|m| m.get(&size.to_string()).copied())
            .or(spec.default_runtime_s)
            .filter(|r| r.is_finite() && *r > 0.0)
            .ok_or_else(|| scenario.workload_error("runtime_s", format!("no positive runtime for component size {size}")))
    };
    let files = spec.file_sizes_gb.clone().unwrap_or_default();
    let replicas = spec.replicas.unwrap_or(1).max(1) as usize;
    // Files live on the storage-only sites when the scenario has any, else on every site.
    let storage: Vec<usize> = (0..scenario.sites.len()).filter(|&i| scenario.sites[i].storage_only).collect();
    let file_sites: Vec<usize> = if storage.is_empty() {
        (0..scenario.sites.len()).collect()
    } else {
        storage
    };
    if replicas > file_sites.len() {
        return Err(scenario.workload_error(
            "replicas",
            format!("{replicas} replicas but only {} sites can store files", file_sites.len()),
        ));
    }
    let priorities = spec.priorities.clone().filter(|p| !p.is_empty()).unwrap_or(vec![Priority::High]);
    // Mean processor-seconds of one job, for the arrival rate.
    let mut mean_work = 0.0;
    for &(n, size) in &shapes {
        mean_work += (n * size) as f64 * runtime_of(size)?;
    }
    mean_work /= shapes.len() as f64;
    let total_procs: u32 = scenario.sites.iter().map(|s| s.processors).sum();
    let mean_gap_s = match (spec.utilization, spec.arrivals_per_min) {
        (Some(u), _) if u > 0.0 && u.is_finite() => mean_work / (u * total_procs as f64),
        (_, Some(r)) if r > 0.0 && r.is_finite() => 60.0 / r,
        _ => return Err(scenario.workload_error("utilization", "give a positive utilization or arrivals_per_min")),
    };
    let estimate_factor = spec.estimate_factor.unwrap_or(1.0).max(1.0);
    let mut t = spec.start_s.unwrap_or(0) as f64;
    let mut out = Vec::with_capacity(jobs);
    for i in 0..jobs {
        if i > 0 {
            t += rng.exponential(mean_gap_s);
        }
        let (n, size) = shapes[rng.choose_index(shapes.len())];
        let runtime_ms = (runtime_of(size)? * 1000.0).round() as Millis;
        let mut input_files = Vec::new();
        if !files.is_empty() {
            let gb = files[rng.choose_index(files.len())];
            let name = format!("input-{i:05}");
            let mut sites = file_sites.clone();
            rng.shuffle(&mut sites);
            catalogue.insert(
                name.clone(),
                (gb * GB).round() as u64,
                sites[..replicas].iter().map(|&s| SiteId(s as u32)),
            );
            input_files.push(name);
        }
        let priority = priorities[rng.choose_index(priorities.len())];
        out.push(GridArrival {
            submit_ms: (t * 1000.0).round() as Millis,
            spec: JobSpec {
                name: format!("{n}x{size}-{i}"),
                components: (0..n)
                    .map(|_| ComponentSpec {
                        processors: size,
                        fixed_site: None,
                    })
                    .collect(),
                flexible: None,
                input_files,
                file_mode: FileMode::Whole,
                runtime_estimate_ms: (runtime_ms as f64 * estimate_factor).round() as Millis,
                priority,
                policy: None,
                min_components: None,
                preferences: Default::default(),
                ..JobSpec::default()
            },
            runtime_ms,
            failing_components: Vec::new(),
            bag: None,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn das2(workload: &str) -> Scenario {
        let text = format!(
            r#"
name = "t"
[[sites]]
name = "vu"
processors = 144
[[sites]]
name = "leiden"
processors = 56
[[sites]]
name = "uva"
processors = 56
[[sites]]
name = "delft"
processors = 64
[[sites]]
name = "utrecht"
processors = 64
{workload}
"#
        );
        Scenario::parse(&text, Path::new("t.toml")).unwrap()
    }

    #[test]
    fn w30_matches_the_seed_arrival_span() {
        // 003 §5.1.2: with W30 the last job arrives around 6500 s after the first.
        let s = das2("[workload]\nkind = \"generated\"\npreset = \"w30\"\nreplicas = 3\n");
        let mut spans = Vec::new();
        for seed in 0..10 {
            let mut cat = ReplicaCatalogue::new();
            let jobs = build(&s, &mut Rng::new(seed), &mut cat).unwrap();
            assert_eq!(jobs.len(), 200);
            assert_eq!(cat.len(), 200);
            assert!(cat.iter().all(|(_, e)| e.replicas.len() == 3));
            spans.push(jobs.last().unwrap().submit_ms as f64 / 1000.0);
        }
        let mean = spans.iter().sum::<f64>() / spans.len() as f64;
        assert!((5000.0..7500.0).contains(&mean), "mean span {mean}");
    }

    #[test]
    fn w50_arrives_faster_than_w30() {
        let span = |preset: &str| {
            let s = das2(&format!("[workload]\nkind = \"generated\"\npreset = \"{preset}\"\n"));
            build(&s, &mut Rng::new(3), &mut ReplicaCatalogue::new())
                .unwrap()
                .last()
                .unwrap()
                .submit_ms
        };
        assert!(span("w50") < span("w30"));
    }

    #[test]
    fn unreliable_shapes_have_total_36_or_72() {
        let s = das2("[workload]\nkind = \"generated\"\npreset = \"unreliable\"\n");
        let jobs = build(&s, &mut Rng::new(1), &mut ReplicaCatalogue::new()).unwrap();
        assert_eq!(jobs.len(), 500);
        for j in &jobs {
            let total = j.spec.total_processors();
            assert!(total == 36 || total == 72, "{total}");
            assert!(j.spec.components.iter().all(|c| c.processors > 8));
        }
        assert!(jobs.iter().any(|j| j.spec.priority == Priority::Low));
    }

    #[test]
    fn oversized_component_is_an_error_naming_the_field() {
        let s = das2("[workload]\nkind = \"jobs\"\njobs = [{ submit_s = 0, components = [500], runtime_s = 1 }]\n");
        let e = build(&s, &mut Rng::new(1), &mut ReplicaCatalogue::new()).unwrap_err().to_string();
        assert!(e.contains("workload.jobs[0].components") && e.contains("500"), "{e}");
    }

    #[test]
    fn a_replica_at_an_unknown_site_is_an_error_not_a_panic() {
        // `Scenario`'s fields are public: a caller can change one after `parse` validated it.
        let mut s =
            das2("[[files]]\nname = \"in\"\nsize_gb = 1.0\nreplicas = [\"vu\"]\n[workload]\nkind = \"generated\"\npreset = \"w30\"\n");
        assert!(build(&s, &mut Rng::new(1), &mut ReplicaCatalogue::new()).is_ok());
        s.files[0].replicas.push("nowhere".into());
        let e = build(&s, &mut Rng::new(1), &mut ReplicaCatalogue::new()).unwrap_err().to_string();
        assert!(e.contains("files[0].replicas") && e.contains("nowhere"), "{e}");
    }
}
