//! A job's REQUIREMENTS or RANK as the core carries it: the submitted text and its compiled
//! form, compiled once when the job description is read.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{Compiled, Expr, ExprError};

/// A compiled REQUIREMENTS or RANK expression of a job ([`crate::model::JobSpec`]).
///
/// Cloning is cheap (the compiled program is shared). It serializes as its source text and
/// deserializes by compiling that text, so a stored job comes back with the same program and a
/// malformed expression is refused when it is read, naming the column. Two expressions are equal
/// when their texts are.
#[derive(Clone)]
pub struct JobExpr(Arc<Compiled>);

impl JobExpr {
    /// Compiles `source`.
    pub fn new(source: &str) -> Result<JobExpr, ExprError> {
        Expr::compile(source).map(|c| JobExpr(Arc::new(c)))
    }

    /// The text it was compiled from.
    pub fn source(&self) -> &str {
        self.0.source()
    }

    /// The compiled program.
    pub fn compiled(&self) -> &Compiled {
        &self.0
    }
}

impl From<Compiled> for JobExpr {
    fn from(c: Compiled) -> Self {
        JobExpr(Arc::new(c))
    }
}

impl std::ops::Deref for JobExpr {
    type Target = Compiled;
    fn deref(&self) -> &Compiled {
        &self.0
    }
}

impl PartialEq for JobExpr {
    fn eq(&self, other: &Self) -> bool {
        self.source() == other.source()
    }
}

impl fmt::Debug for JobExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "JobExpr({:?})", self.source())
    }
}

impl fmt::Display for JobExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.source())
    }
}

impl Serialize for JobExpr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.source())
    }
}

impl<'de> Deserialize<'de> for JobExpr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        JobExpr::new(&text).map_err(|e| serde::de::Error::custom(format!("expression '{text}': {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_as_its_text_and_refuses_bad_text() {
        let e = JobExpr::new("CPU_MHZ + SIZE_CLOSE_DATA(\"f\") / 135").unwrap();
        let json = serde_json::to_string(&e).unwrap();
        assert_eq!(json, r#""CPU_MHZ + SIZE_CLOSE_DATA(\"f\") / 135""#);
        let back: JobExpr = serde_json::from_str(&json).unwrap();
        assert_eq!(back, e);
        assert_eq!(back.files(), ["f"]);
        let msg = serde_json::from_str::<JobExpr>(r#""CPU_MHZ >""#).unwrap_err().to_string();
        assert!(msg.contains("column 10") && msg.contains("CPU_MHZ >"), "{msg}");
    }
}
