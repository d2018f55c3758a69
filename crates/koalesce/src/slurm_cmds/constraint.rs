//! sbatch's `-C/--constraint`: Slurm's feature expression becomes a REQUIREMENTS expression
//! over the sites' features (`HAS_FEATURE`, `[sites.attributes] features = [...]`), so only
//! sites with the features take the job. `a`, `a&b`, `a|b`, `[a|b]` (matching OR: one site
//! has every node of a job here, so it is a plain OR) and parentheses are accepted; operators
//! apply left to right, as Slurm's (`a|b&c` is `(a|b)&c`). Node counts (`a*2`) are refused: koalesce sites have no named nodes. A
//! constraint no site satisfies, or naming a feature no site has, is refused at submission, as
//! Slurm refuses it ("Invalid feature specification").

use koalesce_core::expr::{Compiled, Expr, SiteSnapshot};

/// The REQUIREMENTS expression of `constraint`, or sbatch's error.
pub fn requirement(constraint: &str) -> Result<String, String> {
    let bad = |why: &str| format!("Invalid feature specification: {constraint} ({why})");
    if constraint.contains("&&") || constraint.contains("||") {
        return Err(bad("one & or | between features"));
    }
    let mut out = String::new();
    let mut name = String::new();
    let flush = |name: &mut String, out: &mut String| {
        if !name.is_empty() {
            out.push_str(&format!("HAS_FEATURE(\"{name}\")"));
            name.clear();
        }
    };
    for c in constraint.trim().chars() {
        match c {
            c if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':' | '+' | '/') => name.push(c),
            '&' | '|' | '(' | ')' | '[' | ']' => {
                flush(&mut name, &mut out);
                out.push(match c {
                    '[' => '(',
                    ']' => ')',
                    c => c,
                });
            }
            '*' => return Err(bad("node counts (NAME*COUNT) are not offered: koalesce sites have no named nodes")),
            ',' => return Err(bad("use & or | between features")),
            c if c.is_whitespace() => return Err(bad("blanks are not allowed")),
            c => return Err(bad(&format!("'{c}' cannot be part of a feature name"))),
        }
    }
    flush(&mut name, &mut out);
    if out.is_empty() {
        return Err(bad("empty"));
    }
    Expr::compile(&out).map_err(|e| bad(&e.to_string()))?;
    Ok(out)
}

/// Whether a site with `features` satisfies the compiled requirement (features compared
/// ignoring ASCII case, as the scheduler compares them).
pub fn satisfied_by(expr: &Compiled, features: &[String]) -> bool {
    let tags: Vec<String> = features
        .iter()
        .map(|f| format!("{}{f}", koalesce_core::expr::FEATURE_TAG_PREFIX))
        .collect();
    let host = SiteSnapshot {
        software: expr
            .software()
            .iter()
            .map(|t| tags.iter().any(|o| o.eq_ignore_ascii_case(t)))
            .collect(),
        ..SiteSnapshot::default()
    };
    expr.matches(&host)
}

/// The sites a job may go to, with their features: those `-p` names, else all (`-p` naming a
/// policy names no site).
pub fn candidate_sites(partition: Option<&str>, sites: &[koalesce_api::dto::SiteInfo]) -> Vec<(String, Vec<String>)> {
    let named: Vec<&str> = partition.unwrap_or("").split(',').map(str::trim).collect();
    let some_named = sites.iter().any(|s| named.contains(&s.name.as_str()));
    sites
        .iter()
        .filter(|s| !some_named || named.contains(&s.name.as_str()))
        .map(|s| (s.name.clone(), s.features.clone()))
        .collect()
}

/// Adds `constraint` to the job's requirements after checking that one of `sites` (name,
/// features) — those the job may run on — satisfies it.
pub fn apply(desc: &mut koalesce_api::JobDescription, constraint: &str, sites: &[(String, Vec<String>)]) -> Result<(), String> {
    let req = requirement(constraint)?;
    let compiled = Expr::compile(&req).map_err(|e| e.to_string())?;
    // As Slurm's, every feature named must exist (even in an OR), and one site must satisfy all.
    let known = |t: &String| {
        let name = t.strip_prefix(koalesce_core::expr::FEATURE_TAG_PREFIX).unwrap_or(t);
        sites.iter().any(|(_, f)| f.iter().any(|o| o.eq_ignore_ascii_case(name)))
    };
    if !compiled.software().iter().all(known) || !sites.iter().any(|(_, f)| satisfied_by(&compiled, f)) {
        let offered: Vec<String> = sites
            .iter()
            .map(|(n, f)| format!("{n}: {}", if f.is_empty() { "none".to_string() } else { f.join(",") }))
            .collect();
        return Err(format!(
            "Batch job submission failed: Invalid feature specification (no site has {constraint}; features of the sites: {})",
            offered.join("; ")
        ));
    }
    desc.requirements = Some(match desc.requirements.take() {
        Some(r) => format!("({r}) & ({req})"),
        None => req,
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sat(constraint: &str, features: &[&str]) -> bool {
        let e = Expr::compile(&requirement(constraint).unwrap()).unwrap();
        satisfied_by(&e, &features.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn slurm_feature_syntax_becomes_has_feature() {
        assert_eq!(requirement("ib").unwrap(), "HAS_FEATURE(\"ib\")");
        assert_eq!(requirement("ib&haswell").unwrap(), "HAS_FEATURE(\"ib\")&HAS_FEATURE(\"haswell\")");
        assert_eq!(
            requirement("[rack1|rack2]").unwrap(),
            "(HAS_FEATURE(\"rack1\")|HAS_FEATURE(\"rack2\"))"
        );
        assert_eq!(requirement("gpu-a100").unwrap(), "HAS_FEATURE(\"gpu-a100\")");
        for bad in [
            "",
            "ib&",
            "&ib",
            "ib||x",
            "[ib|x",
            "ib)",
            "ib*2",
            "[a*2&b*3]",
            "ib,x",
            "ib x",
            "ib\"",
            "()",
        ] {
            let e = requirement(bad).unwrap_err();
            assert!(e.starts_with("Invalid feature specification"), "{bad}: {e}");
        }
        assert!(requirement("ib*2").unwrap_err().contains("node counts"));
    }

    #[test]
    fn sites_satisfy_as_slurm_nodes_would() {
        assert!(sat("ib", &["IB", "haswell"]), "case ignored");
        assert!(!sat("ib", &["haswell"]));
        assert!(sat("ib&haswell", &["haswell", "ib"]));
        assert!(!sat("ib&haswell", &["ib"]));
        assert!(sat("skylake|haswell", &["haswell"]));
        assert!(sat("[skylake|haswell]&ib", &["haswell", "ib"]));
        assert!(!sat("[skylake|haswell]&ib", &["haswell"]));
        assert!(!sat("a|b&c", &["a"]), "left to right: (a|b)&c");
        assert!(sat("a|b&c", &["a", "c"]));
        assert!(sat("a&b|c", &["c"]));
        assert!(!sat("(a|b)&c", &["a"]));
        assert!(!sat("ib", &[]));
    }

    #[test]
    fn the_partition_narrows_the_sites_checked() {
        let info = |name: &str, f: &[&str]| koalesce_api::dto::SiteInfo {
            name: name.into(),
            features: f.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        let sites = [info("vu", &["ib"]), info("leiden", &[]), info("delft", &["ib"])];
        let names = |p: Option<&str>| candidate_sites(p, &sites).into_iter().map(|(n, _)| n).collect::<Vec<_>>();
        assert_eq!(names(None), ["vu", "leiden", "delft"]);
        assert_eq!(names(Some("leiden")), ["leiden"]);
        assert_eq!(names(Some("leiden, delft")), ["leiden", "delft"]);
        assert_eq!(names(Some("cm")), ["vu", "leiden", "delft"], "a policy names no site");
        assert_eq!(candidate_sites(Some("vu"), &sites)[0].1, ["ib"]);
    }

    #[test]
    fn apply_refuses_what_no_site_has_and_keeps_the_partition() {
        let sites = vec![
            ("vu".to_string(), vec!["ib".to_string()]),
            ("leiden".to_string(), vec!["haswell".to_string()]),
        ];
        let mut d =
            koalesce_api::JobDescription::parse("name = \"x\"\nexecutable = \"/bin/true\"\n[[components]]\nprocessors = 1\n").unwrap();
        d.requirements = Some("HOSTNAME = \"vu\" | HOSTNAME = \"leiden\"".into());
        apply(&mut d, "ib", &sites).unwrap();
        assert_eq!(
            d.requirements.as_deref(),
            Some("(HOSTNAME = \"vu\" | HOSTNAME = \"leiden\") & (HAS_FEATURE(\"ib\"))")
        );
        let e = apply(&mut d, "ib&haswell", &sites).unwrap_err();
        assert!(e.contains("Invalid feature specification") && e.contains("vu: ib"), "{e}");
        assert!(apply(&mut d, "nosuch|ib", &sites).is_err(), "an unknown feature even in an OR");
    }
}
