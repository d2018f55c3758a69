//! NorduGrid xRSL (ARC's job description language, user-side attributes) onto the native
//! description. `+(&…)(&…)` lists independent jobs (one native job each); `|` alternatives are
//! refused.

use koalesce_api::fields::OutputFile;
use koalesce_api::{ComponentDescription, JobDescription, Runner};

use super::{Rel, Req};
use crate::common::{blank_job, default_name, locate, push_input, relative_name, staged, FormatError, Location, Requirements};
use crate::Format;

const FMT: Format = Format::Xrsl;

/// ARC's time values: a number of minutes, `N unit [N unit …]` (seconds, minutes, hours, days,
/// weeks), `[[D:]H:]M:S`-style clock times are not ARC's; ISO 8601 `PnDTnHnMnS`.
pub(crate) fn period_seconds(s: &str) -> Option<u64> {
    let t = s.trim();
    if let Ok(m) = t.parse::<u64>() {
        return m.checked_mul(60);
    }
    if let Some(iso) = t.strip_prefix('P').or_else(|| t.strip_prefix('p')) {
        let mut total: u64 = 0;
        let mut num = String::new();
        let mut in_time = false;
        for c in iso.chars() {
            match c {
                '0'..='9' => num.push(c),
                'T' | 't' => in_time = true,
                _ => {
                    let n: u64 = num.parse().ok()?;
                    num.clear();
                    let mult = match (c.to_ascii_uppercase(), in_time) {
                        ('W', false) => 604_800,
                        ('D', false) => 86_400,
                        ('H', true) => 3600,
                        ('M', true) => 60,
                        ('S', true) => 1,
                        _ => return None,
                    };
                    total = total.checked_add(n.checked_mul(mult)?)?;
                }
            }
        }
        return num.is_empty().then_some(total);
    }
    // Clock times HH:MM:SS / MM:SS, and single tokens with a unit ("90s", "30m", "2h", "1d").
    if t.contains(':') {
        let mut secs: u64 = 0;
        let parts: Vec<&str> = t.split(':').collect();
        if parts.len() > 3 {
            return None;
        }
        for p in parts {
            secs = secs.checked_mul(60)?.checked_add(p.trim().parse().ok()?)?;
        }
        return Some(secs);
    }
    free_period(t)
}

/// ARC's "free" period format (Arc::Period, libs/common/DateTime.cpp): numbers each followed
/// by a unit (`2 hours`, `1h30m`, `1 day 2 hours`), and a last number without a unit counts in
/// the unit below the previous one (`1h30` is 1 h 30 min; alone it is minutes, xRSL's base).
/// ARC takes a word by its first letter; here only the units' own words are taken, so that
/// `1 month` is an error rather than ARC's one minute.
fn free_period(t: &str) -> Option<u64> {
    const UNITS: [u64; 4] = [604_800, 86_400, 3600, 60];
    let unit = |w: &str| -> Option<u64> {
        Some(match w.to_ascii_lowercase().as_str() {
            "w" | "week" | "weeks" => 604_800,
            "d" | "day" | "days" => 86_400,
            "h" | "hr" | "hrs" | "hour" | "hours" => 3600,
            "m" | "min" | "mins" | "minute" | "minutes" => 60,
            "s" | "sec" | "secs" | "second" | "seconds" => 1,
            _ => return None,
        })
    };
    let b = t.as_bytes();
    let (mut i, mut total, mut last): (usize, u64, Option<u64>) = (0, 0, None);
    let mut any = false;
    while i < b.len() {
        if b[i] == b' ' {
            i += 1;
            continue;
        }
        let d0 = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == d0 {
            return None;
        }
        let n: u64 = t[d0..i].parse().ok()?;
        while i < b.len() && b[i] == b' ' {
            i += 1;
        }
        let w0 = i;
        while i < b.len() && b[i].is_ascii_alphabetic() {
            i += 1;
        }
        let mult = if i > w0 {
            unit(&t[w0..i])?
        } else {
            // A trailing bare number: the unit below the last one, or minutes.
            if i < b.len() {
                return None;
            }
            match last {
                None => 60,
                Some(u) => *UNITS.iter().find(|x| **x < u)?,
            }
        };
        if last.is_some_and(|l| mult >= l) {
            return None; // units must go down: "30m 1h" is a typo
        }
        last = Some(mult);
        total = total.checked_add(n.checked_mul(mult)?)?;
        any = true;
    }
    any.then_some(total)
}

/// The requirement term of a runTimeEnvironment, opSys, architecture or queue relation.
fn site_term(r: &Rel) -> Result<String, FormatError> {
    if r.canon == "runtimeenvironment" {
        let v = match r.values.as_slice() {
            [super::RVal::Str(s)] => s.replace('"', ""),
            [super::RVal::Str(s), ..] => {
                return Err(r.err(
                    FMT,
                    format!("options of runtime environment '{s}' cannot be honoured (koalesce only checks that a site has it)"),
                ))
            }
            _ => return Err(r.err(FMT, "expects the name of a runtime environment")),
        };
        return match r.op {
            "=" => Ok(format!("HAS_SOFTWARE(\"{v}\")")),
            "!=" => Ok(format!("!HAS_SOFTWARE(\"{v}\")")),
            op => Err(r.err(
                FMT,
                format!("version comparisons ('{op}') cannot be honoured; name the exact environment"),
            )),
        };
    }
    let var = match r.canon.as_str() {
        "opsys" => "OS_NAME",
        "architecture" => "ARCH",
        _ => "QUEUE_NAME",
    };
    if r.op != "=" && r.op != "!=" {
        return Err(r.err(FMT, format!("only '=' and '!=' are supported, not '{}'", r.op)));
    }
    Ok(format!("{var} {} \"{}\"", r.op, r.one(FMT)?.replace('"', "")))
}

fn seconds_string(secs: u64) -> String {
    koalesce_api::fields::format_seconds(secs)
}

/// Converts xRSL: one job, or one per clause of a `+` list.
pub fn convert_xrsl(text: &str, name_hint: Option<&str>) -> Result<Vec<JobDescription>, FormatError> {
    match super::resolve(text, FMT)? {
        Req::And(rels, _) => Ok(vec![job(&rels, name_hint)?]),
        Req::Multi(subs, _) => subs
            .iter()
            .map(|s| match s {
                Req::And(rels, _) => job(rels, name_hint),
                Req::Multi(_, p) | Req::Or(p) => Err(FormatError::at(
                    FMT,
                    p.line,
                    Some(p.col),
                    "each job of a '+' list must be a conjunction &(…)",
                )),
            })
            .collect(),
        Req::Or(p) => Err(FormatError::at(
            FMT,
            p.line,
            Some(p.col),
            "'|' alternatives cannot be honoured: koalesce takes one description per job; choose one",
        )),
    }
}

fn job(rels: &[Rel], name_hint: Option<&str>) -> Result<JobDescription, FormatError> {
    let mut j = blank_job(default_name(name_hint, "xrsl-job"), String::new());
    let mut exe: Option<(String, &Rel)> = None;
    let mut executables: Vec<(String, &Rel)> = Vec::new();
    let mut count: u32 = 1;
    let mut count_per_node: Option<(u64, &Rel)> = None;
    let mut join = false;
    let mut req = Requirements::default();
    for r in rels {
        let c = r.canon.as_str();
        if !r.alts.is_empty() {
            // xRSL manual §2.1: "|" gives alternatives for an attribute; a requirement that
            // any of them holds.
            if !matches!(c, "queue" | "runtimeenvironment" | "opsys" | "architecture") {
                return Err(r.err(
                    FMT,
                    "'|' alternatives can be honoured for queue, runTimeEnvironment, opSys and architecture only; choose one value",
                ));
            }
            let terms = r.alts.iter().map(site_term).collect::<Result<Vec<_>, _>>()?;
            req.add(terms.join(" | "));
            continue;
        }
        if !matches!(c, "queue" | "runtimeenvironment" | "opsys" | "architecture" | "rslsubstitution") {
            r.require_eq(FMT)?;
        }
        match c {
            "rslsubstitution" => {}
            "executable" => exe = Some((r.one(FMT)?, r)),
            "arguments" => j.arguments = r.strings(FMT)?,
            "jobname" => j.name = r.one(FMT)?,
            "stdin" => {
                let s = r.one(FMT)?;
                if s != "/dev/null" {
                    j.stdin = Some(relative_name("stdin", &s).map_err(|m| r.err(FMT, m))?);
                }
            }
            "stdout" => j.stdout = Some(relative_name("stdout", &r.one(FMT)?).map_err(|m| r.err(FMT, m))?),
            "stderr" => j.stderr = Some(relative_name("stderr", &r.one(FMT)?).map_err(|m| r.err(FMT, m))?),
            "join" => {
                join = match r.one(FMT)?.to_ascii_lowercase().as_str() {
                    "yes" | "true" => true,
                    "no" | "false" => false,
                    v => return Err(r.err(FMT, format!("'{v}': expected yes or no"))),
                }
            }
            "inputfiles" => {
                for t in r.tuples(FMT)? {
                    let (name, src) = match t.as_slice() {
                        [n] => (n.clone(), String::new()),
                        [n, s] => (n.clone(), s.clone()),
                        [n, s, ..] => {
                            return Err(r.err(
                                FMT,
                                format!("'{n}': URL options ({}) cannot be honoured", t[2..].join(" ").replace(s, "")),
                            ))
                        }
                        [] => return Err(r.err(FMT, "an empty (name source) pair")),
                    };
                    let local = relative_name("inputFiles", &name).map_err(|m| r.err(FMT, m))?;
                    // "" (a file next to the description) or size.checksum: the logical name
                    // is the file's name.
                    let is_size = !src.is_empty()
                        && src
                            .split('.')
                            .next()
                            .is_some_and(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()));
                    let logical = if src.is_empty() || is_size {
                        name.clone()
                    } else {
                        match locate(&src).map_err(|m| r.err(FMT, m))? {
                            Location::Catalogue(l) => l,
                            Location::Absolute(a) => {
                                return Err(r.err(FMT, format!("'{a}' is a path; give a logical name or koalesce:NAME")))
                            }
                        }
                    };
                    push_input(&mut j.inputs, staged(&logical, Some(&local), false));
                }
            }
            "outputfiles" => {
                for t in r.tuples(FMT)? {
                    let (name, dst) = match t.as_slice() {
                        [n] => (n.clone(), String::new()),
                        [n, d] => (n.clone(), d.clone()),
                        _ => return Err(r.err(FMT, "expects (name destination) pairs without URL options")),
                    };
                    let file = relative_name("outputFiles", &name).map_err(|m| r.err(FMT, m))?;
                    let to = if dst.is_empty() {
                        None
                    } else {
                        match locate(&dst).map_err(|m| r.err(FMT, m))? {
                            Location::Catalogue(l) => Some(l),
                            Location::Absolute(a) => {
                                return Err(r.err(FMT, format!("'{a}' is a path; give a logical name or koalesce:NAME")))
                            }
                        }
                    };
                    j.outputs.push(OutputFile { file, to });
                }
            }
            "executables" => {
                for e in r.strings(FMT)? {
                    executables.push((e, r));
                }
            }
            "count" => {
                let n = r.number(FMT)?;
                if n == 0 || n > u32::MAX as u64 {
                    return Err(r.err(FMT, format!("{n} is not a valid count")));
                }
                count = n as u32;
            }
            "countpernode" => count_per_node = Some((r.number(FMT)?, r)),
            "walltime" | "cputime" => {
                let v = r.one(FMT)?;
                let secs = period_seconds(&v).ok_or_else(|| r.err(FMT, format!("'{v}' is not a time (minutes, '2 hours', PT2H)")))?;
                if c == "walltime" {
                    j.walltime = Some(seconds_string(secs));
                } else {
                    j.cputime = Some(seconds_string(secs));
                }
            }
            "memory" => j.memory = Some(format!("{}M", r.number(FMT)?)),
            "disk" => req.add(format!("FREE_DISK_MB >= {}", r.number(FMT)?)),
            "runtimeenvironment" | "opsys" | "architecture" | "queue" => req.add(site_term(r)?),
            "rerun" => j.retries = Some(u32::try_from(r.number(FMT)?).map_err(|_| r.err(FMT, "too large"))?),
            "priority" => {
                let p = r.number(FMT)?.min(100);
                j.priority = Some(
                    match p {
                        0..=24 => "super-low",
                        25..=49 => "low",
                        50..=74 => "high",
                        _ => "super-high",
                    }
                    .into(),
                );
            }
            "environment" => {
                for t in r.tuples(FMT)? {
                    match t.as_slice() {
                        [k, v] => {
                            j.environment.insert(k.clone(), v.clone());
                        }
                        _ => return Err(r.err(FMT, "expects (NAME value) pairs")),
                    }
                }
            }
            // ARC's own session log, cache and transfer-stream settings: koalesce keeps its
            // logs (koalesce status) and moves files itself.
            "gmlog" | "cache" | "ftpthreads" => {
                r.one(FMT)?;
            }
            "dryrun" | "exclusiveexecution" => {
                let v = r.one(FMT)?.to_ascii_lowercase();
                if v != "no" && v != "false" {
                    return Err(r.err(
                        FMT,
                        if c == "dryrun" {
                            "a dry run cannot be submitted; use `koalesce convert` to check a file"
                        } else {
                            "whole nodes cannot be reserved: koalesce allocates processors"
                        },
                    ));
                }
            }
            "gridtime" | "benchmarks" => return Err(r.err(FMT, "benchmark-scaled times cannot be honoured; give wallTime")),
            "lifetime" => return Err(r.err(FMT, "the lifetime of the session directory is the server's retention policy")),
            "notify" => return Err(r.err(FMT, "koalesce sends no e-mail; use `koalesce wait`")),
            "cluster" | "middleware" => return Err(r.err(FMT, "choose sites with requirements (e.g. HOSTNAME = \"site\")")),
            "starttime" => return Err(r.err(FMT, "delayed starts cannot be honoured")),
            "nodeaccess" => return Err(r.err(FMT, "network access of nodes cannot be requested")),
            "acl" | "jobreport" | "credentialserver" | "replicacollection" | "action" => {
                return Err(r.err(FMT, "an ARC service setting koalesce cannot honour"))
            }
            other => {
                let hint = if super::GT2_ONLY.contains(&other) {
                    " (a GT2 RSL attribute: use --format rsl)"
                } else {
                    ""
                };
                return Err(r.err(FMT, format!("unknown xRSL attribute{hint}")));
            }
        }
    }
    let Some((exe, er)) = exe else {
        return Err(FormatError::general(FMT, "the job has no executable"));
    };
    // A relative executable is in the session directory: staged like ARC uploads it.
    j.executable = if exe.starts_with('/') {
        exe
    } else {
        let local = relative_name("executable", &exe).map_err(|m| er.err(FMT, m))?;
        if !j.inputs.iter().any(|f| f.local_name() == local) {
            j.inputs.push(staged(&local, Some(&local), true));
        }
        executables.push((local.clone(), er));
        format!("./{local}")
    };
    for (e, r) in executables {
        match j.inputs.iter_mut().find(|f| f.local_name() == e) {
            Some(f) => f.executable = true,
            None => return Err(r.err(FMT, format!("'{e}' is not among the inputFiles"))),
        }
    }
    if join {
        let Some(out) = j.stdout.clone() else {
            return Err(FormatError::general(FMT, "join is set but stdout is not"));
        };
        if j.stderr.as_ref().is_some_and(|e| *e != out) {
            return Err(FormatError::general(FMT, "join is set but stderr names another file"));
        }
        j.stderr = Some(out);
    }
    if let Some((per, r)) = count_per_node {
        if per == 0 || !(count as u64).is_multiple_of(per) {
            return Err(r.err(FMT, format!("{per} does not divide count {count}")));
        }
    }
    // count = slots of one parallel job: one component (ARC runs the executable once).
    j.components = vec![ComponentDescription::new(count)];
    j.runner = Runner::Independent;
    j.requirements = req.build();
    Ok(j)
}

#[cfg(test)]
mod tests {
    use super::period_seconds as p;

    #[test]
    fn periods() {
        assert_eq!(p("60"), Some(3600));
        assert_eq!(p("2 hours"), Some(7200));
        assert_eq!(p("1 day 30 minutes"), Some(88_200));
        assert_eq!(p("PT1H30M"), Some(5400));
        assert_eq!(p("P1D"), Some(86_400));
        assert_eq!(p("soon"), None);
        assert_eq!(p("3 fortnights"), None);
        assert_eq!(p("90s"), Some(90));
        assert_eq!(p("2h"), Some(7200));
        assert_eq!(p("1:30:00"), Some(5400));
        assert_eq!(p("1:2:3:4"), None);
        // ARC's free format (Arc::Period): units glued or spaced, a last bare number in the
        // unit below the previous one.
        assert_eq!(p("1h30m"), Some(5400));
        assert_eq!(p("1h30"), Some(5400));
        assert_eq!(p("2d12"), Some(2 * 86_400 + 12 * 3600));
        assert_eq!(p("1 week 2 days"), Some(604_800 + 2 * 86_400));
        assert_eq!(p("45 sec"), Some(45));
        assert_eq!(p("1 month"), None, "ARC would read one minute");
        assert_eq!(p("30m 1h"), None);
        assert_eq!(p("10s5"), None);
        assert_eq!(p("2 hours, 3 minutes"), None);
        assert_eq!(p(""), None);
    }
}
