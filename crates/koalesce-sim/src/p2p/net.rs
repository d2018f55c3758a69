//! The network of the P2P study, the model of [`crate::network`] computed per path instead of
//! per transfer.
//!
//! Same model as [`crate::network::Network`]: one LAN per site, one undirected WAN link per pair
//! of sites, a transfer crossing the sender's LAN, the WAN link and the receiver's LAN (a
//! same-site copy its LAN once), max-min fair sharing recomputed whenever a transfer starts or
//! ends, completion times rounded up to the next millisecond. Here latency is always 0 (the
//! seed gives none).
//!
//! Why another implementation: the P2P runs keep up to thousands of transfers in flight (the
//! communication-oblivious runs of §V-D), and the general network recomputes its rates and
//! next completion over every transfer at every change. Transfers with the same path get the
//! same max-min rate (the allocation is unique and symmetric), and a→b crosses the same links as
//! b→a, so the rates are computed per unordered pair of sites (at most 78 for 12 sites), and
//! each pair keeps a per-transfer "service" clock: a transfer started when the pair's clock read
//! v finishes when it reads v + its bits, so the next completion of a pair is the head of a
//! heap. Each change costs O(pairs × links + log transfers) instead of O(transfers × links).
//! The test `matches_the_general_network` runs both on random transfers.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

type Millis = u64;

/// Remaining amounts below this many bits count as delivered (as in [`crate::network`]).
const EPS_BITS: f64 = 1e-6;

/// `ceil(x)` tolerating a relative error of 1e-9 (as in [`crate::network`]).
fn ceil_ms(x: f64) -> Millis {
    let tol = 1e-9 * x.max(1.0);
    let c = (x - tol).ceil();
    if c <= 0.0 {
        0
    } else {
        c as u64
    }
}

/// A transfer's finishing point on its path's service clock.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Due {
    at: f64,
    id: u64,
}

impl Eq for Due {}

impl Ord for Due {
    fn cmp(&self, other: &Self) -> Ordering {
        self.at.total_cmp(&other.at).then(self.id.cmp(&other.id))
    }
}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The transfers of one path (unordered pair of sites, or one site).
#[derive(Debug, Clone, Default)]
struct Path {
    links: Vec<usize>,
    /// Bits delivered to each of its transfers since the path was created.
    served: f64,
    /// Current rate of each transfer, bits per second.
    rate: f64,
    due: BinaryHeap<Reverse<Due>>,
    bytes: Vec<(u64, u64)>,
}

impl Path {
    fn count(&self) -> usize {
        self.due.len()
    }

    /// When its first transfer completes at the current rate, counted from `now`.
    fn next_completion(&self, now: Millis) -> Option<Millis> {
        let Reverse(d) = self.due.peek()?;
        let left = d.at - self.served;
        if left <= EPS_BITS {
            return Some(now);
        }
        if self.rate <= 0.0 {
            return None;
        }
        Some(now.saturating_add(ceil_ms(left * 1000.0 / self.rate)))
    }
}

/// Identifier of a transfer (sequential from 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TransferId(pub u64);

/// The shared network of the P2P grid.
#[derive(Debug, Clone)]
pub struct PathNetwork {
    sites: usize,
    caps: Vec<f64>,
    /// Transfers crossing each link.
    on_link: Vec<usize>,
    paths: Vec<Path>,
    /// Paths crossing each link.
    link_paths: Vec<Vec<usize>>,
    now: Millis,
    next_id: u64,
    active: usize,
    delivered: u64,
}

impl PathNetwork {
    /// `sites` LANs of `lan_bps`, WAN links of `wan_bps` between every pair.
    pub fn new(sites: usize, lan_bps: f64, wan_bps: f64) -> PathNetwork {
        assert!(
            sites > 0 && lan_bps > 0.0 && wan_bps > 0.0,
            "a network needs sites and positive bandwidths"
        );
        let pairs = sites * (sites - 1) / 2;
        let mut caps = vec![lan_bps; sites];
        caps.resize(sites + pairs, wan_bps);
        let mut paths = Vec::with_capacity(sites + pairs);
        for a in 0..sites {
            for b in a..sites {
                let links = if a == b {
                    vec![a]
                } else {
                    vec![a, sites + pair_index(sites, a, b), b]
                };
                paths.push(Path { links, ..Path::default() });
            }
        }
        let mut link_paths = vec![Vec::new(); caps.len()];
        for (p, path) in paths.iter().enumerate() {
            for &l in &path.links {
                link_paths[l].push(p);
            }
        }
        PathNetwork {
            sites,
            on_link: vec![0; caps.len()],
            caps,
            paths,
            link_paths,
            now: 0,
            next_id: 0,
            active: 0,
            delivered: 0,
        }
    }

    fn path_of(&self, a: usize, b: usize) -> usize {
        assert!(a < self.sites && b < self.sites, "site out of range: {a} -> {b}");
        let (a, b) = if a <= b { (a, b) } else { (b, a) };
        // Paths are numbered (0,0), (0,1) … (0,n-1), (1,1), …: rows before a hold
        // Σ_{i<a} (n − i) = a·n − a(a−1)/2.
        a * self.sites - a * a.saturating_sub(1) / 2 + (b - a)
    }

    /// Transfers in flight.
    pub fn active(&self) -> usize {
        self.active
    }

    /// Bytes of all transfers completed.
    pub fn bytes_delivered(&self) -> u64 {
        self.delivered
    }

    /// Starts a transfer of `bytes` from site `from` to site `to` at `now` (≥ the last time
    /// given).
    pub fn start(&mut self, now: Millis, from: usize, to: usize, bytes: u64) -> TransferId {
        let p = self.path_of(from, to);
        self.progress(now);
        let id = self.next_id;
        self.next_id += 1;
        let path = &mut self.paths[p];
        path.due.push(Reverse(Due {
            at: path.served + bytes as f64 * 8.0,
            id,
        }));
        path.bytes.push((id, bytes));
        for &l in &path.links {
            self.on_link[l] += 1;
        }
        self.active += 1;
        self.recompute_rates();
        TransferId(id)
    }

    /// Earliest completion if nothing starts meanwhile.
    pub fn next_completion(&self) -> Option<Millis> {
        self.paths.iter().filter_map(|p| p.next_completion(self.now)).min()
    }

    /// Advances to `now`, completing every transfer due by then; returns them in (time, id)
    /// order.
    pub fn advance_to_timed(&mut self, now: Millis) -> Vec<(Millis, TransferId)> {
        let mut out = Vec::new();
        while let Some(t) = self.next_completion().filter(|&t| t <= now) {
            self.progress(t);
            let first = out.len();
            for p in 0..self.paths.len() {
                while self.paths[p].next_completion(t) == Some(t) {
                    let Reverse(d) = self.paths[p].due.pop().expect("due");
                    let path = &mut self.paths[p];
                    let k = path.bytes.iter().position(|&(id, _)| id == d.id).expect("bytes of a transfer");
                    let (_, bytes) = path.bytes.swap_remove(k);
                    for &l in &path.links {
                        self.on_link[l] -= 1;
                    }
                    self.active -= 1;
                    self.delivered += bytes;
                    out.push((t, TransferId(d.id)));
                }
            }
            out[first..].sort_unstable();
            self.recompute_rates();
        }
        self.progress(now);
        out
    }

    /// Forecast for a new transfer: bytes at the share a new flow would get now,
    /// min over its links of capacity / (transfers on the link + 1), rounded up to ms.
    pub fn estimate_ms(&self, from: usize, to: usize, bytes: u64) -> Millis {
        let p = self.path_of(from, to);
        let share = self.paths[p]
            .links
            .iter()
            .map(|&l| self.caps[l] / (self.on_link[l] + 1) as f64)
            .fold(f64::INFINITY, f64::min);
        ceil_ms(bytes as f64 * 8.0 * 1000.0 / share)
    }

    fn progress(&mut self, t: Millis) {
        if t <= self.now {
            return;
        }
        let secs = (t - self.now) as f64 / 1000.0;
        for p in &mut self.paths {
            if p.count() > 0 && p.rate > 0.0 {
                p.served += p.rate * secs;
            }
        }
        self.now = t;
    }

    /// Max-min fair rates by progressive filling over paths (ties to the lowest link index).
    fn recompute_rates(&mut self) {
        let mut remaining = self.caps.clone();
        let mut unfrozen: Vec<usize> = self.on_link.clone();
        let mut frozen: Vec<bool> = self.paths.iter().map(|p| p.count() == 0).collect();
        loop {
            let mut best: Option<(usize, f64)> = None;
            for (l, &c) in unfrozen.iter().enumerate() {
                if c == 0 {
                    continue;
                }
                let share = remaining[l].max(0.0) / c as f64;
                match best {
                    Some((_, s)) if s <= share => {}
                    _ => best = Some((l, share)),
                }
            }
            let Some((bottleneck, share)) = best else { break };
            for &p in &self.link_paths[bottleneck] {
                if frozen[p] {
                    continue;
                }
                frozen[p] = true;
                let path = &mut self.paths[p];
                path.rate = share;
                let n = path.count();
                for &l in &path.links {
                    remaining[l] -= share * n as f64;
                    unfrozen[l] -= n;
                }
            }
        }
    }
}

/// Index of the unordered pair {a, b} (a != b) among n(n−1)/2 pairs (as in [`crate::network`]).
fn pair_index(n: usize, a: usize, b: usize) -> usize {
    let (a, b) = if a < b { (a, b) } else { (b, a) };
    a * (2 * n - a - 1) / 2 + (b - a - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::{Network, NetworkSpec};
    use proptest::prelude::*;

    const MB: u64 = 1_000_000;

    #[test]
    fn paths_are_numbered_densely() {
        for n in 1..8 {
            let net = PathNetwork::new(n, 1.0, 1.0);
            let mut seen = vec![false; net.paths.len()];
            for a in 0..n {
                for b in 0..n {
                    let p = net.path_of(a, b);
                    assert_eq!(p, net.path_of(b, a));
                    let links = &net.paths[p].links;
                    assert!(links.contains(&a) && links.contains(&b));
                    seen[p] = true;
                }
            }
            assert!(seen.iter().all(|&s| s));
        }
    }

    #[test]
    fn hand_checked_sharing() {
        // 2 sites, LAN 800 Mb/s, WAN 40 Mb/s. Two 100 MB transfers 0->1 and one 1->0 share the
        // WAN: 40/3 Mb/s each; 8e8 bits / 13.33e6 = 60 s, all three at 60 s.
        let mut n = PathNetwork::new(2, 800e6, 40e6);
        let a = n.start(0, 0, 1, 100 * MB);
        let b = n.start(0, 0, 1, 100 * MB);
        let c = n.start(0, 1, 0, 100 * MB);
        assert_eq!(n.estimate_ms(0, 1, 100 * MB), 80_000);
        assert_eq!(n.next_completion(), Some(60_000));
        assert_eq!(n.advance_to_timed(60_000), vec![(60_000, a), (60_000, b), (60_000, c)]);
        // A same-site copy uses only the LAN: 100 MB at 800 Mb/s = 1 s.
        let d = n.start(60_000, 1, 1, 100 * MB);
        assert_eq!(n.advance_to_timed(100_000), vec![(61_000, d)]);
        assert_eq!(n.active(), 0);
        assert_eq!(n.bytes_delivered(), 400 * MB);
    }

    proptest! {
        /// The same transfers through the general network give the same completions, up to a
        /// millisecond of floating-point rounding.
        #[test]
        fn matches_the_general_network(
            sites in 1usize..5,
            transfers in proptest::collection::vec((0u64..20_000, 0usize..5, 0usize..5, 1u64..20_000_000), 1..40),
        ) {
            let mut fast = PathNetwork::new(sites, 100e6, 10e6);
            let mut general = Network::new(NetworkSpec::uniform(sites, 100e6, 10e6, 0)).unwrap();
            let mut transfers = transfers;
            transfers.sort_by_key(|t| t.0);
            let (mut got_fast, mut got_general) = (Vec::new(), Vec::new());
            for &(t, a, b, bytes) in &transfers {
                let (a, b) = (a % sites, b % sites);
                while let Some(c) = general.next_completion().filter(|&c| c <= t) {
                    got_general.extend(general.advance_to_timed(c).into_iter().map(|(t, id)| (t, id.0)));
                }
                got_fast.extend(fast.advance_to_timed(t).into_iter().map(|(t, id)| (t, id.0)));
                let x = general.start(t, a, b, bytes);
                let y = fast.start(t, a, b, bytes);
                prop_assert_eq!(x.0, y.0);
                prop_assert_eq!(general.estimate_ms(a, b, 1_000_000), fast.estimate_ms(a, b, 1_000_000));
            }
            while let Some(c) = general.next_completion() {
                got_general.extend(general.advance_to_timed(c).into_iter().map(|(t, id)| (t, id.0)));
            }
            got_fast.extend(fast.advance_to_timed(u64::MAX / 2).into_iter().map(|(t, id)| (t, id.0)));
            let mut by_id_fast: Vec<(u64, u64)> = got_fast.iter().map(|&(t, id)| (id, t)).collect();
            let mut by_id_general: Vec<(u64, u64)> = got_general.iter().map(|&(t, id)| (id, t)).collect();
            by_id_fast.sort_unstable();
            by_id_general.sort_unstable();
            prop_assert_eq!(by_id_fast.len(), transfers.len());
            prop_assert_eq!(by_id_general.len(), transfers.len());
            for (f, g) in by_id_fast.iter().zip(&by_id_general) {
                prop_assert_eq!(f.0, g.0);
                prop_assert!(f.1.abs_diff(g.1) <= 1, "transfer {}: {} vs {}", f.0, f.1, g.1);
            }
            prop_assert_eq!(fast.bytes_delivered(), general.bytes_delivered());
        }
    }
}
