//! `sbatch -N MIN[-MAX]`: the node count read as Slurm 22.05's sbatch reads it
//! (`verify_node_count` and `_str_to_nodes`), with its errors in Slurm's words.

use super::{SResult, SlurmError};

/// The node count koalesce gives for `-N MIN[-MAX]`: MIN, as Slurm 22.05 does (checked on the
/// test bed): `-N 0-1` (a minimum of 0 under a maximum) is 1 node; `-N 0` and `-N 0-0` are 0
/// (which its controller refuses, but answers under `--test-only`: sbatch's `layout`); a maximum below
/// the minimum and a non-number are refused by its sbatch (exit 255), in Slurm's words.
pub(crate) fn node_count(spec: &str) -> SResult<u32> {
    // Slurm 22.05's verify_node_count: each part read as strtol reads it, then a k/K (1024) and
    // an m/M (1024²) multiplier; a part with other characters left is named alone. A range
    // without a minimum ("-2") has a minimum of 1; one without a maximum has -1 (refused below
    // the minimum, as in Slurm's words).
    let invalid = |part: &str| SlurmError {
        message: format!("\"{part}\" is not a valid node count"),
        raw: false,
        code: 255,
    };
    let (min, max) = match spec.split_once('-') {
        Some((a, b)) => {
            let min = str_to_nodes(a).ok_or_else(|| invalid(a))?;
            (if min < 0 { 1 } else { min }, str_to_nodes(b).ok_or_else(|| invalid(b))?)
        }
        None => match str_to_nodes(spec) {
            Some(n) if n >= 0 => (n, n),
            _ => return Err(invalid(spec)),
        },
    };
    if max != 0 && max < min {
        return Err(SlurmError {
            message: format!("Maximum node count {max} is less than minimum node count {min}"),
            raw: false,
            code: 255,
        });
    }
    if min == 0 && max == 0 {
        return Ok(0);
    }
    u32::try_from(min.max(1)).map_err(|_| invalid(spec))
}

/// Slurm's `_str_to_nodes` on one part of a node count: the number (-1 when it has no digits;
/// multiplied by 1024 after k/K, by 1024² after m/M), None when anything but blanks follows.
fn str_to_nodes(part: &str) -> Option<i64> {
    let t = part.trim_start();
    let (neg, digits_from) = match t.as_bytes().first() {
        Some(b'-') => (true, 1),
        Some(b'+') => (false, 1),
        _ => (false, 0),
    };
    let digits = t[digits_from..].bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        // No digits: the whole part is left over.
        return part.trim().is_empty().then_some(-1);
    }
    let mut n: i64 = t[digits_from..digits_from + digits].parse().ok()?;
    if neg {
        n = -n;
    }
    let mut rest = &t[digits_from + digits..];
    for (suffix, factor) in [(['k', 'K'], 1024), (['m', 'M'], 1024 * 1024)] {
        if let Some(r) = rest.strip_prefix(suffix) {
            n = n.checked_mul(factor)?;
            rest = r;
        }
    }
    rest.trim().is_empty().then_some(n).filter(|n| i32::try_from(*n).is_ok())
}
