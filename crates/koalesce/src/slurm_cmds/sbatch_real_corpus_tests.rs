//! `sbatch` on the headers of real users' scripts (crates/koalesce/tests/data/sbatch/real,
//! each with its source in its second line): every file either becomes the job its
//! `#SBATCH` lines ask for, or is refused with the documented reason.

use std::path::Path;

use super::*;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/sbatch/real")
}

/// The script's options and job, on a grid whose sites are the partitions the script names
/// (so that `-p` maps; a grid without them refuses, see `unknown_partitions_are_refused`).
fn submit(name: &str) -> (SResult<JobDescription>, Vec<String>) {
    let text = std::fs::read_to_string(dir().join(name)).unwrap();
    let text = super::super::sbatch_compat::strip_bom(&text);
    let o: SbatchArgs = match directives(text).and_then(|d| parse_options("sbatch", &d)) {
        Ok(o) => o,
        Err(e) => return (Err(e), Vec::new()),
    };
    let sites: Vec<String> = o
        .partition
        .as_deref()
        .unwrap_or("")
        .split(',')
        .map(|s| s.trim().to_string())
        .collect();
    let warnings = ignored_options(&o).unwrap_or_default();
    let env = [("PATH", "/bin"), ("R_LIBS", "/r"), ("HOME", "/home/u")].map(|(k, v)| (k.to_string(), v.to_string()));
    (describe(&o, text, name, &[], Path::new("/home/u"), &env, &sites), warnings)
}

fn opts(args: &[&str]) -> SbatchArgs {
    let v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    parse_options("sbatch", &v).unwrap_or_else(|e| panic!("{}", e.message))
}

/// What a script must give.
enum Want {
    /// Accepted: job name, processors per component, walltime, memory per processor, and
    /// how many `sbatch: warning:` lines (each one an option koalesce ignores).
    Job {
        name: &'static str,
        procs: &'static [u32],
        walltime: Option<&'static str>,
        memory: Option<&'static str>,
        warnings: usize,
    },
    /// Refused: the error starts with this.
    Refused(&'static str),
}

use Want::{Job, Refused};

const GPUS: Want = Refused("koalesce cannot honour --gpus/--gres: koalesce sites offer no GPUs");

const fn job(
    name: &'static str,
    procs: &'static [u32],
    walltime: Option<&'static str>,
    memory: Option<&'static str>,
    warnings: usize,
) -> Want {
    Job {
        name,
        procs,
        walltime,
        memory,
        warnings,
    }
}

/// Every file of the corpus and what sbatch(1)'s rules make of it (times in seconds; memory
/// per processor: --mem per node over the node's CPUs, --mem-per-cpu as it stands, in KiB).
const CORPUS: &[(&str, Want)] = &[
    // --ntasks wins over --tasks-per-node × --nodes; --qos=standard is a site's QoS (warned).
    ("archer2-tasks-per-node.sh", job("lammps_test", &[512], Some("1200s"), None, 1)),
    ("array-list-exclude-gpu.sh", GPUS),
    // --time=100:00:00 is 100 hours; --mem=16GB on one CPU.
    (
        "array-steps-simple.sh",
        job("array-steps-simple.sh", &[1], Some("360000s"), Some("16777216K"), 0),
    ),
    (
        "array-throttle-qos-standby.sh",
        job("save_mass_1pct_pt", &[2], Some("14400s"), Some("4194304K"), 1),
    ),
    ("array-throttle-r.sh", job("inter_3", &[1], None, None, 0)),
    (
        "bash-l-constraint-logs-x.sh",
        job("06_figure2", &[1], Some("43200s"), Some("104857600K"), 0),
    ),
    // 110GB over 64 CPUs; --mail-user warned.
    (
        "beagle-array-append.sh",
        job("otsh_array_impute", &[64], Some("129600s"), Some("1802240K"), 1),
    ),
    (
        "breseq-mem-gb-lower.sh",
        job("WSO-L1-T14-rS", &[8], Some("35940s"), Some("6553600K"), 2),
    ),
    // ###SBATCH lines are comments; the mail options warn (the last --mail-type wins).
    (
        "commented-out-directives.sh",
        job("psfisher2_500_600_cst_survey_center", &[16], Some("604800s"), None, 2),
    ),
    // A site plugin's option (CSCS's uenv) is unknown to sbatch without that plugin.
    ("cp2k-uenv-hint-exclusive.sh", Refused("sbatch: unrecognized option '--uenv'")),
    ("criann-space-values.sh", job("main", &[1], Some("3600s"), None, 1)),
    ("ddp-64-nodes-mem0.sh", GPUS),
    // --time=15:00 is MM:SS; --deadline becomes the job file's start deadline (checked below).
    ("deadline-now-plus.sh", job("deadline-now-plus.sh", &[1], Some("900s"), None, 0)),
    ("env-bash-knl.sh", job("wrf_to_tell_counties", &[1], Some("28800s"), None, 2)),
    // --qos=batch: a site's QoS (warned).
    (
        "esmf-sh-login-exclusive.sh",
        job("esmf-sh-login-exclusive.sh", &[40], Some("3600s"), None, 1),
    ),
    // 0-24:00 is D-HH:MM; --ntasks-per-core warned.
    (
        "exacloud-aligned-values.sh",
        job("exacloud-aligned-values.sh", &[9], Some("86400s"), Some("8192000K"), 1),
    ),
    (
        "export-all-array.sh",
        job("batch_gridstat", &[1], Some("1800s"), Some("125829120K"), 0),
    ),
    ("export-none-v100.sh", GPUS),
    ("export-var-list.sh", job("ksvsssrpow", &[48], Some("28800s"), Some("8241152K"), 2)),
    ("gequation-hint.sh", GPUS),
    (
        "get-user-env-l-export-none.sh",
        job("get-user-env-l-export-none.sh", &[16], Some("3540s"), Some("5242880K"), 0),
    ),
    ("gpu-gres-a100-requeue.sh", GPUS),
    ("gpus-per-node-h100.sh", GPUS),
    // --gres=gpu:0 asks for no GPU; --time=1:00 is one minute (MM:SS).
    ("gres-gpu0-time-mmss.sh", job("exmaple", &[1], Some("60s"), Some("1048576K"), 0)),
    ("gres-shard-array.sh", GPUS),
    (
        "gres-zero-gpus.sh",
        job("evopool_arc3_sa", &[4], Some("172800s"), Some("16777216K"), 0),
    ),
    ("jaxlib-build.sh", job("jaxlib-ppc64le", &[1], Some("21600s"), None, 0)),
    (
        "julia-array-no-shebang-args.sh",
        job("naiss2024-22-1100-dmh", &[1], Some("230400s"), Some("16384000K"), 2),
    ),
    // "--mem 190GB" (a blank, not '=') over 32 tasks.
    (
        "kallisto-mem-space.sh",
        job("kallisto_quantify", &[32], Some("172800s"), Some("6225920K"), 2),
    ),
    // --time=10 is ten minutes; --qos=normal is the default; --ntasks-per-core warned.
    (
        "ksh-time-minutes.sh",
        job("ksh-time-minutes.sh", &[1], Some("600s"), Some("5120000K"), 1),
    ),
    // 4 nodes × 32 tasks × 2 CPUs; 1-12:00 is D-HH:MM; --qos=regular and mail warned.
    (
        "lammps-qos-tasks-per-node.sh",
        job("aSiGAP", &[256], Some("129600s"), Some("1933312K"), 3),
    ),
    ("lund-chdir-short.sh", job("pred_prey", &[8], Some("36000s"), None, 2)),
    // START is no --mail-type of Slurm's; Slurm 22.05 drops it beside END and FAIL (checked).
    (
        "mail-type-start.sh",
        job("convert_to_llava_format_eng", &[1], Some("1800s"), None, 2),
    ),
    (
        "matlab-mem-plain.sh",
        job("EarlyProcessing", &[4], Some("3000s"), Some("4096000K"), 2),
    ),
    // 4 nodes × 1 task × 16 CPUs; --mem-bind warned.
    (
        "mem-bind-rome.sh",
        job(
            "Connected-Components-Detection-OpenMPI+OpenMP",
            &[64],
            Some("1800s"),
            Some("2097152K"),
            1,
        ),
    ),
    ("modflow-login-shell-array.sh", job("mf", &[1], Some("1800s"), Some("1024000K"), 2)),
    ("mpi-wavefront.sh", job("mpi_wavefront", &[8], Some("1200s"), None, 0)),
    ("named-node-w.sh", GPUS),
    ("nemo-get-user-env.sh", job("duo_2k", &[8], Some("14400s"), None, 2)),
    ("nnunet-gpu.sh", GPUS),
    (
        "ntasks-below-tasks-per-node.sh",
        job("Kathleen.%j", &[1], Some("1200s"), Some("18432000K"), 0),
    ),
    // --gpus=0 asks for none; --ntasks-per-core warned.
    ("ntasks-per-core-gpus0.sh", job("SF-2022", &[3], None, None, 1)),
    ("only-exclusive.sh", job("only-exclusive.sh", &[1], None, None, 0)),
    (
        "openfoam-partitions-quoted-name.sh",
        job("plate0", &[4], Some("360000s"), Some("1024000K"), 1),
    ),
    // --overcommit and --mail-type warned; --mem=0 is no limit.
    ("openrlhf-overcommit.sh", job("myaccount-openllama2", &[2], Some("14400s"), None, 2)),
    ("oxdna-short-options.sh", GPUS),
    (
        "romeo-ntasks-per-core.sh",
        job("romeo-ntasks-per-core.sh", &[1], Some("3600s"), Some("16384000K"), 1),
    ),
    (
        "shebang-with-comment.sh",
        job("run_singler", &[1], Some("7200s"), Some("10485760K"), 0),
    ),
    // -c2 then --cpus-per-task=1: the last wins, as in Slurm.
    (
        "short-cluster-c2-percent-t.sh",
        job("short-cluster-c2-percent-t.sh", &[1], Some("108000s"), None, 3),
    ),
    (
        "sorcha-chdir-export-lower.sh",
        job("s3mlink_vdp", &[2], Some("21600s"), Some("16777216K"), 0),
    ),
    (
        "summit-space-values.sh",
        job("summit-space-values.sh", &[4], Some("57600s"), None, 0),
    ),
    (
        "svgp-mem-per-cpu-plain.sh",
        job("svgp_0_3logs.txt", &[8], Some("18000s"), Some("4680704K"), 0),
    ),
    ("teaching-gpu-reservation.sh", GPUS),
    // "#BATCH" is no directive: the default name; 15 nodes × 40 tasks.
    (
        "typo-batch-directive.sh",
        job("typo-batch-directive.sh", &[600], Some("28800s"), None, 1),
    ),
    ("uppmax-clusters.sh", Refused("No cluster 'snowy' known by database.")),
    (
        "verkko-mem-230g.sh",
        job("G3_verkkoABTU", &[32], Some("504000s"), Some("7536640K"), 3),
    ),
    ("winograd-exclude-space.sh", job("winograd_convolution", &[64], None, None, 1)),
    ("workdir-old-option.sh", job("hpgltools", &[4], Some("36000s"), Some("1572864K"), 2)),
];

#[test]
fn every_real_script_is_taken_or_refused_with_its_reason() {
    let mut listed: Vec<&str> = CORPUS.iter().map(|(n, _)| *n).collect();
    listed.sort_unstable();
    let mut files: Vec<String> = std::fs::read_dir(dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files, listed, "every file of the corpus has its expectation");
    assert!(files.len() >= 58);
    for (name, want) in CORPUS {
        let (got, warnings) = submit(name);
        match (want, got) {
            (
                Job {
                    name: n,
                    procs,
                    walltime,
                    memory,
                    warnings: w,
                },
                Ok(d),
            ) => {
                assert_eq!(d.name, *n, "{name}");
                assert_eq!(d.components.iter().map(|c| c.processors).collect::<Vec<_>>(), *procs, "{name}");
                assert_eq!(d.walltime.as_deref(), *walltime, "{name}");
                assert_eq!(d.memory.as_deref(), *memory, "{name}");
                assert_eq!(warnings.len(), *w, "{name}: {warnings:?}");
                // The job file is one the server takes.
                JobDescription::parse(&toml::to_string(&d).unwrap()).unwrap_or_else(|e| panic!("{name}: {e}"));
            }
            (Refused(words), Err(e)) => assert!(e.message.starts_with(words), "{name}: {}", e.message),
            (Job { .. }, Err(e)) => panic!("{name} refused: {}", e.message),
            (Refused(words), Ok(_)) => panic!("{name} taken, expected: {words}"),
        }
    }
}

#[test]
fn real_scripts_values_reach_the_batch_step() {
    let spec = |name: &str| BatchSpec::decode(&submit(name).0.unwrap().arguments[2]).unwrap();
    // -D / --chdir and the old --workdir.
    assert_eq!(spec("lund-chdir-short.sh").chdir, "/home/u/Pred_prey_dynamics/pred-prey-ibm");
    assert_eq!(spec("workdir-old-option.sh").chdir, "/home/u/basedir");
    // Patterns travel unexpanded (the batch step expands them with the job id).
    assert_eq!(
        spec("beagle-array-append.sh").output.as_deref(),
        Some("03a_imputed_vcf/00_log_folder/beagle_chr.%A_%a.out")
    );
    assert!(spec("beagle-array-append.sh").open_append);
    assert_eq!(spec("criann-space-values.sh").error.as_deref(), Some("main.e%J"));
    // --export=NONE: no environment of the submitter's; all / ALL / a list: one.
    assert!(spec("get-user-env-l-export-none.sh").environment.is_none());
    let names = |name: &str| -> Vec<String> { spec(name).environment.unwrap().into_iter().map(|(k, _)| k).collect() };
    // `--export=all` is ALL (Slurm reads it in any case), as is no --export at all.
    assert_eq!(names("sorcha-chdir-export-lower.sh"), ["HOME", "PATH", "R_LIBS"]);
    assert_eq!(names("mpi-wavefront.sh"), ["HOME", "PATH", "R_LIBS"]);
    // A list: those variables (the ones set) alone.
    assert_eq!(names("export-var-list.sh"), ["PATH", "R_LIBS"]);
    let mpi = spec("mpi-wavefront.sh");
    assert_eq!((mpi.nodes, mpi.ntasks, mpi.cpus_per_task), (2, 8, 1));
    // --deadline=now+8hours with --time=15:00: it must start within 8 h less 15 min.
    let d = submit("deadline-now-plus.sh").0.unwrap();
    let secs: u64 = d.deadline.as_deref().unwrap().trim_end_matches('s').parse().unwrap();
    assert!((27_898..=27_900).contains(&secs), "{secs}");
    let lammps = spec("lammps-qos-tasks-per-node.sh");
    assert_eq!((lammps.nodes, lammps.ntasks, lammps.cpus_per_task), (4, 128, 2));
}

#[test]
fn unknown_partitions_are_refused() {
    // On a grid whose only site is `vu`, a script's own partition is refused as Slurm does.
    let text = std::fs::read_to_string(dir().join("mpi-wavefront.sh")).unwrap();
    let o: SbatchArgs = parse_options("sbatch", &directives(&text).unwrap()).unwrap();
    let e = describe(&o, &text, "x", &[], Path::new("/"), &[], &["vu".into()]).unwrap_err();
    assert!(e.message.starts_with("invalid partition specified: compute"), "{}", e.message);
}

#[test]
fn odd_corners_of_the_syntax() {
    let base = std::fs::read_to_string(dir().join("mpi-wavefront.sh")).unwrap();
    // A byte order mark before "#!" is dropped (the kernel would not find the interpreter).
    let bom = format!("\u{feff}{base}");
    let text = super::super::sbatch_compat::strip_bom(&bom);
    assert_eq!(directives(text).unwrap(), directives(&base).unwrap());
    assert!(describe(&opts(&[]), text, "x", &[], Path::new("/"), &[], &[]).is_ok());
    // Options in the SBATCH_* variables sit between the script's lines and the command line.
    let env = vec![
        ("SBATCH_TIMELIMIT".to_string(), "2-0".to_string()),
        ("SBATCH_JOB_NAME".to_string(), "fromenv".to_string()),
    ];
    let mut all = directives(&base).unwrap();
    all.extend(super::super::sbatch_compat::env_options(&env));
    let o: SbatchArgs = parse_options("sbatch", &all).unwrap();
    assert_eq!((o.job_name.as_deref(), o.time.as_deref()), (Some("fromenv"), Some("2-0")));
    all.extend(["-J".to_string(), "fromcli".to_string()]);
    let o: SbatchArgs = parse_options("sbatch", &all).unwrap();
    assert_eq!(o.job_name.as_deref(), Some("fromcli"));
    // Short options clustered and glued: -N1 -n4 -c2, -G0 (no GPU), -x node (ignored).
    let o = opts(&["-N1", "-n4", "-c2", "-G0", "-xnode3", "-t1-0"]);
    let d = describe(&o, "#!/bin/sh\n", "x", &[], Path::new("/"), &[], &[]).unwrap();
    assert_eq!((d.components[0].processors, d.walltime.as_deref()), (8, Some("86400s")));
    assert_eq!(ignored_options(&o).unwrap().len(), 1);
    // -G 1 and --mem-per-gpu are refused.
    for args in [&["-G", "1"][..], &["--mem-per-gpu=4G"], &["--cpus-per-gpu=2"]] {
        let e = describe(&opts(args), "#!/bin/sh\n", "x", &[], Path::new("/"), &[], &[]).unwrap_err();
        assert!(e.message.starts_with("koalesce cannot honour --"), "{args:?}: {}", e.message);
    }
    // --test-only parses (validation only), with the summary naming the request.
    let o = opts(&["--test-only", "-n", "3", "-t", "5", "--array=1-4%2"]);
    assert!(o.compat.test_only);
    let d = describe(&o, "#!/bin/sh\n", "x", &[], Path::new("/"), &[], &[]).unwrap();
    let s = test_only_summary(&d, &o);
    assert!(
        s.contains("3 processor(s)") && s.contains("walltime 300s") && s.contains("array 1-4%2") && s.contains("not submitted"),
        "{s}"
    );
}
