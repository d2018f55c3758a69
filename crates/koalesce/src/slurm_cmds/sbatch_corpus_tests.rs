//! `sbatch` on scripts written as HPC centres and Slurm's documentation write them
//! (crates/koalesce/tests/data/sbatch, see its README): the values read from each file.

use std::path::Path;

use super::*;

fn script(name: &str) -> String {
    std::fs::read_to_string(format!("{}/tests/data/sbatch/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

fn describe_file(name: &str) -> SResult<JobDescription> {
    let s = script(name);
    let o: SbatchArgs = parse_options("sbatch", &directives(&s)?)?;
    describe(&o, &s, name, &[], Path::new("/home/u"), &[], &["vu".into()])
}

fn spec(d: &JobDescription) -> BatchSpec {
    BatchSpec::decode(&d.arguments[2]).unwrap()
}

#[test]
fn man_page_time_is_minutes() {
    let d = describe_file("man-page-time.sh").unwrap();
    assert_eq!(d.walltime.as_deref(), Some("60s"), "--time=1 is one minute");
    assert_eq!(d.components.len(), 1);
    assert_eq!(d.components[0].processors, 1);
}

#[test]
fn mem_per_cpu_is_per_processor_and_trailing_comments_are_dropped() {
    let d = describe_file("multinode-mem-per-cpu.sh").unwrap();
    assert_eq!(d.name, "multinode");
    // 2 nodes × 4 tasks × 2 CPUs.
    assert_eq!(d.components.iter().map(|c| c.processors).sum::<u32>(), 16);
    assert_eq!(d.memory.as_deref(), Some("4194304K"), "--mem-per-cpu=4G is 4G per processor");
    assert_eq!(d.walltime.as_deref(), Some("300s"));
    let sp = spec(&d);
    assert_eq!((sp.nodes, sp.ntasks, sp.cpus_per_task), (2, 8, 2));
}

#[test]
fn mem_is_per_node() {
    let d = describe_file("multinode-mem.sh").unwrap();
    assert_eq!(d.name, "mpi_job");
    assert_eq!(d.components.iter().map(|c| c.processors).sum::<u32>(), 16);
    // 16G on each of 2 nodes over 16 processors: 2G each.
    assert_eq!(d.memory.as_deref(), Some("2097152K"));
    assert_eq!(d.walltime.as_deref(), Some("129600s"), "1-12:00:00");
    let sp = spec(&d);
    assert_eq!(sp.output.as_deref(), Some("%x-%j.out"));
    assert_eq!(sp.error.as_deref(), Some("%x-%j.err"));
    assert_eq!(sp.mem_per_node_mb, Some(16 * 1024));
}

#[test]
fn crlf_line_ends_are_refused_as_slurm_does() {
    // The directives themselves read fine ...
    let s = script("crlf.sh");
    assert_eq!(directives(&s).unwrap(), ["--job-name=crlf", "--ntasks=3", "--time=10:00"]);
    // ... but the script would run "/bin/bash\r": Slurm's sbatch refuses it, and so does this.
    let e = describe_file("crlf.sh").unwrap_err();
    assert!(e.message.contains("DOS line breaks"), "{}", e.message);
    // The same script with UNIX line ends is taken.
    let unix = s.replace("\r\n", "\n");
    let o: SbatchArgs = parse_options("sbatch", &directives(&unix).unwrap()).unwrap();
    let d = describe(&o, &unix, "crlf.sh", &[], Path::new("/home/u"), &[], &["vu".into()]).unwrap();
    assert_eq!((d.name.as_str(), d.components[0].processors), ("crlf", 3));
    assert_eq!(d.walltime.as_deref(), Some("600s"), "10:00 is ten minutes");
}

#[test]
fn notification_and_core_hints_are_accepted_with_warnings() {
    let d = describe_file("mail-and-hint.sh").unwrap();
    assert_eq!((d.name.as_str(), d.components[0].processors), ("serial", 4));
    assert_eq!(d.walltime.as_deref(), Some("1800s"));
    let s = script("mail-and-hint.sh");
    let o: SbatchArgs = parse_options("sbatch", &directives(&s).unwrap()).unwrap();
    let w = ignored_options(&o).unwrap();
    assert_eq!(w.len(), 4, "{w:?}");
    assert!(w[0].contains("--mail-type=END,FAIL") && w[0].contains("no e-mail"), "{w:?}");
    assert!(w[1].contains("--mail-user=someone@example.org"), "{w:?}");
    assert!(w[2].contains("--hint=nomultithread"), "{w:?}");
    assert!(w[3].contains("--requeue"), "{w:?}");
    // As Slurm 22.05's sbatch (checked): an unknown type beside a known one is dropped, a
    // value with none known is refused, naming it.
    let odd: SbatchArgs = parse_options("sbatch", &["--mail-type=END,SOMETIMES".into()]).unwrap();
    assert_eq!(ignored_options(&odd).unwrap().len(), 1);
    let bad: SbatchArgs = parse_options("sbatch", &["--mail-type=SOMETIMES".into()]).unwrap();
    let e = ignored_options(&bad).unwrap_err();
    assert_eq!(e.message, "Invalid --mail-type specification: SOMETIMES");
}

#[test]
fn unknown_options_name_the_option() {
    let e = describe_file("unknown-option.sh").unwrap_err();
    assert!(e.message.contains("--frobnicate"), "{}", e.message);
}

#[test]
fn a_hash_inside_quotes_is_not_a_comment() {
    let d = describe_file("quoted-hash.sh").unwrap();
    assert_eq!(d.name, "run #1");
    assert_eq!(d.components[0].processors, 6, "2 tasks × 3 CPUs from one line");
    assert_eq!(d.walltime.as_deref(), Some("172800s"), "2-00:00:00");
    // --mem=4GB (as many centres write it) per node over 6 CPUs.
    assert_eq!(d.memory.as_deref(), Some(format!("{}K", (4u64 << 20).div_ceil(6)).as_str()));
}
