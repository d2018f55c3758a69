//! Integration tests of the SWF reader and the single-cluster FCFS/EASY
//! simulator.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use flate2::write::GzEncoder;
use flate2::Compression;
use proptest::prelude::*;

use koalesce_sim::bench::bench_single_cluster;
use koalesce_sim::single_cluster::{sim_job, simulate, write_jobs_csv, JobOutcome, QueuePolicy, SimJob, SingleResult};
use koalesce_sim::swf::{parse_swf_reader, read_swf, SwfError, SwfRecord, SwfTrace};

const TRACES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/traces");

fn shared_trace(name: &str) -> PathBuf {
    Path::new(TRACES).join(name)
}

// ---------------------------------------------------------------- helpers

/// A temporary file removed on drop.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str) -> Self {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        TempFile(std::env::temp_dir().join(format!("koalesce-sim-test-{}-{n}-{name}", std::process::id())))
    }

    fn with_bytes(name: &str, bytes: &[u8]) -> Self {
        let t = Self::new(name);
        std::fs::write(&t.0, bytes).unwrap();
        t
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = GzEncoder::new(Vec::new(), Compression::default());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

/// One SWF job line: requested = allocated processors.
fn line(job: u64, submit: i64, run: i64, procs: i64, req_time: i64) -> String {
    format!("{job} {submit} -1 {run} {procs} -1 -1 {procs} {req_time} -1 1 1 1 -1 -1 1 -1 -1\n")
}

fn trace_of(lines: &[String]) -> SwfTrace {
    let text = format!("; MaxProcs: 10\n{}", lines.concat());
    parse_swf_reader(text.as_bytes(), "hand.swf").unwrap()
}

/// (job id, start) of every simulated job, in trace order.
fn starts(trace: &SwfTrace, procs: u64, policy: QueuePolicy) -> Vec<(u64, u64)> {
    let r = simulate(trace, procs, policy);
    check_schedule(&r, procs);
    r.jobs.iter().map(|j| (j.job_id, j.start)).collect()
}

/// No over-allocation (ends before starts at one instant), start >= submit.
fn check_schedule(r: &SingleResult, procs: u64) {
    let mut ev: Vec<(u64, i8, u64)> = Vec::with_capacity(2 * r.jobs.len());
    for j in &r.jobs {
        assert!(j.start >= j.submit, "job {} starts before submit", j.job_id);
        assert!(j.end > j.start, "job {} has no runtime", j.job_id);
        assert!(j.procs >= 1 && j.procs <= procs);
        ev.push((j.start, 1, j.procs));
        ev.push((j.end, 0, j.procs));
    }
    ev.sort_unstable();
    let mut used: u64 = 0;
    for (t, kind, p) in ev {
        if kind == 0 {
            used -= p;
        } else {
            used += p;
            assert!(used <= procs, "{used} > {procs} processors in use at t={t}");
        }
    }
    assert_eq!(used, 0);
}

const FCFS: QueuePolicy = QueuePolicy::Fcfs;
const EASY: QueuePolicy = QueuePolicy::Easy;

// ---------------------------------------------------------------- SWF reader

const SAMPLE: &str = "; Version: 2.2\n\
; Computer: test\n\
; UnixStartTime: 1000\n\
; MaxProcs: 16\n\
;\n\
\n\
1 0 5 100 4 100.25 -1 4 200 -1 1 1 1 -1 -1 1 -1 -1\n\
2 -1 -1 -1 -1 -1 -1 -1 -1 -1 1 36 -1 66 -1 2 -1 -1\n\
   3   10   0  50.6  2  -1  -1  -1  -1  -1  0  2  1  -1  -1  1  -1  -1   \n\
4 -5 -1 -1 -1 -1 -1 -1 -1 -1 1 36 -1 66 -1 2 -1 -1\n\
\n\
5 20 1 7 1 7 -1 1 10 -1 1 2 1 -1 -1 1 -1 -1";

fn check_sample(t: &SwfTrace) {
    assert_eq!(t.header.len(), 5);
    assert_eq!(t.header[1], "; Computer: test");
    assert_eq!(t.max_procs, Some(16));
    assert_eq!(t.unix_start_time, Some(1000));
    assert_eq!(t.skipped_placeholders, 2);
    let ids: Vec<u64> = t.records.iter().map(|r| r.job_number).collect();
    assert_eq!(ids, [1, 3, 5]);
    assert_eq!(t.records[0].avg_cpu_s, 100.25);
    assert_eq!(t.records[1].run_s, 51);
    assert_eq!(t.records[1].requested_procs, -1);
    assert_eq!(t.records[1].status, 0);
    assert_eq!(t.records[2].requested_time_s, 10);
}

#[test]
fn swf_comments_placeholders_and_blank_lines() {
    let t = parse_swf_reader(SAMPLE.as_bytes(), "sample.swf").unwrap();
    check_sample(&t);
}

#[test]
fn swf_plain_and_gzip_files_read_identically() {
    let plain = TempFile::with_bytes("sample.swf", SAMPLE.as_bytes());
    let gz = TempFile::with_bytes("sample.swf.gz", &gzip(SAMPLE.as_bytes()));
    // Detection is by magic bytes, not by extension.
    let gz_misnamed = TempFile::with_bytes("gz-but-named.swf", &gzip(SAMPLE.as_bytes()));
    let plain_misnamed = TempFile::with_bytes("plain-but-named.swf.gz", SAMPLE.as_bytes());
    let a = read_swf(&plain.0).unwrap();
    check_sample(&a);
    for f in [&gz, &gz_misnamed, &plain_misnamed] {
        assert_eq!(read_swf(&f.0).unwrap(), a, "{}", f.0.display());
    }
}

#[test]
fn swf_multi_member_gzip() {
    let (first, second) = SAMPLE.split_at(SAMPLE.find("\n4 ").unwrap() + 1);
    let mut bytes = gzip(first.as_bytes());
    bytes.extend(gzip(second.as_bytes()));
    let f = TempFile::with_bytes("multi.swf.gz", &bytes);
    check_sample(&read_swf(&f.0).unwrap());
}

#[test]
fn swf_malformed_line_reports_path_line_and_reason() {
    let text = format!(
        "; header\n\n{}{}1 2 3 4\n{}",
        line(1, 0, 10, 1, 10),
        line(2, 0, 10, 1, 10),
        line(3, 0, 10, 1, 10)
    );
    for (name, bytes) in [("bad.swf", text.as_bytes().to_vec()), ("bad.swf.gz", gzip(text.as_bytes()))] {
        let f = TempFile::with_bytes(name, &bytes);
        let err = read_swf(&f.0).unwrap_err();
        match &err {
            SwfError::Malformed { path, line, reason } => {
                assert_eq!(path, &f.0);
                assert_eq!(*line, 5);
                assert!(reason.contains("expected 18 fields, found 4"), "{reason}");
            }
            other => panic!("expected Malformed, got {other:?}"),
        }
        let msg = err.to_string();
        assert!(msg.contains(&format!("{}:5:", f.0.display())), "{msg}");
    }
    // A non-numeric field names the field.
    let text = format!("{}1 0 -1 ten 1 -1 -1 1 5 -1 1 1 1 -1 -1 1 -1 -1\n", line(1, 0, 1, 1, 1));
    let err = parse_swf_reader(text.as_bytes(), "x.swf").unwrap_err();
    let msg = err.to_string();
    assert!(msg.starts_with("x.swf:2: "), "{msg}");
    assert!(msg.contains("field 4 (run time): `ten` is not a number"), "{msg}");
}

#[test]
fn swf_large_gzip_spanning_many_chunks() {
    // ~2 MB of text: many decompression chunks and line splits across them.
    let mut text = String::from("; MaxProcs: 64\n");
    for i in 0..30_000u64 {
        text.push_str(&line(i + 1, i as i64, 1 + (i % 977) as i64, 1 + (i % 64) as i64, 1000));
    }
    let plain = TempFile::with_bytes("big.swf", text.as_bytes());
    let gz = TempFile::with_bytes("big.swf.gz", &gzip(text.as_bytes()));
    let a = read_swf(&plain.0).unwrap();
    assert_eq!(a.records.len(), 30_000);
    assert_eq!(read_swf(&gz.0).unwrap(), a);
    assert_eq!(
        parse_swf_reader(std::io::BufReader::new(std::fs::File::open(&gz.0).unwrap()), "x").unwrap(),
        a
    );
    // A malformed line deep in the file: correct line number, and the
    // decompressor thread stops cleanly when the parser gives up early.
    let mut lines: Vec<&str> = text.lines().collect();
    lines[25_000] = "25000 1 2 3";
    let bad = lines.join("\n");
    let gz = TempFile::with_bytes("bigbad.swf.gz", &gzip(bad.as_bytes()));
    match read_swf(&gz.0) {
        Err(SwfError::Malformed { line, .. }) => assert_eq!(line, 25_001),
        other => panic!("expected Malformed, got {other:?}"),
    }
}

#[test]
fn swf_missing_file_is_io_error_with_path() {
    let p = Path::new("/nonexistent/dir/trace.swf");
    match read_swf(p) {
        Err(SwfError::Io { path, .. }) => assert_eq!(path, p),
        other => panic!("expected Io, got {other:?}"),
    }
}

#[test]
fn swf_truncated_gzip_is_an_error() {
    let gz = gzip(SAMPLE.repeat(50).as_bytes());
    let f = TempFile::with_bytes("trunc.swf.gz", &gz[..gz.len() / 2]);
    assert!(read_swf(&f.0).is_err());
}

// ---------------------------------------------------------------- job rules

#[test]
fn allocated_procs_used_when_requested_unknown_and_drops_counted() {
    let text = [
        // requested -1, allocated 3
        "1 0 -1 10 3 -1 -1 -1 20 -1 1 1 1 -1 -1 1 -1 -1\n".to_string(),
        line(2, 0, 0, 1, 10),   // runtime 0
        line(3, 0, -1, 1, 10),  // runtime unknown
        line(4, 0, 10, -1, 10), // procs unknown
        line(5, 0, 10, 11, 10), // wider than the cluster
        line(6, 0, 10, 10, 10),
    ];
    let t = trace_of(&text);
    let r = simulate(&t, 10, FCFS);
    assert_eq!(r.dropped.no_runtime, 2);
    assert_eq!(r.dropped.no_procs, 1);
    assert_eq!(r.dropped.too_wide, 1);
    assert_eq!(r.dropped.total(), 4);
    let got: Vec<(u64, u64, u64)> = r.jobs.iter().map(|j| (j.job_id, j.start, j.procs)).collect();
    assert_eq!(got, [(1, 0, 3), (6, 10, 10)]);
}

// ---------------------------------------------------------------- hand-checked schedules (N = 10)

#[test]
fn fcfs_basic_and_instant_ordering() {
    // Trace order A, B, C, D; D is submitted before B and C.
    // t=0 A starts (4/4). t=5 D queued. t=10: A ends first, then B and C
    // arrive behind D: D (1) and B (3) start; C waits for B (ends 15).
    let t = trace_of(&[
        line(1, 0, 10, 4, 10),
        line(2, 10, 5, 3, 5),
        line(3, 10, 5, 3, 5),
        line(4, 5, 100, 1, 100),
    ]);
    let want = [(1, 0), (2, 10), (3, 15), (4, 10)];
    assert_eq!(starts(&t, 4, FCFS), want);
    assert_eq!(starts(&t, 4, EASY), want);
}

#[test]
fn easy_backfills_short_job_ahead_of_blocked_head() {
    // J2 blocked (8 > 4 free): shadow S = 100 (J1), extra = 2.
    // J3 (4 procs) ends at 52 <= 100: backfilled at 2.
    let t = trace_of(&[line(1, 0, 100, 6, 100), line(2, 1, 50, 8, 50), line(3, 2, 50, 4, 50)]);
    assert_eq!(starts(&t, 10, EASY), [(1, 0), (2, 100), (3, 2)]);
    assert_eq!(starts(&t, 10, FCFS), [(1, 0), (2, 100), (3, 150)]);
}

#[test]
fn easy_does_not_backfill_job_that_would_delay_head() {
    // J3 would end at 202 > S = 100 and needs 4 > extra = 2: not backfilled.
    let t = trace_of(&[line(1, 0, 100, 6, 100), line(2, 1, 50, 8, 50), line(3, 2, 200, 4, 200)]);
    let want = [(1, 0), (2, 100), (3, 150)];
    assert_eq!(starts(&t, 10, EASY), want);
    assert_eq!(starts(&t, 10, FCFS), want);
}

#[test]
fn easy_extra_processors_rule() {
    // t=2: S = 100, extra = 2; J3 (2 procs, ends 302) uses the extra.
    // t=3: recomputed: free 2, S = 100, extra = 0; J4 (1 proc, ends 303)
    //      may not start.
    // t=4: J5 (1 proc, est 96) ends by S = 100: starts.
    // t=100: J1 ends, J2 starts (free 0). t=150: J2 ends, J4 starts.
    let t = trace_of(&[
        line(1, 0, 100, 6, 100),
        line(2, 1, 50, 8, 50),
        line(3, 2, 300, 2, 300),
        line(4, 3, 300, 1, 300),
        line(5, 4, 50, 1, 96),
    ]);
    assert_eq!(starts(&t, 10, EASY), [(1, 0), (2, 100), (3, 2), (4, 150), (5, 4)]);
    assert_eq!(starts(&t, 10, FCFS), [(1, 0), (2, 100), (3, 100), (4, 150), (5, 150)]);
}

#[test]
fn easy_extra_counts_all_jobs_ending_at_shadow_time() {
    // t=1: J4 needs 5, free 2. J1 and J2 both end (est.) at 100:
    // S = 100, free at S = 2 + 3 + 3 = 8, extra = 3. J5 (2 procs, ends 502)
    // fits in the extra and starts at 2.
    let t = trace_of(&[
        line(1, 0, 100, 3, 100),
        line(2, 0, 100, 3, 100),
        line(3, 0, 200, 2, 200),
        line(4, 1, 10, 5, 10),
        line(5, 2, 500, 2, 500),
    ]);
    assert_eq!(starts(&t, 10, EASY), [(1, 0), (2, 0), (3, 0), (4, 100), (5, 2)]);
}

#[test]
fn easy_estimate_below_runtime_is_raised() {
    // Queued job: J3 asks for 10 s but runs 120 s, so its estimate is 120:
    // 2 + 120 > S = 100 and 4 > extra = 2, not backfilled.
    let t = trace_of(&[line(1, 0, 100, 6, 100), line(2, 1, 50, 8, 50), line(3, 2, 120, 4, 10)]);
    assert_eq!(starts(&t, 10, EASY), [(1, 0), (2, 100), (3, 150)]);
    // Running job: J1 asks for 50 s but runs 100 s, so S = 100, not 50;
    // J3 (ends 72 <= 100) is backfilled.
    let t = trace_of(&[line(1, 0, 100, 6, 50), line(2, 1, 50, 8, 50), line(3, 2, 70, 4, 70)]);
    assert_eq!(starts(&t, 10, EASY), [(1, 0), (2, 100), (3, 2)]);
    // Unknown estimate (-1) is the runtime.
    let t = trace_of(&[line(1, 0, 100, 6, -1), line(2, 1, 50, 8, -1), line(3, 2, 98, 4, -1)]);
    assert_eq!(starts(&t, 10, EASY), [(1, 0), (2, 100), (3, 2)]);
}

#[test]
fn easy_can_start_head_later_than_fcfs_with_overestimates() {
    // J1 is estimated to 100 s but ends at 50. EASY backfills J3 (ends 82)
    // against S = 100; when J1 ends early, J2 must wait for J3 (82), while
    // FCFS starts J2 at 50. So "EASY never delays the head vs FCFS" is not
    // an invariant.
    let t = trace_of(&[line(1, 0, 50, 6, 100), line(2, 1, 50, 8, 50), line(3, 2, 80, 4, 80)]);
    assert_eq!(starts(&t, 10, EASY), [(1, 0), (2, 82), (3, 2)]);
    assert_eq!(starts(&t, 10, FCFS), [(1, 0), (2, 50), (3, 100)]);
}

#[test]
fn metrics_and_csv() {
    let t = trace_of(&[line(1, 0, 100, 5, 100), line(2, 0, 100, 10, 100)]);
    let r = simulate(&t, 10, FCFS);
    // J1 0..100, J2 100..200.
    assert_eq!(r.makespan, 200);
    assert!((r.utilization - (500.0 + 1000.0) / 2000.0).abs() < 1e-12);
    assert!((r.mean_wait - 50.0).abs() < 1e-12);
    assert!((r.mean_bounded_slowdown - 1.5).abs() < 1e-12);
    assert_eq!(r.events, 4);
    assert_eq!(r.passes, 3);
    let f = TempFile::new("jobs.csv");
    write_jobs_csv(&f.0, &r).unwrap();
    let csv = std::fs::read_to_string(&f.0).unwrap();
    assert_eq!(
        csv,
        "job_id,submit,start,end,procs,wait,runtime\n1,0,0,100,5,0,100\n2,0,100,200,10,100,100\n"
    );
}

// ---------------------------------------------------------------- reference model + properties

/// Straightforward O(n^2) model of the same semantics, written independently
/// (instant-by-instant, shadow time from sorted distinct estimated ends).
fn reference(jobs: &[SimJob], n: u64, easy: bool) -> Vec<u64> {
    let mut start = vec![u64::MAX; jobs.len()];
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by_key(|&i| (jobs[i].submit, i));
    let mut next = 0;
    let mut running: Vec<usize> = Vec::new();
    let mut queue: Vec<usize> = Vec::new();
    let end = |i: usize, s: &[u64]| s[i] + jobs[i].runtime;
    loop {
        let t_end = running.iter().map(|&i| end(i, &start)).min();
        let t_arr = order.get(next).map(|&i| jobs[i].submit);
        let now = match (t_end, t_arr) {
            (None, None) => break,
            (a, b) => a.unwrap_or(u64::MAX).min(b.unwrap_or(u64::MAX)),
        };
        running.retain(|&i| end(i, &start) != now);
        while next < order.len() && jobs[order[next]].submit == now {
            queue.push(order[next]);
            next += 1;
        }
        let used = |running: &Vec<usize>| running.iter().map(|&i| jobs[i].procs).sum::<u64>();
        while !queue.is_empty() && jobs[queue[0]].procs <= n - used(&running) {
            let i = queue.remove(0);
            start[i] = now;
            running.push(i);
        }
        if easy && !queue.is_empty() {
            let need = jobs[queue[0]].procs;
            let mut times: Vec<u64> = running.iter().map(|&i| start[i] + jobs[i].estimate).collect();
            times.sort_unstable();
            times.dedup();
            let free_now = n - used(&running);
            let (mut shadow, mut extra) = (u64::MAX, 0);
            for t in times {
                let freed: u64 = running
                    .iter()
                    .filter(|&&i| start[i] + jobs[i].estimate <= t)
                    .map(|&i| jobs[i].procs)
                    .sum();
                if free_now + freed >= need {
                    shadow = t;
                    extra = free_now + freed - need;
                    break;
                }
            }
            let mut k = 1;
            while k < queue.len() {
                let i = queue[k];
                let free = n - used(&running);
                let j = jobs[i];
                if j.procs <= free {
                    if now + j.estimate <= shadow {
                        start[i] = now;
                        running.push(queue.remove(k));
                        continue;
                    } else if j.procs <= extra {
                        extra -= j.procs;
                        start[i] = now;
                        running.push(queue.remove(k));
                        continue;
                    }
                }
                k += 1;
            }
        }
    }
    start
}

fn record(job: u64, submit: i64, run: i64, procs: i64, req: i64) -> SwfRecord {
    let t = trace_of(&[line(job, submit, run, procs, req)]);
    t.records[0]
}

fn arb_trace() -> impl Strategy<Value = (u64, Vec<(i64, i64, i64, i64)>)> {
    (1u64..=12).prop_flat_map(|n| {
        let job = (0i64..60, -1i64..40, -1i64..=(n as i64 + 2), -1i64..60);
        (Just(n), prop::collection::vec(job, 0..40))
    })
}

fn build(jobs: &[(i64, i64, i64, i64)]) -> SwfTrace {
    SwfTrace {
        records: jobs
            .iter()
            .enumerate()
            .map(|(i, &(s, r, p, q))| record(i as u64 + 1, s, r, p, q))
            .collect(),
        ..SwfTrace::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn prop_matches_reference_and_invariants((n, raw) in arb_trace()) {
        let trace = build(&raw);
        let kept: Vec<(u64, SimJob)> = trace
            .records
            .iter()
            .filter_map(|r| sim_job(r, n).ok().map(|j| (r.job_number, j)))
            .collect();
        let sim_jobs: Vec<SimJob> = kept.iter().map(|k| k.1).collect();
        for policy in [FCFS, EASY] {
            let r = simulate(&trace, n, policy);
            // Determinism.
            prop_assert_eq!(&r, &simulate(&trace, n, policy));
            // All non-dropped jobs run, in trace order, exactly their runtime.
            prop_assert_eq!(r.jobs.len() + r.dropped.total(), raw.len());
            prop_assert_eq!(r.jobs.len(), kept.len());
            prop_assert_eq!(r.events, 2 * kept.len() as u64);
            for (o, (id, j)) in r.jobs.iter().zip(&kept) {
                prop_assert_eq!(o.job_id, *id);
                prop_assert_eq!(o.submit, j.submit);
                prop_assert_eq!(o.end - o.start, j.runtime);
                prop_assert_eq!(o.procs, j.procs);
            }
            // No over-allocation, start >= submit.
            check_schedule(&r, n);
            // Same schedule as the independent model.
            let want = reference(&sim_jobs, n, policy == EASY);
            let got: Vec<u64> = r.jobs.iter().map(|j| j.start).collect();
            prop_assert_eq!(got, want);
            if policy == FCFS {
                // FCFS starts are monotone in queue (submit, trace) order.
                let mut by_arrival: Vec<&JobOutcome> = r.jobs.iter().collect();
                by_arrival.sort_by_key(|j| j.submit);
                prop_assert!(by_arrival.windows(2).all(|w| w[0].start <= w[1].start));
            }
        }
    }

    #[test]
    fn prop_easy_equals_fcfs_when_every_job_takes_the_whole_machine(
        (n, raw) in arb_trace()
    ) {
        let whole: Vec<_> = raw.iter().map(|&(s, r, _, q)| (s, r, n as i64, q)).collect();
        let trace = build(&whole);
        prop_assert_eq!(simulate(&trace, n, FCFS).jobs, simulate(&trace, n, EASY).jobs);
    }

    #[test]
    fn prop_swf_reader_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        let _ = parse_swf_reader(&bytes[..], "fuzz");
    }

    #[test]
    fn prop_swf_reader_never_panics_on_token_soup(
        lines in prop::collection::vec(
            prop::collection::vec(
                prop::sample::select(vec![
                    "-1", "0", "1", "17", "3.5", "-2.5", "1e3", "nan", "inf", "x",
                    ";", "99999999999999999999", "-9223372036854775808", "",
                ]),
                0..22,
            ),
            0..6,
        )
    ) {
        let text: String = lines.iter().map(|l| l.join(" ") + "\n").collect();
        if let Err(e) = parse_swf_reader(text.as_bytes(), "soup") {
            // Errors always render.
            prop_assert!(!e.to_string().is_empty());
        }
    }
}

// ---------------------------------------------------------------- real traces

#[test]
fn kth_trace_full_simulation() {
    let path = shared_trace("KTH-SP2-1996-2.1-cln.swf.gz");
    let trace = read_swf(&path).unwrap();
    assert_eq!(trace.records.len(), 28_476);
    assert_eq!(trace.skipped_placeholders, 0);
    assert_eq!(trace.max_procs, Some(100));
    for policy in [FCFS, EASY] {
        let r = simulate(&trace, 100, policy);
        assert_eq!(r.jobs.len() + r.dropped.total(), 28_476);
        assert!(r.jobs.len() > 28_000, "{r}");
        check_schedule(&r, 100);
        assert!(r.utilization > 0.0 && r.utilization <= 1.0, "{r}");
        eprintln!("KTH {policy}:\n{r}");
    }
}

#[test]
#[ignore = "benchmark; run with --release -- --ignored --nocapture"]
fn bench_hpc2n() {
    let path = shared_trace("HPC2N-2002-2.2-cln.swf.gz");
    for policy in [FCFS, EASY] {
        let report = bench_single_cluster(&path, 240, policy, 7).unwrap();
        println!("{report}\n");
        assert_eq!(report.records, 202_871);
    }
}

#[test]
#[ignore = "all shared traces; run with --release -- --ignored --nocapture"]
fn all_shared_traces() {
    let mut paths: Vec<PathBuf> = Vec::new();
    for dir in [Path::new(TRACES).to_path_buf(), Path::new(TRACES).join("extra")] {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "gz") {
                paths.push(p);
            }
        }
    }
    paths.sort();
    for p in paths {
        let t0 = std::time::Instant::now();
        let trace = read_swf(&p).unwrap();
        let read = t0.elapsed();
        let n = trace.max_procs.unwrap();
        for policy in [FCFS, EASY] {
            let t1 = std::time::Instant::now();
            let r = simulate(&trace, n, policy);
            let sim = t1.elapsed();
            check_schedule(&r, n);
            println!(
                "{:<40} {policy} N={n:<6} read {:>7.1} ms sim {:>8.1} ms  jobs {} dropped {} maxq {} util {:.3} wait {:.0} bsld {:.1}",
                p.file_name().unwrap().to_string_lossy(),
                read.as_secs_f64() * 1e3,
                sim.as_secs_f64() * 1e3,
                r.jobs.len(),
                r.dropped.total(),
                r.max_queue_len,
                r.utilization,
                r.mean_wait,
                r.mean_bounded_slowdown
            );
        }
    }
}
