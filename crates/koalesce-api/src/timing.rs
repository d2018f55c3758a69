//! The job description's `begin` (an instant before which the job is not placed) and `signal`
//! (a signal sent before the wall-time limit), with the syntaxes Slurm's `--begin` and
//! `--signal` reduce to.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `begin`: an RFC 3339 instant in UTC (`2026-11-28T10:00:00Z`; fractions of a second and a
/// space instead of `T` are accepted), as Unix milliseconds.
pub fn parse_begin(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let at = humantime::parse_rfc3339_weak(t.strip_suffix('Z').unwrap_or(t))
        .map_err(|e| format!("'{text}' is not an instant in UTC like 2026-11-28T10:00:00Z ({e})"))?;
    let ms = at
        .duration_since(UNIX_EPOCH)
        .map_err(|_| format!("'{text}' is before 1970"))?
        .as_millis();
    u64::try_from(ms).map_err(|_| format!("'{text}' is too far in the future"))
}

/// The last instant `begin` can name (RFC 3339 ends with year 9999), in Unix milliseconds.
pub const MAX_BEGIN_MS: u64 = 253_402_300_799_000;

/// `ms` as a begin time, or why not: after [`MAX_BEGIN_MS`] (sbatch `--begin=now+9999999999weeks`).
pub fn check_begin_ms(ms: u64) -> Result<u64, String> {
    match ms <= MAX_BEGIN_MS {
        true => Ok(ms),
        false => Err(format!("the begin time is after {}", format_begin(MAX_BEGIN_MS))),
    }
}

/// Unix milliseconds as `begin` writes them (`2026-11-28T10:00:00Z`; seconds resolution); a
/// later instant than [`MAX_BEGIN_MS`] prints as that one (RFC 3339 has no year after 9999).
pub fn format_begin(ms: u64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_millis(ms.min(MAX_BEGIN_MS))).to_string()
}

/// Now, in Unix milliseconds (0 on a clock before 1970).
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Signals by name, as Linux numbers them (Slurm's `sig_name2num` list and a few more).
const SIGNALS: &[(&str, i32)] = &[
    ("HUP", 1),
    ("INT", 2),
    ("QUIT", 3),
    ("ABRT", 6),
    ("KILL", 9),
    ("USR1", 10),
    ("USR2", 12),
    ("PIPE", 13),
    ("ALRM", 14),
    ("TERM", 15),
    ("CONT", 18),
    ("STOP", 19),
    ("TSTP", 20),
    ("TTIN", 21),
    ("TTOU", 22),
    ("URG", 23),
    ("XCPU", 24),
    ("XFSZ", 25),
    ("VTALRM", 26),
    ("PROF", 27),
    ("WINCH", 28),
];

/// Highest signal number Linux delivers (SIGRTMAX).
const MAX_SIGNAL: i32 = 64;

/// A signal by name (`USR1`, `SIGUSR1`, any case) or number (1 to 64).
pub fn signal_number(text: &str) -> Option<i32> {
    let t = text.trim();
    if let Ok(n) = t.parse::<i32>() {
        return (1..=MAX_SIGNAL).contains(&n).then_some(n);
    }
    let upper = t.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    SIGNALS.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
}

/// `signal`: Slurm's `--signal=[B:]SIG[@SECONDS]` — send SIG this many seconds (default 60)
/// before the wall-time limit; with `B:` to the program alone (an sbatch job's batch shell),
/// else to every other process of the component (as Slurm signals a job's steps, not its batch
/// shell).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EarlySignal {
    pub signal: i32,
    /// Seconds before the limit (0: at the limit, before the SIGTERM of the limit).
    pub before_s: u64,
    /// Only the program (the batch shell), not the other processes of the component.
    pub batch_only: bool,
}

/// Default of `@SECONDS` (as Slurm's).
pub const DEFAULT_SIGNAL_BEFORE_S: u64 = 60;

impl FromStr for EarlySignal {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("invalid signal specification '{text}': {why}");
        let t = text.trim();
        // `get`: the text may not be ASCII (a slice inside a character would panic).
        let upper_prefix = |p: &str| t.get(..p.len()).is_some_and(|x| x.eq_ignore_ascii_case(p));
        if upper_prefix("R:") || upper_prefix("RB:") || upper_prefix("BR:") {
            return Err(bad(
                "R: (signal when the job's reservation ends) is not offered: koalesce jobs run to their own time limit",
            ));
        }
        let (batch_only, rest) = if upper_prefix("B:") { (true, &t[2..]) } else { (false, t) };
        let (sig, secs) = match rest.split_once('@') {
            Some((s, n)) => (s, Some(n)),
            None => (rest, None),
        };
        let signal = signal_number(sig).ok_or_else(|| bad(&format!("unknown signal '{sig}'")))?;
        let before_s = match secs {
            None => DEFAULT_SIGNAL_BEFORE_S,
            Some(n) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => match n.parse::<u64>() {
                Ok(v) if v <= 0xffff => v,
                _ => return Err(bad("the time must be at most 65535 seconds")),
            },
            Some(n) => return Err(bad(&format!("'{n}' is not a number of seconds"))),
        };
        Ok(EarlySignal {
            signal,
            before_s,
            batch_only,
        })
    }
}

impl fmt::Display for EarlySignal {
    /// The canonical form (`B:10@60`), which parses back to the same value.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.batch_only {
            f.write_str("B:")?;
        }
        write!(f, "{}@{}", self.signal, self.before_s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn begin_is_utc_rfc3339() {
        assert_eq!(parse_begin("1970-01-01T00:01:00Z"), Ok(60_000));
        assert_eq!(
            parse_begin("2026-11-28T10:00:00Z").map(format_begin).as_deref(),
            Ok("2026-11-28T10:00:00Z")
        );
        assert_eq!(
            parse_begin("2026-11-28 10:00:00.250Z"),
            parse_begin("2026-11-28T10:00:00Z").map(|m| m + 250)
        );
        for bad in ["tomorrow", "2026-11-28", "2026-13-01T00:00:00Z", "", "2026-11-28T10:00:00+01:00"] {
            assert!(parse_begin(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn begin_times_past_year_9999_are_refused_and_still_print() {
        // The last instant RFC 3339 writes, and beyond it (sbatch --begin=now+9999999999weeks).
        let last = parse_begin("9999-12-31T23:59:59Z").unwrap();
        assert_eq!(format_begin(last), "9999-12-31T23:59:59Z");
        assert_eq!(format_begin(last + 1000), "9999-12-31T23:59:59Z", "printed as the last instant");
        assert_eq!(format_begin(u64::MAX), "9999-12-31T23:59:59Z");
        assert!(check_begin_ms(last).is_ok());
        let e = check_begin_ms(last + 1000).unwrap_err();
        assert!(e.contains("after 9999-12-31T23:59:59Z"), "{e}");
    }

    #[test]
    fn signals_parse_as_slurm_reads_them() {
        let s = |t: &str| t.parse::<EarlySignal>();
        assert_eq!(
            s("USR1"),
            Ok(EarlySignal {
                signal: 10,
                before_s: 60,
                batch_only: false
            })
        );
        assert_eq!(
            s("B:SIGUSR2@90"),
            Ok(EarlySignal {
                signal: 12,
                before_s: 90,
                batch_only: true
            })
        );
        assert_eq!(
            s("b:10@0"),
            Ok(EarlySignal {
                signal: 10,
                before_s: 0,
                batch_only: true
            })
        );
        assert_eq!(s("sigterm@5").map(|x| x.signal), Ok(15));
        assert_eq!(s("64@1").map(|x| x.signal), Ok(64));
        for bad in [
            "",
            "B:",
            "USR3",
            "0",
            "65",
            "USR1@",
            "USR1@-1",
            "USR1@1.5",
            "USR1@70000",
            "USR1@10s",
            "X:USR1",
        ] {
            assert!(s(bad).is_err(), "{bad}");
        }
        // Untrusted text (an API body): other than ASCII is an error, never a panic.
        for odd in ["Ré", "Bé", "é", "B:é@1", "USR1@é", "\u{0}"] {
            assert!(s(odd).is_err(), "{odd}");
        }
        let r = s("R:USR1@60").unwrap_err();
        assert!(r.contains("R:") && r.contains("not offered"), "{r}");
        assert!(s("RB:USR1").is_err() && s("BR:USR1").is_err());
        for v in ["B:USR1@90", "TERM", "2@0"] {
            let once = s(v).unwrap();
            assert_eq!(s(&once.to_string()), Ok(once), "{v} round-trips");
        }
    }
}
