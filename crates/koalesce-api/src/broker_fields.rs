//! The `[broker]` table of a job description: the job preferences of 001 §2.4 that the TTS/TTD
//! ranking (001 §3.1) and reservation-based co-allocation (001 §3.2) read.
//!
//! ```toml
//! policy = "ttd"
//! [broker]
//! benchmarks = [{ name = "linpack", score = 1000.0, time = "10m" }]
//! stage_in = "30s"        # when no input file of the catalogue says it
//! stage_out = "10s"
//! coallocation = "reservations"
//! earliest_start = "5m"   # after submission
//! latest_start = "1h"
//! max_start_deviation = "1m"
//! ```

use koalesce_core::model::{BenchmarkRef, CoallocationMode, JobPreferences, UnknownCoallocationMode};
use serde::{Deserialize, Serialize};

use crate::duration::parse_ms;

/// One benchmark the application's speed follows: it ran `time` on a machine scoring `score`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BenchmarkDescription {
    pub name: String,
    /// The reference machine's score p_b_ref (higher is faster).
    pub score: f64,
    /// The application's run time on the reference machine, t_ref (duration).
    pub time: String,
}

/// The `[broker]` table (every key optional).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BrokerDescription {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub benchmarks: Vec<BenchmarkDescription>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stage_in: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stage_out: Option<String>,
    /// "claiming" (KOALA's) or "reservations" (001's Algorithms 1 and 2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coallocation: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub earliest_start: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latest_start: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_start_deviation: Option<String>,
}

impl BrokerDescription {
    pub fn is_empty(&self) -> bool {
        self == &BrokerDescription::default()
    }

    /// The core's preferences; errors name the field (`broker.stage_in: ...`).
    pub fn to_preferences(&self) -> Result<JobPreferences, BrokerFieldError> {
        let dur = |field: &'static str, v: &Option<String>| -> Result<Option<u64>, BrokerFieldError> {
            v.as_deref()
                .map(|s| parse_ms(s).map_err(|reason| BrokerFieldError::Duration { field, reason }))
                .transpose()
        };
        let mut benchmarks = Vec::with_capacity(self.benchmarks.len());
        for (index, b) in self.benchmarks.iter().enumerate() {
            if b.name.trim().is_empty() {
                return Err(BrokerFieldError::EmptyBenchmarkName { index });
            }
            if !(b.score.is_finite() && b.score > 0.0) {
                return Err(BrokerFieldError::BadBenchmarkScore { index, score: b.score });
            }
            let time = parse_ms(&b.time).map_err(|reason| BrokerFieldError::BenchmarkTime { index, reason })?;
            if time == 0 {
                return Err(BrokerFieldError::ZeroBenchmarkTime { index });
            }
            benchmarks.push(BenchmarkRef {
                name: b.name.clone(),
                reference_score: b.score,
                reference_time_ms: time,
            });
        }
        let coallocation = match &self.coallocation {
            Some(c) => Some(c.parse::<CoallocationMode>()?),
            None => None,
        };
        let earliest = dur("earliest_start", &self.earliest_start)?;
        let latest = dur("latest_start", &self.latest_start)?;
        if let (Some(e), Some(l)) = (earliest, latest) {
            if l < e {
                return Err(BrokerFieldError::LatestBeforeEarliest {
                    latest: self.latest_start.clone().unwrap_or_default(),
                    earliest: self.earliest_start.clone().unwrap_or_default(),
                });
            }
        }
        Ok(JobPreferences {
            benchmarks,
            stage_in_ms: dur("stage_in", &self.stage_in)?,
            stage_out_ms: dur("stage_out", &self.stage_out)?.unwrap_or(0),
            coallocation,
            earliest_start_ms: earliest,
            latest_start_ms: latest,
            max_start_deviation_ms: dur("max_start_deviation", &self.max_start_deviation)?,
            // Resolved by the server from the job's `reservation` field (it knows the owner).
            held_reservation: None,
        })
    }

    /// [`Self::to_preferences`] with the error as its message, for `jobdesc`'s checks (whose
    /// errors are still text: `DescriptionError::Invalid`).
    pub(crate) fn preferences(&self) -> Result<JobPreferences, String> {
        self.to_preferences().map_err(|e| e.to_string())
    }
}

/// Why a `[broker]` table is refused; the message names the field.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BrokerFieldError {
    #[error("field 'broker.{field}': {reason}")]
    Duration {
        field: &'static str,
        reason: crate::duration::DurationError,
    },
    #[error("field 'broker.benchmarks[{index}].name': must not be empty")]
    EmptyBenchmarkName { index: usize },
    #[error("field 'broker.benchmarks[{index}].score': must be a positive number, not {score}")]
    BadBenchmarkScore { index: usize, score: f64 },
    #[error("field 'broker.benchmarks[{index}].time': {reason}")]
    BenchmarkTime {
        index: usize,
        reason: crate::duration::DurationError,
    },
    #[error("field 'broker.benchmarks[{index}].time': must be longer than 0")]
    ZeroBenchmarkTime { index: usize },
    #[error("field 'broker.coallocation': {0}")]
    Coallocation(#[from] UnknownCoallocationMode),
    #[error("field 'broker.latest_start': {latest} is before earliest_start {earliest}")]
    LatestBeforeEarliest { latest: String, earliest: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(toml_text: &str) -> Result<JobPreferences, String> {
        let d: BrokerDescription = toml::from_str(toml_text).map_err(|e| e.to_string())?;
        d.preferences()
    }

    #[test]
    fn every_key_reaches_the_core() {
        let p = parse(
            r#"benchmarks = [{ name = "linpack", score = 1000.0, time = "10m" }, { name = "stream", score = 2.5, time = "00:01:30" }]
               stage_in = "30s"
               stage_out = "10s"
               coallocation = "reservations"
               earliest_start = "5m"
               latest_start = "1h"
               max_start_deviation = "1m""#,
        )
        .unwrap();
        assert_eq!(p.benchmarks.len(), 2);
        assert_eq!(p.benchmarks[0].reference_time_ms, 600_000);
        assert_eq!(p.benchmarks[1].reference_score, 2.5);
        assert_eq!(p.benchmarks[1].reference_time_ms, 90_000);
        assert_eq!(p.stage_in_ms, Some(30_000));
        assert_eq!(p.stage_out_ms, 10_000);
        assert_eq!(p.coallocation, Some(CoallocationMode::Reservations));
        assert_eq!((p.earliest_start_ms, p.latest_start_ms), (Some(300_000), Some(3_600_000)));
        assert_eq!(p.max_start_deviation_ms, Some(60_000));
        assert_eq!(parse("").unwrap(), JobPreferences::default());
    }

    #[test]
    fn wrong_values_name_their_field() {
        for (text, field) in [
            (
                r#"benchmarks = [{ name = "x", score = 0.0, time = "1m" }]"#,
                "broker.benchmarks[0].score",
            ),
            (
                r#"benchmarks = [{ name = "x", score = 1.0, time = "soon" }]"#,
                "broker.benchmarks[0].time",
            ),
            (
                r#"benchmarks = [{ name = " ", score = 1.0, time = "1m" }]"#,
                "broker.benchmarks[0].name",
            ),
            (r#"coallocation = "magic""#, "broker.coallocation"),
            (r#"stage_in = "-3s""#, "broker.stage_in"),
            (
                r#"earliest_start = "1h"
                latest_start = "5m""#,
                "broker.latest_start",
            ),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(field), "{text}: {e}");
        }
        assert!(parse(r#"benchmark = []"#).unwrap_err().contains("benchmark"));
    }

    #[test]
    fn errors_are_typed() {
        let typed = |text: &str| toml::from_str::<BrokerDescription>(text).unwrap().to_preferences().unwrap_err();
        assert_eq!(
            typed(r#"benchmarks = [{ name = "x", score = -2.0, time = "1m" }]"#),
            BrokerFieldError::BadBenchmarkScore { index: 0, score: -2.0 }
        );
        assert_eq!(
            typed(r#"coallocation = "magic""#),
            BrokerFieldError::Coallocation(UnknownCoallocationMode("magic".into()))
        );
        assert!(matches!(
            typed(r#"max_start_deviation = "soon""#),
            BrokerFieldError::Duration {
                field: "max_start_deviation",
                ..
            }
        ));
        assert_eq!(
            typed(r#"coallocation = "magic""#).to_string(),
            "field 'broker.coallocation': unknown co-allocation mode 'magic' (expected claiming or reservations)"
        );
    }
}
