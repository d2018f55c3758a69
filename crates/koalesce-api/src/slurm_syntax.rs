//! Slurm's syntax for dependencies (`afterok:12:13`) and job arrays (`1-100:2%4`), shared by
//! the job file, `submit`, the API and `sbatch`.

use koalesce_core::scheduler::{Dependency, DependencyKind};
use koalesce_core::JobId;

/// Parses Slurm's dependency syntax, `KIND:ID[:ID...][,KIND:ID...]` (`afterok:12:13,after:9`;
/// kinds after, afterany, afterok, afternotok; an id `12_3` is task 3 of array 12 alone). The
/// one parser of it: `sbatch --dependency`, `submit --dependency`, the API's `dependency`
/// parameter and the job file's `dependency` field. What Slurm has and koalesce does not (`?`
/// for "any of", `after:ID+MINUTES`, singleton, aftercorr, afterburstbuffer, expand) is
/// refused, named.
pub fn parse_dependency_list(text: &str) -> Result<Vec<Dependency>, String> {
    if text.contains('?') {
        return Err(format!(
            "dependency '{}': '?' (any of) is not supported: koalesce waits for all dependencies (use ',')",
            text.trim()
        ));
    }
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let mut fields = part.split(':');
        let kind_name = fields.next().unwrap_or_default();
        let lower = kind_name.to_ascii_lowercase();
        if ["singleton", "aftercorr", "afterburstbuffer", "expand"].contains(&lower.as_str()) {
            return Err(format!(
                "dependency '{part}': '{kind_name}' is not supported (after, afterany, afterok, afternotok)"
            ));
        }
        let kind = DependencyKind::ALL
            .into_iter()
            .find(|k| k.name() == lower)
            .ok_or_else(|| format!("dependency '{part}': unknown kind '{kind_name}' (after, afterany, afterok, afternotok)"))?;
        let mut any = false;
        for id in fields {
            // `12` (a job; an array's id: every task) or `12_3` (task 3 of array 12 alone).
            if id.contains('+') {
                return Err(format!(
                    "dependency '{part}': '{id}': a delay after the start (+MINUTES) is not supported"
                ));
            }
            let (job, task) = match id.trim().split_once('_') {
                Some((a, t)) => (a, Some(t)),
                None => (id.trim(), None),
            };
            let job: u64 = job
                .parse()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("dependency '{part}': '{id}' is not a job id (nor ARRAY_TASK)"))?;
            let task = match task {
                Some(t) => Some(
                    t.parse::<u64>()
                        .map_err(|_| format!("dependency '{part}': '{id}': '{t}' is not a task index"))?,
                ),
                None => None,
            };
            out.push(Dependency {
                job: JobId(job),
                kind,
                task,
            });
            any = true;
        }
        if !any {
            return Err(format!("dependency '{part}': no job id (e.g. {kind_name}:12)"));
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

#[cfg(test)]
mod dependency_tests {
    use super::*;
    use crate::jobdesc::JobDescription;

    #[test]
    fn slurm_syntax_and_fields_agree() {
        let d = parse_dependency_list("afterok:12:13, after:9,afterok:12").unwrap();
        let names: Vec<String> = d.iter().map(|d| d.to_string()).collect();
        assert_eq!(names, ["after:9", "afterok:12", "afterok:13"]);
        let t = parse_dependency_list("afterok:40_2:40,afterany:40_0").unwrap();
        let names: Vec<String> = t.iter().map(|d| d.to_string()).collect();
        assert_eq!(names, ["afterany:40_0", "afterok:40", "afterok:40_2"]);
        assert_eq!((t[0].task, t[1].task), (Some(0), None));
        for bad in [
            "afterok",
            "later:3",
            "afterok:x",
            "afterok:0",
            "afterok:40_x",
            "afterok:_2",
            "afterok:0_1",
        ] {
            assert!(parse_dependency_list(bad).is_err(), "{bad}");
        }
        let desc =
            JobDescription::parse("name='a'\nexecutable='/bin/true'\nafterok=[13,12]\nafter=[9]\n[[components]]\nprocessors=1\n").unwrap();
        assert_eq!(desc.dependencies(), d);
        let e = JobDescription::parse("name='a'\nexecutable='/bin/true'\nafterany=[0]\n[[components]]\nprocessors=1\n").unwrap_err();
        assert!(e.to_string().contains("afterany"), "{e}");
    }

    /// A job file takes what `sbatch --dependency` takes, through the same parser: one task of
    /// an array (`40_2`), several kinds in one string; and the lists' ids add to it.
    #[test]
    fn a_job_file_takes_sbatch_dependency_syntax() {
        let file = |extra: &str| format!("name='a'\nexecutable='/bin/true'\n{extra}\n[[components]]\nprocessors=1\n");
        let slurm = "afterok:40_2:41,afterany:9,AfterNotOk:7_0";
        let desc = JobDescription::parse(&file(&format!("dependency = '{slurm}'\nafterok = [41, 5]"))).unwrap();
        let mut want = parse_dependency_list(slurm).unwrap();
        want.push(Dependency::on(JobId(5), DependencyKind::AfterOk));
        want.sort();
        assert_eq!(desc.dependencies(), want);
        let names: Vec<String> = desc.dependencies().iter().map(|d| d.to_string()).collect();
        assert_eq!(names, ["afterok:5", "afternotok:7_0", "afterany:9", "afterok:40_2", "afterok:41"]);
        // It survives the round trip the server stores.
        assert_eq!(JobDescription::parse(&desc.to_toml()).unwrap().dependencies(), want);
        for (bad, words) in [
            ("afterok:12_x", &["field 'dependency'", "'x' is not a task index"][..]),
            ("afterok:1?afterok:2", &["field 'dependency'", "'?'", "use ','"]),
            ("singleton", &["field 'dependency'", "'singleton' is not supported"]),
            ("aftercorr:12", &["'aftercorr' is not supported"]),
            ("after:12+5", &["'12+5'", "+MINUTES"]),
            ("afterok:", &["field 'dependency'", "is not a job id"]),
        ] {
            let e = JobDescription::parse(&file(&format!("dependency = '{bad}'")))
                .unwrap_err()
                .to_string();
            for w in words {
                assert!(e.contains(w), "{bad}: '{w}' not in: {e}");
            }
        }
    }
}

/// A job array as `submit --array` gives it (Slurm's `--array`): task indices `1-100`,
/// `0-30:10` (a step), `1,3,7-9` (a list), optionally `%M`: at most M tasks active at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArraySpec {
    /// Task indices in submission order (no duplicates).
    pub tasks: Vec<u64>,
    /// At most this many tasks queued or running at once (`%M`).
    pub max_active: Option<u32>,
}

/// Most tasks in one array.
pub const MAX_ARRAY_TASKS: usize = 10_000;

/// Parses an array specification (see [`ArraySpec`]).
pub fn parse_array(text: &str) -> Result<ArraySpec, String> {
    let t = text.trim();
    let (list, max) = match t.split_once('%') {
        Some((l, m)) => {
            let m: u32 = m
                .trim()
                .parse()
                .ok()
                .filter(|&m| m > 0)
                .ok_or_else(|| format!("array '{text}': '%{m}' is not a positive number of tasks"))?;
            (l, Some(m))
        }
        None => (t, None),
    };
    let num = |s: &str| -> Result<u64, String> {
        s.trim()
            .parse()
            .map_err(|_| format!("array '{text}': '{s}' is not a task index (e.g. 1-100, 0-30:10, 1,3,5, 1-100%10)"))
    };
    let mut tasks = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for part in list.split(',').filter(|p| !p.trim().is_empty()) {
        let (range, step) = match part.split_once(':') {
            Some((r, s)) => (r, num(s)?),
            None => (part, 1),
        };
        if step == 0 {
            return Err(format!("array '{text}': a step of 0"));
        }
        let (a, b) = match range.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => (num(range)?, num(range)?),
        };
        if a > b {
            return Err(format!("array '{text}': {a}-{b} is empty"));
        }
        let mut i = a;
        while i <= b {
            if seen.insert(i) {
                tasks.push(i);
            }
            if tasks.len() > MAX_ARRAY_TASKS {
                return Err(format!("array '{text}': more than {MAX_ARRAY_TASKS} tasks"));
            }
            i = match i.checked_add(step) {
                Some(n) => n,
                None => break,
            };
        }
    }
    if tasks.is_empty() {
        return Err(format!("array '{text}': no tasks (e.g. 1-100)"));
    }
    Ok(ArraySpec { tasks, max_active: max })
}

#[cfg(test)]
mod array_tests {
    use super::*;

    #[test]
    fn slurm_array_syntax() {
        assert_eq!(parse_array("1-5").unwrap().tasks, [1, 2, 3, 4, 5]);
        let a = parse_array("0-30:10%2").unwrap();
        assert_eq!((a.tasks.as_slice(), a.max_active), (&[0, 10, 20, 30][..], Some(2)));
        assert_eq!(parse_array("7,1-3,2").unwrap().tasks, [7, 1, 2, 3]);
        for bad in ["", "5-1", "1-3:0", "x", "1-3%0", "1-100000"] {
            assert!(parse_array(bad).is_err(), "{bad}");
        }
    }
}
