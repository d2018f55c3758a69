//! NWS-style forecasting: on series where the right forecaster is known, that one is chosen;
//! the chosen forecaster always has the least recent error; the probe policy stays within its
//! bounds.

use koalesce_core::model::{NetworkForecast, SiteId};
use koalesce_core::nws::{
    probes_due, ErrorMetric, Measurement, MeasurementError, Method, NetworkWeather, NwsConfig, PairStatus, ProbePolicy, SeriesForecaster,
};
use proptest::prelude::*;

/// A small deterministic generator (no dependency on the RNG of the simulator).
struct Lcg(u64);
impl Lcg {
    /// Uniform in [-1, 1).
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
    }
}

fn feed(f: &mut SeriesForecaster, values: impl IntoIterator<Item = f64>) {
    for v in values {
        let at = f.samples() * 1000;
        f.observe(at, v).unwrap();
    }
}

fn default_series() -> SeriesForecaster {
    SeriesForecaster::new(&NwsConfig::default())
}

#[test]
fn no_forecast_before_a_measurement() {
    let f = default_series();
    assert!(f.forecast().is_none());
    assert!(f.candidates().is_empty());
    assert_eq!(f.last_at(), None);
}

#[test]
fn constant_series_forecasts_the_constant_with_no_error() {
    let mut f = default_series();
    feed(&mut f, std::iter::repeat_n(40e6, 50));
    let fc = f.forecast().unwrap();
    assert_eq!(fc.value, 40e6);
    assert_eq!((fc.mae, fc.mse), (0.0, 0.0));
    // Every forecaster is exact; the tie goes to the first listed.
    assert_eq!(fc.method, Method::LastValue);
    assert!(f.candidates().iter().all(|&(_, p, e)| p == 40e6 && e == 0.0));
    assert_eq!(fc.samples, 50);
    assert_eq!(fc.last_at, 49_000);
}

#[test]
fn step_change_is_followed_by_the_last_value() {
    let mut f = default_series();
    feed(&mut f, std::iter::repeat_n(100.0, 30));
    assert_eq!(f.forecast().unwrap().value, 100.0);
    // The link drops to half; a few measurements later the forecaster that follows at once is
    // chosen and forecasts the new level exactly, while the slow ones are still dragged up.
    feed(&mut f, std::iter::repeat_n(50.0, 3));
    let fc = f.forecast().unwrap();
    assert_eq!(fc.method, Method::LastValue, "{:?}", f.candidates());
    assert_eq!(fc.value, 50.0);
    let running_mean = f.candidates().into_iter().find(|c| c.0 == Method::RunningMean).unwrap();
    assert!(
        running_mean.1 > 90.0,
        "the running mean still believes the old level: {running_mean:?}"
    );
    assert!(running_mean.2 > fc.mae);
    feed(&mut f, std::iter::repeat_n(50.0, 40));
    assert_eq!(f.forecast().unwrap().value, 50.0);
}

/// 100 ± 2 with every 10th measurement a dropout to 10: the medians ignore the dropouts, the
/// means are dragged by them, the last value forecasts a dropout right after one.
fn series_with_outliers(n: usize) -> Vec<f64> {
    let mut rng = Lcg(7);
    (0..n).map(|i| if i % 10 == 9 { 10.0 } else { 100.0 + 2.0 * rng.next() }).collect()
}

#[test]
fn noisy_series_with_outliers_is_forecast_by_a_median() {
    let mut f = default_series();
    feed(&mut f, series_with_outliers(200));
    let fc = f.forecast().unwrap();
    assert!(
        matches!(fc.method, Method::SlidingMedian { .. }),
        "chosen {} among {:?}",
        fc.method,
        f.candidates()
    );
    assert!((fc.value - 100.0).abs() < 2.0, "forecast {}", fc.value);
    for (m, _, e) in f.candidates() {
        if matches!(
            m,
            Method::LastValue | Method::RunningMean | Method::SlidingMean { .. } | Method::ExpSmoothing { .. }
        ) {
            assert!(e > fc.mae, "{m} has error {e}, the median {}", fc.mae);
        }
    }
}

#[test]
fn mse_prefers_a_mean_on_the_same_outliers() {
    // The documented reason for MAE as the default: under MSE the dropouts' squared errors
    // dominate and a forecaster pulled towards them (a mean) wins.
    let config = NwsConfig {
        metric: ErrorMetric::Mse,
        ..NwsConfig::default()
    };
    let mut f = SeriesForecaster::new(&config);
    feed(&mut f, series_with_outliers(200));
    let fc = f.forecast().unwrap();
    assert!(!matches!(fc.method, Method::SlidingMedian { .. }), "chosen {}", fc.method);
    assert!(fc.value < 99.0, "a mean-like forecast is pulled below the level: {}", fc.value);
}

#[test]
fn noisy_stationary_series_is_smoothed_not_followed() {
    // Over a short error window the ranking of close forecasters is itself noisy; over 100
    // predictions the smoothers' advantage on independent noise is clear.
    let mut rng = Lcg(11);
    let mut f = SeriesForecaster::new(&NwsConfig {
        error_window: 100,
        ..NwsConfig::default()
    });
    feed(&mut f, (0..300).map(|_| 100.0 + 10.0 * rng.next()));
    let fc = f.forecast().unwrap();
    // Independent noise: the best predictor is the long-run mean (expected MAE 5 against
    // 6.7 for the last value).
    let long_memory = [
        Method::RunningMean,
        Method::SlidingMean { window: 20 },
        Method::ExpSmoothing { gain_permille: 50 },
        Method::ExpSmoothing { gain_permille: 100 },
    ];
    assert!(long_memory.contains(&fc.method), "chosen {}", fc.method);
    let last = f.candidates()[0];
    assert_eq!(last.0, Method::LastValue);
    assert!(
        fc.mae < 0.85 * last.2,
        "chosen {} error {} vs last value {}: {:?}",
        fc.method,
        fc.mae,
        last.2,
        f.candidates()
    );
    assert!((fc.value - 100.0).abs() < 4.0);
}

#[test]
fn invalid_measurements_are_refused() {
    let mut w = NetworkWeather::new(NwsConfig::default());
    let m = |bw: f64| Measurement {
        at: 1,
        bandwidth_bps: bw,
        latency_ms: None,
    };
    assert_eq!(
        w.observe(SiteId(0), SiteId(1), m(f64::NAN)).unwrap_err().to_string(),
        MeasurementError::NotFinite(f64::NAN).to_string()
    );
    assert!(w.observe(SiteId(0), SiteId(1), m(-1.0)).is_err());
    assert!(w.observe(SiteId(0), SiteId(1), m(f64::INFINITY)).is_err());
    assert_eq!(w.observe(SiteId(2), SiteId(2), m(1.0)), Err(MeasurementError::SamePair(SiteId(2))));
    let bad_latency = Measurement {
        latency_ms: Some(f64::NAN),
        ..m(1.0)
    };
    assert!(w.observe(SiteId(0), SiteId(1), bad_latency).is_err());
    assert!(w.forecast(SiteId(0), SiteId(1)).is_none(), "nothing was recorded");
}

#[test]
fn forecasts_are_written_into_the_cores_network_view() {
    let mut w = NetworkWeather::new(NwsConfig::default());
    for (i, bw) in [30e6, 32e6, 31e6].into_iter().enumerate() {
        let m = Measurement {
            at: i as u64 * 1000,
            bandwidth_bps: bw,
            latency_ms: Some(2.0),
        };
        w.observe(SiteId(0), SiteId(2), m).unwrap();
    }
    w.observe(
        SiteId(1),
        SiteId(0),
        Measurement {
            at: 5,
            bandwidth_bps: 8e6,
            latency_ms: None,
        },
    )
    .unwrap();
    let mut net = NetworkForecast::uniform(3, 1e9, 7);
    assert_eq!(w.apply(&mut net), 2);
    let f02 = w.forecast(SiteId(0), SiteId(2)).unwrap();
    assert_eq!(net.get(SiteId(0), SiteId(2)), (f02.bandwidth.value, 2));
    assert!((30e6..=32e6).contains(&f02.bandwidth.value));
    assert_eq!(
        net.get(SiteId(1), SiteId(0)),
        (8e6, 7),
        "no latency measured: the old latency stays"
    );
    assert_eq!(net.get(SiteId(2), SiteId(0)), (1e9, 7), "never measured: unchanged");
    // The forecast drives the core's transfer-time estimate: 8 MB over 8 Mbit/s = 8 s + 7 ms.
    assert_eq!(net.transfer_ms(SiteId(1), SiteId(0), 8_000_000), 8_007);
}

fn status(pair: (u32, u32), last_measured: Option<u64>, last_probe: Option<u64>, probing: bool) -> PairStatus {
    PairStatus {
        pair: (SiteId(pair.0), SiteId(pair.1)),
        last_measured,
        last_probe,
        probing,
    }
}

#[test]
fn probes_go_to_unmeasured_pairs_first_within_the_budget() {
    let policy = ProbePolicy {
        stale_after_ms: 60_000,
        min_interval_ms: 10_000,
        max_concurrent: 2,
        probe_bytes: 1 << 20,
    };
    let now = 100_000;
    let pairs = [
        status((0, 1), Some(90_000), None, false), // fresh: no probe
        status((0, 2), Some(10_000), None, false), // stale
        status((1, 0), None, None, false),         // never measured
        status((1, 2), Some(5_000), None, false),  // stale, older
        status((2, 0), None, Some(95_000), false), // probed 5 s ago: wait
        status((2, 1), None, None, false),         // never measured
    ];
    let due = probes_due(now, &pairs, &policy);
    assert_eq!(due, vec![(SiteId(1), SiteId(0)), (SiteId(2), SiteId(1))]);
    // One probe running: one more may start, the next in line.
    let mut with_running = pairs.to_vec();
    with_running[2].probing = true;
    assert_eq!(probes_due(now, &with_running, &policy), vec![(SiteId(2), SiteId(1))]);
    // Never-measured pairs taken care of: the longest unmeasured come next.
    let measured: Vec<PairStatus> = pairs
        .iter()
        .map(|p| PairStatus {
            last_measured: p.last_measured.or(Some(50_000)),
            ..*p
        })
        .collect();
    assert_eq!(
        probes_due(now, &measured, &policy),
        vec![(SiteId(1), SiteId(2)), (SiteId(0), SiteId(2))]
    );
    // Everything fresh: nothing to do.
    let fresh: Vec<PairStatus> = pairs
        .iter()
        .map(|p| PairStatus {
            last_measured: Some(now),
            ..*p
        })
        .collect();
    assert!(probes_due(now, &fresh, &policy).is_empty());
}

#[test]
fn weather_tracks_probes() {
    let mut w = NetworkWeather::new(NwsConfig::default());
    let policy = ProbePolicy {
        max_concurrent: 1,
        ..ProbePolicy::default()
    };
    assert_eq!(w.probes_due(0, 2, &policy), vec![(SiteId(0), SiteId(1))]);
    w.probe_started(SiteId(0), SiteId(1), 0);
    assert!(w.probes_due(1, 2, &policy).is_empty(), "one probe at a time");
    w.observe(
        SiteId(0),
        SiteId(1),
        Measurement {
            at: 900,
            bandwidth_bps: 1e6,
            latency_ms: None,
        },
    )
    .unwrap();
    w.probe_ended(SiteId(0), SiteId(1));
    assert_eq!(w.probes_due(1000, 2, &policy), vec![(SiteId(1), SiteId(0))]);
    // A probe that measured nothing (it failed) is retried only after the minimum interval.
    w.probe_started(SiteId(1), SiteId(0), 1000);
    w.probe_ended(SiteId(1), SiteId(0));
    assert!(w.probes_due(1000 + policy.min_interval_ms - 1, 2, &policy).is_empty());
    assert_eq!(
        w.probes_due(1000 + policy.min_interval_ms, 2, &policy),
        vec![(SiteId(1), SiteId(0))]
    );
    // After the stale time the measured pair is due again, after the never-measured one.
    let later = 900 + policy.stale_after_ms;
    w.probe_started(SiteId(1), SiteId(0), later);
    assert!(w.probes_due(later, 2, &policy).is_empty(), "one probe at a time");
    w.probe_ended(SiteId(1), SiteId(0));
    assert_eq!(w.probes_due(later, 2, &policy), vec![(SiteId(0), SiteId(1))]);
    assert_eq!(w.probes_due(later - 1, 2, &policy), Vec::<(SiteId, SiteId)>::new());
}

fn config_strategy() -> impl Strategy<Value = NwsConfig> {
    (
        1usize..30,
        any::<bool>(),
        proptest::sample::subsequence(Method::default_family(), 1..=14),
    )
        .prop_map(|(window, mse, methods)| NwsConfig {
            methods,
            error_window: window,
            metric: if mse { ErrorMetric::Mse } else { ErrorMetric::Mae },
        })
}

proptest! {
    /// At every step the chosen forecaster's recent error is the least of the family, its
    /// prediction is the forecast, and (every forecaster being a convex combination of past
    /// measurements) the forecast lies within the measured range.
    #[test]
    fn chosen_forecaster_has_the_least_recent_error(
        config in config_strategy(),
        values in proptest::collection::vec(prop_oneof![0.0f64..1e9, Just(0.0), Just(5e7)], 1..120),
    ) {
        let mut f = SeriesForecaster::new(&config);
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for (i, v) in values.iter().enumerate() {
            f.observe(i as u64, *v).unwrap();
            lo = lo.min(*v);
            hi = hi.max(*v);
            let fc = f.forecast().unwrap();
            let cands = f.candidates();
            prop_assert_eq!(cands.len(), config.methods.len());
            let chosen = cands.iter().position(|c| c.0 == fc.method).unwrap();
            for (m, _, e) in &cands {
                prop_assert!(fc.error(config.metric) <= *e, "chose {} ({}) over {} ({})", fc.method, fc.error(config.metric), m, e);
            }
            prop_assert!(cands[..chosen].iter().all(|c| c.2 > fc.error(config.metric)), "ties go to the first listed");
            prop_assert_eq!(cands[chosen].1, fc.value);
            let slack = 1e-6 * hi.abs().max(1.0);
            prop_assert!(fc.value >= lo - slack && fc.value <= hi + slack, "{} outside [{}, {}]", fc.value, lo, hi);
        }
    }

    /// The probe policy never exceeds its concurrency budget, never probes a fresh, running or
    /// recently probed pair, and uses the whole budget when enough pairs are due.
    #[test]
    fn probe_policy_stays_within_bounds(
        now in 0u64..1_000_000,
        stale in 1u64..200_000,
        interval in 0u64..200_000,
        max_concurrent in 0usize..5,
        raw in proptest::collection::vec((0u32..5, 0u32..5, proptest::option::of(0u64..1_000_000), proptest::option::of(0u64..1_000_000), any::<bool>()), 0..25),
    ) {
        let mut seen = std::collections::BTreeSet::new();
        let pairs: Vec<PairStatus> = raw
            .into_iter()
            .filter(|r| seen.insert((r.0, r.1)))
            .map(|(f, t, m, p, probing)| status((f, t), m.map(|m| m.min(now)), p.map(|p| p.min(now)), probing))
            .collect();
        let policy = ProbePolicy { stale_after_ms: stale, min_interval_ms: interval, max_concurrent, probe_bytes: 1 };
        let due = probes_due(now, &pairs, &policy);
        let running = pairs.iter().filter(|p| p.probing).count();
        prop_assert!(due.len() + running <= max_concurrent.max(running));
        let eligible: Vec<&PairStatus> = pairs.iter().filter(|p| {
            p.pair.0 != p.pair.1
                && !p.probing
                && p.last_measured.is_none_or(|t| now - t >= stale)
                && p.last_probe.is_none_or(|t| now - t >= interval)
        }).collect();
        for d in &due {
            prop_assert!(eligible.iter().any(|p| p.pair == *d), "{:?} is not due", d);
        }
        prop_assert_eq!(due.len(), eligible.len().min(max_concurrent.saturating_sub(running)));
    }
}
