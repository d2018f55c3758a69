//! A small, deterministic, seedable pseudo-random number generator.
//!
//! [`Rng`] is xoshiro256** (Blackman & Vigna) whose 256-bit state is filled from a
//! single `u64` seed with splitmix64, so every seed (including 0) gives a valid,
//! well-mixed state. It has no external dependencies, no global state and never reads
//! the clock: the same seed always produces the same sequence on every platform.
//!
//! Everything random in the simulator must flow through an `Rng` passed in by the caller.
//! To give independent components their own streams without coupling their draw counts,
//! derive child generators with [`Rng::fork`] (or seed them with [`Rng::seed_from`]).
//!
//! ```
//! use koalesce_sim::rng::Rng;
//! let mut rng = Rng::new(42);
//! let coin = rng.bernoulli(0.5);
//! let size = rng.range_inclusive_u64(1, 8); // 1..=8
//! let gap_ms = rng.exponential(60_000.0); // mean one minute
//! # let _ = (coin, size, gap_ms);
//! ```

use serde::{Deserialize, Serialize};

/// One step of splitmix64: advances `state` and returns the next output.
///
/// Exposed because it is handy for hashing a seed and a stream number together.
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Deterministic xoshiro256** generator. Cheap to clone; clones continue identically.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rng {
    s: [u64; 4],
    /// Second value of the last Box–Muller pair (standard normal), used by the next `normal`.
    spare_normal: Option<f64>,
}

impl Rng {
    /// Creates a generator from a 64-bit seed (state filled by splitmix64).
    pub fn new(seed: u64) -> Self {
        let mut sm = seed;
        let s = [splitmix64(&mut sm), splitmix64(&mut sm), splitmix64(&mut sm), splitmix64(&mut sm)];
        Rng { s, spare_normal: None }
    }

    /// Creates a generator for sub-stream `stream` of `seed` (e.g. one per site), independent
    /// of how many numbers other streams draw.
    pub fn seed_from(seed: u64, stream: u64) -> Self {
        let mut sm = seed ^ 0xD1B5_4A32_D192_ED03u64.wrapping_mul(stream.wrapping_add(1));
        let mixed = splitmix64(&mut sm) ^ stream.rotate_left(32);
        Rng::new(mixed)
    }

    /// Draws one `u64` from `self` and returns a new generator seeded with it.
    pub fn fork(&mut self) -> Rng {
        Rng::new(self.next_u64())
    }

    /// Next uniformly distributed `u64` (full 64 bits).
    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Next uniformly distributed `u32` (the high 32 bits of `next_u64`).
    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    /// Uniform `f64` in `[0, 1)` with 53 bits of precision.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform `f64` in `[low, high)`. Panics if `low > high` or either is not finite.
    pub fn uniform_f64(&mut self, low: f64, high: f64) -> f64 {
        assert!(
            low.is_finite() && high.is_finite() && low <= high,
            "uniform_f64: bad range [{low}, {high})"
        );
        let x = low + (high - low) * self.uniform();
        // Guard against rounding up to `high`.
        if x >= high && high > low {
            low.max(f64_prev(high))
        } else {
            x
        }
    }

    /// Uniform integer in `[0, n)`, unbiased (Lemire's method). Panics if `n == 0`.
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "below(0): empty range");
        let mut m = (self.next_u64() as u128) * (n as u128);
        let mut low = m as u64;
        if low < n {
            let threshold = n.wrapping_neg() % n;
            while low < threshold {
                m = (self.next_u64() as u128) * (n as u128);
                low = m as u64;
            }
        }
        (m >> 64) as u64
    }

    /// Uniform integer in the half-open range `[low, high)`. Panics if `low >= high`.
    pub fn range_u64(&mut self, low: u64, high: u64) -> u64 {
        assert!(low < high, "range_u64: empty range [{low}, {high})");
        low + self.below(high - low)
    }

    /// Uniform integer in the closed range `[low, high]`. Panics if `low > high`.
    pub fn range_inclusive_u64(&mut self, low: u64, high: u64) -> u64 {
        assert!(low <= high, "range_inclusive_u64: empty range [{low}, {high}]");
        match (high - low).checked_add(1) {
            Some(span) => low + self.below(span),
            None => self.next_u64(), // the full u64 range
        }
    }

    /// `true` with probability `p` (clamped to `[0, 1]`).
    pub fn bernoulli(&mut self, p: f64) -> bool {
        self.uniform() < p
    }

    /// Exponentially distributed `f64` with the given mean (`mean >= 0`; 0 gives 0).
    /// Inverse-CDF method: `-mean * ln(1 - U)`, `U` in `[0, 1)`, so the result is finite.
    pub fn exponential(&mut self, mean: f64) -> f64 {
        assert!(mean >= 0.0 && mean.is_finite(), "exponential: bad mean {mean}");
        -mean * (1.0 - self.uniform()).ln()
    }

    /// Normally distributed `f64` (Box–Muller; the second value of each pair is cached).
    /// Panics if `sd < 0`.
    pub fn normal(&mut self, mean: f64, sd: f64) -> f64 {
        assert!(sd >= 0.0, "normal: negative standard deviation {sd}");
        let z = match self.spare_normal.take() {
            Some(z) => z,
            None => {
                // u1 in (0, 1] so ln(u1) is finite.
                let u1 = 1.0 - self.uniform();
                let u2 = self.uniform();
                let r = (-2.0 * u1.ln()).sqrt();
                let theta = 2.0 * std::f64::consts::PI * u2;
                self.spare_normal = Some(r * theta.sin());
                r * theta.cos()
            }
        };
        mean + sd * z
    }

    /// Uniform index in `[0, len)`. Panics if `len == 0`.
    pub fn choose_index(&mut self, len: usize) -> usize {
        assert!(len > 0, "choose_index: empty collection");
        self.below(len as u64) as usize
    }

    /// A uniformly chosen element of `items`, or `None` if it is empty.
    pub fn choose<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        if items.is_empty() {
            None
        } else {
            Some(&items[self.choose_index(items.len())])
        }
    }

    /// Shuffles `items` in place (Fisher–Yates), uniformly over all permutations.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}

/// The largest `f64` strictly below a positive finite `x` (or `x` itself for 0).
fn f64_prev(x: f64) -> f64 {
    if x > 0.0 {
        f64::from_bits(x.to_bits() - 1)
    } else if x < 0.0 {
        f64::from_bits(x.to_bits() + 1)
    } else {
        -f64::from_bits(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_reference_value() {
        // First output of splitmix64 seeded with 0 (reference implementation).
        let mut s = 0u64;
        assert_eq!(splitmix64(&mut s), 0xE220_A839_7B1D_CDAF);
        assert_eq!(splitmix64(&mut s), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn same_seed_same_sequence() {
        let mut a = Rng::new(12345);
        let mut b = Rng::new(12345);
        for _ in 0..1000 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        for _ in 0..100 {
            assert_eq!(a.normal(1.0, 2.0).to_bits(), b.normal(1.0, 2.0).to_bits());
            assert_eq!(a.exponential(3.0).to_bits(), b.exponential(3.0).to_bits());
        }
        let mut c = Rng::new(12346);
        let mut a = Rng::new(12345);
        let same = (0..100).filter(|_| a.next_u64() == c.next_u64()).count();
        assert!(same < 3);
    }

    #[test]
    fn clone_continues_identically_and_streams_differ() {
        let mut a = Rng::new(7);
        a.next_u64();
        let mut b = a.clone();
        assert_eq!(a.next_u64(), b.next_u64());
        let mut s0 = Rng::seed_from(7, 0);
        let mut s1 = Rng::seed_from(7, 1);
        assert_ne!(s0.next_u64(), s1.next_u64());
        let mut f = a.fork();
        assert_ne!(f.next_u64(), a.next_u64());
    }

    #[test]
    fn uniform_in_unit_interval_with_right_mean() {
        let mut r = Rng::new(1);
        let n = 100_000;
        let mut sum = 0.0;
        for _ in 0..n {
            let x = r.uniform();
            assert!((0.0..1.0).contains(&x));
            sum += x;
        }
        assert!((sum / n as f64 - 0.5).abs() < 0.01);
    }

    #[test]
    fn exponential_mean_within_two_percent() {
        let mut r = Rng::new(2024);
        let n = 100_000;
        let mean = 600_000.0;
        let sum: f64 = (0..n).map(|_| r.exponential(mean)).sum();
        let est = sum / n as f64;
        assert!((est - mean).abs() / mean < 0.02, "sample mean {est} vs {mean}");
    }

    #[test]
    fn normal_mean_and_sd() {
        let mut r = Rng::new(99);
        let n = 100_000;
        let xs: Vec<f64> = (0..n).map(|_| r.normal(10.0, 3.0)).collect();
        let m = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / n as f64;
        assert!((m - 10.0).abs() < 0.05, "mean {m}");
        assert!((var.sqrt() - 3.0).abs() < 0.05, "sd {}", var.sqrt());
    }

    #[test]
    fn ranges_cover_bounds_and_stay_inside() {
        let mut r = Rng::new(5);
        let mut seen = [false; 6];
        for _ in 0..10_000 {
            let x = r.range_inclusive_u64(3, 8);
            assert!((3..=8).contains(&x));
            seen[(x - 3) as usize] = true;
            let y = r.range_u64(10, 12);
            assert!((10..12).contains(&y));
            let z = r.uniform_f64(-1.0, 1.0);
            assert!((-1.0..1.0).contains(&z));
        }
        assert!(seen.iter().all(|&s| s));
        assert_eq!(r.range_inclusive_u64(4, 4), 4);
        let _ = r.range_inclusive_u64(0, u64::MAX);
    }

    #[test]
    fn choose_and_shuffle() {
        let mut r = Rng::new(11);
        let empty: [u8; 0] = [];
        assert!(r.choose(&empty).is_none());
        let items = [1, 2, 3];
        assert!(items.contains(r.choose(&items).unwrap()));
        let mut v: Vec<u32> = (0..50).collect();
        r.shuffle(&mut v);
        let mut sorted = v.clone();
        sorted.sort();
        assert_eq!(sorted, (0..50).collect::<Vec<_>>());
        assert_ne!(v, sorted);
        let mut counts = [0usize; 4];
        for _ in 0..40_000 {
            counts[r.choose_index(4)] += 1;
        }
        for c in counts {
            assert!((9_000..11_000).contains(&c));
        }
    }
}
