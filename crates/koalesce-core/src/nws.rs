//! Network forecasting as the Network Weather Service does it (Wolski, Spring and Hayes,
//! "The Network Weather Service", FGCS 15, 1999), which KOALA's information service used to
//! estimate file transfer times (003 §3.1, 000 §3.1).
//!
//! For every ordered pair of sites a [`SeriesForecaster`] keeps the measured series (bandwidth
//! in bits/s; optionally latency in ms) and runs a whole family of simple forecasters over it:
//! the last value, the running mean, sliding-window means and medians of several widths and
//! exponential smoothing with several gains. Each forecaster predicts the next measurement
//! *before* it arrives; when it arrives, every forecaster's error is recorded. The forecast
//! given out is the prediction of the forecaster whose recent error — the mean absolute error
//! (MAE) or the mean squared error (MSE) over the last `error_window` predictions — is the
//! lowest. Ties go to the forecaster listed first, so the choice is deterministic.
//!
//! Which error: MSE is minimised by a mean, MAE by a median. Bandwidth series have heavy tails
//! (a transfer stuck behind another, a probe cut short), so the default is MAE, which lets a
//! sliding median win on a series with outliers; NWS reports both and so can this module
//! ([`NwsConfig::metric`]).
//!
//! Like the rest of the core this does no I/O and reads no clock: measurements come in with
//! the time they were taken. [`probes_due`] is the (pure) probe policy: which pairs have no
//! recent measurement and may be probed now, within a bound on concurrent probes and on how
//! often one pair is probed.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::model::{Millis, NetworkForecast, SiteId};

/// One forecaster of the family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Method {
    /// The last measurement.
    LastValue,
    /// The mean of every measurement so far.
    RunningMean,
    /// The mean of the last `window` measurements.
    SlidingMean { window: u16 },
    /// The median of the last `window` measurements (the mean of the two middle ones when
    /// the window holds an even number).
    SlidingMedian { window: u16 },
    /// Exponential smoothing `f ← f + g·(x − f)` with gain `g = gain_permille / 1000`.
    ExpSmoothing { gain_permille: u16 },
}

impl Method {
    /// The family NWS runs by default: last value, running mean, means over 5/10/20, medians
    /// over 5/11/21 and smoothing with gains 0.05, 0.1, 0.2, 0.3, 0.5 and 0.75.
    pub fn default_family() -> Vec<Method> {
        let mut v = vec![Method::LastValue, Method::RunningMean];
        v.extend([5, 10, 20].map(|window| Method::SlidingMean { window }));
        v.extend([5, 11, 21].map(|window| Method::SlidingMedian { window }));
        v.extend([50, 100, 200, 300, 500, 750].map(|gain_permille| Method::ExpSmoothing { gain_permille }));
        v
    }

    /// Measurements this method looks back on (0: only its own state).
    fn window(self) -> usize {
        match self {
            Method::SlidingMean { window } | Method::SlidingMedian { window } => window as usize,
            Method::LastValue => 1,
            Method::RunningMean | Method::ExpSmoothing { .. } => 0,
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Method::LastValue => f.write_str("last"),
            Method::RunningMean => f.write_str("mean"),
            Method::SlidingMean { window } => write!(f, "mean{window}"),
            Method::SlidingMedian { window } => write!(f, "median{window}"),
            Method::ExpSmoothing { gain_permille } => write!(f, "exp{:.2}", *gain_permille as f64 / 1000.0),
        }
    }
}

/// How forecasters are compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ErrorMetric {
    /// Mean absolute error over the window (robust to outliers; a median wins on them).
    #[default]
    Mae,
    /// Mean squared error over the window.
    Mse,
}

/// Parameters of the forecasters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NwsConfig {
    /// The family, in tie-breaking order.
    pub methods: Vec<Method>,
    /// Predictions whose errors are compared (the "recent" error).
    pub error_window: usize,
    pub metric: ErrorMetric,
}

impl Default for NwsConfig {
    fn default() -> Self {
        NwsConfig {
            methods: Method::default_family(),
            error_window: 20,
            metric: ErrorMetric::Mae,
        }
    }
}

/// A measurement that cannot enter a series.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MeasurementError {
    #[error("measured value {0} is not a finite non-negative number")]
    NotFinite(f64),
    #[error("a measurement between a site and itself ({0}) is not a network measurement")]
    SamePair(SiteId),
}

/// What a series forecasts now.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Forecast {
    /// The chosen forecaster's prediction of the next measurement.
    pub value: f64,
    /// The chosen forecaster.
    pub method: Method,
    /// Its recent mean absolute error (over the error window; 0 before any prediction was checked).
    pub mae: f64,
    /// Its recent mean squared error.
    pub mse: f64,
    /// Measurements so far.
    pub samples: u64,
    /// When the last measurement was taken.
    pub last_at: Millis,
}

impl Forecast {
    /// The error of the metric the choice was made by.
    pub fn error(&self, metric: ErrorMetric) -> f64 {
        match metric {
            ErrorMetric::Mae => self.mae,
            ErrorMetric::Mse => self.mse,
        }
    }
}

/// One forecaster's state and recent errors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Track {
    method: Method,
    /// Exponential smoothing state (unused by the other methods).
    smoothed: f64,
    /// Signed errors `measurement − prediction` of the recent predictions, oldest first.
    errors: VecDeque<f64>,
}

/// A family of forecasters over one measured series.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeriesForecaster {
    error_window: usize,
    metric: ErrorMetric,
    tracks: Vec<Track>,
    /// The last measurements (as many as the widest window needs), oldest first.
    history: VecDeque<f64>,
    history_len: usize,
    sum: f64,
    samples: u64,
    last_at: Millis,
}

impl SeriesForecaster {
    pub fn new(config: &NwsConfig) -> Self {
        let methods = if config.methods.is_empty() {
            vec![Method::LastValue]
        } else {
            config.methods.clone()
        };
        let history_len = methods.iter().map(|m| m.window()).max().unwrap_or(1).max(1);
        SeriesForecaster {
            error_window: config.error_window.max(1),
            metric: config.metric,
            tracks: methods
                .into_iter()
                .map(|method| Track {
                    method,
                    smoothed: 0.0,
                    errors: VecDeque::new(),
                })
                .collect(),
            history: VecDeque::with_capacity(history_len),
            history_len,
            sum: 0.0,
            samples: 0,
            last_at: 0,
        }
    }

    /// Adds a measurement taken at `at`: first every forecaster's prediction is checked
    /// against it, then the forecasters learn it.
    pub fn observe(&mut self, at: Millis, value: f64) -> Result<(), MeasurementError> {
        if !value.is_finite() || value < 0.0 {
            return Err(MeasurementError::NotFinite(value));
        }
        if self.samples > 0 {
            for i in 0..self.tracks.len() {
                let err = value - self.predict(i);
                let track = &mut self.tracks[i];
                track.errors.push_back(err);
                if track.errors.len() > self.error_window {
                    track.errors.pop_front();
                }
            }
        }
        for track in &mut self.tracks {
            if let Method::ExpSmoothing { gain_permille } = track.method {
                track.smoothed = if self.samples == 0 {
                    value
                } else {
                    track.smoothed + (gain_permille as f64 / 1000.0) * (value - track.smoothed)
                };
            }
        }
        self.history.push_back(value);
        if self.history.len() > self.history_len {
            self.history.pop_front();
        }
        self.sum += value;
        self.samples += 1;
        self.last_at = self.last_at.max(at);
        Ok(())
    }

    /// Forecaster `i`'s prediction of the next measurement (needs one measurement).
    fn predict(&self, i: usize) -> f64 {
        let track = &self.tracks[i];
        let recent = |w: u16| {
            let w = (w as usize).clamp(1, self.history.len());
            self.history.iter().skip(self.history.len() - w)
        };
        match track.method {
            Method::LastValue => *self.history.back().expect("a measurement"),
            Method::RunningMean => self.sum / self.samples as f64,
            Method::SlidingMean { window } => {
                let (n, s) = recent(window).fold((0usize, 0.0), |(n, s), v| (n + 1, s + v));
                s / n as f64
            }
            Method::SlidingMedian { window } => median(recent(window).copied().collect()),
            Method::ExpSmoothing { .. } => track.smoothed,
        }
    }

    /// Recent (MAE, MSE) of forecaster `i`.
    fn errors(&self, i: usize) -> (f64, f64) {
        let e = &self.tracks[i].errors;
        if e.is_empty() {
            return (0.0, 0.0);
        }
        let n = e.len() as f64;
        (e.iter().map(|x| x.abs()).sum::<f64>() / n, e.iter().map(|x| x * x).sum::<f64>() / n)
    }

    fn error_of(&self, i: usize) -> f64 {
        let (mae, mse) = self.errors(i);
        match self.metric {
            ErrorMetric::Mae => mae,
            ErrorMetric::Mse => mse,
        }
    }

    /// The forecaster with the lowest recent error (the first listed among equals).
    fn best(&self) -> usize {
        let mut best = 0;
        for i in 1..self.tracks.len() {
            if self.error_of(i) < self.error_of(best) {
                best = i;
            }
        }
        best
    }

    /// The forecast of the forecaster with the lowest recent error; `None` before any
    /// measurement.
    pub fn forecast(&self) -> Option<Forecast> {
        if self.samples == 0 {
            return None;
        }
        let i = self.best();
        let (mae, mse) = self.errors(i);
        Some(Forecast {
            value: self.predict(i),
            method: self.tracks[i].method,
            mae,
            mse,
            samples: self.samples,
            last_at: self.last_at,
        })
    }

    /// Every forecaster with its current prediction and recent error (by the configured
    /// metric), in family order; empty before any measurement.
    pub fn candidates(&self) -> Vec<(Method, f64, f64)> {
        if self.samples == 0 {
            return Vec::new();
        }
        (0..self.tracks.len())
            .map(|i| (self.tracks[i].method, self.predict(i), self.error_of(i)))
            .collect()
    }

    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// When the last measurement was taken (`None` before any).
    pub fn last_at(&self) -> Option<Millis> {
        (self.samples > 0).then_some(self.last_at)
    }
}

/// The median of `v` (the mean of the middle two for an even count; NaN for none).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// One measurement between two sites.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    /// When it was taken (the end of the transfer).
    pub at: Millis,
    /// Measured throughput in bits per second.
    pub bandwidth_bps: f64,
    /// Measured latency (round trip of a small request), if known.
    pub latency_ms: Option<f64>,
}

/// The forecasts of one ordered pair of sites.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PairForecast {
    pub bandwidth: Forecast,
    pub latency: Option<Forecast>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct PairSeries {
    bandwidth: SeriesForecaster,
    latency: SeriesForecaster,
    last_probe: Option<Millis>,
    probing: bool,
}

/// The network information provider's forecasts for every measured pair of sites.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NetworkWeather {
    config: NwsConfig,
    pairs: BTreeMap<(SiteId, SiteId), PairSeries>,
}

impl NetworkWeather {
    pub fn new(config: NwsConfig) -> Self {
        NetworkWeather {
            config,
            pairs: BTreeMap::new(),
        }
    }

    pub fn config(&self) -> &NwsConfig {
        &self.config
    }

    fn pair_mut(&mut self, from: SiteId, to: SiteId) -> &mut PairSeries {
        let config = &self.config;
        self.pairs.entry((from, to)).or_insert_with(|| PairSeries {
            bandwidth: SeriesForecaster::new(config),
            latency: SeriesForecaster::new(config),
            last_probe: None,
            probing: false,
        })
    }

    /// Adds a measurement of `from → to` (a real transfer or a probe).
    pub fn observe(&mut self, from: SiteId, to: SiteId, m: Measurement) -> Result<(), MeasurementError> {
        if from == to {
            return Err(MeasurementError::SamePair(from));
        }
        if !m.bandwidth_bps.is_finite() || m.bandwidth_bps < 0.0 {
            return Err(MeasurementError::NotFinite(m.bandwidth_bps));
        }
        if let Some(l) = m.latency_ms {
            if !l.is_finite() || l < 0.0 {
                return Err(MeasurementError::NotFinite(l));
            }
        }
        let pair = self.pair_mut(from, to);
        pair.bandwidth.observe(m.at, m.bandwidth_bps)?;
        if let Some(l) = m.latency_ms {
            pair.latency.observe(m.at, l)?;
        }
        Ok(())
    }

    /// The forecasts of `from → to`, if it was ever measured.
    pub fn forecast(&self, from: SiteId, to: SiteId) -> Option<PairForecast> {
        let p = self.pairs.get(&(from, to))?;
        Some(PairForecast {
            bandwidth: p.bandwidth.forecast()?,
            latency: p.latency.forecast(),
        })
    }

    /// The bandwidth series of a pair (for its candidates and errors).
    pub fn series(&self, from: SiteId, to: SiteId) -> Option<&SeriesForecaster> {
        self.pairs.get(&(from, to)).map(|p| &p.bandwidth)
    }

    /// Every measured pair's forecast, in pair order.
    pub fn forecasts(&self) -> impl Iterator<Item = ((SiteId, SiteId), PairForecast)> + '_ {
        self.pairs.keys().filter_map(|&(f, t)| Some(((f, t), self.forecast(f, t)?)))
    }

    /// What the core's transfer-time estimate needs, per measured pair: forecast bandwidth
    /// (bits/s) and, when latency was measured, forecast latency (ms). A driver feeds these to
    /// `Scheduler::update_forecast`.
    pub fn estimates(&self) -> impl Iterator<Item = (SiteId, SiteId, f64, Option<Millis>)> + '_ {
        self.forecasts()
            .map(|((from, to), f)| (from, to, f.bandwidth.value, f.latency.map(|l| l.value.round() as Millis)))
    }

    /// Writes every forecast into a [`NetworkForecast`] (pairs never measured keep their
    /// value; a pair without a latency forecast keeps its latency). Returns the pairs written.
    pub fn apply(&self, net: &mut NetworkForecast) -> usize {
        let mut n = 0;
        for (from, to, bps, latency) in self.estimates() {
            if from.index() >= net.sites() || to.index() >= net.sites() {
                continue;
            }
            let latency = latency.unwrap_or(net.get(from, to).1);
            net.set(from, to, bps, latency);
            n += 1;
        }
        n
    }

    /// A probe of `from → to` was started at `now`.
    pub fn probe_started(&mut self, from: SiteId, to: SiteId, now: Millis) {
        let p = self.pair_mut(from, to);
        p.last_probe = Some(now);
        p.probing = true;
    }

    /// The probe of `from → to` ended (its measurement, if any, goes to [`Self::observe`]).
    pub fn probe_ended(&mut self, from: SiteId, to: SiteId) {
        if let Some(p) = self.pairs.get_mut(&(from, to)) {
            p.probing = false;
        }
    }

    /// The probe bookkeeping of every ordered pair of distinct sites among `sites`.
    pub fn pair_status(&self, sites: usize) -> Vec<PairStatus> {
        let mut out = Vec::new();
        for f in 0..sites as u32 {
            for t in 0..sites as u32 {
                if f == t {
                    continue;
                }
                let pair = (SiteId(f), SiteId(t));
                let p = self.pairs.get(&pair);
                out.push(PairStatus {
                    pair,
                    last_measured: p.and_then(|p| p.bandwidth.last_at()),
                    last_probe: p.and_then(|p| p.last_probe),
                    probing: p.is_some_and(|p| p.probing),
                });
            }
        }
        out
    }

    /// The pairs among `sites` to probe now (see [`probes_due`]).
    pub fn probes_due(&self, now: Millis, sites: usize, policy: &ProbePolicy) -> Vec<(SiteId, SiteId)> {
        probes_due(now, &self.pair_status(sites), policy)
    }
}

/// How often pairs are probed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbePolicy {
    /// A pair whose last measurement is older than this (or that has none) needs a probe.
    pub stale_after_ms: Millis,
    /// A pair is probed at most once per this interval, whatever became of the last probe.
    pub min_interval_ms: Millis,
    /// At most this many probes run at once.
    pub max_concurrent: usize,
    /// Bytes one probe moves.
    pub probe_bytes: u64,
}

impl Default for ProbePolicy {
    fn default() -> Self {
        ProbePolicy {
            stale_after_ms: 5 * 60_000,
            min_interval_ms: 60_000,
            max_concurrent: 1,
            probe_bytes: 1 << 20,
        }
    }
}

/// The probe bookkeeping of one ordered pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PairStatus {
    pub pair: (SiteId, SiteId),
    /// When it was last measured (by a transfer or a probe).
    pub last_measured: Option<Millis>,
    /// When its last probe started.
    pub last_probe: Option<Millis>,
    /// A probe of it is running.
    pub probing: bool,
}

/// Which pairs to probe now: those without a measurement younger than `stale_after_ms`, not
/// probing and not probed within `min_interval_ms`, never-measured pairs first, then the
/// longest unmeasured, ties in pair order; no more than `max_concurrent` minus the probes
/// already running. So probing costs at most `max_concurrent × probe_bytes` in flight and at
/// most one probe per pair per `min_interval_ms`, and pairs that real transfers keep measured
/// are never probed.
pub fn probes_due(now: Millis, pairs: &[PairStatus], policy: &ProbePolicy) -> Vec<(SiteId, SiteId)> {
    let running = pairs.iter().filter(|p| p.probing).count();
    let budget = policy.max_concurrent.saturating_sub(running);
    let mut due: Vec<&PairStatus> = pairs
        .iter()
        .filter(|p| p.pair.0 != p.pair.1 && !p.probing)
        .filter(|p| p.last_measured.is_none_or(|t| now.saturating_sub(t) >= policy.stale_after_ms))
        .filter(|p| p.last_probe.is_none_or(|t| now.saturating_sub(t) >= policy.min_interval_ms))
        .collect();
    due.sort_by_key(|p| (p.last_measured.is_some(), p.last_measured, p.pair));
    due.into_iter().take(budget).map(|p| p.pair).collect()
}
