//! 001 §5.2.2, Tables I and II: 1000 co-allocation requests of four one-hour jobs over four
//! machines of eight nodes, each machine carrying one 20-minute background reservation placed at
//! random in the four-hour start window, ε = 5 minutes; homogeneous (every job can use every
//! machine) and heterogeneous (the fourth job only one machine).
//!
//! Every run is Algorithm 1 of the core ([`koalesce_core::broker::coallocate`]) against four
//! reservation tables of the core ([`TableService`]): the sites of the seed's test bed were four
//! Maui schedulers whose only load was these reservations. Besides the algorithm's counters, each
//! run records whether a window exists at all ("in theory", 001 §5.2.2), found by an exact search.

use koalesce_core::broker::{
    coallocate, Augmentation, CoallocationRequest, CoallocationStats, ComponentRequest, ReservationRequest, TableService,
};
use koalesce_core::model::{Millis, SiteId};

use crate::rng::Rng;

pub const MIN: Millis = 60_000;
pub const HOUR: Millis = 60 * MIN;
/// 001 §5.1: "Each cluster is configured with 8 (virtual) back-end nodes".
pub const NODES: u32 = 8;
pub const MACHINES: usize = 4;
/// 001 §5.2.2: "The length of the job start time window is four hours, the maximum allowed job
/// start time deviation (ε) is five minutes and the requested length of each job is one hour.
/// Each machine has a 20 minutes long reservation as background load".
pub const WINDOW: Millis = 4 * HOUR;
pub const EPSILON: Millis = 5 * MIN;
pub const JOB: Millis = HOUR;
pub const BACKGROUND: Millis = 20 * MIN;

/// Which reading of the seed a configuration uses (see `docs/experiments/broker.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableSetup {
    pub key: &'static str,
    pub label: &'static str,
    /// 001 Table II: the fourth job can use only one machine.
    pub heterogeneous: bool,
    pub augmentation: Augmentation,
    /// Latest start T_l after T_e: the window less the job (the job runs inside the four
    /// hours), or the whole window (only the start must be inside).
    pub latest_start: Millis,
    /// Processors per job (8: a whole machine).
    pub job_nodes: u32,
    /// Job i tries machine i first (else every job tries machine 1 first).
    pub rotate: bool,
}

impl TableSetup {
    /// The reading used for the side-by-side tables.
    pub const fn main(key: &'static str, label: &'static str, heterogeneous: bool, augmentation: Augmentation) -> Self {
        TableSetup {
            key,
            label,
            heterogeneous,
            augmentation,
            latest_start: WINDOW - JOB,
            job_nodes: NODES,
            rotate: true,
        }
    }
}

/// Every table configuration: the main reading for both tables and both readings of Steps
/// 15–16, then the sensitivity variants (each changes one thing).
pub fn setups() -> Vec<TableSetup> {
    let single = Augmentation::SinglePath;
    let exhaustive = Augmentation::Exhaustive;
    vec![
        TableSetup::main("hom", "Table I (homogeneous), seed's single path", false, single),
        TableSetup::main("het", "Table II (heterogeneous), seed's single path", true, single),
        TableSetup::main(
            "hom-free",
            "homogeneous, single path to a free machine",
            false,
            Augmentation::SinglePathFree,
        ),
        TableSetup::main(
            "het-free",
            "heterogeneous, single path to a free machine",
            true,
            Augmentation::SinglePathFree,
        ),
        TableSetup::main("hom-exh", "homogeneous, exhaustive augmentation", false, exhaustive),
        TableSetup::main("het-exh", "heterogeneous, exhaustive augmentation", true, exhaustive),
        TableSetup {
            latest_start: WINDOW,
            ..TableSetup::main("hom-tl4h", "homogeneous, start anywhere in the 4 h", false, single)
        },
        TableSetup {
            latest_start: WINDOW,
            ..TableSetup::main("het-tl4h", "heterogeneous, start anywhere in the 4 h", true, single)
        },
        TableSetup {
            job_nodes: NODES / 2,
            ..TableSetup::main("hom-half", "homogeneous, jobs of 4 nodes", false, single)
        },
        TableSetup {
            job_nodes: NODES / 2,
            ..TableSetup::main("het-half", "heterogeneous, jobs of 4 nodes", true, single)
        },
        TableSetup {
            rotate: false,
            ..TableSetup::main("hom-same", "homogeneous, every job tries machine 1 first", false, single)
        },
        TableSetup {
            rotate: false,
            ..TableSetup::main("het-same", "heterogeneous, every job tries machine 1 first", true, single)
        },
    ]
}

/// One co-allocation request of the test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableRun {
    pub success: bool,
    /// A window exists (`None`: not decided for jobs smaller than a machine).
    pub feasible: Option<bool>,
    pub stats: CoallocationStats,
}

/// The jobs' machine lists: rotated so job i tries machine i first; in the heterogeneous test
/// the fourth job can use only the fourth machine.
fn machine_lists(setup: &TableSetup) -> Vec<Vec<SiteId>> {
    (0..MACHINES)
        .map(|j| {
            if setup.heterogeneous && j == MACHINES - 1 {
                return vec![SiteId(j as u32)];
            }
            let first = if setup.rotate { j } else { 0 };
            (0..MACHINES).map(|k| SiteId(((first + k) % MACHINES) as u32)).collect()
        })
        .collect()
}

/// One run: background reservations drawn from `rng`, then Algorithm 1.
pub fn run_one(setup: &TableSetup, rng: &mut Rng) -> TableRun {
    let mut service = TableService::new(0, &[NODES; MACHINES]);
    let mut background = [0; MACHINES];
    for (m, b) in background.iter_mut().enumerate() {
        // A 20-minute reservation of the whole machine, entirely inside the four hours.
        *b = rng.range_inclusive_u64(0, WINDOW - BACKGROUND);
        let granted = service.tables[m].request(0, &ReservationRequest::at(NODES, *b, BACKGROUND), None);
        debug_assert!(granted.is_granted());
    }
    let lists = machine_lists(setup);
    let request = CoallocationRequest {
        components: lists
            .iter()
            .map(|sites| ComponentRequest::new(setup.job_nodes, JOB, sites.clone()))
            .collect(),
        earliest_start: 0,
        latest_start: setup.latest_start,
        epsilon_ms: EPSILON,
        augmentation: setup.augmentation,
    };
    let out = coallocate(&request, &mut service);
    let feasible = (setup.job_nodes > NODES / 2).then(|| earliest_window(&background, &lists, setup.latest_start).is_some());
    TableRun {
        success: out.succeeded(),
        feasible,
        stats: out.stats,
    }
}

/// The earliest `x ∈ [0, T_l]` such that the jobs (each needing a whole machine for one hour)
/// can be matched to distinct machines of their lists, each starting in `[x, x + ε]` clear of its
/// machine's background reservation `[b, b + 20 min)`; exact.
///
/// Job on machine m fits for some start in `[x, x + ε]` unless `x` lies in the open interval
/// `(b_m − 1 h, b_m + 20 min − ε)`; the earliest feasible `x` is therefore 0 or the right end of
/// one of these intervals.
pub fn earliest_window(background: &[Millis], lists: &[Vec<SiteId>], latest: Millis) -> Option<Millis> {
    let blocked = |m: usize, x: Millis| {
        let b = background[m];
        x + JOB > b && x + EPSILON < b + BACKGROUND
    };
    let mut candidates: Vec<Millis> = vec![0];
    candidates.extend(background.iter().map(|&b| (b + BACKGROUND).saturating_sub(EPSILON)));
    candidates.sort_unstable();
    candidates.into_iter().filter(|&x| x <= latest).find(|&x| {
        let ok = |j: usize, m: usize| lists[j].contains(&SiteId(m as u32)) && !blocked(m, x);
        perfect_matching(lists.len(), background.len(), &ok)
    })
}

/// Whether every job gets a distinct machine it may use (Kuhn's augmenting paths).
fn perfect_matching(jobs: usize, machines: usize, ok: &dyn Fn(usize, usize) -> bool) -> bool {
    fn try_job(j: usize, machines: usize, ok: &dyn Fn(usize, usize) -> bool, seen: &mut [bool], owner: &mut [Option<usize>]) -> bool {
        for m in 0..machines {
            if ok(j, m) && !seen[m] {
                seen[m] = true;
                if owner[m].is_none_or(|o| try_job(o, machines, ok, seen, owner)) {
                    owner[m] = Some(j);
                    return true;
                }
            }
        }
        false
    }
    let mut owner = vec![None; machines];
    (0..jobs).all(|j| try_job(j, machines, ok, &mut vec![false; machines], &mut owner))
}

/// `runs` runs of `setup` with seed `seed` (one RNG stream per seed and configuration).
pub fn run_seed(setup: &TableSetup, seed: u64, runs: usize) -> Vec<TableRun> {
    let mut rng = Rng::seed_from(seed, 0x7AB1E);
    (0..runs).map(|_| run_one(setup, &mut rng)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_window_search() {
        let all: Vec<Vec<SiteId>> = (0..4).map(|_| (0..4).map(SiteId).collect()).collect();
        // Background at 0 on every machine: the first window starts when it ends (20 − 5 min).
        assert_eq!(earliest_window(&[0; 4], &all, 3 * HOUR), Some(15 * MIN));
        // Background late enough everywhere: start at once.
        assert_eq!(earliest_window(&[HOUR; 4], &all, 3 * HOUR), Some(0));
        // Staggered so that every x in [0, 3 h] hits one machine: no window.
        let b = [50 * MIN, 120 * MIN, 190 * MIN, 220 * MIN];
        assert_eq!(earliest_window(&b, &all, 3 * HOUR), None);
        assert_eq!(earliest_window(&b, &all, 4 * HOUR), Some(235 * MIN));
    }
}
