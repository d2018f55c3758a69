//! Shared multi-site network with max-min fair bandwidth sharing.
//!
//! # Model
//!
//! Following the wide-area model of Shan, Oliker, Smith and Biswas (§IV-A)
//! and the DAS-2 testbed that KOALA ran on:
//!
//! * every site `s` has one **LAN link** of capacity `lan_bps[s]`;
//! * every unordered pair of distinct sites `{a, b}` has one **WAN link**
//!   with a capacity and a latency (`default_wan_bps` / `default_latency_ms`,
//!   or a per-pair override).
//!
//! A transfer from site `a` to site `b != a` crosses `a`'s LAN, the `a`–`b`
//! WAN link and `b`'s LAN. A **same-site copy** (`a == b`) crosses `a`'s LAN
//! exactly once and has no latency.
//!
//! WAN links are **undirected**: one capacity is shared by the transfers of
//! both directions (`a -> b` and `b -> a`). This is the conservative choice
//! for the shared, partly half-duplex research WANs the model describes, and
//! it keeps the number of links at `sites + sites*(sites-1)/2`.
//!
//! # Timing
//!
//! A transfer started at `t` first waits its path latency (no bandwidth is
//! used meanwhile) and then streams its bits. At every instant the streaming
//! transfers share the links **max-min fairly**, computed by progressive
//! filling: repeatedly take the link with the smallest fair share
//! `remaining capacity / unfrozen flows crossing it`, freeze those flows at
//! that rate, subtract their rates from every link they cross, and repeat.
//! Rates are recomputed whenever the set of streaming transfers changes (a
//! transfer ends its latency phase, completes, or is cancelled).
//!
//! All event times are integer milliseconds. Rates and remaining bits are
//! `f64`; a completion time is rounded **up** to the next millisecond, and a
//! transfer keeps its bandwidth share until that (rounded) completion time,
//! so every rate change happens at an integer millisecond. This makes the
//! model a fluid model quantised to 1 ms, fully deterministic (flows are kept
//! ordered by id; ties break by id / lowest link index), and
//! free of accumulated rounding drift: a transfer is complete exactly at its
//! computed completion time, remaining amounts below `1e-6` bits count as
//! zero, and the rounding up tolerates a relative error of `1e-9`.

use std::cell::Cell;
use std::collections::{BTreeMap, VecDeque};
use std::fmt;

/// Integer milliseconds of simulated time.
type Millis = u64;

/// Remaining amounts below this many bits count as delivered.
const EPS_BITS: f64 = 1e-6;

/// Description of the network topology and link parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkSpec {
    /// Number of sites; sites are numbered `0..sites`.
    pub sites: usize,
    /// LAN capacity of every site in bits per second (`lan_bps.len() == sites`).
    pub lan_bps: Vec<f64>,
    /// Capacity of every WAN link without an override, in bits per second.
    pub default_wan_bps: f64,
    /// Latency of every WAN link without an override.
    pub default_latency_ms: Millis,
    /// Per-pair `(bits per second, latency)` overrides. The key `(a, b)` and
    /// `(b, a)` denote the same undirected link; giving both is an error.
    pub wan_overrides: BTreeMap<(usize, usize), (f64, Millis)>,
}

impl NetworkSpec {
    /// A uniform network: every LAN `lan_bps`, every WAN `wan_bps` with
    /// `latency_ms`, no overrides.
    pub fn uniform(sites: usize, lan_bps: f64, wan_bps: f64, latency_ms: Millis) -> Self {
        NetworkSpec {
            sites,
            lan_bps: vec![lan_bps; sites],
            default_wan_bps: wan_bps,
            default_latency_ms: latency_ms,
            wan_overrides: BTreeMap::new(),
        }
    }
}

/// Errors detected when building a [`Network`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NetworkError {
    /// A link bandwidth is zero, negative, NaN or infinite.
    #[error("invalid bandwidth {bps} b/s on {link}: must be finite and > 0")]
    InvalidBandwidth { link: String, bps: f64 },
    /// `lan_bps` does not have one entry per site.
    #[error("lan_bps has {got} entries but the network has {sites} sites")]
    LanCount { sites: usize, got: usize },
    /// A WAN override names a site out of range or the same site twice.
    #[error("WAN override ({a}, {b}) is not a pair of distinct sites in 0..{sites}")]
    BadOverride { a: usize, b: usize, sites: usize },
    /// Both `(a, b)` and `(b, a)` were overridden.
    #[error("WAN link {a}-{b} is overridden twice (as ({a}, {b}) and ({b}, {a}))")]
    DuplicateOverride { a: usize, b: usize },
}

/// Identifier of a transfer, unique within one [`Network`] (allocated
/// sequentially from 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TransferId(pub u64);

impl fmt::Display for TransferId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "transfer#{}", self.0)
    }
}

/// Link indices crossed by a transfer: 1 for same-site copies, 3 otherwise.
#[derive(Debug, Clone, Copy)]
struct Path {
    ids: [usize; 3],
    len: usize,
}

impl Path {
    fn links(&self) -> &[usize] {
        &self.ids[..self.len]
    }
}

#[derive(Debug, Clone, Copy)]
struct Flow {
    id: u64,
    bytes: u64,
    links: Path,
    /// Time at which the latency phase ends and bits start to flow.
    stream_at: Millis,
    remaining_bits: f64,
    /// Current rate in bits per second (0 while in the latency phase).
    rate: f64,
    /// The most this transfer can reach on its own (one TCP stream), bits per second;
    /// infinite when only the links limit it.
    cap: f64,
}

/// Mutable part of the network state (cloned to look ahead).
#[derive(Debug, Clone)]
struct Core {
    now: Millis,
    /// Transfers in transit, sorted by id (ids are allocated increasingly).
    flows: Vec<Flow>,
}

/// The shared network: active transfers and their max-min fair rates.
#[derive(Debug, Clone)]
pub struct Network {
    sites: usize,
    /// Capacity per link: `0..sites` are LANs, then WAN links by pair index.
    caps: Vec<f64>,
    /// Latency per WAN pair index.
    latency: Vec<Millis>,
    core: Core,
    /// Completed but not yet reported transfers `(time, id, bytes)`, in
    /// (time, id) order.
    done: VecDeque<(Millis, TransferId, u64)>,
    next_id: u64,
    delivered: u64,
    /// Cache for [`Network::next_completion`] (`None` = not computed).
    next_cache: Cell<Option<Option<Millis>>>,
}

/// Index of the unordered pair `{a, b}` (a != b) among `n*(n-1)/2` pairs.
fn pair_index(n: usize, a: usize, b: usize) -> usize {
    let (a, b) = if a < b { (a, b) } else { (b, a) };
    // Pairs (0,1)..(0,n-1), (1,2).., ...: rows before `a` hold
    // sum_{i<a} (n-1-i) = a*(2n-a-1)/2 pairs.
    a * (2 * n - a - 1) / 2 + (b - a - 1)
}

fn check_bps(link: impl FnOnce() -> String, bps: f64) -> Result<(), NetworkError> {
    if bps.is_finite() && bps > 0.0 {
        Ok(())
    } else {
        Err(NetworkError::InvalidBandwidth { link: link(), bps })
    }
}

/// `ceil(x)` tolerating a relative error of `1e-9` (so `200000.0000000001`
/// rounds to `200000`), saturating at `u64::MAX`; `x` must be `>= 0`.
fn ceil_ms(x: f64) -> Millis {
    let tol = 1e-9 * x.max(1.0);
    let c = (x - tol).ceil();
    if c <= 0.0 {
        0
    } else {
        // `as` saturates for values beyond u64::MAX (and maps NaN to 0,
        // which cannot occur for finite non-negative inputs).
        c as u64
    }
}

impl Core {
    /// Completion time of a streaming flow at `self.now` under its current rate.
    fn finish_time(&self, f: &Flow) -> Option<Millis> {
        if f.stream_at > self.now {
            return None;
        }
        if f.remaining_bits <= EPS_BITS {
            return Some(self.now);
        }
        if f.rate <= 0.0 {
            return None;
        }
        Some(self.now.saturating_add(ceil_ms(f.remaining_bits * 1000.0 / f.rate)))
    }

    /// Recompute max-min fair rates of the flows streaming at `self.now`.
    fn recompute_rates(&mut self, caps: &[f64]) {
        let now = self.now;
        let mut remaining: Vec<f64> = caps.to_vec();
        // Streaming flows (in id order) and, per link, the indices of those
        // crossing it; a negative rate marks a flow that is not frozen yet.
        let mut streaming: Vec<&mut Flow> = Vec::with_capacity(self.flows.len());
        let mut on_link: Vec<Vec<usize>> = vec![Vec::new(); caps.len()];
        let mut count: Vec<usize> = vec![0; caps.len()];
        for f in self.flows.iter_mut() {
            if f.stream_at <= now {
                f.rate = -1.0;
                for &l in f.links.links() {
                    on_link[l].push(streaming.len());
                    count[l] += 1;
                }
                streaming.push(f);
            } else {
                f.rate = 0.0;
            }
        }
        loop {
            // Bottleneck: smallest fair share, ties to the lowest link index.
            let mut best: Option<(usize, f64)> = None;
            for (l, &c) in count.iter().enumerate() {
                if c == 0 {
                    continue;
                }
                let share = remaining[l].max(0.0) / c as f64;
                match best {
                    Some((_, s)) if s <= share => {}
                    _ => best = Some((l, share)),
                }
            }
            // A flow's own cap is a private link: frozen at it when it is the smallest share
            // (ties to the lowest id).
            let capped = streaming
                .iter()
                .enumerate()
                .filter(|(_, f)| f.rate < 0.0 && f.cap.is_finite())
                .min_by(|a, b| a.1.cap.total_cmp(&b.1.cap))
                .map(|(k, f)| (k, f.cap));
            if let Some((k, cap)) = capped {
                if best.is_none_or(|(_, share)| cap <= share) {
                    let f = &mut streaming[k];
                    f.rate = cap;
                    for &l in f.links.links() {
                        remaining[l] -= cap;
                        count[l] -= 1;
                    }
                    continue;
                }
            }
            let Some((bottleneck, share)) = best else {
                break;
            };
            for &k in &on_link[bottleneck] {
                let f = &mut streaming[k];
                if f.rate >= 0.0 {
                    continue;
                }
                f.rate = share;
                for &l in f.links.links() {
                    remaining[l] -= share;
                    count[l] -= 1;
                }
            }
        }
    }

    /// Run the fluid model forward to `target`, pushing completions (in
    /// (time, id) order) onto `done`. With `stop_at_first`, stops right after
    /// the first instant at which something completes.
    fn run(&mut self, caps: &[f64], target: Millis, done: &mut VecDeque<(Millis, TransferId, u64)>, stop_at_first: bool) {
        loop {
            let next_stream = self.flows.iter().filter(|f| f.stream_at > self.now).map(|f| f.stream_at).min();
            let finishing: Vec<Option<Millis>> = self.flows.iter().map(|f| self.finish_time(f)).collect();
            let next_finish = finishing.iter().flatten().min().copied();
            let t = match (next_stream, next_finish) {
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) => a,
                (None, Some(b)) => b,
                (None, None) => {
                    self.progress(target.max(self.now));
                    return;
                }
            };
            if t > target {
                self.progress(target.max(self.now));
                return;
            }
            self.progress(t);
            let before = done.len();
            let mut k = 0;
            self.flows.retain(|f| {
                let finished = finishing[k] == Some(t);
                k += 1;
                if finished {
                    done.push_back((t, TransferId(f.id), f.bytes));
                }
                !finished
            });
            let any_done = done.len() > before;
            self.recompute_rates(caps);
            if any_done && stop_at_first {
                return;
            }
        }
    }

    /// Deliver bits at the current rates from `self.now` to `t` (no rate
    /// change may happen strictly inside that interval).
    fn progress(&mut self, t: Millis) {
        if t <= self.now {
            return;
        }
        let secs = (t - self.now) as f64 / 1000.0;
        for f in self.flows.iter_mut() {
            if f.stream_at <= self.now && f.rate > 0.0 {
                f.remaining_bits = (f.remaining_bits - f.rate * secs).max(0.0);
            }
        }
        self.now = t;
    }
}

impl Network {
    /// Build a network, validating every link.
    pub fn new(spec: NetworkSpec) -> Result<Self, NetworkError> {
        let n = spec.sites;
        if spec.lan_bps.len() != n {
            return Err(NetworkError::LanCount {
                sites: n,
                got: spec.lan_bps.len(),
            });
        }
        let pairs = n * n.saturating_sub(1) / 2;
        let mut caps = Vec::with_capacity(n + pairs);
        for (s, &bps) in spec.lan_bps.iter().enumerate() {
            check_bps(|| format!("LAN of site {s}"), bps)?;
            caps.push(bps);
        }
        if n >= 2 {
            check_bps(|| "default WAN".to_string(), spec.default_wan_bps)?;
        }
        caps.resize(n + pairs, spec.default_wan_bps);
        let mut latency = vec![spec.default_latency_ms; pairs];
        let mut seen = vec![false; pairs];
        for (&(a, b), &(bps, lat)) in &spec.wan_overrides {
            if a >= n || b >= n || a == b {
                return Err(NetworkError::BadOverride { a, b, sites: n });
            }
            let p = pair_index(n, a, b);
            if seen[p] {
                return Err(NetworkError::DuplicateOverride { a: a.min(b), b: a.max(b) });
            }
            seen[p] = true;
            check_bps(|| format!("WAN {}-{}", a.min(b), a.max(b)), bps)?;
            caps[n + p] = bps;
            latency[p] = lat;
        }
        Ok(Network {
            sites: n,
            caps,
            latency,
            core: Core { now: 0, flows: Vec::new() },
            done: VecDeque::new(),
            next_id: 0,
            delivered: 0,
            next_cache: Cell::new(None),
        })
    }

    /// Number of sites.
    pub fn sites(&self) -> usize {
        self.sites
    }

    /// Time up to which the network state has been advanced.
    pub fn now(&self) -> Millis {
        self.core.now
    }

    fn path(&self, from: usize, to: usize) -> (Path, Millis) {
        assert!(
            from < self.sites && to < self.sites,
            "site out of range: {from} -> {to} with {} sites",
            self.sites
        );
        if from == to {
            (Path { ids: [from; 3], len: 1 }, 0)
        } else {
            let p = pair_index(self.sites, from, to);
            (
                Path {
                    ids: [from, self.sites + p, to],
                    len: 3,
                },
                self.latency[p],
            )
        }
    }

    /// Bring the state to `now`; completions found on the way are queued for
    /// the next [`Network::advance_to`].
    fn sync(&mut self, now: Millis) {
        if now >= self.core.now {
            self.core.run(&self.caps, now, &mut self.done, false);
        }
    }

    /// Start a transfer of `bytes` bytes from site `from` to site `to` at
    /// time `now` (times before [`Network::now`] are treated as `now()`).
    /// Zero-byte transfers complete when their latency has elapsed.
    ///
    /// # Panics
    /// If `from` or `to` is not a site.
    pub fn start(&mut self, now: Millis, from: usize, to: usize, bytes: u64) -> TransferId {
        self.start_capped(now, from, to, bytes, None)
    }

    /// Like [`Network::start`], for a transfer that cannot exceed `cap_bps` on its own (one
    /// TCP stream limited by its window and the path's loss): it shares the links max-min
    /// fairly as every transfer does, but never streams faster than its cap.
    pub fn start_capped(&mut self, now: Millis, from: usize, to: usize, bytes: u64, cap_bps: Option<f64>) -> TransferId {
        let (links, latency) = self.path(from, to);
        self.sync(now);
        self.next_cache.set(None);
        let id = self.next_id;
        self.next_id += 1;
        let stream_at = self.core.now.saturating_add(latency);
        self.core.flows.push(Flow {
            id,
            bytes,
            links,
            stream_at,
            remaining_bits: bytes as f64 * 8.0,
            rate: 0.0,
            cap: cap_bps.filter(|c| c.is_finite() && *c > 0.0).unwrap_or(f64::INFINITY),
        });
        if stream_at <= self.core.now {
            self.core.recompute_rates(&self.caps);
        }
        TransferId(id)
    }

    /// Cancel a transfer at time `now`, freeing its bandwidth. Returns
    /// whether it was still in progress (or completed but not yet reported,
    /// in which case it is no longer reported). Bytes of a cancelled
    /// transfer never count as delivered.
    pub fn cancel(&mut self, now: Millis, id: TransferId) -> bool {
        self.sync(now);
        self.next_cache.set(None);
        if let Ok(k) = self.core.flows.binary_search_by_key(&id.0, |f| f.id) {
            let f = self.core.flows.remove(k);
            if f.stream_at <= self.core.now {
                self.core.recompute_rates(&self.caps);
            }
            return true;
        }
        let before = self.done.len();
        self.done.retain(|&(_, d, _)| d != id);
        before != self.done.len()
    }

    /// Earliest time at which a transfer completes if no transfer is started
    /// or cancelled in the meantime (accounts for transfers that are still
    /// in their latency phase). `None` when nothing is in transit.
    pub fn next_completion(&self) -> Option<Millis> {
        if let Some(cached) = self.next_cache.get() {
            return cached;
        }
        let result = if let Some(&(t, _, _)) = self.done.front() {
            Some(t)
        } else if self.core.flows.is_empty() {
            None
        } else if let Some(t) = self.quick_next_completion() {
            Some(t)
        } else {
            let mut core = self.core.clone();
            let mut done = VecDeque::new();
            core.run(&self.caps, Millis::MAX, &mut done, true);
            done.front().map(|&(t, _, _)| t)
        };
        self.next_cache.set(Some(result));
        result
    }

    /// The next completion under the current rates, if no transfer starts
    /// streaming before it (otherwise the rates change first: `None`).
    fn quick_next_completion(&self) -> Option<Millis> {
        let core = &self.core;
        let next_finish = core.flows.iter().filter_map(|f| core.finish_time(f)).min()?;
        let next_stream = core.flows.iter().filter(|f| f.stream_at > core.now).map(|f| f.stream_at).min();
        (next_finish <= next_stream.unwrap_or(Millis::MAX)).then_some(next_finish)
    }

    /// Advance to `now`: complete every transfer whose completion time is
    /// `<= now` and progress all others. Returns the completed transfers in
    /// (completion time, id) order.
    pub fn advance_to(&mut self, now: Millis) -> Vec<TransferId> {
        self.advance_to_timed(now).into_iter().map(|(_, id)| id).collect()
    }

    /// Like [`Network::advance_to`] but also returns each completion time.
    pub fn advance_to_timed(&mut self, now: Millis) -> Vec<(Millis, TransferId)> {
        self.sync(now);
        self.next_cache.set(None);
        let mut out = Vec::new();
        while let Some(&(t, id, bytes)) = self.done.front() {
            if t > now {
                break;
            }
            self.done.pop_front();
            self.delivered = self.delivered.saturating_add(bytes);
            out.push((t, id));
        }
        out
    }

    /// Forecast of how long a transfer of `bytes` from `from` to `to` would
    /// take if started now: path latency plus `bytes*8` at the share a new
    /// flow would get, `min over its links of capacity / (flows on link + 1)`
    /// (flows still in their latency phase are counted). Same-site copies
    /// are estimated like real ones: LAN only, no latency. Rounded up to ms.
    ///
    /// # Panics
    /// If `from` or `to` is not a site.
    pub fn estimate_ms(&self, from: usize, to: usize, bytes: u64) -> Millis {
        let (links, latency) = self.path(from, to);
        let share = links
            .links()
            .iter()
            .map(|&l| {
                let n = self.core.flows.iter().filter(|f| f.links.links().contains(&l)).count();
                self.caps[l] / (n + 1) as f64
            })
            .fold(f64::INFINITY, f64::min);
        latency.saturating_add(ceil_ms(bytes as f64 * 8.0 * 1000.0 / share))
    }

    /// Number of transfers in transit (latency phase or streaming).
    pub fn active(&self) -> usize {
        self.core.flows.len()
    }

    /// Total bytes of all transfers reported complete so far.
    pub fn bytes_delivered(&self) -> u64 {
        self.delivered
    }

    /// Current rate (bits per second) of a transfer in transit.
    pub fn rate_bps(&self, id: TransferId) -> Option<f64> {
        let k = self.core.flows.binary_search_by_key(&id.0, |f| f.id).ok()?;
        Some(self.core.flows[k].rate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MB: u64 = 1_000_000;
    const GB: u64 = 1_000_000_000;
    const MBPS: f64 = 1e6;

    fn net(sites: usize, lan: f64, wan: f64, lat: Millis) -> Network {
        Network::new(NetworkSpec::uniform(sites, lan, wan, lat)).unwrap()
    }

    /// Drive the network until idle, returning (time, id) of each completion.
    fn drain(n: &mut Network) -> Vec<(Millis, TransferId)> {
        let mut out = Vec::new();
        while let Some(t) = n.next_completion() {
            let got = n.advance_to_timed(t);
            assert!(!got.is_empty(), "next_completion {t} produced nothing");
            assert!(got.iter().all(|&(ct, _)| ct == t));
            out.extend(got);
        }
        out
    }

    /// Sum of allocated rates per link.
    fn link_loads(n: &Network) -> Vec<f64> {
        let mut load = vec![0.0; n.caps.len()];
        for f in n.core.flows.iter() {
            for &l in f.links.links() {
                load[l] += f.rate;
            }
        }
        load
    }

    #[test]
    fn pair_index_is_a_bijection() {
        for n in 2..7 {
            let mut seen = vec![false; n * (n - 1) / 2];
            for a in 0..n {
                for b in 0..n {
                    if a != b {
                        let p = pair_index(n, a, b);
                        assert_eq!(p, pair_index(n, b, a));
                        seen[p] = true;
                    }
                }
            }
            assert!(seen.iter().all(|&x| x));
        }
    }

    #[test]
    fn rejects_bad_bandwidths() {
        let mut spec = NetworkSpec::uniform(3, 800.0 * MBPS, 40.0 * MBPS, 5);
        spec.lan_bps[1] = 0.0;
        let e = Network::new(spec.clone()).unwrap_err();
        assert!(e.to_string().contains("LAN of site 1"), "{e}");

        spec.lan_bps[1] = 800.0 * MBPS;
        spec.wan_overrides.insert((2, 0), (f64::NAN, 3));
        let e = Network::new(spec.clone()).unwrap_err();
        assert!(e.to_string().contains("WAN 0-2"), "{e}");

        spec.wan_overrides.insert((2, 0), (-1.0, 3));
        assert!(Network::new(spec.clone()).is_err());
        spec.wan_overrides.insert((2, 0), (f64::INFINITY, 3));
        assert!(Network::new(spec.clone()).is_err());

        spec.wan_overrides.clear();
        spec.default_wan_bps = 0.0;
        let e = Network::new(spec.clone()).unwrap_err();
        assert!(e.to_string().contains("default WAN"), "{e}");

        let mut spec = NetworkSpec::uniform(3, 800.0 * MBPS, 40.0 * MBPS, 5);
        spec.wan_overrides.insert((1, 1), (1.0, 3));
        assert!(matches!(Network::new(spec.clone()), Err(NetworkError::BadOverride { .. })));
        spec.wan_overrides.clear();
        spec.wan_overrides.insert((0, 1), (1.0, 3));
        spec.wan_overrides.insert((1, 0), (2.0, 3));
        assert!(matches!(
            Network::new(spec.clone()),
            Err(NetworkError::DuplicateOverride { a: 0, b: 1 })
        ));
        spec.lan_bps.pop();
        assert!(matches!(Network::new(spec), Err(NetworkError::LanCount { sites: 3, got: 2 })));
    }

    #[test]
    fn single_transfer_latency_plus_bottleneck() {
        // 1 GB = 8e9 bits over min(800, 40) Mb/s = 200 s, plus 7 ms latency.
        let mut n = net(2, 800.0 * MBPS, 40.0 * MBPS, 7);
        assert_eq!(n.estimate_ms(0, 1, GB), 200_007);
        let id = n.start(0, 0, 1, GB);
        assert_eq!(n.active(), 1);
        assert_eq!(n.next_completion(), Some(200_007));
        assert!(n.advance_to(200_006).is_empty());
        assert_eq!(n.bytes_delivered(), 0);
        assert_eq!(n.advance_to(200_007), vec![id]);
        assert_eq!(n.active(), 0);
        assert_eq!(n.bytes_delivered(), GB);
        assert_eq!(n.next_completion(), None);
    }

    #[test]
    fn lan_can_be_the_bottleneck_and_overrides_apply() {
        let mut spec = NetworkSpec::uniform(3, 800.0 * MBPS, 40.0 * MBPS, 7);
        spec.lan_bps[2] = 10.0 * MBPS;
        spec.wan_overrides.insert((1, 0), (100.0 * MBPS, 20));
        let mut n = Network::new(spec).unwrap();
        // 0 -> 1 uses the overridden 100 Mb/s WAN with 20 ms latency.
        assert_eq!(n.estimate_ms(1, 0, 125 * MB), 10_020);
        // 0 -> 2 is limited by site 2's 10 Mb/s LAN.
        assert_eq!(n.estimate_ms(0, 2, 125 * MB), 100_007);
        let a = n.start(0, 1, 0, 125 * MB);
        let b = n.start(0, 0, 2, 125 * MB);
        assert_eq!(drain(&mut n), vec![(10_020, a), (100_007, b)]);
    }

    #[test]
    fn same_site_copy_crosses_the_lan_once_without_latency() {
        let mut n = net(2, 800.0 * MBPS, 40.0 * MBPS, 7);
        // 100 MB = 8e8 bits at 800 Mb/s = 1 s.
        assert_eq!(n.estimate_ms(1, 1, 100 * MB), 1_000);
        let id = n.start(5, 1, 1, 100 * MB);
        assert_eq!(drain(&mut n), vec![(1_005, id)]);
    }

    #[test]
    fn zero_byte_transfer_takes_the_latency() {
        let mut n = net(2, 800.0 * MBPS, 40.0 * MBPS, 7);
        let a = n.start(10, 0, 1, 0);
        let b = n.start(10, 0, 0, 0);
        assert_eq!(n.next_completion(), Some(10));
        assert_eq!(drain(&mut n), vec![(10, b), (17, a)]);
        assert_eq!(n.estimate_ms(0, 1, 0), 7);
        assert_eq!(n.estimate_ms(0, 0, 0), 0);
    }

    #[test]
    fn completion_rounds_up_to_the_next_ms() {
        // 1 byte = 8 bits at 40 Mb/s = 0.0002 ms -> 1 ms.
        let mut n = net(2, 800.0 * MBPS, 40.0 * MBPS, 0);
        let id = n.start(0, 0, 1, 1);
        assert_eq!(drain(&mut n), vec![(1, id)]);
        // 5001 bytes = 40008 bits at 40 Mb/s = 1.0002 ms -> 2 ms.
        let id = n.start(100, 0, 1, 5_001);
        assert_eq!(drain(&mut n), vec![(102, id)]);
    }

    #[test]
    fn two_transfers_on_one_wan_each_get_half() {
        let mut n = net(2, 800.0 * MBPS, 40.0 * MBPS, 7);
        let a = n.start(0, 0, 1, GB);
        // Opposite direction shares the same (undirected) WAN link.
        let b = n.start(0, 1, 0, GB);
        assert_eq!(n.estimate_ms(0, 1, GB), 7 + 600_000);
        n.advance_to(7);
        assert_eq!(n.rate_bps(a), Some(20.0 * MBPS));
        assert_eq!(n.rate_bps(b), Some(20.0 * MBPS));
        assert_eq!(drain(&mut n), vec![(400_007, a), (400_007, b)]);
        assert_eq!(n.bytes_delivered(), 2 * GB);
    }

    #[test]
    fn max_min_differs_from_equal_share() {
        // Site 0's LAN (100 Mb/s) carries three flows; f1 goes over a
        // 20 Mb/s WAN to site 1, f2 and f3 over a 100 Mb/s WAN to site 2.
        // Equal share of the LAN would be 33.3 Mb/s each. Max-min: WAN 0-1
        // is the bottleneck (20/1) so f1 = 20; the LAN then has 80 left for
        // two flows -> f2 = f3 = 40 (WAN 0-2 offers 50 each).
        let mut spec = NetworkSpec::uniform(3, 1000.0 * MBPS, 100.0 * MBPS, 0);
        spec.lan_bps[0] = 100.0 * MBPS;
        spec.wan_overrides.insert((0, 1), (20.0 * MBPS, 0));
        let mut n = Network::new(spec).unwrap();
        let f1 = n.start(0, 0, 1, 250 * MB); // 2e9 bits
        let f2 = n.start(0, 0, 2, 250 * MB); // 2e9 bits
        let f3 = n.start(0, 0, 2, 500 * MB); // 4e9 bits
        assert_eq!(n.rate_bps(f1), Some(20.0 * MBPS));
        assert_eq!(n.rate_bps(f2), Some(40.0 * MBPS));
        assert_eq!(n.rate_bps(f3), Some(40.0 * MBPS));
        // t=50 s: f2 done (2e9/40e6). f1 has 1e9 bits left, f3 2e9.
        // Then f1 = 20 (WAN 0-1), f3 = min(100-20, 100) = 80:
        // f3 done 25 s later (75 s), f1 50 s later (100 s).
        let out = drain(&mut n);
        assert_eq!(out, vec![(50_000, f2), (75_000, f3), (100_000, f1)]);
    }

    #[test]
    fn a_capped_flow_leaves_the_rest_to_the_others() {
        // Two flows over one 40 Mb/s WAN: one capped at 10 Mb/s (its own stream), the other
        // takes the remaining 30 instead of an equal 20.
        let mut n = net(2, 800.0 * MBPS, 40.0 * MBPS, 0);
        let slow = n.start_capped(0, 0, 1, 125 * MB, Some(10.0 * MBPS)); // 1e9 bits
        let fast = n.start(0, 0, 1, 375 * MB); // 3e9 bits
        assert_eq!(n.rate_bps(slow), Some(10.0 * MBPS));
        assert_eq!(n.rate_bps(fast), Some(30.0 * MBPS));
        // Both take 100 s. Alone, a capped flow streams at its cap even on an idle link.
        assert_eq!(drain(&mut n), vec![(100_000, slow), (100_000, fast)]);
        let alone = n.start_capped(200_000, 1, 0, 125 * MB, Some(8.0 * MBPS));
        assert_eq!(drain(&mut n), vec![(325_000, alone)]);
        // A cap above the fair share changes nothing.
        let a = n.start_capped(400_000, 0, 1, 125 * MB, Some(1000.0 * MBPS));
        let b = n.start(400_000, 0, 1, 125 * MB);
        assert_eq!(n.rate_bps(a), Some(20.0 * MBPS));
        assert_eq!(drain(&mut n), vec![(450_000, a), (450_000, b)]);
    }

    #[test]
    fn late_flow_slows_an_earlier_one() {
        // A: 1 GB (8e9 bits) at t=0; streams from 10 ms at 40 Mb/s.
        // B: 250 MB (2e9 bits) at t=50 s; streams from 50.010 s.
        // At 50.010 s A has 6e9 bits left; both get 20 Mb/s; B needs 100 s
        // -> 150.010 s; A then has 4e9 left at 40 Mb/s -> 250.010 s.
        let mut n = net(2, 800.0 * MBPS, 40.0 * MBPS, 10);
        let a = n.start(0, 0, 1, GB);
        assert_eq!(n.next_completion(), Some(200_010));
        assert!(n.advance_to(50_000).is_empty());
        let b = n.start(50_000, 0, 1, 250 * MB);
        // A's completion accounts for B, which is still in its latency phase.
        assert_eq!(n.next_completion(), Some(150_010));
        assert_eq!(n.rate_bps(a), Some(40.0 * MBPS));
        n.advance_to(50_010);
        assert_eq!(n.rate_bps(a), Some(20.0 * MBPS));
        assert_eq!(drain(&mut n), vec![(150_010, b), (250_010, a)]);
    }

    #[test]
    fn cancel_frees_bandwidth() {
        // Two 1 GB flows share 40 Mb/s. At 100 s, B is cancelled: A has sent
        // 2e9 bits, 6e9 remain at 40 Mb/s = 150 s -> done at 250 s.
        let mut n = net(2, 800.0 * MBPS, 40.0 * MBPS, 0);
        let a = n.start(0, 0, 1, GB);
        let b = n.start(0, 0, 1, GB);
        assert_eq!(n.next_completion(), Some(400_000));
        assert!(n.cancel(100_000, b));
        assert!(!n.cancel(100_000, b));
        assert_eq!(n.active(), 1);
        assert_eq!(n.rate_bps(a), Some(40.0 * MBPS));
        assert_eq!(drain(&mut n), vec![(250_000, a)]);
        assert_eq!(n.bytes_delivered(), GB);
    }

    #[test]
    fn cancel_of_completed_but_unreported_transfer() {
        let mut n = net(2, 800.0 * MBPS, 40.0 * MBPS, 0);
        let a = n.start(0, 0, 1, 5 * MB); // 1 s
                                          // Starting a later transfer moves time past a's completion.
        let b = n.start(2_000, 0, 1, 5 * MB);
        assert_eq!(n.next_completion(), Some(1_000));
        assert!(n.cancel(2_000, a));
        assert_eq!(drain(&mut n), vec![(3_000, b)]);
        assert_eq!(n.bytes_delivered(), 5 * MB);
    }

    #[test]
    fn estimate_counts_existing_flows() {
        let mut n = net(3, 800.0 * MBPS, 40.0 * MBPS, 7);
        n.start(0, 0, 1, GB);
        // New 0->1 flow would get 40/2 on the WAN.
        assert_eq!(n.estimate_ms(0, 1, GB), 7 + 400_000);
        // 0->2 only shares site 0's LAN: 800/2 = 400 > 40 -> 200 s.
        assert_eq!(n.estimate_ms(0, 2, GB), 7 + 200_000);
    }

    #[test]
    fn one_big_jump_matches_step_by_step() {
        let run = |stepwise: bool| {
            let mut n = net(3, 100.0 * MBPS, 30.0 * MBPS, 3);
            let starts = [
                (0, 0, 1, 37 * MB),
                (0, 0, 2, 11 * MB),
                (1_234, 1, 2, 53 * MB),
                (2_000, 2, 2, 70 * MB),
                (2_500, 1, 0, 5 * MB),
            ];
            let mut out = Vec::new();
            for &(t, a, b, bytes) in &starts {
                if stepwise {
                    while let Some(c) = n.next_completion().filter(|&c| c <= t) {
                        out.extend(n.advance_to_timed(c));
                    }
                }
                n.start(t, a, b, bytes);
            }
            out.extend(drain(&mut n));
            out
        };
        assert_eq!(run(true), run(false));
    }

    #[test]
    fn thousands_of_transfers_with_hundreds_concurrent() {
        // 10 sites, 3000 transfers, ~300 in flight at once: a scale check
        // (must stay fast even in debug builds) plus conservation of bytes.
        let mut n = net(10, 1000.0 * MBPS, 100.0 * MBPS, 5);
        let mut total = 0;
        let mut done = 0;
        let mut peak = 0;
        for k in 0u64..3000 {
            let t = k * 50;
            while let Some(c) = n.next_completion().filter(|&c| c <= t) {
                done += n.advance_to(c).len();
            }
            let (a, b) = ((k * 7 % 10) as usize, (k * 3 % 10) as usize);
            let bytes = 10 * MB + (k * 7919 % 50) * MB;
            total += bytes;
            n.start(t, a, b, bytes);
            peak = peak.max(n.active());
        }
        done += drain(&mut n).len();
        assert_eq!(done, 3000);
        assert_eq!(n.bytes_delivered(), total);
        assert!(peak >= 200, "peak concurrency only {peak}");
    }

    proptest! {
        #[test]
        fn random_transfers_respect_capacities_and_complete(
            sites in 1usize..5,
            lan in proptest::collection::vec(1.0f64..1000.0, 4),
            wan in 0.5f64..100.0,
            lat in 0u64..50,
            overrides in proptest::collection::vec((0usize..5, 0usize..5, 0.5f64..100.0, 0u64..50), 0..4),
            transfers in proptest::collection::vec((0u64..20_000, 0usize..5, 0usize..5, 0u64..20_000_000), 1..40),
        ) {
            let mut spec = NetworkSpec::uniform(sites, 0.0, wan * MBPS, lat);
            for (s, bps) in spec.lan_bps.iter_mut().enumerate() {
                *bps = lan[s] * MBPS;
            }
            for &(a, b, bps, l) in &overrides {
                let (a, b) = (a % sites, b % sites);
                if a != b {
                    spec.wan_overrides.insert((a.min(b), a.max(b)), (bps * MBPS, l));
                }
            }
            let mut n = Network::new(spec).unwrap();
            let mut transfers = transfers;
            transfers.sort_by_key(|t| t.0);
            let check = |n: &Network| -> Result<(), TestCaseError> {
                for (l, load) in link_loads(n).into_iter().enumerate() {
                    prop_assert!(load <= n.caps[l] * (1.0 + 1e-6), "link {l}: {load} > {}", n.caps[l]);
                }
                for f in n.core.flows.iter() {
                    if f.stream_at <= n.core.now {
                        prop_assert!(f.rate > 0.0);
                    }
                }
                Ok(())
            };
            let mut total = 0u64;
            let mut started = Vec::new();
            let mut completed = Vec::new();
            let mut last = 0;
            for &(t, a, b, bytes) in &transfers {
                while let Some(c) = n.next_completion().filter(|&c| c <= t) {
                    let got = n.advance_to_timed(c);
                    prop_assert!(!got.is_empty());
                    prop_assert!(c >= last);
                    last = c;
                    completed.extend(got);
                    check(&n)?;
                }
                let (a, b) = (a % sites, b % sites);
                let id = n.start(t, a, b, bytes);
                started.push((id, t, a, b, bytes));
                total += bytes;
                check(&n)?;
            }
            while let Some(c) = n.next_completion() {
                let got = n.advance_to_timed(c);
                prop_assert!(!got.is_empty());
                prop_assert!(c >= last);
                last = c;
                completed.extend(got);
                check(&n)?;
            }
            prop_assert_eq!(n.active(), 0);
            prop_assert_eq!(n.bytes_delivered(), total);
            prop_assert_eq!(completed.len(), started.len());
            // No transfer beats latency + bytes at its path's raw bottleneck.
            for &(id, t, a, b, bytes) in &started {
                let (links, latency) = n.path(a, b);
                let cap = links.links().iter().map(|&l| n.caps[l]).fold(f64::INFINITY, f64::min);
                let min_ms = (bytes as f64 * 8.0 * 1000.0 / cap).floor() as u64;
                let done = completed.iter().find(|c| c.1 == id).unwrap().0;
                prop_assert!(done >= t + latency + min_ms, "{id}: {done} < {t}+{latency}+{min_ms}");
            }
        }
    }
}
