//! The one duration syntax of koalesce (job descriptions' `runtime_estimate`, the CLI's
//! `--timeout`): `humantime` spans (`90s`, `10m`, `2h`, `1d`, `500ms`, `1h 30m`),
//! `HH:MM:SS` / `MM:SS` clock forms, or plain seconds (`1.5`). Values that do not fit in
//! a `u64` of milliseconds are errors, never a silent overflow.

use std::time::Duration;

/// Why a text is not a duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("'{text}' is not a duration (use e.g. \"90s\", \"10m\", \"2h\", \"01:30:00\" or seconds)")]
    Syntax { text: String },
    #[error("'{text}' is too long a duration")]
    TooLong { text: String },
}

/// Parses a duration (see the module docs).
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    let t = text.trim();
    let syntax = || DurationError::Syntax { text: text.to_string() };
    let too_long = || DurationError::TooLong { text: text.to_string() };
    if t.is_empty() {
        return Err(syntax());
    }
    let d = if t.contains(':') {
        // HH:MM:SS or MM:SS (each part a non-negative integer).
        let parts: Vec<&str> = t.split(':').collect();
        if parts.len() > 3 || parts.iter().any(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit())) {
            return Err(syntax());
        }
        let mut secs: u64 = 0;
        for p in parts {
            let v: u64 = p.parse().map_err(|_| too_long())?;
            secs = secs.checked_mul(60).and_then(|s| s.checked_add(v)).ok_or_else(too_long)?;
        }
        Duration::from_secs(secs)
    } else if t.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        // Plain seconds.
        let v: f64 = t.parse().map_err(|_| syntax())?;
        Duration::try_from_secs_f64(v).map_err(|_| too_long())?
    } else {
        humantime::parse_duration(t).map_err(|e| match e {
            humantime::DurationError::NumberOverflow => too_long(),
            _ => syntax(),
        })?
    };
    // Everything downstream counts integer milliseconds in a u64.
    if u64::try_from(d.as_millis()).is_err() {
        return Err(too_long());
    }
    Ok(d)
}

/// Milliseconds the way people write them (`humantime`: `3s`, `1h 30m`, `500ms`).
pub fn format_ms(ms: u64) -> String {
    humantime::format_duration(Duration::from_millis(ms)).to_string()
}

/// Parses a duration into whole milliseconds (rounded).
pub fn parse_ms(text: &str) -> Result<u64, DurationError> {
    let d = parse(text)?;
    let ms = d.as_millis() + u128::from(d.subsec_nanos() % 1_000_000 >= 500_000);
    u64::try_from(ms).map_err(|_| DurationError::TooLong { text: text.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_parses() {
        assert_eq!(parse_ms("90s").unwrap(), 90_000);
        assert_eq!(parse_ms("10m").unwrap(), 600_000);
        assert_eq!(parse_ms("10min").unwrap(), 600_000);
        assert_eq!(parse_ms("2h").unwrap(), 7_200_000);
        assert_eq!(parse_ms("1d").unwrap(), 86_400_000);
        assert_eq!(parse_ms("500ms").unwrap(), 500);
        assert_eq!(parse_ms("1h 30m").unwrap(), 5_400_000);
        assert_eq!(parse_ms("01:30:00").unwrap(), 5_400_000);
        assert_eq!(parse_ms("01:00:05").unwrap(), 3_605_000);
        assert_eq!(parse_ms("2:05").unwrap(), 125_000);
        assert_eq!(parse_ms("1.5").unwrap(), 1_500);
        assert_eq!(parse_ms(" 45 ").unwrap(), 45_000);
    }

    #[test]
    fn nonsense_is_refused() {
        for bad in ["", "soon", "-3s", "1:2:3:4", "1::2", "a:b", "3 parsecs", "1e3", "NaN", "inf"] {
            assert!(matches!(parse(bad), Err(DurationError::Syntax { .. })), "{bad}");
        }
    }

    #[test]
    fn huge_values_are_errors_not_overflows() {
        for huge in [
            "99999999999999999999:00:00",
            "5124095576030431:00:00",
            "18446744073709551615:59:59",
            "1e400",
            "99999999999999999999999s",
        ] {
            assert!(parse(huge).is_err(), "{huge}");
        }
        assert!(matches!(parse("5124095576030431:00:00"), Err(DurationError::TooLong { .. })));
        let e = parse("99999999999999999999:00:00").unwrap_err().to_string();
        assert!(e.contains("too long"), "{e}");
    }
}
