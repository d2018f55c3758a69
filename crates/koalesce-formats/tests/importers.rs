//! The importers on files written from each format's documentation (tests/data): what maps
//! to what, and that what cannot be honoured is refused with its line and column.

use koalesce_api::{JobDescription, Runner};
use koalesce_core::expr::{Expr, IntVar, SiteSnapshot, StrVar};
use koalesce_formats::{convert, detect, Format, FormatError, Options, TaskContext};

fn read(path: &str) -> String {
    std::fs::read_to_string(format!("{}/tests/data/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

fn opts(path: &str) -> Options {
    Options {
        name_hint: path.rsplit('/').next().and_then(|f| f.split('.').next()).map(str::to_string),
        task: None,
        sites: vec!["vu".into(), "leiden".into()],
    }
}

/// Converts a file with the detected format, which must be `want`.
fn jobs(path: &str, want: Format) -> Result<Vec<JobDescription>, FormatError> {
    let text = read(path);
    assert_eq!(detect(&text), want, "{path} detected as another format");
    convert(&text, want, &opts(path))
}

fn one(path: &str, want: Format) -> JobDescription {
    let mut v = jobs(path, want).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert_eq!(v.len(), 1);
    v.pop().unwrap()
}

fn refused(path: &str, want: Format, line: usize, words: &[&str]) -> FormatError {
    let e = jobs(path, want).expect_err(path);
    assert_eq!(e.line, Some(line), "{path}: {e}");
    for w in words {
        assert!(e.to_string().contains(w), "{path}: '{w}' not in: {e}");
    }
    e
}

#[test]
fn jsdl_posix_maps_every_element() {
    let j = one("jsdl/posix-basic.jsdl", Format::Jsdl);
    assert_eq!(j.name, "poisson-solver");
    assert_eq!(j.executable, "/usr/local/bin/poisson");
    assert_eq!(j.arguments, ["-n", "1024", "grid.in"]);
    assert_eq!(j.environment["OMP_NUM_THREADS"], "2");
    assert_eq!(
        (j.stdin.as_deref(), j.stdout.as_deref(), j.stderr.as_deref()),
        (Some("params.txt"), Some("solver.out"), Some("solver.err"))
    );
    assert_eq!(j.working_directory.as_deref(), Some("run"));
    assert_eq!((j.walltime.as_deref(), j.cputime.as_deref()), (Some("1h"), Some("2h")));
    // 8 CPUs in all, 2 per resource: 4 components of 2, started together.
    assert_eq!(j.components.iter().map(|c| c.processors).collect::<Vec<_>>(), [2, 2, 2, 2]);
    assert_eq!(j.runner, Runner::Coupled);
    // 2 GiB per resource of 2 CPUs: 1 GiB per processor.
    assert_eq!(j.memory.as_deref(), Some("1G"));
    assert_eq!(j.limits.open_files, Some(1024));
    assert_eq!(j.inputs[0].file, "grids/grid-1024.in");
    assert_eq!(j.inputs[0].local_name(), "grid.in");
    assert_eq!(j.outputs[0].logical_name(5), "results/solution-1024.dat");
    let req = Expr::compile(j.requirements.as_deref().unwrap()).unwrap();
    let mut site = SiteSnapshot::default();
    site.set_str(StrVar::Arch, "x86_64");
    site.set_str(StrVar::OsName, "Linux");
    assert!(req.matches(&site));
    site.set_str(StrVar::Arch, "sparc");
    assert!(!req.matches(&site));
}

#[test]
fn jsdl_default_namespace_cdata_entities_and_absolute_working_directory() {
    let j = one("jsdl/default-ns.jsdl", Format::Jsdl);
    assert_eq!(j.name, "shell & pipes");
    assert_eq!(j.arguments[1], "echo \"a < b\" && echo $((1 + 2)) > sum.txt");
    assert_eq!(j.arguments[2], "x<y&z");
    assert_eq!(j.stdout, None, "/dev/null is the default capture");
    assert_eq!(j.working_directory, None, "an absolute WorkingDirectory is the job's own directory");
    assert_eq!(j.memory.as_deref(), Some("512M"));
    assert_eq!(j.outputs[0].to.as_deref(), Some("sums/latest.txt"));
}

#[test]
fn jsdl_hpc_profile_total_cpus_is_a_flexible_request() {
    let j = one("jsdl/hpcpa.jsdl", Format::Jsdl);
    assert_eq!(j.flexible.as_ref().map(|f| f.total), Some(32));
    assert!(j.components.is_empty());
    assert_eq!(j.memory.as_deref(), Some("1G"), "32 GiB over 32 CPUs");
    assert_eq!(j.environment["SWEEP_ID"], "${KOALESCE_JOB_ID}");
    assert_eq!(j.stdout, j.stderr);
    let spec = j.to_spec(|_| None).unwrap();
    assert_eq!(spec.flexible.unwrap().total, 32);
}

#[test]
fn jsdl_ranges_file_systems_candidate_hosts_and_limits() {
    let j = one("jsdl/ranges.jsdl", Format::Jsdl);
    assert_eq!(j.executable, "./bin/analyse");
    assert_eq!(j.arguments, ["${KOALESCE_JOB_DIR}/tmp/data"]);
    assert_eq!(
        j.components.iter().map(|c| c.processors).collect::<Vec<_>>(),
        [4, 4],
        "exclusive lower bound 3 → 4 CPUs, 2 resources"
    );
    assert_eq!(
        j.cputime.as_deref(),
        Some("10m"),
        "the upper bound of IndividualCPUTime is the limit"
    );
    assert_eq!(j.limits.virtual_memory.as_deref(), Some("4G"));
    assert_eq!(j.limits.processes, Some(64));
    let req = Expr::compile(j.requirements.as_deref().unwrap()).unwrap();
    let mut s = SiteSnapshot::default();
    s.set_str(StrVar::Hostname, "node.leiden.nl");
    s.set_int(IntVar::FreeDiskMb, 2048);
    s.set_int(IntVar::CpuMhz, 2400);
    assert!(req.matches(&s));
    s.set_int(IntVar::CpuMhz, 4000);
    assert!(!req.matches(&s), "exclusive upper bound");
    s.set_int(IntVar::CpuMhz, 1050);
    assert!(req.matches(&s), "Exact 1 GHz ± 100 MHz");
    s.set_str(StrVar::Hostname, "delft");
    assert!(!req.matches(&s));
}

#[test]
fn jsdl_refusals_name_element_and_line() {
    refused("jsdl/wrong-namespace.jsdl", Format::Jsdl, 2, &["2006/11/jsdl", "2005/11/jsdl"]);
    refused("jsdl/no-namespace.jsdl", Format::Jsdl, 1, &["no namespace"]);
    refused("jsdl/unknown-posix-element.jsdl", Format::Jsdl, 8, &["jsdl-posix:Priority"]);
    refused(
        "jsdl/foreign-extension.jsdl",
        Format::Jsdl,
        12,
        &["PreferredBroker", "example.org/broker-hints"],
    );
    refused("jsdl/username.jsdl", Format::Jsdl, 8, &["UserName"]);
    refused("jsdl/doctype.jsdl", Format::Jsdl, 1, &["DTD"]);
    let e = refused("jsdl/gsiftp-staging.jsdl", Format::Jsdl, 28, &["gsiftp://"]);
    assert_eq!(e.column, Some(7));
}

#[test]
fn gridway_examples_map_with_variables() {
    let j = one("jt/ls.jt", Format::GridWay);
    assert_eq!(j.stdout.as_deref(), Some("ls.out.${KOALESCE_JOB_ID}"));
    assert!(
        j.outputs.iter().any(|o| o.file == "ls.err.${KOALESCE_JOB_ID}"),
        "streams come back like outputs"
    );
    assert_eq!(j.rank.as_deref(), Some("(CPU_MHZ * 2) + FREE_MEM_MB"));
    let m = one("jt/mpi.jt", Format::GridWay);
    assert_eq!(
        (m.components.len(), m.runner, m.policy.as_deref()),
        (4, Runner::Coupled, Some("cm"))
    );
    let d = one("jt/data-aware.jt", Format::GridWay);
    let rank = Expr::compile(d.rank.as_deref().unwrap()).unwrap();
    assert_eq!(rank.files(), ["myfile".to_string()]);
}

#[test]
fn gridway_array_tasks_substitute_per_task() {
    let text = read("jt/pi.jt");
    let task = |i: u32, array_id: Option<u64>| Options {
        name_hint: Some("pi".into()),
        task: Some(TaskContext {
            task_id: i,
            total_tasks: 4,
            array_id,
            param_start: 10,
            param_increment: 5,
            deferred: false,
        }),
        sites: vec![],
    };
    let t0 = convert(&text, Format::GridWay, &task(0, None)).unwrap().pop().unwrap();
    let t3 = convert(&text, Format::GridWay, &task(3, Some(41))).unwrap().pop().unwrap();
    assert_eq!(t0.name, "pi-0");
    assert_eq!(t3.arguments, ["3", "4", "100000"]);
    assert_eq!(t3.stdout.as_deref(), Some("stdout_file.3"));
    assert!(
        t3.inputs.iter().any(|f| f.file == "param.25" && f.local_name() == "param"),
        "PARAM = 10 + 5×3: {:?}",
        t3.inputs
    );
    assert_eq!(t3.environment["GW_TASK_ID"], "3");
    assert_eq!(t0.executable, "./pi");
    assert!(t0.inputs[0].executable);
    // Not an array: GridWay's values (gw_job_init: task_id = 0, total_tasks = 0).
    let single = one("jt/pi.jt", Format::GridWay);
    assert_eq!(single.arguments, ["0", "0", "100000"]);
}

/// A bag's one description (`submit --tasks N`) keeps the task variables as references; each
/// task's copy as the server makes it (`for_task`) is what converting that task alone gives.
#[test]
fn a_gridway_bag_is_one_description_whose_task_copies_are_the_tasks() {
    let text = read("jt/pi.jt");
    let opts = |task: TaskContext| Options {
        name_hint: Some("pi".into()),
        task: Some(TaskContext {
            param_start: 10,
            param_increment: 5,
            ..task
        }),
        sites: vec![],
    };
    let bag = convert(&text, Format::GridWay, &opts(TaskContext::bag(4))).unwrap().pop().unwrap();
    assert_eq!(bag.name, "pi-${KOALESCE_TASK_ID}");
    assert_eq!(bag.arguments, ["${KOALESCE_TASK_ID}", "${KOALESCE_ARRAY_TASK_COUNT}", "100000"]);
    assert!(bag.inputs.iter().any(|f| f.file == "param.${KOALESCE_PARAM}"), "{:?}", bag.inputs);
    for k in 0..4u32 {
        let vars: std::collections::BTreeMap<String, String> = [
            ("KOALESCE_TASK_ID", k.to_string()),
            ("KOALESCE_ARRAY_TASK_COUNT", "4".to_string()),
            ("KOALESCE_ARRAY_JOB_ID", "41".to_string()),
            ("KOALESCE_PARAM", (10 + 5 * k).to_string()),
            ("KOALESCE_MAX_PARAM", "25".to_string()),
        ]
        .into_iter()
        .map(|(a, b)| (a.to_string(), b))
        .collect();
        let copy = bag.for_task(&vars).unwrap();
        let alone = convert(&text, Format::GridWay, &opts(TaskContext::new(k, 4)))
            .unwrap()
            .pop()
            .unwrap();
        assert_eq!(copy, alone, "task {k}");
    }
}

#[test]
fn gridway_every_default_keyword_is_understood() {
    let j = one("jt/full.jt", Format::GridWay);
    assert_eq!(j.name, "full-template");
    assert_eq!(j.executable, "./simulate");
    assert_eq!(j.arguments, ["-i", "input.dat", "-o", "result file.txt"]);
    assert_eq!(j.environment["SCRATCH_DIR"], "/tmp");
    assert_eq!(j.environment["GREETING"], "hello, world");
    assert_eq!(j.deadline.as_deref(), Some("90m"));
    assert_eq!(j.retries, Some(0), "RESCHEDULE_ON_FAILURE = no");
    assert_eq!(j.components[0].processors, 8);
    assert!(j.inputs.iter().any(|f| f.file == "sets/big.dat"));
    assert!(j
        .outputs
        .iter()
        .any(|o| o.file == "log.txt" && o.to.as_deref() == Some("logs/log.${KOALESCE_JOB_ID}")));
    let s = one("jt/shell.jt", Format::GridWay);
    assert_eq!(
        s.executable, "/bin/sh",
        "shell expansions run in a shell, as GridWay's wrapper does"
    );
    assert!(
        s.arguments[1].contains("$RANDOM") && s.arguments[1].contains("expr 0 + 3"),
        "{:?}",
        s.arguments
    );
}

#[test]
fn gridway_refusals_name_keyword_line_and_column() {
    refused("jt/err-restart.jt", Format::GridWay, 3, &["RESTART_FILES"]);
    let e = refused("jt/err-requirements.jt", Format::GridWay, 2, &["REQUIREMENTS", "FOO"]);
    assert_eq!(e.column, Some(49));
    refused("jt/err-unknown.jt", Format::GridWay, 2, &["QUEUE"]);
    refused("jt/err-gsiftp.jt", Format::GridWay, 2, &["gsiftp://"]);
    refused("jt/err-dependencies.jt", Format::GridWay, 2, &["JOB_DEPENDENCIES", "'x13'"]);
}

#[test]
fn gridway_job_dependencies_wait_for_successful_jobs() {
    let j = one("jt/dependencies.jt", Format::GridWay);
    assert_eq!(j.afterok, [12, 13, 14]);
    assert!(j.after.is_empty() && j.afterany.is_empty());
}

#[test]
fn rsl_spec_example_staging_and_job_types() {
    let j = one("rsl/spec-example.rsl", Format::Rsl);
    assert_eq!(j.executable, "/home/nobody/bin/a.out");
    assert_eq!(j.arguments, ["/home/nobody/data/file1", "/home/nobody/data/file2", "$(FOO)"]);
    assert_eq!(j.environment["DATADIR"], "/home/nobody/data");
    let s = one("rsl/stage.rsl", Format::Rsl);
    assert_eq!(s.executable, "./my_echo", "an absolute staging destination becomes the job's copy");
    assert!(s.inputs.iter().any(|f| f.file == "bin/echo" && f.executable));
    assert_eq!(
        (s.walltime.as_deref(), s.cputime.as_deref(), s.memory.as_deref()),
        (Some("30m"), Some("25m"), Some("1024M"))
    );
    assert_eq!((s.stdout.as_deref(), s.stderr.as_deref()), (Some("echo.out"), Some("echo.err")));
    assert_eq!(s.requirements.as_deref(), Some("QUEUE_NAME = \"short\""));
    assert_eq!(s.outputs[0].to.as_deref(), Some("results/run-1.dat"));
    let m = one("rsl/mpi.rsl", Format::Rsl);
    assert_eq!((m.components.len(), m.runner), (4, Runner::Coupled), "(JobType=MPI)(count=4)");
    assert_eq!(m.stdout, None, "streamed to the submitter: kept for koalesce status");
}

#[test]
fn rsl_multirequest_is_one_coallocated_job() {
    let j = one("rsl/multi.rsl", Format::Rsl);
    assert_eq!(j.runner, Runner::Coupled, "strict-barrier");
    assert_eq!(j.components.len(), 2);
    assert_eq!((j.components[0].processors, j.components[0].site.as_deref()), (4, Some("vu")));
    assert_eq!((j.components[1].processors, j.components[1].site.as_deref()), (8, None));
    assert_eq!(j.environment["LD_LIBRARY_PATH"], "/usr/globus/lib");
    assert_eq!(j.components[1].environment["GLOBUS_DUROC_SUBJOB_INDEX"], "1");
    assert_eq!(j.components[1].arguments.as_deref(), Some(&["--worker".to_string()][..]));
    let spec = j.to_spec(|n| (n == "vu").then_some(koalesce_core::SiteId(0))).unwrap();
    assert_eq!(spec.components[0].fixed_site, Some(koalesce_core::SiteId(0)));
    // Each component runs with its own environment and arguments.
    let rt = Default::default();
    assert_eq!(j.process(0, &rt).environment["GLOBUS_DUROC_SUBJOB_INDEX"], "0");
    assert_eq!(j.process(1, &rt).arguments, ["--worker"]);
}

#[test]
fn rsl_refusals_have_positions() {
    refused("rsl/err-gsiftp.rsl", Format::Rsl, 2, &["gsiftp://"]);
    refused("rsl/err-undefined.rsl", Format::Rsl, 1, &["GLOBUS_LOCATION"]);
    let e = refused("rsl/err-unclosed.rsl", Format::Rsl, 2, &["not closed"]);
    assert_eq!(e.column, Some(13));
    refused("rsl/err-xrsl-attribute.rsl", Format::Rsl, 1, &["inputFiles", "--format xrsl"]);
}

#[test]
fn xrsl_jobs() {
    let h = one("xrsl/hello.xrsl", Format::Xrsl);
    assert_eq!(
        (h.name.as_str(), h.stdout.as_deref(), h.stderr.as_deref()),
        ("hello", Some("out.txt"), Some("out.txt"))
    );
    assert_eq!(h.cputime.as_deref(), Some("10m"));
    let d = one("xrsl/data.xrsl", Format::Xrsl);
    assert_eq!(d.executable, "./run.sh");
    assert!(d.inputs.iter().any(|f| f.file == "run.sh" && f.executable));
    assert!(d
        .inputs
        .iter()
        .any(|f| f.file == "datasets/input-42.dat" && f.local_name() == "input.dat"));
    assert!(d.inputs.iter().any(|f| f.file == "calib.db"));
    assert_eq!(
        (d.walltime.as_deref(), d.memory.as_deref(), d.retries),
        (Some("2h"), Some("2000M"), Some(2))
    );
    assert_eq!(d.components[0].processors, 4);
    assert_eq!(d.priority.as_deref(), Some("super-high"));
    let req = Expr::compile(d.requirements.as_deref().unwrap()).unwrap();
    assert_eq!(req.software(), ["APPS/HEP/ATLAS-17.2".to_string()]);
    let m = jobs("xrsl/multi.xrsl", Format::Xrsl).unwrap();
    assert_eq!(m.iter().map(|j| j.name.as_str()).collect::<Vec<_>>(), ["first", "second"]);
    assert_eq!(m[1].walltime.as_deref(), Some("15m"));
    refused("xrsl/err-notify.xrsl", Format::Xrsl, 2, &["notify"]);
    // `(|(queue=a)(queue=b))` inside the conjunction: a requirement that either holds.
    let alt = one("xrsl/queue-alternatives.xrsl", Format::Xrsl);
    assert_eq!(alt.requirements.as_deref(), Some(r#"QUEUE_NAME = "short" | QUEUE_NAME = "long""#));
    // A whole request of alternatives is still one description too many.
    let e = convert("|(&(executable=/bin/a))(&(executable=/bin/b))", Format::Xrsl, &opts("x")).unwrap_err();
    assert!(e.message.contains("'|'"), "{e}");
}

#[test]
fn detection_of_each_format() {
    assert_eq!(
        detect("name = \"x\"\nexecutable = \"/bin/true\"\n[[components]]\nprocessors = 1\n"),
        Format::Toml
    );
    assert_eq!(detect("\u{feff}<?xml version=\"1.0\"?><a/>"), Format::Jsdl);
    assert_eq!(detect("(* hi *) &(executable=x)(jobName=y)(wallTime=3)"), Format::Xrsl);
    assert_eq!(detect("  +(&(executable=x)(count=2))(&(executable=x))"), Format::Rsl);
    assert_eq!(detect("# a template\n\nEXECUTABLE=/bin/ls\n"), Format::GridWay);
    assert_eq!(detect("executable = '/bin/ls'\n"), Format::Toml, "lower-case keys are TOML");
    // Forcing a format that does not fit gives an error, not a panic.
    assert!(convert("name = 'x'", Format::Jsdl, &Options::default()).is_err());
    assert!(convert("&(executable=/bin/ls)", Format::GridWay, &Options::default()).is_err());
}

#[test]
fn real_world_idioms_are_accepted() {
    // The staged executable also listed in INPUT_FILES (common in GridWay templates).
    let t = "EXECUTABLE = script.sh\nINPUT_FILES = script.sh, data.in\nCPULOAD_THRESHOLD = 50\n";
    let j = convert(t, Format::GridWay, &Options::default()).unwrap().pop().unwrap();
    assert_eq!(j.inputs.iter().filter(|f| f.file == "script.sh").count(), 1);
    assert!(j.inputs[0].executable);
    // RSL without a leading '&', mixed-case attribute names, a label on a single request.
    let r = convert(
        "(Executable=/bin/hostname)(Count=2)(JOB_TYPE=multiple)(label=probe)",
        Format::Rsl,
        &Options::default(),
    )
    .unwrap()
    .pop()
    .unwrap();
    assert_eq!(r.components.len(), 2);
    assert_eq!(r.components[1].label.as_deref(), Some("probe"));
    // xRSL times with a unit and as a clock.
    let x = convert(
        "&(executable=/bin/true)(wallTime=\"90m\")(cpuTime=\"1:00:00\")",
        Format::Xrsl,
        &Options::default(),
    )
    .unwrap()
    .pop()
    .unwrap();
    assert_eq!((x.walltime.as_deref(), x.cputime.as_deref()), (Some("90m"), Some("1h")));
    // JSDL booleans in another case.
    let jsdl = r#"<jsdl:JobDefinition xmlns:jsdl="http://schemas.ggf.org/jsdl/2005/11/jsdl" xmlns:p="http://schemas.ggf.org/jsdl/2005/11/jsdl-posix"><jsdl:JobDescription><jsdl:Application><p:POSIXApplication><p:Executable>/bin/true</p:Executable></p:POSIXApplication></jsdl:Application><jsdl:Resources><jsdl:ExclusiveExecution>False</jsdl:ExclusiveExecution></jsdl:Resources></jsdl:JobDescription></jsdl:JobDefinition>"#;
    assert!(convert(jsdl, Format::Jsdl, &Options::default()).is_ok());
}
