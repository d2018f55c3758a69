//! The importers on real job files from other projects (tests/data/real, see its README):
//! each valid file imports with the values written in it; what koalesce cannot honour is
//! an error naming the element or attribute, its line, and why.

use koalesce_api::{JobDescription, Runner};
use koalesce_formats::{convert, decode, detect, Format, FormatError, Options, TaskContext};

fn read(path: &str) -> String {
    std::fs::read_to_string(format!("{}/tests/data/real/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

fn opts(path: &str, task: Option<TaskContext>) -> Options {
    Options {
        name_hint: path.rsplit('/').next().and_then(|f| f.split('.').next()).map(str::to_string),
        task,
        sites: vec!["grid1".into()],
    }
}

fn jobs(path: &str, want: Format) -> Result<Vec<JobDescription>, FormatError> {
    let text = read(path);
    assert_eq!(detect(&text), want, "{path} detected as another format");
    convert(&text, want, &opts(path, None))
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

fn procs(j: &JobDescription) -> Vec<u32> {
    j.components.iter().map(|c| c.processors).collect()
}

#[test]
fn gridway_pi_single_job_sees_task_zero_of_zero() {
    let j = one("jt/gridway-pi.jt", Format::GridWay);
    assert_eq!(j.executable, "./pi");
    assert_eq!(j.arguments, ["0", "0", "100000"], "gw_job_init: task_id = 0, total_tasks = 0");
    assert_eq!(j.stdout.as_deref(), Some("stdout_file.0"));
    assert_eq!(j.rank.as_deref(), Some("CPU_MHZ"));
    let files: Vec<&str> = j.inputs.iter().map(|i| i.file.as_str()).collect();
    assert_eq!(files, ["pi", "pi.c"]);
    assert!(j.inputs[0].executable);
    // As an array task: ${TASK_ID} and ${TOTAL_TASKS} of that task.
    let t = convert(
        &read("jt/gridway-pi.jt"),
        Format::GridWay,
        &opts("jt/gridway-pi.jt", Some(TaskContext::new(2, 4))),
    )
    .unwrap();
    assert_eq!(t[0].arguments, ["2", "4", "100000"]);
    assert_eq!(t[0].stderr.as_deref(), Some("stderr_file.2"));
}

#[test]
fn gridway_mpi_and_ls_examples() {
    let m = one("jt/gridway-mpi.jt", Format::GridWay);
    assert_eq!(m.runner, Runner::Coupled, "TYPE = \"mpi\"");
    assert_eq!(procs(&m), [1], "NP = 1");
    assert_eq!(m.requirements.as_deref(), Some(r#"LRMS_TYPE != "Fork" & HOSTNAME = "*.lrz.de""#));
    assert_eq!(m.rank.as_deref(), Some("CPU_MHZ + QUEUE_FREENODECOUNT"));
    assert_eq!(m.stdout.as_deref(), Some("stdout.${KOALESCE_JOB_ID}"));
    let l = one("jt/gridway-ls.jt", Format::GridWay);
    assert_eq!(
        (l.executable.as_str(), l.arguments.as_slice()),
        ("/bin/ls", &["-la".to_string()][..])
    );
    assert_eq!(l.stdin, None, "STDIN_FILE = /dev/null");
    assert_eq!(l.requirements.as_deref(), Some(r#"(ARCH = "i686" | ARCH="x86") & CPU_MHZ > 1000"#));
    assert_eq!(l.rank.as_deref(), Some("(CPU_MHZ * 2) + FREE_MEM_MB"));
}

#[test]
fn gridway_test_templates() {
    let m = one("jt/gridway-migration.jt", Format::GridWay);
    assert_eq!(
        (m.executable.as_str(), m.arguments.as_slice()),
        ("/bin/sleep", &["60".to_string()][..])
    );
    assert_eq!(m.environment["VAL1"], "example");
    assert_eq!(m.environment["VAL2"], "other");
    assert_eq!(m.environment["VAL4"], "234");
    let b = one("jt/gridway-workflow-B.jt", Format::GridWay);
    assert_eq!(b.executable, "./sum");
    assert_eq!(b.arguments, ["out.A", "1"]);
    assert_eq!(b.stdout.as_deref(), Some("out.B"));
    assert!(b.inputs.iter().any(|i| i.file == "out.A"));
    // URLs of the client's files and gsiftp servers cannot be staged.
    refused("jt/gridway-input_output_files.jt", Format::GridWay, 3, &["INPUT_FILES", "file://"]);
    // Checkpoint files cannot be honoured.
    refused("jt/gridway-sleep.jt", Format::GridWay, 6, &["RESTART_FILES", "checkpoint"]);
}

#[test]
fn gridway_default_template_examples() {
    let path = "jt/default-template-examples.jt";
    let j = one(path, Format::GridWay);
    // "SCRATCH_DIR /tmp" (name and value separated by a blank) and "NAME=value".
    assert!(
        j.arguments
            .iter()
            .any(|a| a.contains("SCRATCH_DIR=\"/tmp\"") && a.contains("LD_LIBRARY_PATH=\"/usr/local/lib\"")),
        "{:?}",
        j.arguments
    );
    assert_eq!(j.requirements.as_deref(), Some(r#"ARCH = "i686" & CPU_MHZ > 1000;"#));
    let param = j.inputs.iter().find(|i| i.local_name() == "param").unwrap();
    assert_eq!(param.file, "param.${GW_TASK_ID}", "a single job has no GW_TASK_ID: left to the job");
    // An array task knows its GW_TASK_ID.
    let t = convert(&read(path), Format::GridWay, &opts(path, Some(TaskContext::new(1, 3)))).unwrap();
    let param = t[0].inputs.iter().find(|i| i.local_name() == "param").unwrap();
    assert_eq!(param.file, "param.1");
    assert_eq!(t[0].environment["GW_TASK_ID"], "1");
}

#[test]
fn jsdl_spmd_application() {
    let j = one("jsdl/spmd-gfd115.jsdl", Format::Jsdl);
    assert_eq!(j.name, "spmd-example");
    assert_eq!(j.executable, "./a.out", "staged in from koalesce:apps/a.out");
    assert_eq!(j.inputs[0].file, "apps/a.out");
    assert!(j.inputs[0].executable);
    assert_eq!(j.arguments, ["-v"]);
    assert_eq!(j.stdout.as_deref(), Some("stdout.txt"));
    assert_eq!(j.environment["OMP_NUM_THREADS"], "2");
    // 5 processes, 2 per host, 2 threads each: hosts of 4, 4 and 2 processors.
    assert_eq!(procs(&j), [4, 4, 2]);
    assert_eq!(j.runner, Runner::Coupled, "MPICH2");
    let t = one("jsdl/spmd-total.jsdl", Format::Jsdl);
    assert_eq!(procs(&t), [1, 1, 1, 1], "actualtotalcpucount: TotalCPUCount 4");
    assert_eq!(t.policy.as_deref(), Some("cm"));
    assert_eq!(t.flexible, None);
    refused("jsdl/err-spmd-pvm.jsdl", Format::Jsdl, 20, &["jsdl-spmd:SPMDVariation", "PVM"]);
}

#[test]
fn jsdl_spmd_counts_must_agree_with_resources() {
    let base = read("jsdl/spmd-gfd115.jsdl");
    let with_total = base.replace(
        "</Application>",
        "</Application><Resources><TotalCPUCount><Exact>8</Exact></TotalCPUCount></Resources>",
    );
    let e = convert(&with_total, Format::Jsdl, &opts("x", None)).unwrap_err();
    assert!(
        e.message.contains("NumberOfProcesses 5") && e.message.contains("TotalCPUCount 8"),
        "{e}"
    );
    let agreeing = base.replace(
        "</Application>",
        "</Application><Resources><TotalCPUCount><Exact>10</Exact></TotalCPUCount></Resources>",
    );
    let j = convert(&agreeing, Format::Jsdl, &opts("x", None)).unwrap();
    assert_eq!(procs(&j[0]), [4, 4, 2]);
    let no_variation = base.replace(
        "<jsdl-spmd:SPMDVariation>http://www.ogf.org/jsdl/2007/02/jsdl-spmd/MPICH2</jsdl-spmd:SPMDVariation>",
        "",
    );
    let e = convert(&no_variation, Format::Jsdl, &opts("x", None)).unwrap_err();
    assert!(e.message.contains("SPMDVariation"), "{e}");
    let zero = base.replace(">5<", ">0<");
    let e = convert(&zero, Format::Jsdl, &opts("x", None)).unwrap_err();
    assert!(
        e.message.contains("jsdl-spmd:NumberOfProcesses") && e.message.contains("'0'"),
        "{e}"
    );
}

#[test]
fn jsdl_gridway_examples_are_refused_with_the_reason() {
    // gsiftp sources cannot be staged: the error names the staging element and the file.
    refused(
        "jsdl/gridway-basicExample.jsdl",
        Format::Jsdl,
        45,
        &["jsdl:Source of 'file.txt'", "gsiftp://"],
    );
    // The jsdl-hpcpa prefix is used without an xmlns declaration: not well-formed.
    refused(
        "jsdl/gridway-HPCProfileExample.jsdl",
        Format::Jsdl,
        22,
        &[
            "jsdl-hpcpa",
            "declare xmlns:jsdl-hpcpa=\"http://schemas.ggf.org/jsdl/2006/07/jsdl-hpcpa\"",
        ],
    );
    // Declared, the same document imports up to its gsiftp staging.
    let fixed = read("jsdl/gridway-HPCProfileExample.jsdl").replace(
        "xmlns:xsi=",
        "xmlns:jsdl-hpcpa=\"http://schemas.ggf.org/jsdl/2006/07/jsdl-hpcpa\" xmlns:xsi=",
    );
    let e = convert(&fixed, Format::Jsdl, &opts("x", None)).unwrap_err();
    assert!(e.message.contains("jsdl:Source of 'file1.txt'"), "{e}");
}

#[test]
fn xrsl_arc_examples() {
    let h = one("xrsl/arc-helloworld.xrsl", Format::Xrsl);
    assert_eq!(h.name, "Hello World");
    assert_eq!(
        (h.executable.as_str(), h.arguments.as_slice()),
        ("/bin/echo", &["Hello World".to_string()][..])
    );
    assert_eq!(h.stdout.as_deref(), Some("std.out"));
    assert_eq!(h.stderr.as_deref(), Some("std.out"), "join = yes");
    assert_eq!(h.cputime.as_deref(), Some("1m"), "cputime = 1: minutes");
    let a = one("xrsl/arc-queue-alternatives.xrsl", Format::Xrsl);
    assert_eq!(
        a.requirements.as_deref(),
        Some(r#"(QUEUE_NAME = "q1" | QUEUE_NAME = "q2") & (HAS_SOFTWARE("APPS/A-1.0") | HAS_SOFTWARE("APPS/A-1.1"))"#)
    );
    assert_eq!(a.arguments, ["Hello world!"]);
    refused(
        "xrsl/err-rte-options.xrsl",
        Format::Xrsl,
        1,
        &["runTimeEnvironment", "options", "RTE-1.2.3"],
    );
    let mixed = "&(executable=/bin/true)(|(queue=a)(opsys=b))";
    let e = convert(mixed, Format::Xrsl, &opts("x", None)).unwrap_err();
    assert!(e.message.contains("one attribute"), "{e}");
    let stdout_alt = "&(executable=/bin/true)(|(stdout=a)(stdout=b))";
    let e = convert(stdout_alt, Format::Xrsl, &opts("x", None)).unwrap_err();
    assert!(e.message.starts_with("stdout:") && e.message.contains("'|' alternatives"), "{e}");
}

#[test]
fn xrsl_units_and_staging() {
    let j = one("xrsl/atlas-style.xrsl", Format::Xrsl);
    assert_eq!(j.name, "test job");
    assert_eq!(j.executable, "./run.sh");
    assert_eq!(j.cputime.as_deref(), Some("2h"), "\"2 hours\"");
    assert_eq!(j.walltime.as_deref(), Some("4h"), "\"240\" minutes");
    assert_eq!(j.memory.as_deref(), Some("2000M"));
    assert_eq!(j.retries, Some(2));
    assert_eq!(procs(&j), [4], "count = 4");
    let files: Vec<&str> = j.inputs.iter().map(|i| i.file.as_str()).collect();
    assert_eq!(files, ["run.sh", "data/input.dat"]);
    assert_eq!(j.outputs[0].to.as_deref(), Some("results/result.tgz"));
    // The same with a plain http:// source: refused, naming the attribute and the URL.
    let http = read("xrsl/atlas-style.xrsl").replace("koalesce:data/input.dat", "http://example.org/data/input.dat");
    let e = convert(&http, Format::Xrsl, &opts("x", None)).unwrap_err();
    assert_eq!(e.line, Some(4));
    assert!(e.message.starts_with("inputFiles:") && e.message.contains("http://"), "{e}");
}

#[test]
fn gt2_rsl_examples() {
    let g = one("rsl/gram-multiple.rsl", Format::Rsl);
    assert_eq!(g.executable, "/bin/hostname");
    assert_eq!(procs(&g), [1, 1, 1, 1], "count = 4, jobType = multiple");
    assert_eq!(g.runner, Runner::Independent);
    assert_eq!(g.walltime.as_deref(), Some("10m"), "maxWallTime is minutes");
    assert_eq!(g.environment["FOO"], "bar");
    assert_eq!(g.environment["LD_LIBRARY_PATH"], "/opt/lib");
    assert_eq!(g.requirements.as_deref(), Some(r#"QUEUE_NAME = "short""#));
    let d = one("rsl/duroc-multirequest.rsl", Format::Rsl);
    assert_eq!(d.runner, Runner::Coupled);
    assert_eq!(procs(&d), [2, 3]);
    assert_eq!(
        d.components[0].site.as_deref(),
        Some("grid1"),
        "resourceManagerContact names site grid1"
    );
    assert_eq!(d.components[1].site, None);
    assert_eq!(d.components[1].label.as_deref(), Some("subjob 1"));
    refused("rsl/err-gass-executable.rsl", Format::Rsl, 1, &["executable", "GLOBUSRUN_GASS_URL"]);
}

#[test]
fn arc_jsdl_variants() {
    let s = one("jsdl/arc-jsdl_simple.jsdl", Format::Jsdl);
    assert_eq!((s.name.as_str(), s.executable.as_str()), ("TEST", "/bin/true"));
    assert_eq!(procs(&s), [1]);
    // ARC's client staging example: a file:// source from the client cannot be staged.
    refused(
        "jsdl/arc-jsdl_stage.jsdl",
        Format::Jsdl,
        23,
        &["jsdl:Source of 'inputdir1/inputfile2'", "file://"],
    );
    // Without it: a bare URI is a catalogue name; DataStaging with neither Source nor Target
    // (ARC writes these for stdout and stderr) is an output kept with the job.
    let text = read("jsdl/arc-jsdl_stage.jsdl").replace("file://./inputfile2", "sets/inputfile2");
    let j = convert(&text, Format::Jsdl, &opts("x", None)).unwrap().pop().unwrap();
    assert_eq!((j.stdout.as_deref(), j.stderr.as_deref()), (Some("out.txt"), Some("err.txt")));
    let ins: Vec<(&str, &str)> = j.inputs.iter().map(|i| (i.file.as_str(), i.local_name())).collect();
    assert_eq!(ins, [("inputfile1", "inputfile1"), ("sets/inputfile2", "inputdir1/inputfile2")]);
    let outs: Vec<(&str, Option<&str>)> = j.outputs.iter().map(|o| (o.file.as_str(), o.to.as_deref())).collect();
    assert_eq!(outs, [("out.txt", None), ("err.txt", None)]);
    // ARC's QueueName (require="ne") and IsExecutable.
    let q = one("jsdl/arc-queue-ne.jsdl", Format::Jsdl);
    assert_eq!(q.requirements.as_deref(), Some(r#"(QUEUE_NAME != "q1") & (QUEUE_NAME = "long")"#));
    assert_eq!(q.executable, "./executable");
    assert!(q.inputs[0].executable);
    assert_eq!(q.inputs[0].file, "bin/executable");
    refused("jsdl/err-arc-urioption.jsdl", Format::Jsdl, 14, &["jsdl:URIOption", "threads=5"]);
    let bad_require = read("jsdl/arc-queue-ne.jsdl").replace("require=\"ne\"", "require=\"gt\"");
    let e = convert(&bad_require, Format::Jsdl, &opts("x", None)).unwrap_err();
    assert!(e.message.contains("jsdl:QueueName@require 'gt'"), "{e}");
}

#[test]
fn jsdl_filesystemname_as_gfd56_spells_it() {
    // GFD.56 §6.3.2: DataStaging/FilesystemName.
    let text = read("jsdl/arc-jsdl_simple.jsdl").replace(
        "</JobDescription>",
        "<Resources><FileSystem name=\"SCRATCH\"/></Resources><DataStaging><FileName>in.dat</FileName><FilesystemName>SCRATCH</FilesystemName><CreationFlag>overwrite</CreationFlag><Source><URI>koalesce:d/in.dat</URI></Source></DataStaging></JobDescription>",
    );
    let j = convert(&text, Format::Jsdl, &opts("x", None)).unwrap().pop().unwrap();
    assert_eq!(j.inputs[0].file, "d/in.dat");
    assert_eq!(j.inputs[0].local_name(), "in.dat");
    let other = text.replace("<FilesystemName>SCRATCH", "<FilesystemName>PROJECTS");
    let e = convert(&other, Format::Jsdl, &opts("x", None)).unwrap_err();
    assert!(e.message.contains("PROJECTS"), "{e}");
}

#[test]
fn gfd56_gnuplot_example() {
    let j = one("jsdl/gfd56-gnuplot.jsdl", Format::Jsdl);
    assert_eq!(j.name, "My Gnuplot invocation");
    assert_eq!(j.executable, "/usr/local/bin/gnuplot");
    assert_eq!(j.arguments, ["control.txt"]);
    assert_eq!((j.stdin.as_deref(), j.stdout.as_deref()), (Some("input.dat"), Some("output1.png")));
    // IndividualPhysicalMemory is bytes: 2097152.0 is 2 MiB for the one processor.
    assert_eq!(j.memory.as_deref(), Some("2M"));
    // TotalCPUCount Exact 1.0: one processor, not a flexible request.
    assert_eq!(procs(&j), [1]);
    assert_eq!((j.flexible.as_ref(), j.runner), (None, Runner::Independent));
    let ins: Vec<&str> = j.inputs.iter().map(|i| i.file.as_str()).collect();
    assert_eq!(ins, ["~me/control.txt", "pub/input.dat"]);
    assert_eq!(j.outputs[0].to.as_deref(), Some("results/output1.png"));
    // The spec's own http:// source is refused, naming the staging element and file.
    let http = read("jsdl/gfd56-gnuplot.jsdl").replace("koalesce:pub/input.dat", "http://www.example.org/pub/input.dat");
    let e = convert(&http, Format::Jsdl, &opts("x", None)).unwrap_err();
    assert_eq!(e.line, Some(43));
    assert!(
        e.message.contains("jsdl:Source of 'input.dat'") && e.message.contains("http://"),
        "{e}"
    );
    // Two CPUs in all stay a flexible request.
    let two = read("jsdl/gfd56-gnuplot.jsdl").replace("<jsdl:Exact>1.0</jsdl:Exact>", "<jsdl:Exact>2</jsdl:Exact>");
    let j2 = convert(&two, Format::Jsdl, &opts("x", None)).unwrap().pop().unwrap();
    assert_eq!(j2.flexible.map(|f| f.total), Some(2));
}

#[test]
fn windows_encodings_byte_order_marks_and_utf16() {
    // ARC's JSDL saved as UTF-16 (little and big endian, with a byte-order mark).
    let text = read("jsdl/arc-jsdl_simple.jsdl");
    let units: Vec<u16> = text.encode_utf16().collect();
    let mut le = vec![0xFF, 0xFE];
    let mut be = vec![0xFE, 0xFF];
    for u in &units {
        le.extend(u.to_le_bytes());
        be.extend(u.to_be_bytes());
    }
    for bytes in [le, be] {
        let decoded = decode(&bytes).unwrap();
        assert_eq!(decoded, text);
        assert_eq!(detect(&decoded), Format::Jsdl);
    }
    // A GridWay template with a UTF-8 byte-order mark is still a template.
    let jt = format!("\u{feff}{}", read("jt/gridway-ls.jt"));
    assert_eq!(decode(jt.as_bytes()).unwrap(), read("jt/gridway-ls.jt"));
    assert_eq!(detect(&jt), Format::GridWay, "the mark must not hide the first keyword");
    let j = convert(&jt, Format::GridWay, &opts("x", None)).unwrap().pop().unwrap();
    assert_eq!(j.executable, "/bin/ls");
    // Latin-1 is refused, naming the line and the byte.
    let e = decode(b"EXECUTABLE = /bin/ls\nARGUMENTS = caf\xe9\n").unwrap_err();
    assert!(e.contains("line 2") && e.contains("0xe9"), "{e}");
    assert!(decode(&[0xFF, 0xFE, 0x41]).is_err(), "odd UTF-16 length");
    assert!(decode(&[0xFF, 0xFE, 0x00, 0xD8]).is_err(), "a lone surrogate");
}

#[test]
fn gram_glidein_host_count() {
    // As GRAM glidein services (Pegasus Corral, Condor-G globus_rsl) write it.
    let j = one("rsl/glidein-hostcount.rsl", Format::Rsl);
    assert_eq!(procs(&j), vec![1; 16], "count = 16 copies over hostCount = 2 hosts");
    assert_eq!(j.runner, Runner::Independent);
    assert_eq!(j.walltime.as_deref(), Some("120m"), "maxTime is minutes");
    assert_eq!(j.memory.as_deref(), Some("950M"), "max_memory per process");
    assert_eq!(j.requirements.as_deref(), Some(r#"QUEUE_NAME = "normal""#));
    let text = read("rsl/glidein-hostcount.rsl");
    for (h, bad) in [("17", "17 hosts for 16"), ("0", "0 hosts")] {
        let e = convert(
            &text.replace("hostCount=2", &format!("hostCount={h}")),
            Format::Rsl,
            &opts("x", None),
        )
        .unwrap_err();
        assert!(e.message.starts_with("hostCount:") && e.message.contains(bad), "{e}");
    }
}
