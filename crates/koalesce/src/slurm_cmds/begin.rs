//! sbatch's `--begin`: Slurm's `parse_time` (src/common/parse_time.c) in the submitting
//! host's local time zone, as Slurm's sbatch reads it on the submission host before it sends
//! the controller an instant. Accepted forms, combinable as Slurm combines them:
//! `HH:MM[:SS] [AM|PM]`, `MMDD[YY]`, `MM/DD[/YY]`, `MM.DD[.YY]`, `MM/DD[/YY]-HH:MM[:SS]`,
//! `YYYY-MM-DD[THH:MM[:SS]]`, `now[{+|-}count[seconds|minutes|hours|days|weeks]]` (seconds by
//! default), `today`, `tomorrow`, `midnight`, `noon`, `elevenses` (11:00), `fika` (15:00),
//! `teatime` (16:00), and `uts<Unix seconds>`. A time without a date is the next such time
//! (today, or tomorrow once passed); a date without a year is the next such date.

/// A local date and time (the fields of `struct tm`, with a full year and months from 1): the
/// one the Slurm site code reads and prints.
pub use koalesce_server::slurm::parse::SlurmTime as Civil;

/// What `--begin` names: an instant (`uts...`) or a local date and time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    Unix(i64),
    Local(Civil),
}

const UNITS: &[(&str, i64)] = &[
    ("seconds", 1),
    ("second", 1),
    ("minutes", 60),
    ("minute", 60),
    ("hours", 3600),
    ("hour", 3600),
    ("days", 86_400),
    ("day", 86_400),
    ("weeks", 604_800),
    ("week", 604_800),
];

const WORDS: &[(&str, Option<u32>)] = &[
    ("today", None),
    ("tomorrow", None),
    ("midnight", Some(0)),
    ("noon", Some(12)),
    ("elevenses", Some(11)),
    ("fika", Some(15)),
    ("teatime", Some(16)),
];

fn starts_ci(s: &[u8], at: usize, word: &str) -> bool {
    s.len() >= at + word.len() && s[at..at + word.len()].eq_ignore_ascii_case(word.as_bytes())
}

fn digit(s: &[u8], at: usize) -> Option<u32> {
    s.get(at).filter(|b| b.is_ascii_digit()).map(|b| u32::from(b - b'0'))
}

/// Parses `text` at `now` (Unix seconds); `local` gives the local date and time of an instant.
/// The error is the byte position Slurm would report.
pub fn parse(text: &str, now: i64, local: &dyn Fn(i64) -> Civil) -> Result<When, usize> {
    let s = text.as_bytes();
    if starts_ci(s, 0, "uts") {
        return match text[3..].parse::<i64>() {
            Ok(v) if v >= 1_000_000 => Ok(When::Unix(v)),
            _ => Err(3),
        };
    }
    let today = local(now);
    let (mut hour, mut minute, mut second): (Option<u32>, u32, u32) = (None, 0, 0);
    let mut date: Option<(Option<i32>, u32, u32)> = None; // (year, month, day)
    let mut pos = 0;
    'outer: while pos < s.len() && s[pos] != b'\n' {
        let c = s[pos];
        if c == b' ' || c == b'\t' || c == b'-' || c == b'T' {
            pos += 1;
            continue;
        }
        for (w, h) in WORDS {
            if starts_ci(s, pos, w) {
                match (*w, h) {
                    ("today", _) => date = Some((Some(today.year), today.month, today.day)),
                    ("tomorrow", _) => {
                        let (y, m, d) = next_day(&today);
                        date = Some((Some(y), m, d));
                    }
                    (_, Some(h)) => (hour, minute, second) = (Some(*h), 0, 0),
                    _ => {}
                }
                pos += w.len();
                continue 'outer;
            }
        }
        if starts_ci(s, pos, "now") {
            let mut i = pos + 3;
            let mut delta: i64 = 0;
            loop {
                match s.get(i) {
                    None | Some(b'\n') => {
                        pos = i;
                        break;
                    }
                    Some(b' ' | b'\t') => i += 1,
                    Some(&sign @ (b'+' | b'-')) => {
                        let (d, end) = get_delta(s, i + 1)?;
                        delta = if sign == b'-' { -d } else { d };
                        pos = end;
                        break;
                    }
                    Some(_) => return Err(i),
                }
            }
            let t = local(now.saturating_add(delta));
            date = Some((Some(t.year), t.month, t.day));
            (hour, minute, second) = (Some(t.hour), t.minute, t.second);
            continue;
        }
        if !c.is_ascii_digit() {
            return Err(pos);
        }
        if s.get(pos + 1) == Some(&b':') || s.get(pos + 2) == Some(&b':') {
            let (h, m, sec, end) = get_time(s, pos)?;
            (hour, minute, second) = (Some(h), m, sec);
            pos = end;
        } else {
            let (d, end) = get_date(s, pos)?;
            date = Some(d);
            pos = end;
        }
    }
    let (hour, date) = match (hour, date) {
        (None, None) => return Err(0),
        (None, Some(d)) => {
            (minute, second) = (0, 0);
            (0, d)
        }
        (Some(h), Some(d)) => (h, d),
        // A time alone: today if still to come (to the minute), else tomorrow.
        (Some(h), None) => {
            let (y, m, d) = if (h, minute) > (today.hour, today.minute) {
                (today.year, today.month, today.day)
            } else {
                next_day(&today)
            };
            (h, (Some(y), m, d))
        }
    };
    let (year, month, day) = date;
    // A date without a year: this year if still to come, else next year.
    let year = year.unwrap_or_else(|| {
        if (month, day, hour, minute) > (today.month, today.day, today.hour, today.minute) {
            today.year
        } else {
            today.year + 1
        }
    });
    Ok(When::Local(Civil {
        year,
        month,
        day,
        hour,
        minute,
        second,
    }))
}

/// The calendar day after `c`'s (not 24 hours later: a day of a DST change has 23 or 25).
fn next_day(c: &Civil) -> (i32, u32, u32) {
    let leap = c.year % 4 == 0 && (c.year % 100 != 0 || c.year % 400 == 0);
    let days = match c.month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    match (c.day < days, c.month < 12) {
        (true, _) => (c.year, c.month, c.day + 1),
        (false, true) => (c.year, c.month + 1, 1),
        (false, false) => (c.year + 1, 1, 1),
    }
}

/// `{+|-}count[unit]` after `now` (from the count): seconds and the position after it.
fn get_delta(s: &[u8], mut at: usize) -> Result<(i64, usize), usize> {
    let mut count: i64 = 0;
    let mut digits = 0;
    while at < s.len() && s[at] != b'\n' {
        if s[at] == b' ' || s[at] == b'\t' {
            at += 1;
            continue;
        }
        if let Some((name, mult)) = UNITS.iter().find(|(n, _)| starts_ci(s, at, n)) {
            count = count.checked_mul(*mult).ok_or(at)?;
            at += name.len();
            break;
        }
        match digit(s, at) {
            Some(d) => {
                count = count.checked_mul(10).and_then(|c| c.checked_add(i64::from(d))).ok_or(at)?;
                digits += 1;
                at += 1;
            }
            None => return Err(at),
        }
    }
    if digits == 0 {
        return Err(at);
    }
    Ok((count, at))
}

/// `HH:MM[:SS] [AM|PM]` at `at`: hour, minute, second and the position after it.
fn get_time(s: &[u8], mut at: usize) -> Result<(u32, u32, u32, usize), usize> {
    let mut hr = digit(s, at).ok_or(at)?;
    at += 1;
    if s.get(at) != Some(&b':') {
        hr = hr * 10 + digit(s, at).ok_or(at)?;
        at += 1;
    }
    if hr > 23 || s.get(at) != Some(&b':') {
        return Err(at);
    }
    at += 1;
    let two = |at: usize| -> Result<u32, usize> { Ok(digit(s, at).ok_or(at)? * 10 + digit(s, at + 1).ok_or(at + 1)?) };
    let min = two(at)?;
    if min > 59 {
        return Err(at);
    }
    at += 2;
    let mut sec = 0;
    if s.get(at) == Some(&b':') {
        sec = two(at + 1)?;
        if sec > 59 {
            return Err(at + 1);
        }
        at += 3;
    }
    while matches!(s.get(at), Some(b' ' | b'\t')) {
        at += 1;
    }
    if starts_ci(s, at, "pm") {
        hr = match hr + 12 {
            24 => 12,
            h if h > 23 => return Err(at),
            h => h,
        };
        at += 2;
    } else if starts_ci(s, at, "am") {
        hr = match hr {
            12 => 0,
            h if h > 11 => return Err(at),
            h => h,
        };
        at += 2;
    }
    Ok((hr, min, sec, at))
}

/// `YYYY-MM-DD`, or `MMDD[YY]` / `MM/DD[/YY]` / `MM.DD[.YY]` at `at`.
type Date = (Option<i32>, u32, u32);

fn get_date(s: &[u8], mut at: usize) -> Result<(Date, usize), usize> {
    let one_or_two = |at: &mut usize| -> Result<u32, usize> {
        let mut v = digit(s, *at).ok_or(*at)?;
        *at += 1;
        if let Some(d) = digit(s, *at) {
            v = v * 10 + d;
            *at += 1;
        }
        Ok(v)
    };
    if s.len() >= at + 8 && s[at + 4] == b'-' && s[at + 7] == b'-' {
        let mut year = 0;
        for _ in 0..4 {
            year = year * 10 + digit(s, at).ok_or(at)? as i32;
            at += 1;
        }
        at += 1;
        let month = one_or_two(&mut at)?;
        if !(1..=12).contains(&month) {
            return Err(at);
        }
        at += 1;
        let day = one_or_two(&mut at)?;
        if !(1..=31).contains(&day) {
            return Err(at);
        }
        return Ok(((Some(year), month, day), at));
    }
    let month = one_or_two(&mut at)?;
    if !(1..=12).contains(&month) {
        return Err(at);
    }
    if matches!(s.get(at), Some(b'.' | b'/')) {
        at += 1;
    }
    let day = one_or_two(&mut at)?;
    if !(1..=31).contains(&day) {
        return Err(at);
    }
    if matches!(s.get(at), Some(b'.' | b'/')) {
        at += 1;
    }
    let year = match digit(s, at) {
        Some(d) => {
            let y = d * 10 + digit(s, at + 1).ok_or(at + 1)?;
            at += 2;
            Some(2000 + y as i32)
        }
        None => None,
    };
    Ok(((year, month, day), at))
}

/// The local date and time of Unix seconds `t` (this host's time zone).
pub fn local_civil(t: i64) -> Civil {
    Civil::from_unix_local(t)
}

/// Unix seconds of a local date and time (mktime: out-of-range days roll over, as Slurm's).
pub fn local_to_unix(c: Civil) -> Option<i64> {
    c.to_unix_local()
}

/// `--begin=TEXT` at `now_ms`, in this host's time zone: Unix milliseconds, or sbatch's error.
pub fn begin_ms(text: &str, now_ms: u64) -> Result<u64, String> {
    let bad = |pos: usize| format!("Invalid --begin specification: {text} (Invalid time specification at character {pos})");
    let now = (now_ms / 1000) as i64;
    let secs = match parse(text, now, &local_civil).map_err(bad)? {
        When::Unix(t) => t,
        When::Local(c) => local_to_unix(c).ok_or_else(|| bad(0))?,
    };
    // A job file's begin ends with year 9999 (RFC 3339).
    u64::try_from(secs)
        .ok()
        .and_then(|s| s.checked_mul(1000))
        .and_then(|ms| koalesce_api::timing::check_begin_ms(ms).ok())
        .ok_or_else(|| bad(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// UTC as the "local" zone, so the tests do not depend on the machine's.
    fn utc(t: i64) -> Civil {
        let days = t.div_euclid(86_400);
        let rem = t.rem_euclid(86_400) as u32;
        // Howard Hinnant's civil_from_days.
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let year = (yoe + era * 400 + i64::from(month <= 2)) as i32;
        Civil {
            year,
            month,
            day,
            hour: rem / 3600,
            minute: rem / 60 % 60,
            second: rem % 60,
        }
    }

    /// 2026-11-28 09:30:15 UTC, a Saturday.
    const NOW: i64 = 1_795_858_215;

    fn at(text: &str) -> Result<(i32, u32, u32, u32, u32, u32), usize> {
        match parse(text, NOW, &utc)? {
            When::Local(c) => Ok((c.year, c.month, c.day, c.hour, c.minute, c.second)),
            When::Unix(t) => {
                let c = utc(t);
                Ok((c.year, c.month, c.day, c.hour, c.minute, c.second))
            }
        }
    }

    #[test]
    fn the_clock_of_the_tests() {
        assert_eq!(
            utc(NOW),
            Civil {
                year: 2026,
                month: 11,
                day: 28,
                hour: 9,
                minute: 30,
                second: 15
            }
        );
    }

    #[test]
    fn times_of_day_are_the_next_such_time() {
        assert_eq!(at("16:00"), Ok((2026, 11, 28, 16, 0, 0)));
        assert_eq!(at("9:45:30"), Ok((2026, 11, 28, 9, 45, 30)));
        assert_eq!(at("09:30"), Ok((2026, 11, 29, 9, 30, 0)), "this minute is past: tomorrow");
        assert_eq!(at("08:00"), Ok((2026, 11, 29, 8, 0, 0)));
        assert_eq!(at("4:15 PM"), Ok((2026, 11, 28, 16, 15, 0)));
        assert_eq!(at("4:15pm"), Ok((2026, 11, 28, 16, 15, 0)));
        assert_eq!(at("12:00 AM"), Ok((2026, 11, 29, 0, 0, 0)), "12 AM is midnight");
        assert_eq!(at("12:30 pm"), Ok((2026, 11, 28, 12, 30, 0)), "12 PM is noon");
        assert_eq!(at("13:00 AM"), Err(6));
        assert!(at("13:00 PM").is_err());
        assert!(at("24:00").is_err() && at("10:60").is_err() && at("10:5").is_err() && at("10:05:60").is_err());
    }

    #[test]
    fn words() {
        assert_eq!(at("midnight"), Ok((2026, 11, 29, 0, 0, 0)));
        assert_eq!(at("noon"), Ok((2026, 11, 28, 12, 0, 0)));
        assert_eq!(at("elevenses"), Ok((2026, 11, 28, 11, 0, 0)));
        assert_eq!(at("FIKA"), Ok((2026, 11, 28, 15, 0, 0)));
        assert_eq!(at("teatime"), Ok((2026, 11, 28, 16, 0, 0)));
        assert_eq!(at("today"), Ok((2026, 11, 28, 0, 0, 0)), "a date alone is its midnight");
        assert_eq!(at("tomorrow"), Ok((2026, 11, 29, 0, 0, 0)));
        assert_eq!(at("noon tomorrow"), Ok((2026, 11, 29, 12, 0, 0)));
        assert_eq!(at("tomorrow 8:00"), Ok((2026, 11, 29, 8, 0, 0)));
        assert_eq!(at("today 8:00"), Ok((2026, 11, 28, 8, 0, 0)), "a past time today is today");
        assert!(at("soon").is_err() && at("").is_err() && at("   ").is_err());
    }

    /// A zone one hour ahead of UTC from `switch` on (a spring-forward day of 23 hours).
    fn dst(switch: i64) -> impl Fn(i64) -> Civil {
        move |t| utc(if t >= switch { t + 3600 } else { t })
    }

    #[test]
    fn tomorrow_is_the_next_calendar_day_across_a_dst_change() {
        // 2027-03-28 01:00 UTC: clocks go from 01:00 to 02:00 (23 hours that day).
        let switch = 1_806_195_600;
        assert_eq!(utc(switch).day, 28);
        let zone = dst(switch);
        let at = |text: &str, now: i64| match parse(text, now, &zone) {
            Ok(When::Local(c)) => Ok((c.month, c.day, c.hour)),
            other => Err(format!("{other:?}")),
        };
        // 23:30 the evening before: 24 hours later is already 00:30 on the 29th.
        let eve = switch - 3600 - 1800;
        assert_eq!((zone(eve).day, zone(eve).hour), (27, 23));
        assert_eq!(at("23:00", eve), Ok((3, 28, 23)), "the next 23:00 is on the 28th");
        assert_eq!(at("tomorrow", eve), Ok((3, 28, 0)));
        // Month, year and leap-day ends.
        let day = |y, m, d| Civil {
            year: y,
            month: m,
            day: d,
            hour: 0,
            minute: 0,
            second: 0,
        };
        assert_eq!(next_day(&day(2028, 2, 28)), (2028, 2, 29));
        assert_eq!(next_day(&day(2027, 2, 28)), (2027, 3, 1));
        assert_eq!(next_day(&day(2100, 2, 28)), (2100, 3, 1));
        assert_eq!(next_day(&day(2000, 2, 29)), (2000, 3, 1));
        assert_eq!(next_day(&day(2026, 4, 30)), (2026, 5, 1));
        assert_eq!(next_day(&day(2026, 12, 31)), (2027, 1, 1));
    }

    #[test]
    fn now_with_offsets() {
        assert_eq!(at("now"), Ok((2026, 11, 28, 9, 30, 15)));
        assert_eq!(at("now+60"), Ok((2026, 11, 28, 9, 31, 15)), "seconds by default");
        assert_eq!(at("now+1hour"), Ok((2026, 11, 28, 10, 30, 15)));
        assert_eq!(at("NOW + 2 hours"), Ok((2026, 11, 28, 11, 30, 15)));
        assert_eq!(at("now+3days"), Ok((2026, 12, 1, 9, 30, 15)));
        assert_eq!(at("now+1week"), Ok((2026, 12, 5, 9, 30, 15)));
        assert_eq!(at("now+5minutes"), Ok((2026, 11, 28, 9, 35, 15)));
        assert_eq!(at("now+10seconds"), Ok((2026, 11, 28, 9, 30, 25)));
        assert_eq!(at("now-1day"), Ok((2026, 11, 27, 9, 30, 15)));
        assert!(at("now+").is_err(), "a count is needed");
        assert!(at("now+1h").is_err(), "units are Slurm's words");
        assert!(at("now+1fortnight").is_err());
        assert!(at("nowish").is_err());
    }

    #[test]
    fn dates() {
        assert_eq!(at("2026-12-24"), Ok((2026, 12, 24, 0, 0, 0)));
        assert_eq!(at("2026-12-24T18:00"), Ok((2026, 12, 24, 18, 0, 0)));
        assert_eq!(at("2026-12-24T18:00:05"), Ok((2026, 12, 24, 18, 0, 5)));
        assert_eq!(at("2027-01-01 00:00"), Ok((2027, 1, 1, 0, 0, 0)));
        assert_eq!(at("1224"), Ok((2026, 12, 24, 0, 0, 0)), "MMDD");
        assert_eq!(at("122427"), Ok((2027, 12, 24, 0, 0, 0)), "MMDDYY");
        assert_eq!(at("12/24"), Ok((2026, 12, 24, 0, 0, 0)));
        assert_eq!(at("12/24/27"), Ok((2027, 12, 24, 0, 0, 0)));
        assert_eq!(at("12.24.27"), Ok((2027, 12, 24, 0, 0, 0)));
        assert_eq!(at("12/24-18:30"), Ok((2026, 12, 24, 18, 30, 0)));
        assert_eq!(
            at("11/27"),
            Ok((2027, 11, 27, 0, 0, 0)),
            "a past date without a year is next year's"
        );
        assert_eq!(at("11/28"), Ok((2027, 11, 28, 0, 0, 0)), "today's midnight has passed");
        assert_eq!(at("11/28-10:00"), Ok((2026, 11, 28, 10, 0, 0)));
        assert!(at("13/01").is_err() && at("12/32").is_err() && at("2026-13-01").is_err() && at("2026-12-00").is_err());
        assert!(at("12/24/2").is_err(), "a year has two digits");
        assert!(at("2026-12-24X").is_err());
    }

    #[test]
    fn unix_seconds() {
        assert_eq!(parse("uts1795858215", NOW, &utc), Ok(When::Unix(1_795_858_215)));
        assert!(parse("uts12", NOW, &utc).is_err() && parse("uts17958582x", NOW, &utc).is_err());
    }

    #[test]
    fn the_local_zone_round_trips() {
        let now_ms = 1_795_858_215_000;
        assert_eq!(begin_ms("now", now_ms), Ok(now_ms));
        assert_eq!(begin_ms("now+1hour", now_ms), Ok(now_ms + 3_600_000));
        let c = local_civil(NOW);
        assert_eq!(local_to_unix(c), Some(NOW));
        // Past year 9999 (no job file can say it): refused, not a panic when it is written.
        for far in ["now+9999999999weeks", "uts253402300800", "now+99999999999999999999"] {
            let e = begin_ms(far, now_ms).unwrap_err();
            assert!(e.starts_with("Invalid --begin specification"), "{far}: {e}");
        }
        assert!(begin_ms("uts253402300799", now_ms).is_ok());
        let e = begin_ms("sometime", now_ms).unwrap_err();
        assert!(e.starts_with("Invalid --begin specification: sometime"), "{e}");
    }
}
