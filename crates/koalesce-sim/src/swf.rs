//! Reader for the Standard Workload Format (SWF) of the Parallel Workloads
//! Archive.
//!
//! A trace is a text file, optionally gzip-compressed (detected by the gzip
//! magic bytes `1f 8b`, not by the file name). Lines starting with `;` are
//! comments; the header ones carry `; Key: value` pairs such as
//! `; MaxProcs: 240`. Every other non-blank line is one job record of exactly
//! 18 whitespace-separated numeric fields, where `-1` means "unknown":
//!
//! | # | field | # | field |
//! |---|---|---|---|
//! | 1 | job number | 10 | requested memory (KB/proc) |
//! | 2 | submit time (s) | 11 | status |
//! | 3 | wait time (s) | 12 | user id |
//! | 4 | run time (s) | 13 | group id |
//! | 5 | allocated processors | 14 | executable (application) number |
//! | 6 | average CPU time used (s) | 15 | queue number |
//! | 7 | used memory (KB/proc) | 16 | partition number |
//! | 8 | requested processors | 17 | preceding job number |
//! | 9 | requested time (s) | 18 | think time from preceding job (s) |
//!
//! Values may be written as integers or decimals; integer-typed fields are
//! rounded to the nearest integer (half away from zero). Records with a
//! negative submit time are placeholders (e.g. LLNL-Thunder has 1,190 of
//! them); they are skipped and counted in [`SwfTrace::skipped_placeholders`].
//!
//! The reader streams the input through one reused line buffer and parses
//! bytes directly (no UTF-8 validation of job lines, integer fast path), so a
//! 200k-job trace parses in a few tens of milliseconds. It never panics on
//! malformed input: it returns [`SwfError`] naming the file, the 1-based line
//! number and the reason.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use flate2::bufread::MultiGzDecoder;

/// Number of fields in an SWF job line.
pub const SWF_FIELDS: usize = 18;

/// Size of the read buffers used by [`read_swf`].
const BUF_CAPACITY: usize = 256 * 1024;

/// Longest accepted line (bounds memory on garbage input).
const MAX_LINE: u64 = 1 << 20;

/// Names of the 18 SWF fields, for error messages (index = field number - 1).
const FIELD_NAMES: [&str; SWF_FIELDS] = [
    "job number",
    "submit time",
    "wait time",
    "run time",
    "allocated processors",
    "average cpu time",
    "used memory",
    "requested processors",
    "requested time",
    "requested memory",
    "status",
    "user id",
    "group id",
    "executable number",
    "queue number",
    "partition number",
    "preceding job number",
    "think time",
];

/// Error reading or parsing an SWF trace.
#[derive(Debug, thiserror::Error)]
pub enum SwfError {
    /// The file could not be opened or read (including corrupt gzip data).
    #[error("cannot read SWF trace {}", path.display())]
    Io {
        /// Path (or name given to [`parse_swf_reader`]) of the trace.
        path: PathBuf,
        /// Underlying I/O error.
        #[source]
        source: io::Error,
    },
    /// A job line is not a valid SWF record.
    #[error("{}:{line}: malformed SWF record: {reason}", path.display())]
    Malformed {
        /// Path (or name given to [`parse_swf_reader`]) of the trace.
        path: PathBuf,
        /// 1-based line number in the (decompressed) file.
        line: u64,
        /// What is wrong with the line.
        reason: String,
    },
}

/// One job record (one non-comment line) of an SWF trace. `-1` means unknown.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SwfRecord {
    /// Field 1: job number.
    pub job_number: u64,
    /// Field 2: submit time in seconds since the log start (never negative
    /// here: negative-submit placeholders are skipped).
    pub submit_s: i64,
    /// Field 3: wait time in seconds.
    pub wait_s: i64,
    /// Field 4: run time in seconds (wall clock).
    pub run_s: i64,
    /// Field 5: number of allocated processors.
    pub allocated_procs: i64,
    /// Field 6: average CPU time used per processor, seconds (may be fractional).
    pub avg_cpu_s: f64,
    /// Field 7: used memory per processor, KB (may be fractional).
    pub used_memory_kb: f64,
    /// Field 8: requested number of processors.
    pub requested_procs: i64,
    /// Field 9: requested time (user runtime estimate) in seconds.
    pub requested_time_s: i64,
    /// Field 10: requested memory per processor, KB (may be fractional).
    pub requested_memory_kb: f64,
    /// Field 11: status (1 completed, 0 failed, 5 cancelled, ...).
    pub status: i64,
    /// Field 12: user id.
    pub user: i64,
    /// Field 13: group id.
    pub group: i64,
    /// Field 14: executable (application) number.
    pub executable: i64,
    /// Field 15: queue number.
    pub queue: i64,
    /// Field 16: partition number.
    pub partition: i64,
    /// Field 17: preceding job number.
    pub preceding_job: i64,
    /// Field 18: think time from the preceding job, seconds.
    pub think_time_s: i64,
}

/// A parsed SWF trace.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SwfTrace {
    /// Job records in file order (placeholders excluded).
    pub records: Vec<SwfRecord>,
    /// Number of placeholder records (negative submit time) that were skipped.
    pub skipped_placeholders: usize,
    /// All comment lines (starting with `;`), verbatim without the line end.
    pub header: Vec<String>,
    /// Value of the `; MaxProcs:` header line, if present and numeric.
    pub max_procs: Option<u64>,
    /// Value of the `; MaxNodes:` header line, if present and numeric.
    pub max_nodes: Option<u64>,
    /// Value of the `; UnixStartTime:` header line, if present and numeric.
    pub unix_start_time: Option<i64>,
}

impl SwfTrace {
    /// Looks up a header field `; Key: value` (key compared
    /// case-insensitively) and returns the trimmed value of its first
    /// occurrence.
    pub fn header_value(&self, key: &str) -> Option<&str> {
        self.header.iter().find_map(|line| header_kv(line, key))
    }
}

/// Reads an SWF trace from `path`, plain text or gzip-compressed (detected by
/// the magic bytes). Gzip input is decompressed on a helper thread while the
/// calling thread parses (falling back to one thread if it cannot spawn).
pub fn read_swf(path: &Path) -> Result<SwfTrace, SwfError> {
    let io_err = |source| SwfError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(io_err)?;
    let (is_gzip, stream) = sniff_gzip(BufReader::with_capacity(BUF_CAPACITY, file)).map_err(io_err)?;
    if !is_gzip {
        return parse_lines(stream, path);
    }
    let threaded = std::thread::scope(|scope| {
        let (tx, rx) = mpsc::sync_channel::<io::Result<Vec<u8>>>(PIPELINE_DEPTH);
        let (back_tx, back_rx) = mpsc::sync_channel::<Vec<u8>>(PIPELINE_DEPTH + 2);
        let decompress = move || decompress_chunks(MultiGzDecoder::new(stream), &tx, &back_rx);
        match std::thread::Builder::new()
            .name("swf-gunzip".into())
            .spawn_scoped(scope, decompress)
        {
            Ok(_) => {
                let reader = ChunkReader {
                    rx,
                    back: back_tx,
                    cur: Vec::new(),
                    pos: 0,
                    done: false,
                };
                Some(parse_lines(reader, path))
            }
            Err(_) => None,
        }
    });
    match threaded {
        Some(result) => result,
        // Could not spawn a thread: decompress on this one.
        None => {
            let file = File::open(path).map_err(io_err)?;
            parse_swf_impl(BufReader::with_capacity(BUF_CAPACITY, file), path)
        }
    }
}

/// Parses an SWF trace from any buffered reader (plain text or gzip,
/// detected by the magic bytes). `name_for_errors` is used as the path in
/// errors.
pub fn parse_swf_reader<R: BufRead>(reader: R, name_for_errors: &str) -> Result<SwfTrace, SwfError> {
    parse_swf_impl(reader, Path::new(name_for_errors))
}

fn parse_swf_impl<R: BufRead>(reader: R, path: &Path) -> Result<SwfTrace, SwfError> {
    let (is_gzip, stream) = sniff_gzip(reader).map_err(|source| SwfError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    if is_gzip {
        let gz = MultiGzDecoder::new(stream);
        parse_lines(BufReader::with_capacity(BUF_CAPACITY, gz), path)
    } else {
        parse_lines(stream, path)
    }
}

type Sniffed<R> = io::Chain<io::Take<io::Cursor<[u8; 2]>>, R>;

/// Reads (up to) the first two bytes, without assuming `fill_buf` returns
/// both at once, and puts them back in front of the stream. `true` if they
/// are the gzip magic `1f 8b`.
fn sniff_gzip<R: BufRead>(mut reader: R) -> io::Result<(bool, Sniffed<R>)> {
    let mut magic = [0u8; 2];
    let mut got = 0;
    while got < magic.len() {
        match reader.read(&mut magic[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let is_gzip = got == 2 && magic == [0x1f, 0x8b];
    Ok((is_gzip, io::Cursor::new(magic).take(got as u64).chain(reader)))
}

/// Chunk size of the decompression pipeline.
const CHUNK: usize = 256 * 1024;
/// Decompressed chunks that may wait for the parser.
const PIPELINE_DEPTH: usize = 4;

/// Decompressor side of the pipeline: sends full chunks until EOF, an error,
/// or the parser hanging up (it stops early on a malformed line).
fn decompress_chunks<R: Read>(mut src: R, tx: &mpsc::SyncSender<io::Result<Vec<u8>>>, recycled: &mpsc::Receiver<Vec<u8>>) {
    loop {
        let mut buf = recycled.try_recv().unwrap_or_else(|_| Vec::with_capacity(CHUNK));
        buf.resize(CHUNK, 0);
        let mut n = 0;
        while n < CHUNK {
            match src.read(&mut buf[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            }
        }
        if n == 0 {
            return;
        }
        buf.truncate(n);
        if tx.send(Ok(buf)).is_err() {
            return;
        }
    }
}

/// Parser side of the pipeline: a `BufRead` over the received chunks.
struct ChunkReader {
    rx: mpsc::Receiver<io::Result<Vec<u8>>>,
    back: mpsc::SyncSender<Vec<u8>>,
    cur: Vec<u8>,
    pos: usize,
    done: bool,
}

impl Read for ChunkReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let avail = self.fill_buf()?;
        let n = avail.len().min(out.len());
        out[..n].copy_from_slice(&avail[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for ChunkReader {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        while self.pos >= self.cur.len() && !self.done {
            match self.rx.recv() {
                Ok(Ok(buf)) => {
                    let old = std::mem::replace(&mut self.cur, buf);
                    self.pos = 0;
                    if old.capacity() > 0 {
                        let _ = self.back.try_send(old);
                    }
                }
                Ok(Err(e)) => {
                    self.done = true;
                    return Err(e);
                }
                // Decompressor finished.
                Err(_) => self.done = true,
            }
        }
        Ok(&self.cur[self.pos..])
    }

    fn consume(&mut self, amt: usize) {
        self.pos = (self.pos + amt).min(self.cur.len());
    }
}

fn parse_lines<R: BufRead>(mut reader: R, path: &Path) -> Result<SwfTrace, SwfError> {
    let mut trace = SwfTrace::default();
    let mut buf: Vec<u8> = Vec::with_capacity(256);
    let mut line_no: u64 = 0;
    loop {
        buf.clear();
        match (&mut reader).take(MAX_LINE).read_until(b'\n', &mut buf) {
            Ok(0) => break,
            Ok(n) if n as u64 == MAX_LINE && buf.last() != Some(&b'\n') => {
                return Err(SwfError::Malformed {
                    path: path.to_path_buf(),
                    line: line_no + 1,
                    reason: format!("line longer than {MAX_LINE} bytes"),
                })
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(source) => {
                return Err(SwfError::Io {
                    path: path.to_path_buf(),
                    source,
                })
            }
        }
        line_no += 1;
        // A byte-order mark (files saved by Windows editors) is not part of the first line.
        let raw = if line_no == 1 {
            buf.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&buf)
        } else {
            &buf[..]
        };
        let line = trim_ascii(raw);
        if line.is_empty() {
            continue;
        }
        if line[0] == b';' {
            let text = String::from_utf8_lossy(line).into_owned();
            if trace.max_procs.is_none() {
                trace.max_procs = header_kv(&text, "MaxProcs").and_then(leading_u64);
            }
            if trace.max_nodes.is_none() {
                trace.max_nodes = header_kv(&text, "MaxNodes").and_then(leading_u64);
            }
            if trace.unix_start_time.is_none() {
                trace.unix_start_time = header_kv(&text, "UnixStartTime")
                    .and_then(|v| v.split_ascii_whitespace().next())
                    .and_then(|v| v.parse().ok());
            }
            trace.header.push(text);
            continue;
        }
        match parse_record(line) {
            Ok(Some(rec)) => trace.records.push(rec),
            Ok(None) => trace.skipped_placeholders += 1,
            Err(reason) => {
                return Err(SwfError::Malformed {
                    path: path.to_path_buf(),
                    line: line_no,
                    reason,
                })
            }
        }
    }
    trace.records.shrink_to_fit();
    Ok(trace)
}

/// `; Key: value` → `Some("value")` when the key matches (case-insensitive).
fn header_kv<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let rest = line.strip_prefix(';')?.trim_start();
    let (k, v) = rest.split_once(':')?;
    k.trim().eq_ignore_ascii_case(key).then(|| v.trim())
}

/// Leading unsigned integer of a header value (`"338 (batch partition)"` → 338).
fn leading_u64(v: &str) -> Option<u64> {
    v.split(|c: char| !c.is_ascii_digit())
        .next()
        .filter(|s| !s.is_empty())?
        .parse()
        .ok()
}

fn trim_ascii(mut s: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = s {
        if first.is_ascii_whitespace() {
            s = rest;
        } else {
            break;
        }
    }
    while let [rest @ .., last] = s {
        if last.is_ascii_whitespace() {
            s = rest;
        } else {
            break;
        }
    }
    s
}

/// A numeric field value: exact integer or decimal.
#[derive(Clone, Copy)]
enum Num {
    Int(i64),
    Float(f64),
}

impl Num {
    fn as_f64(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        }
    }
}

/// SWF field separators (ASCII whitespace).
#[inline(always)]
fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b'\x0c')
}

/// Parses one token that is not a plain short integer: a long integer, a
/// decimal or an exponent form. Non-finite values (`inf`, `NaN`) are rejected.
#[cold]
fn parse_num_slow(tok: &[u8]) -> Option<Num> {
    let s = std::str::from_utf8(tok).ok()?;
    if let Ok(i) = s.parse::<i64>() {
        return Some(Num::Int(i));
    }
    let f: f64 = s.parse().ok()?;
    f.is_finite().then_some(Num::Float(f))
}

/// Converts a field value to an integer, rounding decimals half away from zero.
fn to_int(n: Num) -> Option<i64> {
    match n {
        Num::Int(i) => Some(i),
        Num::Float(f) => {
            let r = f.round();
            // `i64::MAX as f64` rounds to 2^63, the first value out of range;
            // -2^63 is i64::MIN and in range.
            let lim = i64::MAX as f64;
            (-lim..lim).contains(&r).then_some(r as i64)
        }
    }
}

/// Parses one job line. `Ok(None)` for a placeholder (negative submit time).
fn parse_record(line: &[u8]) -> Result<Option<SwfRecord>, String> {
    // Integer values, decimal values and which fields hold a decimal (kept
    // apart so the hot path stores one plain i64 per field).
    let mut ints = [0i64; SWF_FIELDS];
    let mut floats = [0f64; SWF_FIELDS];
    let mut float_mask = 0u32;
    let mut n = 0usize;
    let len = line.len();
    let mut i = 0usize;
    // One pass over the bytes: skip separators, accumulate an integer of at
    // most 18 digits (cannot overflow), fall back to the slow path for
    // anything else.
    while i < len {
        let c = line[i];
        if is_ws(c) {
            i += 1;
            continue;
        }
        let start = i;
        let neg = c == b'-';
        if neg || c == b'+' {
            i += 1;
        }
        let digits_start = i;
        let mut v: i64 = 0;
        while i < len && i - digits_start < 18 {
            let d = line[i].wrapping_sub(b'0');
            if d > 9 {
                break;
            }
            v = v * 10 + i64::from(d);
            i += 1;
        }
        if i > digits_start && (i == len || is_ws(line[i])) {
            if n < SWF_FIELDS {
                ints[n] = if neg { -v } else { v };
            }
        } else {
            while i < len && !is_ws(line[i]) {
                i += 1;
            }
            if n < SWF_FIELDS {
                match parse_num_slow(&line[start..i]) {
                    Some(Num::Int(v)) => ints[n] = v,
                    Some(Num::Float(f)) => {
                        floats[n] = f;
                        float_mask |= 1 << n;
                    }
                    None => {
                        return Err(format!(
                            "field {} ({}): `{}` is not a number",
                            n + 1,
                            FIELD_NAMES[n],
                            String::from_utf8_lossy(&line[start..i])
                        ))
                    }
                }
            }
        }
        n += 1;
    }
    if n != SWF_FIELDS {
        return Err(format!("expected {SWF_FIELDS} fields, found {n}"));
    }
    let num = |i: usize| {
        if float_mask & (1 << i) != 0 {
            Num::Float(floats[i])
        } else {
            Num::Int(ints[i])
        }
    };
    let int =
        |i: usize| to_int(num(i)).ok_or_else(|| format!("field {} ({}): value {} is out of range", i + 1, FIELD_NAMES[i], num(i).as_f64()));
    let submit_s = int(1)?;
    if submit_s < 0 {
        return Ok(None);
    }
    let job_number = int(0)?;
    let job_number = u64::try_from(job_number).map_err(|_| format!("field 1 (job number): negative value {job_number}"))?;
    Ok(Some(SwfRecord {
        job_number,
        submit_s,
        wait_s: int(2)?,
        run_s: int(3)?,
        allocated_procs: int(4)?,
        avg_cpu_s: num(5).as_f64(),
        used_memory_kb: num(6).as_f64(),
        requested_procs: int(7)?,
        requested_time_s: int(8)?,
        requested_memory_kb: num(9).as_f64(),
        status: int(10)?,
        user: int(11)?,
        group: int(12)?,
        executable: int(13)?,
        queue: int(14)?,
        partition: int(15)?,
        preceding_job: int(16)?,
        think_time_s: int(17)?,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<SwfTrace, SwfError> {
        parse_swf_reader(text.as_bytes(), "mem.swf")
    }

    const LINE: &str = "1 10 2 100 4 99.5 -1 8 200 -1 1 3 1 -1 -1 1 -1 -1";

    #[test]
    fn parses_all_fields() {
        let t = parse(LINE).unwrap();
        assert_eq!(t.records.len(), 1);
        let r = t.records[0];
        assert_eq!(r.job_number, 1);
        assert_eq!(r.submit_s, 10);
        assert_eq!(r.wait_s, 2);
        assert_eq!(r.run_s, 100);
        assert_eq!(r.allocated_procs, 4);
        assert_eq!(r.avg_cpu_s, 99.5);
        assert_eq!(r.used_memory_kb, -1.0);
        assert_eq!(r.requested_procs, 8);
        assert_eq!(r.requested_time_s, 200);
        assert_eq!(r.status, 1);
        assert_eq!(r.user, 3);
        assert_eq!(r.group, 1);
        assert_eq!(r.partition, 1);
        assert_eq!(r.think_time_s, -1);
    }

    #[test]
    fn decimals_round_in_integer_fields() {
        let t = parse("1 10.4 2.5 99.5 4.0 1 1 -2.5 1e3 -1 1 3 1 -1 -1 1 -1 -1\n").unwrap();
        let r = t.records[0];
        assert_eq!(r.submit_s, 10);
        assert_eq!(r.wait_s, 3);
        assert_eq!(r.run_s, 100);
        assert_eq!(r.allocated_procs, 4);
        assert_eq!(r.requested_procs, -3);
        assert_eq!(r.requested_time_s, 1000);
    }

    #[test]
    fn header_values() {
        let text = format!(
            "; Version: 2.2\n;  MaxNodes: 338 (batch partition; 512 total)\n\
             ; MaxProcs: 240\n; UnixStartTime: 1027839845\n;\n\n{LINE}\r\n\n"
        );
        let t = parse(&text).unwrap();
        assert_eq!(t.header.len(), 5);
        assert_eq!(t.max_procs, Some(240));
        assert_eq!(t.max_nodes, Some(338));
        assert_eq!(t.unix_start_time, Some(1_027_839_845));
        assert_eq!(t.header_value("version"), Some("2.2"));
        assert_eq!(t.records.len(), 1);
    }

    #[test]
    fn bad_inputs_give_errors_not_panics() {
        let cases = [
            ("1 2 3", 1, "expected 18 fields, found 3"),
            (
                "1 10 2 x 4 99.5 -1 8 200 -1 1 3 1 -1 -1 1 -1 -1",
                1,
                "field 4 (run time): `x` is not a number",
            ),
            ("1 10 2 inf 4 99.5 -1 8 200 -1 1 3 1 -1 -1 1 -1 -1", 1, "not a number"),
            ("1 10 2 1e300 4 99.5 -1 8 200 -1 1 3 1 -1 -1 1 -1 -1", 1, "out of range"),
            ("-5 10 2 1 4 99.5 -1 8 200 -1 1 3 1 -1 -1 1 -1 -1", 1, "negative"),
            ("1 10 2 1 4 99.5 -1 8 200 -1 1 3 1 -1 -1 1 -1 -1 7", 1, "found 19"),
        ];
        for (text, line, reason_part) in cases {
            let text = format!("; c\n\n{text}\n");
            match parse(&text) {
                Err(SwfError::Malformed { path, line: l, reason }) => {
                    assert_eq!(path, Path::new("mem.swf"));
                    assert_eq!(l, line + 2, "{text}");
                    assert!(reason.contains(reason_part), "{reason} vs {reason_part}");
                }
                other => panic!("expected Malformed for {text:?}, got {other:?}"),
            }
        }
        // Invalid UTF-8 and odd bytes never panic.
        let bytes: &[u8] = b"\xff\xfe 1 2\n;\xff comment\n";
        assert!(parse_swf_reader(bytes, "x").is_err());
        let bytes: &[u8] = b";\xff comment only\n";
        assert_eq!(parse_swf_reader(bytes, "x").unwrap().header.len(), 1);
    }

    #[test]
    fn big_integers_fall_back_to_float() {
        // 19 digits, still in i64 range.
        let t = parse("1 1000000000000000000 0 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1").unwrap();
        assert_eq!(t.records[0].submit_s, 1_000_000_000_000_000_000);
        assert!(parse("1 99999999999999999999 0 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1").is_err());
    }

    #[test]
    fn placeholders_skipped() {
        let t = parse(&format!("299 -1 -1 -1 -1 -1 -1 -1 -1 -1 1 36 -1 66 -1 2 -1 -1\n{LINE}\n")).unwrap();
        assert_eq!(t.records.len(), 1);
        assert_eq!(t.skipped_placeholders, 1);
    }

    #[test]
    fn overlong_line_is_an_error() {
        let mut text = format!("{LINE}\n; ");
        text.push_str(&"x".repeat(MAX_LINE as usize + 10));
        match parse(&text) {
            Err(SwfError::Malformed { line, reason, .. }) => {
                assert_eq!(line, 2);
                assert!(reason.contains("longer than"), "{reason}");
            }
            other => panic!("expected Malformed, got {other:?}"),
        }
        // Exactly at the limit (newline included) is fine.
        let mut text = String::from("; ");
        text.push_str(&"x".repeat(MAX_LINE as usize - 3));
        text.push('\n');
        assert_eq!(parse(&text).unwrap().header.len(), 1);
    }

    #[test]
    fn empty_and_tiny_inputs() {
        assert_eq!(parse("").unwrap().records.len(), 0);
        assert!(parse("\x1f").is_err());
        // Gzip magic followed by garbage is an I/O (decompression) error.
        let r = parse_swf_reader(&[0x1f, 0x8b, 0, 1, 2][..], "g");
        assert!(matches!(r, Err(SwfError::Io { .. })), "{r:?}");
    }
}
