//! Unit tests of sbatch's option parsing and the job file it writes.

use super::*;

fn opts(args: &[&str]) -> SbatchArgs {
    let v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    parse_options("sbatch", &v).unwrap_or_else(|e| panic!("{}", e.message))
}

fn describe_script(script: &str, args: &[&str]) -> SResult<JobDescription> {
    let mut all = directives(script)?;
    all.extend(args.iter().map(|s| s.to_string()));
    let o: SbatchArgs = parse_options("sbatch", &all)?;
    let env = vec![
        ("PATH".to_string(), "/bin".to_string()),
        ("KOALESCE_TOKEN".to_string(), "secret".to_string()),
    ];
    describe(
        &o,
        script,
        "job.sh",
        &[],
        Path::new("/home/u"),
        &env,
        &["vu".into(), "leiden".into()],
    )
}

fn spec_of(d: &JobDescription) -> BatchSpec {
    BatchSpec::decode(&d.arguments[2]).unwrap()
}

#[test]
fn directives_stop_at_the_first_command() {
    let s = "#!/bin/bash\n#SBATCH -J a\n\n#SBATCH --job-name=\"b c\" # comment\n# plain comment\n#SBATCHX no\necho hi\n#SBATCH -n 9\n";
    assert_eq!(directives(s).unwrap(), ["-J", "a", "--job-name=b c"]);
    // Checked against Slurm 22.05's sbatch -vv: '#' ends the line inside a word too,
    // not inside quotes nor escaped.
    let s = "#!/bin/sh\n#SBATCH --job-name=x --ntasks=2#c -t 5\n#SBATCH --comment=a\\#b --account='p #1'\n";
    assert_eq!(
        directives(s).unwrap(),
        ["--job-name=x", "--ntasks=2", "--comment=a#b", "--account=p #1"]
    );
}

#[test]
fn dask_jobqueue_script() {
    let s = "#!/usr/bin/env bash\n\n#SBATCH -J dask-worker\n#SBATCH -e /tmp/d/dask-worker-%J.err\n#SBATCH -o /tmp/d/dask-worker-%J.out\n\
             #SBATCH -n 1\n#SBATCH --cpus-per-task=2\n#SBATCH --mem=2G\n#SBATCH -t 00:30:00\n\n/usr/bin/python3 -m distributed.cli.dask_worker tcp://1.2.3.4:5\n";
    let d = describe_script(s, &[]).unwrap();
    assert_eq!(d.name, "dask-worker");
    assert_eq!(d.components.len(), 1);
    assert_eq!(d.components[0].processors, 2);
    assert_eq!(d.walltime.as_deref(), Some("1800s"));
    assert_eq!(d.memory.as_deref(), Some("1048576K"), "2G per node over 2 CPUs");
    let spec = spec_of(&d);
    assert_eq!(spec.output.as_deref(), Some("/tmp/d/dask-worker-%J.out"));
    assert_eq!(spec.chdir, "/home/u");
    let env = spec.environment.unwrap();
    assert!(env.iter().any(|(k, _)| k == "PATH"));
    assert!(
        !env.iter().any(|(k, _)| k == "KOALESCE_TOKEN"),
        "the token stays on the submitting side"
    );
}

#[test]
fn psij_and_parsl_scripts() {
    let psij = "#!/bin/bash\n\n\n#SBATCH --job-name=\"x\"\n#SBATCH --chdir=\"/w\"\n    \n#SBATCH --nodes=2\n#SBATCH --ntasks=4\n#SBATCH --ntasks-per-node=2\n\
                #SBATCH --time=0:10:0\n#SBATCH -e /dev/null\n#SBATCH -o /dev/null\n#SBATCH --export=NONE\n\nexport A=1\n";
    let d = describe_script(psij, &[]).unwrap();
    assert_eq!((d.components.len(), d.components[0].processors), (1, 4));
    let spec = spec_of(&d);
    assert_eq!((spec.nodes, spec.ntasks, spec.chdir.as_str()), (2, 4, "/w"));
    assert!(spec.environment.is_none());
    let parsl =
        "#!/bin/bash\n\n#SBATCH --job-name=parsl.slurm.1\n#SBATCH --output=/r/1.stdout\n#SBATCH --error=/r/1.stderr\n#SBATCH --nodes=1\n\
                 #SBATCH --time=10\n#SBATCH --ntasks-per-node=1\n#SBATCH --exclusive\n\nexport JOBNAME=x\n";
    let d = describe_script(parsl, &[]).unwrap();
    assert_eq!(d.walltime.as_deref(), Some("600s"), "--time=10 is ten minutes");
    assert_eq!(d.components[0].processors, 1);
}

#[test]
fn command_line_wins_and_partitions_map() {
    let s = "#!/bin/sh\n#SBATCH -J fromscript\n#SBATCH -n 2\ntrue\n";
    let d = describe_script(s, &["-J", "fromcli", "-p", "vu"]).unwrap();
    assert_eq!(d.name, "fromcli");
    assert_eq!(d.components[0].site.as_deref(), Some("vu"));
    let d = describe_script(s, &["-p", "vu,leiden"]).unwrap();
    assert_eq!(d.requirements.as_deref(), Some("HOSTNAME = \"vu\" | HOSTNAME = \"leiden\""));
    let d = describe_script(s, &["-p", "cm"]).unwrap();
    assert_eq!(d.policy.as_deref(), Some("cm"));
    let e = describe_script(s, &["-p", "nowhere"]).unwrap_err();
    assert!(e.message.starts_with("invalid partition specified: nowhere"), "{}", e.message);
    let d = describe_script(s, &["--qos=high"]).unwrap();
    assert_eq!(d.priority.as_deref(), Some("high"));
    // A site's own QoS name: the default priority, with a warning.
    let d = describe_script(s, &["--qos=gold"]).unwrap();
    assert_eq!(d.priority, None);
    let w = ignored_options(&opts(&["--qos=gold"])).unwrap();
    assert!(w[0].starts_with("koalesce ignores --qos=gold"), "{w:?}");
}

#[test]
fn coallocation_makes_coupled_components() {
    let s = "#!/bin/sh\n#SBATCH -N 3\n#SBATCH --ntasks-per-node=4\n#SBATCH --koalesce-coallocate\ntrue\n";
    let d = describe_script(s, &[]).unwrap();
    assert_eq!(d.components.iter().map(|c| c.processors).collect::<Vec<_>>(), [4, 4, 4]);
    assert_eq!(d.runner, Runner::Coupled);
    assert!(describe_script("#!/bin/sh\n#SBATCH -N 2 -n 3 --koalesce-coallocate\n", &[]).is_err());
}

#[test]
fn what_cannot_be_honoured_is_refused() {
    let s = "#!/bin/sh\ntrue\n";
    for args in [
        &["--array=x"][..],
        &["--dependency=singleton"],
        &["--dependency=afterok:1?afterok:2"],
        &["--gres=gpu:1"],
        &["--gpus-per-task=1"],
        &["--begin=soon"],
        &["--begin=now+1h"],
        &["--signal=R:USR1@60"],
        &["--signal=USR3"],
        &["--signal=USR1@x"],
        &["--mail-type=SOMETIMES"],
        &["--mem=2.5G"],
        &["--hint=fast"],
        &["--exclusive=nodes"],
        &["-w", "node1"],
        &["-n", "0"],
        &["--mem=lots"],
        &["-t", "soon"],
    ] {
        let e = describe_script(s, args).unwrap_err();
        assert!(!e.message.is_empty(), "{args:?}");
    }
    let e = describe_script("echo no shebang\n", &[]).unwrap_err();
    assert!(e.message.starts_with("This does not look like a batch script"));
    assert!(parse_options::<SbatchArgs>("sbatch", &["--frobnicate".into()]).is_err());
}

#[test]
fn a_higher_layers_memory_option_replaces_the_other_kind() {
    let w = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let script = w(&["--mem=8G", "-n", "2"]);
    let o = merge_layers(&script, &[], &w(&["--mem-per-cpu=1G"])).unwrap();
    assert_eq!((o.mem.as_deref(), o.mem_per_cpu.as_deref()), (None, Some("1G")));
    let o = merge_layers(&script, &w(&["--mem-per-cpu=2G"]), &w(&["-J", "x"])).unwrap();
    assert_eq!(
        (o.mem.as_deref(), o.mem_per_cpu.as_deref()),
        (None, Some("2G")),
        "SBATCH_MEM_PER_CPU over the script"
    );
    let o = merge_layers(&w(&["--mem-per-cpu=1G"]), &w(&["--mem-per-cpu=2G"]), &w(&["--mem=4G"])).unwrap();
    assert_eq!((o.mem.as_deref(), o.mem_per_cpu.as_deref()), (Some("4G"), None));
    // Both in one layer stay an error, as in Slurm.
    let o = merge_layers(&w(&["--mem=1G", "--mem-per-cpu=1G"]), &[], &[]).unwrap();
    let e = describe(&o, "#!/bin/sh\n", "x", &[], Path::new("/"), &[], &[]).unwrap_err();
    assert!(e.message.contains("mutually exclusive"), "{}", e.message);
}

#[test]
fn stray_words_and_heterogeneous_jobs_are_refused() {
    let e = directives("#!/bin/sh\n#SBATCH -n 2\n#SBATCH hetjob\n#SBATCH -n 4\ntrue\n").unwrap_err();
    assert!(e.message.contains("#SBATCH hetjob (line 3)"), "{}", e.message);
    let e = directives("#!/bin/sh\n#SBATCH -n 2 oops -t 5\ntrue\n").unwrap_err();
    assert_eq!(e.message, "Invalid directive found in batch script: oops");
    // Values are no stray words.
    assert_eq!(directives("#!/bin/sh\n#SBATCH -J name -t 5\n").unwrap(), ["-J", "name", "-t", "5"]);
}

#[test]
fn fewer_tasks_than_nodes_lowers_the_nodes_as_slurm_does() {
    let s = "#!/bin/sh\ntrue\n";
    let d = describe_script(s, &["-N", "2", "-n", "1"]).unwrap();
    assert_eq!(d.components[0].processors, 1);
    assert_eq!(spec_of(&d).nodes, 1);
    let w = ignored_options(&opts(&["-N", "2", "-n", "1"])).unwrap();
    assert_eq!(w, ["can't run 1 processes on 2 nodes, setting nnodes to 1"]);
    // --exclusive=user|mcs|topo are no more than koalesce gives.
    for x in ["user", "mcs", "topo"] {
        assert!(describe_script(s, &[&format!("--exclusive={x}")]).is_ok(), "{x}");
    }
}

#[test]
fn node_counts_as_slurm_22_05_takes_them() {
    // Checked by hand against Slurm 22.05.8's sbatch on the test bed.
    let s = "#!/bin/sh\ntrue\n";
    // Slurm's multipliers (k: 1024, m: 1024²) and a range without a minimum.
    for (n, nodes) in [
        ("0-1", 1),
        ("0-2", 1),
        ("1-0", 1),
        ("2", 2),
        ("2-4", 2),
        ("1k", 1024),
        ("2K-4k", 2048),
        ("-3", 1),
    ] {
        let d = describe_script(s, &[&format!("--nodes={n}")]).unwrap_or_else(|e| panic!("-N {n}: {}", e.message));
        assert_eq!(spec_of(&d).nodes, nodes, "-N {n}");
    }
    for (n, message, code) in [
        ("0", "Batch job submission failed: Node count specification invalid", 1),
        ("0-0", "Batch job submission failed: Node count specification invalid", 1),
        ("3-2", "Maximum node count 2 is less than minimum node count 3", 255),
        ("abc", "\"abc\" is not a valid node count", 255),
    ] {
        let e = describe_script(s, &[&format!("--nodes={n}")]).unwrap_err();
        assert_eq!((e.message.as_str(), e.code), (message, code), "-N {n}");
    }
    // The controller refuses no nodes, but its will-run test (--test-only) answers for them:
    // on the test bed "using 0 processors on nodes  in partition debug" for `-N 0` (also with
    // --ntasks-per-node, whatever -c), N processors on one node for `-n N`, C for `-c C` alone.
    for (args, procs, nodes) in [
        (&["-N", "0"][..], 0, 0),
        (&["-N", "0-0"], 0, 0),
        (&["-N", "0", "--ntasks-per-node=2"], 0, 0),
        (&["-N", "0", "--ntasks-per-node=2", "-c", "4"], 0, 0),
        (&["-N", "0-0", "-n", "3"], 3, 1),
        (&["-N", "0", "-c", "4"], 4, 1),
        (&["-N", "0", "-n", "2", "-c", "2"], 4, 1),
    ] {
        let mut args = args.to_vec();
        args.push("--test-only");
        let d = describe_script(s, &args).unwrap_or_else(|e| panic!("{args:?}: {}", e.message));
        assert_eq!(spec_of(&d).nodes, nodes, "{args:?}");
        assert_eq!(d.components.iter().map(|c| c.processors).sum::<u32>(), procs, "{args:?}");
        let summary = test_only_summary(&d, &opts(&args));
        assert!(
            summary.contains(&format!(": {procs} processor(s) in 1 component(s) [{procs}]")),
            "{summary}"
        );
    }
    // No tasks: refused in Slurm's words, with or without nodes.
    for (args, option) in [
        (&["-n", "0"][..], "ntasks"),
        (&["-N", "0", "-n", "0", "--test-only"], "ntasks"),
        (&["--ntasks-per-node=0"], "ntasks-per-node"),
        (&["-N", "0", "--ntasks-per-node=0", "--test-only"], "ntasks-per-node"),
    ] {
        let e = describe_script(s, args).unwrap_err();
        assert_eq!(
            (e.message, e.code),
            (format!("Invalid numeric value \"0\" for --{option}."), 1),
            "{args:?}"
        );
    }
}

#[test]
fn begin_and_signal_become_fields() {
    let s = "#!/bin/sh\n#SBATCH --begin=now+1hour\n#SBATCH --signal=B:USR1@90\ntrue\n";
    let before = koalesce_api::timing::now_ms();
    let d = describe_script(s, &[]).unwrap();
    let after = koalesce_api::timing::now_ms();
    let begin = koalesce_api::timing::parse_begin(d.begin.as_deref().unwrap()).unwrap();
    // Seconds resolution, as Slurm's.
    assert!(
        begin / 1000 >= before / 1000 + 3600 && begin / 1000 <= after / 1000 + 3600,
        "{begin}"
    );
    assert_eq!(d.signal.as_deref(), Some("B:10@90"));
    let d = describe_script(s, &["--signal=SIGUSR2", "--begin=uts2000000000"]).unwrap();
    assert_eq!(d.signal.as_deref(), Some("12@60"), "the command line wins; 60 s by default");
    assert_eq!(d.begin.as_deref(), Some("2033-05-18T03:33:20Z"));
    let e = describe_script(s, &["--signal=R:USR1"]).unwrap_err();
    assert!(
        e.message.starts_with("Invalid signal specification") && e.message.contains("R:"),
        "{}",
        e.message
    );
    let e = describe_script(s, &["--begin=next tuesday"]).unwrap_err();
    assert!(
        e.message.starts_with("Invalid --begin specification: next tuesday"),
        "{}",
        e.message
    );
    // The job file they make is one the server accepts.
    let d = describe_script(s, &[]).unwrap();
    JobDescription::parse(&toml::to_string(&d).unwrap()).unwrap();
}

#[test]
fn dependencies_become_the_dependency_field() {
    use koalesce_core::scheduler::{Dependency, DependencyKind};
    use koalesce_core::JobId;
    let s = "#!/bin/sh\ntrue\n";
    let d = describe_script(s, &["--dependency=afterok:3:4,afterany:5", "--array=1-3"]).unwrap();
    assert_eq!(d.dependency.as_deref(), Some("afterok:3,afterok:4,afterany:5"));
    // One task of an array too: the same field, read by the same parser.
    let d = describe_script(s, &["--dependency=afterok:3_0:4,afterany:5_2"]).unwrap();
    let (ok, any) = (DependencyKind::AfterOk, DependencyKind::AfterAny);
    let mut want = vec![
        Dependency {
            task: Some(0),
            ..Dependency::on(JobId(3), ok)
        },
        Dependency::on(JobId(4), ok),
        Dependency {
            task: Some(2),
            ..Dependency::on(JobId(5), any)
        },
    ];
    want.sort();
    assert_eq!(d.dependencies(), want);
    assert!(d.afterok.is_empty() && d.afterany.is_empty(), "{d:?}");
    // The job file they make is one the server accepts, with the same dependencies.
    let back = JobDescription::parse(&toml::to_string(&d).unwrap()).unwrap();
    assert_eq!(back.dependencies(), want);
    assert_eq!(describe_script(s, &[]).unwrap().dependency, None);
}

#[test]
fn exports() {
    let env = vec![("A".to_string(), "1".to_string()), ("SLURM_X".to_string(), "y".to_string())];
    assert_eq!(export_environment(Some("NONE"), &env).unwrap(), None);
    let only = export_environment(Some("A,B=2"), &env).unwrap().unwrap();
    assert_eq!(
        only,
        vec![("A".into(), "1".into()), ("B".into(), "2".into()), ("SLURM_X".into(), "y".into())]
    );
    let all = export_environment(Some("ALL,A=0"), &env).unwrap().unwrap();
    assert!(
        all.contains(&("A".into(), "1".into())),
        "ALL: the environment wins over explicit values"
    );
    assert!(export_environment(Some("NONE,ALL"), &env).is_err());
    // NONE with variables: those (and SLURM_*), as Slurm 22.05 takes it.
    let some = export_environment(Some("NONE,B=2"), &env).unwrap().unwrap();
    assert_eq!(some, vec![("B".into(), "2".into()), ("SLURM_X".into(), "y".into())]);
}

#[test]
fn script_arguments_follow_the_script() {
    let o = opts(&["-J", "x", "job.sh", "-n", "5", "--foo"]);
    assert_eq!(o.script, ["job.sh", "-n", "5", "--foo"]);
    assert_eq!(o.ntasks, None);
}
