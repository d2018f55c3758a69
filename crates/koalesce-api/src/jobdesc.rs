//! The native job description (TOML, docs/server-contract.md) and its translation to the
//! core's [`JobSpec`].

use std::collections::BTreeMap;

use koalesce_core::model::{ComponentSpec, FileMode, PolicyKind};
use koalesce_core::{JobSpec, Millis, Priority, SiteId};
use serde::{Deserialize, Serialize};

/// How the components of a job run (003 §3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Runner {
    /// Components run independently (KRunner).
    #[default]
    Independent,
    /// Components start together behind a barrier and learn their rank and peers (DRunner).
    Coupled,
    /// Bag of tasks: at least `min_components` must succeed.
    Bag,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComponentDescription {
    pub processors: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site: Option<String>,
}

/// A job as the user writes it. Unknown keys are errors naming the key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobDescription {
    pub name: String,
    pub executable: String,
    #[serde(default)]
    pub arguments: Vec<String>,
    #[serde(default)]
    pub environment: BTreeMap<String, String>,
    #[serde(default)]
    pub runner: Runner,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_components: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_estimate: Option<String>,
    #[serde(default)]
    pub inputs: Vec<String>,
    #[serde(default)]
    pub outputs: Vec<String>,
    pub components: Vec<ComponentDescription>,
}

/// Why a description is refused: `Malformed` → 400, `Invalid` → 422.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DescriptionError {
    #[error("malformed TOML: {0}")]
    Malformed(String),
    #[error("{0}")]
    Invalid(String),
}

/// Default runtime estimate when the user gives none.
pub const DEFAULT_RUNTIME_MS: Millis = 3_600_000;

impl JobDescription {
    /// Parses TOML text: syntax errors are `Malformed`, schema errors (unknown key, wrong type,
    /// missing field) are `Invalid` and name the field.
    pub fn parse(text: &str) -> Result<Self, DescriptionError> {
        let table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| DescriptionError::Malformed(one_line(&e.to_string())))?;
        let desc =
            JobDescription::deserialize(toml::Value::Table(table)).map_err(|e| DescriptionError::Invalid(one_line(&e.to_string())))?;
        desc.check()?;
        Ok(desc)
    }

    fn check(&self) -> Result<(), DescriptionError> {
        let inv = |m: String| Err(DescriptionError::Invalid(m));
        if self.name.trim().is_empty() {
            return inv("field 'name': must not be empty".into());
        }
        if self.executable.trim().is_empty() {
            return inv("field 'executable': must not be empty".into());
        }
        if self.components.is_empty() {
            return inv("field 'components': at least one component is required".into());
        }
        for (i, c) in self.components.iter().enumerate() {
            if c.processors == 0 {
                return inv(format!("field 'components[{i}].processors': must be at least 1"));
            }
        }
        match (self.runner, self.min_components) {
            (Runner::Bag, None) => {}
            (Runner::Bag, Some(k)) if k == 0 || k as usize > self.components.len() => {
                return inv(format!("field 'min_components': {k} is not in 1..={}", self.components.len()));
            }
            (Runner::Bag, Some(_)) => {}
            (_, Some(_)) => return inv("field 'min_components': only allowed with runner = \"bag\"".into()),
            (_, None) => {}
        }
        if let Some(p) = &self.priority {
            p.parse::<Priority>()
                .map_err(|e| DescriptionError::Invalid(format!("field 'priority': {e}")))?;
        }
        if let Some(p) = &self.policy {
            p.parse::<PolicyKind>()
                .map_err(|e| DescriptionError::Invalid(format!("field 'policy': {e}")))?;
        }
        if let Some(r) = &self.runtime_estimate {
            parse_duration(r).map_err(|e| DescriptionError::Invalid(format!("field 'runtime_estimate': {e}")))?;
        }
        for k in self.environment.keys() {
            if k.is_empty() || k.contains('=') || k.contains('\0') {
                return inv(format!("field 'environment': invalid variable name '{k}'"));
            }
        }
        for o in &self.outputs {
            if o.is_empty() || o.contains('/') || o == "." || o == ".." {
                return inv(format!("field 'outputs': '{o}' must be a plain file name"));
            }
        }
        Ok(())
    }

    /// The core's view of the job; `site_of` resolves site names (unknown → 422 naming it).
    pub fn to_spec(&self, site_of: impl Fn(&str) -> Option<SiteId>) -> Result<JobSpec, DescriptionError> {
        let mut components = Vec::with_capacity(self.components.len());
        for (i, c) in self.components.iter().enumerate() {
            let fixed_site = match &c.site {
                None => None,
                Some(name) => Some(
                    site_of(name)
                        .ok_or_else(|| DescriptionError::Invalid(format!("field 'components[{i}].site': site '{name}' does not exist")))?,
                ),
            };
            components.push(ComponentSpec {
                processors: c.processors,
                fixed_site,
            });
        }
        Ok(JobSpec {
            name: self.name.clone(),
            components,
            flexible: None,
            input_files: self.inputs.clone(),
            file_mode: FileMode::Whole,
            runtime_estimate_ms: match &self.runtime_estimate {
                Some(r) => parse_duration(r).map_err(DescriptionError::Invalid)?,
                None => DEFAULT_RUNTIME_MS,
            },
            priority: self.priority.as_deref().map(|p| p.parse().unwrap()).unwrap_or_default(),
            policy: self.policy.as_deref().map(|p| p.parse().unwrap()),
            min_components: self.min_components,
            preferences: Default::default(),
        })
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// "90s", "10m", "2h", "1d", "HH:MM:SS", "MM:SS" or plain seconds → milliseconds.
pub fn parse_duration(s: &str) -> Result<Millis, String> {
    let t = s.trim();
    let bad = || format!("'{s}' is not a duration (use e.g. \"90s\", \"10m\", \"2h\" or \"HH:MM:SS\")");
    if t.contains(':') {
        let parts: Vec<&str> = t.split(':').collect();
        if parts.len() > 3 {
            return Err(bad());
        }
        let mut secs: u64 = 0;
        for p in parts {
            let v: u64 = p.parse().map_err(|_| bad())?;
            secs = secs * 60 + v;
        }
        return Ok(secs * 1000);
    }
    let (num, unit) = match t.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => (&t[..i], &t[i..]),
        None => (t, "s"),
    };
    let v: f64 = num.parse().map_err(|_| bad())?;
    let mult = match unit {
        "ms" => 1.0,
        "s" => 1000.0,
        "m" | "min" => 60_000.0,
        "h" => 3_600_000.0,
        "d" => 86_400_000.0,
        _ => return Err(bad()),
    };
    if !v.is_finite() || v < 0.0 {
        return Err(bad());
    }
    Ok((v * mult).round() as Millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90s").unwrap(), 90_000);
        assert_eq!(parse_duration("10m").unwrap(), 600_000);
        assert_eq!(parse_duration("2h").unwrap(), 7_200_000);
        assert_eq!(parse_duration("01:00:05").unwrap(), 3_605_000);
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn unknown_key_is_named() {
        let e = JobDescription::parse("name='a'\nexecutable='/bin/true'\nbogus=1\n[[components]]\nprocessors=1\n").unwrap_err();
        assert!(matches!(&e, DescriptionError::Invalid(m) if m.contains("bogus")), "{e}");
        let e = JobDescription::parse("name = = 'a'").unwrap_err();
        assert!(matches!(e, DescriptionError::Malformed(_)));
    }
}
