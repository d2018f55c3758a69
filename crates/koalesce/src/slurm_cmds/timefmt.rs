//! Slurm's time syntaxes: the `--time` values sbatch accepts and the ways squeue, sacct and
//! scontrol print durations and instants.

/// Parses a Slurm time limit (`--time`): "minutes", "minutes:seconds",
/// "hours:minutes:seconds", "days-hours", "days-hours:minutes",
/// "days-hours:minutes:seconds"; `0`, "UNLIMITED" and "infinite" mean no limit (`None`).
pub fn parse_time_limit(text: &str) -> Result<Option<u64>, String> {
    let t = text.trim();
    let bad = || format!("Invalid time limit specification: {text}");
    if t.eq_ignore_ascii_case("unlimited") || t.eq_ignore_ascii_case("infinite") || t == "-1" {
        return Ok(None);
    }
    let num = |s: &str| -> Result<u64, String> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        s.parse::<u64>().map_err(|_| bad())
    };
    let (days, rest) = match t.split_once('-') {
        Some((d, r)) => (Some(num(d)?), r),
        None => (None, t),
    };
    let parts = rest.split(':').map(num).collect::<Result<Vec<u64>, String>>()?;
    // (hours, minutes, seconds) of the part after the days.
    let (h, m, s) = match (days.is_some(), parts.as_slice()) {
        (false, [m]) => (0, *m, 0),
        (false, [m, s]) => (0, *m, *s),
        (_, [h, m, s]) => (*h, *m, *s),
        (true, [h]) => (*h, 0, 0),
        (true, [h, m]) => (*h, *m, 0),
        _ => return Err(bad()),
    };
    let secs = days
        .unwrap_or(0)
        .checked_mul(86_400)
        .and_then(|v| v.checked_add(h.checked_mul(3600)?))
        .and_then(|v| v.checked_add(m.checked_mul(60)?))
        .and_then(|v| v.checked_add(s))
        .ok_or_else(bad)?;
    Ok(if secs == 0 { None } else { Some(secs) })
}

/// squeue's `%M` / `%l` and scontrol's short form: `M:SS`, `H:MM:SS` or `D-HH:MM:SS`.
pub fn squeue_duration(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86_400, (secs / 3600) % 24, (secs / 60) % 60, secs % 60);
    if d > 0 {
        format!("{d}-{h:02}:{m:02}:{s:02}")
    } else if h > 0 {
        format!("{h}:{m:02}:{s:02}")
    } else {
        format!("{m}:{s:02}")
    }
}

/// sacct's `Elapsed` / `Timelimit` and scontrol's `RunTime`: `HH:MM:SS` or `D-HH:MM:SS`.
pub fn long_duration(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86_400, (secs / 3600) % 24, (secs / 60) % 60, secs % 60);
    if d > 0 {
        format!("{d}-{h:02}:{m:02}:{s:02}")
    } else {
        format!("{h:02}:{m:02}:{s:02}")
    }
}

/// An instant (Unix ms) as Slurm prints it, in local time: `2026-11-23T16:40:05`.
pub fn timestamp(ms: u64) -> String {
    let secs = (ms / 1000) as libc::time_t;
    // SAFETY: localtime_r writes only into `tm`, which lives on our stack.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let ok = unsafe { !libc::localtime_r(&secs, &mut tm).is_null() };
    if !ok {
        return "Unknown".into();
    }
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}

/// An instant as ctime(3) writes it, without the newline: `Mon Nov 23 17:12:49 2026`.
pub fn ctime(ms: u64) -> String {
    let secs = (ms / 1000) as libc::time_t;
    let mut buf = [0 as libc::c_char; 64];
    // SAFETY: ctime_r writes at most 26 bytes into our 64-byte buffer.
    let p = unsafe { libc::ctime_r(&secs, buf.as_mut_ptr()) };
    if p.is_null() {
        return String::new();
    }
    // SAFETY: ctime_r wrote a NUL-terminated string into `buf`.
    let c = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
    c.to_string_lossy().trim_end().to_string()
}

/// Unix ms of today's local midnight (sacct's default start time).
pub fn local_midnight_ms(now_ms: u64) -> u64 {
    let secs = (now_ms / 1000) as libc::time_t;
    // SAFETY: as in `timestamp`; mktime reads and normalizes our own `tm`.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    unsafe {
        if libc::localtime_r(&secs, &mut tm).is_null() {
            return 0;
        }
        tm.tm_hour = 0;
        tm.tm_min = 0;
        tm.tm_sec = 0;
        let t = libc::mktime(&mut tm);
        if t < 0 {
            0
        } else {
            t as u64 * 1000
        }
    }
}

/// Now, in Unix ms.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_time_limits() {
        assert_eq!(parse_time_limit("30").unwrap(), Some(1800), "a bare number is minutes");
        assert_eq!(parse_time_limit("5:30").unwrap(), Some(330), "MM:SS");
        assert_eq!(parse_time_limit("01:00:00").unwrap(), Some(3600));
        assert_eq!(parse_time_limit("0:10:0").unwrap(), Some(600), "PSI/J writes unpadded parts");
        assert_eq!(parse_time_limit("2-0").unwrap(), Some(2 * 86_400));
        assert_eq!(parse_time_limit("1-2:30").unwrap(), Some(86_400 + 2 * 3600 + 1800));
        assert_eq!(parse_time_limit("1-00:00:05").unwrap(), Some(86_405));
        assert_eq!(parse_time_limit("UNLIMITED").unwrap(), None);
        assert_eq!(parse_time_limit("0").unwrap(), None);
        for bad in ["", "x", "1:2:3:4", "-5", "1h", "1-2:3:4:5", "99999999999999999999"] {
            assert!(parse_time_limit(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations_print_like_slurm() {
        assert_eq!(squeue_duration(0), "0:00");
        assert_eq!(squeue_duration(65), "1:05");
        assert_eq!(squeue_duration(3600), "1:00:00");
        assert_eq!(squeue_duration(90_061), "1-01:01:01");
        assert_eq!(long_duration(5), "00:00:05");
        assert_eq!(long_duration(3600), "01:00:00");
        assert_eq!(long_duration(86_400 * 3), "3-00:00:00");
    }

    #[test]
    fn timestamps_have_slurm_shape() {
        let t = timestamp(1_700_000_000_000);
        assert_eq!(t.len(), 19, "{t}");
        assert_eq!(&t[10..11], "T");
        let c = ctime(1_700_000_000_000);
        assert_eq!(c.len(), 24, "{c}");
        assert!(local_midnight_ms(1_700_000_000_000) <= 1_700_000_000_000);
        assert!(1_700_000_000_000 - local_midnight_ms(1_700_000_000_000) < 86_400_000 + 3_600_000);
    }
}
