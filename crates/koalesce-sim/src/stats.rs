//! Summary statistics for experiment reports.
//!
//! Samples are expected to be finite. Sorting uses [`f64::total_cmp`], so a
//! NaN never panics, but it propagates into means and sits at the top of the
//! order for percentiles.

use serde::Serialize;

/// Arithmetic mean; `None` for an empty slice.
pub fn mean(samples: &[f64]) -> Option<f64> {
    if samples.is_empty() {
        None
    } else {
        Some(samples.iter().sum::<f64>() / samples.len() as f64)
    }
}

/// Sample standard deviation (divisor `n - 1`); `None` when `n < 2`.
pub fn std_dev(samples: &[f64]) -> Option<f64> {
    if samples.len() < 2 {
        return None;
    }
    let m = mean(samples)?;
    let ss: f64 = samples.iter().map(|x| (x - m) * (x - m)).sum();
    Some((ss / (samples.len() - 1) as f64).sqrt())
}

/// The `p`-th percentile, `p` in `[0, 100]`, of samples in any order.
///
/// Uses **linear interpolation between closest ranks** (the default of
/// NumPy and R type 7): with the samples sorted ascending as
/// `x[0..n]`, `h = (n - 1) * p / 100` and the result is
/// `x[floor(h)] + (h - floor(h)) * (x[floor(h) + 1] - x[floor(h)])`.
/// So `p = 0` is the minimum, `p = 100` the maximum and `p = 50` the median.
/// `None` for an empty slice or `p` outside `[0, 100]` (or NaN).
pub fn percentile(samples: &[f64], p: f64) -> Option<f64> {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    percentile_sorted(&sorted, p)
}

/// [`percentile`] for samples already sorted ascending (not checked).
pub fn percentile_sorted(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() || !(0.0..=100.0).contains(&p) {
        return None;
    }
    let h = (sorted.len() - 1) as f64 * p / 100.0;
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(sorted.len() - 1);
    let frac = h - lo as f64;
    Some(sorted[lo] + frac * (sorted[hi] - sorted[lo]))
}

/// Count, mean, percentiles (see [`percentile`]) and extremes of a sample.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    pub n: usize,
    pub mean: f64,
    pub min: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl Summary {
    /// Summarise `samples` (any order); `None` for an empty slice.
    pub fn of(samples: &[f64]) -> Option<Summary> {
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let pct = |p| percentile_sorted(&sorted, p);
        Some(Summary {
            n: sorted.len(),
            mean: mean(samples)?,
            min: *sorted.first()?,
            p50: pct(50.0)?,
            p90: pct(90.0)?,
            p99: pct(99.0)?,
            max: *sorted.last()?,
        })
    }
}

/// Two-sided 95% Student t quantile (`t_{0.975, df}`): tabulated for
/// `df` 1..=30, `1.96` (normal) beyond. `df = 0` has no quantile and gives
/// infinity.
pub fn t_quantile_975(df: usize) -> f64 {
    const TABLE: [f64; 30] = [
        12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281, 2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199,
        2.1098, 2.1009, 2.0930, 2.0860, 2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423,
    ];
    match df {
        0 => f64::INFINITY,
        1..=30 => TABLE[df - 1],
        _ => 1.96,
    }
}

/// Mean and half-width of its 95% confidence interval,
/// `t_{0.975, n-1} * s / sqrt(n)` with `s` the sample standard deviation.
/// `None` when fewer than two samples are given (no spread can be
/// estimated; use [`mean`] for the point value).
pub fn mean_ci95(samples: &[f64]) -> Option<(f64, f64)> {
    let n = samples.len();
    let m = mean(samples)?;
    let s = std_dev(samples)?;
    Some((m, t_quantile_975(n - 1) * s / (n as f64).sqrt()))
}

/// Wilson score interval of a binomial proportion `k / n` at the normal quantile `z` (1.96 for
/// 95%), as fractions in `[0, 1]`. Unlike mean ± z·s it stays inside `[0, 1]` and does not
/// collapse to zero width when every trial succeeds (or none does): 10 of 10 gives about
/// `[0.72, 1]`. `None` for `n = 0`.
pub fn wilson(k: u64, n: u64, z: f64) -> Option<(f64, f64)> {
    if n == 0 || k > n {
        return None;
    }
    let (k, n) = (k as f64, n as f64);
    let p = k / n;
    let z2 = z * z;
    let centre = (p + z2 / (2.0 * n)) / (1.0 + z2 / n);
    let half = z / (1.0 + z2 / n) * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    Some(((centre - half).max(0.0), (centre + half).min(1.0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn mean_basic() {
        assert_eq!(mean(&[]), None);
        assert_eq!(mean(&[4.0]), Some(4.0));
        assert_eq!(mean(&[1.0, 2.0, 3.0, 6.0]), Some(3.0));
    }

    #[test]
    fn std_dev_basic() {
        assert_eq!(std_dev(&[1.0]), None);
        // mean 5, squared deviations 9+1+1+9+0 = 20, /4 = 5.
        let s = std_dev(&[2.0, 4.0, 6.0, 8.0, 5.0]).unwrap();
        assert!(close(s, 5f64.sqrt()));
    }

    #[test]
    fn percentile_linear_interpolation() {
        let xs = [15.0, 20.0, 35.0, 40.0, 50.0];
        assert_eq!(percentile(&xs, 0.0), Some(15.0));
        assert_eq!(percentile(&xs, 100.0), Some(50.0));
        assert_eq!(percentile(&xs, 50.0), Some(35.0));
        // h = 4 * 0.4 = 1.6 -> 20 + 0.6 * 15 = 29
        assert!(close(percentile(&xs, 40.0).unwrap(), 29.0));
        // h = 4 * 0.9 = 3.6 -> 40 + 0.6 * 10 = 46
        assert!(close(percentile(&xs, 90.0).unwrap(), 46.0));
        // Order does not matter.
        let ys = [50.0, 15.0, 40.0, 35.0, 20.0];
        assert!(close(percentile(&ys, 90.0).unwrap(), 46.0));
        // Even count median: average of the middle two.
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 50.0), Some(2.5));
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(percentile(&xs, -1.0), None);
        assert_eq!(percentile(&xs, 100.5), None);
        assert_eq!(percentile(&xs, f64::NAN), None);
    }

    #[test]
    fn summary_of() {
        assert_eq!(Summary::of(&[]), None);
        // 1..=100 shuffled-ish: h = 99p.
        let xs: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        let s = Summary::of(&xs).unwrap();
        assert_eq!(s.n, 100);
        assert!(close(s.mean, 50.5));
        assert_eq!(s.min, 1.0);
        assert!(close(s.p50, 50.5)); // h = 49.5
        assert!(close(s.p90, 90.1)); // h = 89.1 -> 90 + 0.1
        assert!(close(s.p99, 99.01)); // h = 98.01 -> 99 + 0.01
        assert_eq!(s.max, 100.0);
    }

    #[test]
    fn wilson_hand_computed() {
        assert_eq!(wilson(0, 0, 1.96), None);
        assert_eq!(wilson(3, 2, 1.96), None);
        // 10 of 10: centre (1 + 1.9208/10)/(1 + 0.38416) = 0.86123, half = 1.96/1.38416 *
        // sqrt(0 + 3.8416/400) = 0.13877 -> [0.72246, 1].
        let (lo, hi) = wilson(10, 10, 1.96).unwrap();
        assert!((lo - 0.72246).abs() < 1e-5, "{lo}");
        assert_eq!(hi, 1.0);
        // 0 of 10 mirrors it.
        let (lo, hi) = wilson(0, 10, 1.96).unwrap();
        assert_eq!(lo, 0.0);
        assert!((hi - 0.27754).abs() < 1e-5, "{hi}");
        // 5 of 10: symmetric around 0.5, [0.2366, 0.7634].
        let (lo, hi) = wilson(5, 10, 1.96).unwrap();
        assert!((lo - 0.23659).abs() < 1e-4 && (hi - 0.76341).abs() < 1e-4, "{lo} {hi}");
        // Large n approaches p ± 1.96·sqrt(p(1-p)/n).
        let (lo, hi) = wilson(300, 1000, 1.96).unwrap();
        assert!((lo - 0.2724).abs() < 1e-3 && (hi - 0.3291).abs() < 1e-3, "{lo} {hi}");
    }

    #[test]
    fn t_table() {
        assert_eq!(t_quantile_975(1), 12.7062);
        assert_eq!(t_quantile_975(4), 2.7764);
        assert_eq!(t_quantile_975(30), 2.0423);
        assert_eq!(t_quantile_975(31), 1.96);
        assert!(t_quantile_975(0).is_infinite());
        for df in 1..40 {
            assert!(t_quantile_975(df + 1) <= t_quantile_975(df));
        }
    }

    #[test]
    fn ci95_hand_computed() {
        assert_eq!(mean_ci95(&[]), None);
        assert_eq!(mean_ci95(&[3.0]), None);
        // n = 5, mean 5, s = sqrt(5); half = 2.7764 * sqrt(5) / sqrt(5).
        let (m, h) = mean_ci95(&[2.0, 4.0, 6.0, 8.0, 5.0]).unwrap();
        assert!(close(m, 5.0));
        assert!(close(h, 2.7764));
        // n = 2: {0, 2}: mean 1, s = sqrt(2); half = 12.7062 * sqrt(2)/sqrt(2).
        let (m, h) = mean_ci95(&[0.0, 2.0]).unwrap();
        assert!(close(m, 1.0));
        assert!(close(h, 12.7062));
        // Constant sample: zero width.
        assert_eq!(mean_ci95(&[4.0, 4.0, 4.0]), Some((4.0, 0.0)));
        // n = 100 uses 1.96: values alternate 0/2 -> mean 1,
        // s^2 = 100/99, half = 1.96 * sqrt(100/99) / 10.
        let xs: Vec<f64> = (0..100).map(|i| if i % 2 == 0 { 0.0 } else { 2.0 }).collect();
        let (m, h) = mean_ci95(&xs).unwrap();
        assert!(close(m, 1.0));
        assert!(close(h, 1.96 * (100.0f64 / 99.0).sqrt() / 10.0));
    }
}
