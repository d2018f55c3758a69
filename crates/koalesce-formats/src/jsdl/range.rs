//! JSDL's RangeValue_Type (GFD.56 §6.1.3): UpperBoundedRange, LowerBoundedRange, Exact
//! (with epsilon) and Range, any of which a value may satisfy.

/// One alternative of a range.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Alt {
    Exact {
        value: f64,
        epsilon: f64,
    },
    Bounds {
        lower: Option<(f64, bool)>,
        upper: Option<(f64, bool)>,
    },
}

/// A range value: a value is in it when it satisfies any alternative.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Range {
    pub alts: Vec<Alt>,
}

impl Range {
    /// The smallest whole number ≥ `floor` in the range, if any.
    pub fn smallest_whole(&self, floor: f64) -> Option<u64> {
        let mut best: Option<f64> = None;
        for a in &self.alts {
            let candidate = match a {
                Alt::Exact { value, epsilon } => {
                    let lo = (value - epsilon).max(floor).ceil();
                    (lo <= value + epsilon).then_some(lo)
                }
                Alt::Bounds { lower, upper } => {
                    let lo = match lower {
                        Some((l, excl)) => {
                            let c = l.ceil();
                            if *excl && c == *l {
                                c + 1.0
                            } else {
                                c
                            }
                        }
                        None => floor,
                    }
                    .max(floor.ceil());
                    let ok = match upper {
                        Some((u, excl)) => lo < *u || (!excl && lo == *u),
                        None => true,
                    };
                    ok.then_some(lo)
                }
            };
            if let Some(c) = candidate.filter(|c| c.is_finite() && *c >= 0.0 && *c <= u64::MAX as f64) {
                best = Some(best.map_or(c, |b| b.min(c)));
            }
        }
        best.map(|b| b as u64)
    }

    /// The largest value the range allows, as a limit (an upper bound or an exact value;
    /// a lower bound when that is all there is).
    pub fn limit(&self) -> Option<u64> {
        let v = self
            .alts
            .iter()
            .map(|a| match a {
                Alt::Exact { value, epsilon } => value + epsilon,
                Alt::Bounds { upper: Some((u, _)), .. } => *u,
                Alt::Bounds { lower: Some((l, _)), .. } => *l,
                Alt::Bounds { .. } => 0.0,
            })
            .fold(0.0f64, f64::max);
        (v.is_finite() && v > 0.0 && v <= u64::MAX as f64).then(|| v.floor() as u64)
    }

    /// A requirement on `var` with values scaled by `scale` (e.g. Hz → MHz: 1e-6): the
    /// alternatives joined with `|`.
    pub fn expression(&self, var: &str, scale: f64) -> String {
        let conv = |v: f64, up: bool| {
            let x = v * scale;
            let r = if up { x.ceil() } else { x.floor() };
            r.clamp(i64::MIN as f64, i64::MAX as f64) as i64
        };
        let alts: Vec<String> = self
            .alts
            .iter()
            .map(|a| match a {
                Alt::Exact { value, epsilon } if *epsilon == 0.0 => format!("{var} = {}", conv(*value, false)),
                Alt::Exact { value, epsilon } => {
                    format!(
                        "({var} >= {} & {var} <= {})",
                        conv(value - epsilon, true),
                        conv(value + epsilon, false)
                    )
                }
                Alt::Bounds { lower, upper } => {
                    let mut parts = Vec::new();
                    if let Some((l, excl)) = lower {
                        parts.push(format!("{var} {} {}", if *excl { ">" } else { ">=" }, conv(*l, !excl)));
                    }
                    if let Some((u, excl)) = upper {
                        parts.push(format!("{var} {} {}", if *excl { "<" } else { "<=" }, conv(*u, *excl)));
                    }
                    match parts.len() {
                        0 => "1 = 1".to_string(),
                        1 => parts.pop().unwrap(),
                        _ => format!("({})", parts.join(" & ")),
                    }
                }
            })
            .collect();
        alts.join(" | ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smallest_and_expressions() {
        let r = Range {
            alts: vec![Alt::Bounds {
                lower: Some((2.0, true)),
                upper: Some((8.0, false)),
            }],
        };
        assert_eq!(r.smallest_whole(1.0), Some(3));
        assert_eq!(r.expression("N", 1.0), "(N > 2 & N <= 8)");
        let e = Range {
            alts: vec![Alt::Exact { value: 4.0, epsilon: 0.0 }, Alt::Exact { value: 2.0, epsilon: 0.0 }],
        };
        assert_eq!(e.smallest_whole(1.0), Some(2));
        let up = Range {
            alts: vec![Alt::Bounds {
                lower: None,
                upper: Some((0.5, false)),
            }],
        };
        assert_eq!(up.smallest_whole(1.0), None);
        let hz = Range {
            alts: vec![Alt::Bounds {
                lower: Some((1.5e9, false)),
                upper: None,
            }],
        };
        assert_eq!(hz.expression("CPU_MHZ", 1e-6), "CPU_MHZ >= 1500");
    }
}
