//! The SWF reader on the Parallel Workloads Archive's real headers and job lines
//! (tests/data/swf, see its README), and on the odd corners such files have: `;` comment
//! lines, `-1` fields, decimals, trailing blanks, CRLF line ends, a byte-order mark, and
//! malformed lines,
//! which must be errors naming their line.

use std::io::Cursor;

use koalesce_sim::swf::{parse_swf_reader, SwfError, SwfTrace};

fn data(name: &str) -> String {
    std::fs::read_to_string(format!("{}/tests/data/swf/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

fn parse(text: &str) -> Result<SwfTrace, SwfError> {
    parse_swf_reader(Cursor::new(text.as_bytes().to_vec()), "test.swf")
}

fn malformed_line(text: &str) -> (u64, String) {
    match parse(text) {
        Err(SwfError::Malformed { line, reason, .. }) => (line, reason),
        other => panic!("expected a malformed-line error, got {other:?}"),
    }
}

#[test]
fn ctc_sp2_header_and_decimal_cpu_time() {
    let t = parse(&data("CTC-SP2-1996-3.1-cln.head.swf")).unwrap();
    assert_eq!(t.max_procs, Some(338));
    assert_eq!(t.max_nodes, Some(338), "'338 (batch partition; 512 total)'");
    assert_eq!(t.unix_start_time, Some(835_823_160));
    assert_eq!(t.header_value("Computer"), Some("IBM SP2"));
    assert_eq!(t.header_value("Version"), Some("2.2"));
    assert_eq!(t.records.len(), 4);
    let r = &t.records[0];
    assert_eq!((r.job_number, r.submit_s, r.wait_s, r.run_s), (1, 0, 588_530, 937));
    assert_eq!(r.allocated_procs, 306);
    assert_eq!(r.avg_cpu_s, 142.0, "'142.00'");
    assert_eq!(r.requested_procs, -1, "-1: unknown");
    assert_eq!(r.requested_time_s, 35_100);
    assert_eq!((r.status, r.user, r.group, r.executable, r.queue), (1, 97, -1, 307, 3));
    assert_eq!(t.records[1].submit_s, 164_472);
}

#[test]
fn lanl_cm5_memory_fields() {
    let t = parse(&data("LANL-CM5-1994-4.1-cln.head.swf")).unwrap();
    assert_eq!((t.max_procs, t.max_nodes), (Some(1024), Some(1024)));
    let r = &t.records[0];
    assert_eq!(r.used_memory_kb, 6676.0);
    assert_eq!(r.requested_memory_kb, 5904.0);
    assert_eq!(t.records[1].avg_cpu_s, 489.0);
    assert_eq!(t.records[1].requested_procs, 32);
}

#[test]
fn lcg_long_header_with_column_titles() {
    // LCG's header is long and has a `;  #  sub  runtime ...` column-title line.
    let text = data("LCG-2005-1.head.swf");
    let t = parse(&text).unwrap();
    assert_eq!(t.max_procs, Some(24_515));
    assert_eq!(t.max_nodes, None, "LCG has no MaxNodes line");
    assert_eq!(t.header.len(), text.lines().filter(|l| l.starts_with(';')).count());
    assert_eq!(t.records.len(), 4);
    assert_eq!(t.records[1].run_s, 3611);
    assert_eq!(t.records[1].requested_time_s, 116_400);
    assert_eq!(t.records[0].status, -1);
}

#[test]
fn llnl_thunder_placeholders_are_skipped_and_counted() {
    let t = parse(&data("LLNL-Thunder-2007-1.1-cln.head.swf")).unwrap();
    assert_eq!(t.records.len(), 3);
    assert_eq!(t.skipped_placeholders, 2, "two lines with submit time -1");
    assert_eq!((t.max_procs, t.max_nodes), (Some(4008), Some(1002)));
    assert_eq!(t.records[2].submit_s, 207_147);
}

#[test]
fn sdsc_sp2_copyright_header() {
    let t = parse(&data("SDSC-SP2-1998-4.2-cln.head.swf")).unwrap();
    assert_eq!(t.max_procs, Some(128));
    assert_eq!(t.records[0].job_number, 11);
    assert_eq!(t.records[0].executable, 18_180);
    assert_eq!(t.records[0].status, 5);
}

#[test]
fn crlf_and_trailing_blanks_read_the_same() {
    let text = data("CTC-SP2-1996-3.1-cln.head.swf");
    let plain = parse(&text).unwrap();
    let crlf = parse(&text.replace('\n', "\r\n")).unwrap();
    let blanks = parse(&text.lines().map(|l| format!("{l}  \t ")).collect::<Vec<_>>().join("\n")).unwrap();
    let no_final_newline = parse(text.trim_end()).unwrap();
    let bom = parse(&format!("\u{feff}{text}")).unwrap();
    for t in [&crlf, &blanks, &no_final_newline, &bom] {
        assert_eq!(t.records, plain.records);
        assert_eq!(t.max_procs, plain.max_procs);
        assert_eq!(t.header_value("Computer"), Some("IBM SP2"));
    }
}

#[test]
fn malformed_lines_name_their_line_and_field() {
    let text = data("CTC-SP2-1996-3.1-cln.head.swf");
    let lines: Vec<&str> = text.lines().collect();
    let first_job = lines.iter().position(|l| !l.starts_with(';')).unwrap();
    let with = |i: usize, new: &str| {
        let mut v = lines.clone();
        v[i] = new;
        v.join("\n")
    };
    // A field missing (17 of 18).
    let short = lines[first_job + 1].rsplit_once(' ').unwrap().0.to_string();
    let (line, reason) = malformed_line(&with(first_job + 1, &short));
    assert_eq!(line as usize, first_job + 2);
    assert!(reason.contains("expected 18 fields, found 17"), "{reason}");
    // A word where the run time belongs.
    let bad = lines[first_job].replacen(" 937 ", " 9x7 ", 1);
    let (line, reason) = malformed_line(&with(first_job, &bad));
    assert_eq!(line as usize, first_job + 1);
    assert!(reason.contains("field 4 (run time)") && reason.contains("9x7"), "{reason}");
    // An extra field (19).
    let long = format!("{} 0", lines[first_job + 2]);
    let (line, reason) = malformed_line(&with(first_job + 2, &long));
    assert_eq!(line as usize, first_job + 3);
    assert!(reason.contains("found 19"), "{reason}");
    // Non-finite values and a negative job number.
    let nan = lines[first_job].replacen("142.00", "NaN", 1);
    let (_, reason) = malformed_line(&with(first_job, &nan));
    assert!(reason.contains("field 6"), "{reason}");
    let neg = lines[first_job].replacen("    1 ", "   -7 ", 1);
    let (_, reason) = malformed_line(&with(first_job, &neg));
    assert!(reason.contains("job number"), "{reason}");
    // Rendered, the error names the file and the line.
    let e = parse(&with(first_job, &bad)).unwrap_err().to_string();
    assert!(e.contains("test.swf") && e.contains(&(first_job + 1).to_string()), "{e}");
}

#[test]
fn sandia_ross_header_without_blank_after_semicolon() {
    // Sandia-Ross writes ";MaxNodes: 1524" and ";Computer: ...".
    let t = parse(&data("Sandia-Ross-2001-1.1-cln.head.swf")).unwrap();
    assert_eq!((t.max_procs, t.max_nodes), (Some(1524), Some(1524)));
    assert_eq!(t.unix_start_time, Some(1_007_061_086));
    assert_eq!(t.header_value("Computer"), Some("Compaq DS10L 1U servers"));
    assert_eq!(t.records.len(), 3);
    let r = &t.records[1];
    assert_eq!((r.run_s, r.allocated_procs, r.avg_cpu_s, r.used_memory_kb), (11, 210, 9.0, 3296.0));
    assert_eq!((r.requested_procs, r.requested_time_s, r.status, r.partition), (210, 600, 0, 2));
}

#[test]
fn sdsc_paragon_node_count_with_a_remark() {
    let t = parse(&data("SDSC-Par-1996-3.1-cln.head.swf")).unwrap();
    // "; MaxNodes: 400 (48 interactive, 352 batch, 6 service, 10 I/O)"
    assert_eq!((t.max_procs, t.max_nodes), (Some(400), Some(400)));
    assert_eq!(t.header_value("Computer"), Some("Intel Paragon"));
    assert_eq!(t.records[2].submit_s, 251_072);
    assert_eq!(t.records[2].queue, 25);
}
