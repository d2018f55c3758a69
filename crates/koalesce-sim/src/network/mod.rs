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

mod fair;
#[cfg(test)]
mod tests;

use fair::{ceil_ms, Core, Flow, Path};

/// Integer milliseconds of simulated time.
type Millis = u64;

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
