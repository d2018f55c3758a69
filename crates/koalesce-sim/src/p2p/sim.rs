//! The event loop of one P2P grid run (002 §IV): twelve compute servers, each with its local
//! scheduler (FCFS + EASY over nodes, [`koalesce_core::federation::Easy`]) and grid scheduler,
//! the shared network ([`crate::network::Network`], max-min fair over sender LAN, WAN, receiver
//! LAN) and the workload.
//!
//! Determinism: integer milliseconds, and a fixed order of work at every instant — (1) finished
//! transfers (a job blocked on its input starts running; a returned output completes the job),
//! (2) jobs whose run ends (ties by job index), (3) a scheduling pass on every server that
//! changed, in server order, (4) the periodic check of R-I and SY-I (grid queues re-examined,
//! then volunteers, in server order), (5) arrivals in workload order, each decided and passed
//! to its local scheduler before the next. No randomness is drawn while running.
//!
//! A migrated job enters the remote local queue at once and its input transfer starts with it
//! ("we assume these activities can be performed simultaneously", §III-A1). When the local
//! scheduler gives it nodes before the input has arrived it holds them, blocked ("blocked jobs
//! with allocated resources unable to execute because their data have not arrived", §V-D),
//! until the data are there. At the end of the run its output returns to the origin; the job
//! ends (ET) when the output has arrived.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use koalesce_core::federation::policy::{self, Offer, Target};
use koalesce_core::federation::{Easy, Params, Replay, Wait, Waiting};

use super::grid::{LAN_BPS, TABLE_I, WAN_BPS};
use super::net::PathNetwork;
use super::workload::Job;
use super::{Algorithm, JobRecord, RunConfig};

type Millis = u64;

/// First look-ahead when collecting offers (then 4×, 16×, …).
const FIRST_HORIZON_MS: Millis = 600_000;

/// Whether job `j` fits on server `s` at all.
fn servers_fit(sim: &Sim<'_>, j: u32, s: usize) -> bool {
    sim.size_on(j, s).0 <= sim.servers[s].nodes
}

/// A job in a local queue.
#[derive(Debug, Clone, Copy)]
struct Entry {
    job: u32,
    nodes: u32,
    estimate: Millis,
    /// When it joined the queue.
    queued: Millis,
}

impl Waiting for Entry {
    fn key(&self) -> u64 {
        u64::from(self.job)
    }
    fn nodes(&self) -> u32 {
        self.nodes
    }
    fn estimate_ms(&self) -> Millis {
        self.estimate
    }
}

struct Server {
    nodes: u32,
    cpus_per_node: u32,
    clock: u32,
    site: usize,
    easy: Easy,
    lq: VecDeque<Entry>,
    gq: VecDeque<u32>,
    /// Bumped whenever the jobs holding nodes change (`easy`: a job starts, is held, ends, or
    /// a held job starts running), and when: the AWT replay starts there. A job joining `lq`
    /// does not bump it: it joins the replay at its time ([`Replay::append`]).
    version: u64,
    changed_at: Millis,
    /// The replay of the current state, made from `changed_at` (see [`Replay::wait_ms_at`])
    /// with the jobs queued since appended at their times.
    replay: Option<(u64, Replay)>,
    /// Something changed since the last scheduling pass.
    dirty: bool,
    volunteering: bool,
}

impl Server {
    fn ru(&self) -> f64 {
        policy::ru(self.easy.busy(), self.nodes)
    }
}

/// What the simulation knows about a job while it runs.
#[derive(Debug, Clone, Copy, Default)]
struct State {
    exec: u8,
    nodes: u32,
    run: Millis,
    estimate: Millis,
    input: u64,
    output: u64,
    queued: Option<Millis>,
    /// Nodes allocated, and the expected end the local scheduler keys them by.
    alloc: Option<Millis>,
    expected_end: Millis,
    start: Option<Millis>,
    run_end: Option<Millis>,
    end: Option<Millis>,
    input_done: Option<Millis>,
    output_start: Option<Millis>,
    data_ready: bool,
}

/// Counters of one run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    pub events: u64,
    pub replays: u64,
    pub awt_queries: u64,
    pub max_gq: usize,
    pub max_lq: usize,
    pub max_transfers: usize,
}

pub struct Sim<'a> {
    cfg: &'a RunConfig,
    params: Params,
    jobs: &'a [Job],
    state: Vec<State>,
    servers: Vec<Server>,
    net: PathNetwork,
    transfers: Vec<(u32, bool)>,
    ends: BinaryHeap<Reverse<(Millis, u32)>>,
    now: Millis,
    next_arrival: usize,
    next_tick: Option<Millis>,
    finished: usize,
    started: Vec<Entry>,
    counters: Counters,
    verify_decisions: bool,
}

impl<'a> Sim<'a> {
    pub fn new(cfg: &'a RunConfig, jobs: &'a [Job]) -> Sim<'a> {
        let sites = cfg.sites.count();
        let net = PathNetwork::new(sites, LAN_BPS, WAN_BPS);
        let servers = TABLE_I
            .iter()
            .map(|s| Server {
                nodes: s.nodes,
                cpus_per_node: s.cpus_per_node,
                clock: s.clock_mhz,
                site: s.site(cfg.sites),
                easy: Easy::new(s.nodes),
                lq: VecDeque::new(),
                gq: VecDeque::new(),
                version: 0,
                changed_at: 0,
                replay: None,
                dirty: false,
                volunteering: false,
            })
            .collect();
        let periodic = matches!(cfg.algorithm, Algorithm::ReceiverInitiated | Algorithm::Symmetric);
        Sim {
            cfg,
            params: cfg.params,
            jobs,
            state: vec![State::default(); jobs.len()],
            servers,
            net,
            transfers: Vec::new(),
            ends: BinaryHeap::new(),
            now: 0,
            next_arrival: 0,
            next_tick: periodic.then_some(0),
            finished: 0,
            started: Vec::new(),
            counters: Counters::default(),
            verify_decisions: false,
        }
    }

    /// Test aid: check every sender-initiated decision against one computed from every offer in
    /// full (slow).
    pub fn verify_decisions(mut self, on: bool) -> Self {
        self.verify_decisions = on;
        self
    }

    /// Runs until every job has ended; `progress(arrived)` is called every 8192 arrivals.
    pub fn run(mut self, progress: &mut dyn FnMut(usize)) -> (Vec<JobRecord>, Counters) {
        while self.finished < self.jobs.len() {
            let Some(t) = self.next_time() else {
                panic!(
                    "P2P simulation stalled at {} ms with {} of {} jobs done",
                    self.now,
                    self.finished,
                    self.jobs.len()
                );
            };
            self.now = t;
            self.step(progress);
            self.counters.events += 1;
        }
        (self.records(), self.counters)
    }

    fn next_time(&self) -> Option<Millis> {
        [
            self.jobs.get(self.next_arrival).map(|j| j.submit_ms),
            self.ends.peek().map(|e| e.0 .0),
            self.net.next_completion(),
            self.next_tick,
        ]
        .into_iter()
        .flatten()
        .min()
        .map(|t| t.max(self.now))
    }

    fn step(&mut self, progress: &mut dyn FnMut(usize)) {
        let now = self.now;
        // (1) Transfers.
        if self.net.next_completion().is_some_and(|t| t <= now) {
            for (_, id) in self.net.advance_to_timed(now) {
                let (job, output) = self.transfers[id.0 as usize];
                if output {
                    self.complete(job);
                } else {
                    self.input_arrived(job);
                }
            }
        }
        // (2) Run ends.
        while let Some(&Reverse((end, job))) = self.ends.peek() {
            if end > now {
                break;
            }
            self.ends.pop();
            self.run_ended(job);
        }
        // (3) Local schedulers.
        for s in 0..self.servers.len() {
            if self.servers[s].dirty {
                self.pass(s);
            }
        }
        // (4) Periodic checks.
        if self.next_tick.is_some_and(|t| t <= now) {
            self.tick();
            let more = self.next_arrival < self.jobs.len() || self.servers.iter().any(|s| !s.gq.is_empty());
            self.next_tick = more.then_some(now + self.params.sigma_ms);
        }
        // (5) Arrivals.
        while let Some(job) = self.jobs.get(self.next_arrival) {
            if job.submit_ms > now {
                break;
            }
            let j = self.next_arrival as u32;
            self.next_arrival += 1;
            self.arrive(j);
            if self.next_arrival.is_multiple_of(8192) {
                progress(self.next_arrival);
            }
        }
        self.counters.max_transfers = self.counters.max_transfers.max(self.net.active());
    }

    // ---- the local scheduler -------------------------------------------------------------

    /// Nodes and (clock-scaled) estimate and run time of job `j` on server `s`.
    fn size_on(&self, j: u32, s: usize) -> (u32, Millis, Millis) {
        let job = &self.jobs[j as usize];
        let srv = &self.servers[s];
        let home = self.servers[usize::from(job.origin)].clock;
        let nodes = job.cpus.div_ceil(srv.cpus_per_node);
        (
            nodes,
            policy::ert(job.estimate_ms, home, srv.clock),
            policy::ert(job.run_ms, home, srv.clock),
        )
    }

    fn touch(&mut self, s: usize) {
        self.changed(s);
        self.servers[s].dirty = true;
    }

    fn changed(&mut self, s: usize) {
        let srv = &mut self.servers[s];
        srv.version += 1;
        srv.changed_at = self.now;
    }

    /// Puts job `j` into the local queue of server `s` (migrating it and starting its input
    /// transfer when `s` is not its origin) and runs a scheduling pass there.
    fn enqueue(&mut self, j: u32, s: usize) {
        let now = self.now;
        let (nodes, estimate, run) = self.size_on(j, s);
        let job = self.jobs[j as usize];
        let origin = usize::from(job.origin);
        let input = job.input_bytes(self.cfg.data_kb);
        let st = &mut self.state[j as usize];
        st.exec = s as u8;
        st.nodes = nodes;
        st.run = run;
        st.estimate = estimate;
        st.queued = Some(now);
        st.input = input;
        st.output = input * 5;
        st.data_ready = true;
        if s != origin && input > 0 {
            st.data_ready = false;
            let id = self.net.start(now, self.servers[origin].site, self.servers[s].site, input);
            debug_assert_eq!(id.0 as usize, self.transfers.len());
            self.transfers.push((j, false));
        }
        let srv = &mut self.servers[s];
        srv.lq.push_back(Entry {
            job: j,
            nodes,
            estimate,
            queued: now,
        });
        self.counters.max_lq = self.counters.max_lq.max(srv.lq.len());
        srv.dirty = true;
        let version = srv.version;
        self.pass(s);
        // Nothing started: the job joins the current replay (if there is one) at its time.
        if let Some((v, r)) = &mut self.servers[s].replay {
            if *v == version {
                r.append(now, nodes, estimate);
            }
        }
    }

    fn pass(&mut self, s: usize) {
        let now = self.now;
        let mut started = std::mem::take(&mut self.started);
        started.clear();
        let srv = &mut self.servers[s];
        srv.dirty = false;
        srv.easy.schedule(now, &mut srv.lq, &mut started);
        if !started.is_empty() {
            self.changed(s);
        }
        for e in &started {
            let st = &mut self.state[e.job as usize];
            st.alloc = Some(now);
            st.expected_end = now + e.estimate;
            if st.data_ready {
                self.begin_run(e.job);
            } else {
                // Holds its nodes until its input has arrived.
                let ok = self.servers[s].easy.hold(u64::from(e.job), now + e.estimate, e.estimate);
                debug_assert!(ok);
            }
        }
        self.started = started;
    }

    fn begin_run(&mut self, j: u32) {
        let now = self.now;
        let st = &mut self.state[j as usize];
        let s = usize::from(st.exec);
        st.start = Some(now);
        let end = now + st.run;
        st.run_end = Some(end);
        let held = st.alloc.is_some_and(|a| a < now);
        if held {
            let expected = self.servers[s].easy.run_held(u64::from(j), st.estimate, now);
            debug_assert!(expected.is_some());
            st.expected_end = now + st.estimate;
            // The job now ends at a fixed expected time: the scheduler looks again.
            self.touch(s);
        }
        self.ends.push(Reverse((end, j)));
    }

    fn input_arrived(&mut self, j: u32) {
        let st = &mut self.state[j as usize];
        st.input_done = Some(self.now);
        st.data_ready = true;
        if st.alloc.is_some() && st.start.is_none() {
            self.begin_run(j);
        }
    }

    fn run_ended(&mut self, j: u32) {
        let now = self.now;
        let st = self.state[j as usize];
        let s = usize::from(st.exec);
        let released = self.servers[s].easy.release(u64::from(j), st.expected_end);
        debug_assert!(released.is_some());
        self.touch(s);
        let origin = usize::from(self.jobs[j as usize].origin);
        if s != origin && st.output > 0 {
            self.state[j as usize].output_start = Some(now);
            let id = self.net.start(now, self.servers[s].site, self.servers[origin].site, st.output);
            debug_assert_eq!(id.0 as usize, self.transfers.len());
            self.transfers.push((j, true));
        } else {
            self.complete(j);
        }
    }

    fn complete(&mut self, j: u32) {
        self.state[j as usize].end = Some(self.now);
        self.finished += 1;
    }

    // ---- the grid schedulers -------------------------------------------------------------

    /// AWT of job `j` on server `s` now if it is at most `cutoff` (see [`Replay::wait_within`]).
    /// The server's replay is made once per state of the jobs holding its nodes, from the time
    /// that state began, with the jobs queued since joining it at their times (carried across
    /// appends, or appended when it is made: the same replay), so the answers do not depend on
    /// which queries came before.
    fn awt_within(&mut self, j: u32, s: usize, cutoff: Millis) -> Wait {
        let now = self.now;
        let (nodes, estimate, _) = self.size_on(j, s);
        self.counters.awt_queries += 1;
        let srv = &mut self.servers[s];
        if nodes > srv.nodes {
            return Wait::Beyond;
        }
        if srv.lq.is_empty() {
            return match srv.easy.earliest_fit(srv.changed_at, nodes) {
                Some(t) if t.saturating_sub(now) <= cutoff => Wait::At(t.saturating_sub(now)),
                _ => Wait::Beyond,
            };
        }
        if !matches!(&srv.replay, Some((v, _)) if *v == srv.version) {
            // From the last change of the jobs holding nodes, the jobs queued since joining at
            // their times: the same replay as one made then and carried across the appends.
            let e = srv.changed_at;
            let before = srv.lq.iter().take_while(|q| q.queued <= e).count();
            let mut r = Replay::new(e, &srv.easy, srv.lq.iter().take(before));
            for q in srv.lq.iter().skip(before) {
                r.append(q.queued, q.nodes, q.estimate);
            }
            srv.replay = Some((srv.version, r));
            self.counters.replays += 1;
        }
        let (_, r) = srv.replay.as_mut().expect("just made");
        r.wait_within(now, nodes, estimate, cutoff)
    }

    /// Whether job `j`'s AWT on `s` is below φ.
    fn below_phi(&mut self, j: u32, s: usize) -> bool {
        let phi = self.params.phi_ms;
        phi > 0 && matches!(self.awt_within(j, s, phi - 1), Wait::At(_))
    }

    /// ADT(j_in, origin, s), ERT(j, s) and ADT(j_out, s, origin): 0 for the origin, and the ADTs
    /// are 0 too when the scheduler ignores data (§V-D).
    fn costs(&self, j: u32, s: usize) -> (Millis, Millis, Millis) {
        let job = self.jobs[j as usize];
        let origin = usize::from(job.origin);
        let (_, estimate, _) = self.size_on(j, s);
        if s == origin || !self.cfg.data_aware {
            return (0, estimate, 0);
        }
        let input = job.input_bytes(self.cfg.data_kb);
        let (a, b) = (self.servers[origin].site, self.servers[s].site);
        (self.adt(a, b, input), estimate, self.adt(b, a, input * 5))
    }

    /// ADT: a transfer's forecast at the bandwidth a new flow would get now.
    fn adt(&self, from: usize, to: usize, bytes: u64) -> Millis {
        if bytes == 0 {
            0
        } else {
            self.net.estimate_ms(from, to, bytes)
        }
    }

    /// The offers of `servers` for job `j`, exact for every server whose ATT is within ε of the
    /// best one, `None` or an exact value for the others (they cannot change a decision; see
    /// [`policy::awt_cutoff`]). Best-first: each server's queue is simulated only as far as
    /// needed to show that it cannot beat the best offer found so far, in growing steps, the
    /// server with the lowest bound on its ATT first. The decisions are those of computing
    /// every offer in full.
    fn offers(&mut self, j: u32, servers: &[usize]) -> Vec<Offer> {
        let mut offers: Vec<Offer> = servers
            .iter()
            .map(|&s| Offer {
                att: None,
                ru: self.servers[s].ru(),
            })
            .collect();
        let costs: Vec<(Millis, Millis, Millis)> = servers.iter().map(|&s| self.costs(j, s)).collect();
        let mut horizon: Vec<Millis> = vec![FIRST_HORIZON_MS; servers.len()];
        let mut heap: BinaryHeap<Reverse<(Millis, usize)>> = costs
            .iter()
            .enumerate()
            .map(|(i, &(a, e, o))| Reverse((policy::att_lower_bound(a, e, o), i)))
            .collect();
        let mut best: Option<Millis> = None;
        while let Some(Reverse((bound, i))) = heap.pop() {
            let (adt_in, ert, adt_out) = costs[i];
            let cutoff = match best {
                // The lowest bound left cannot be within ε of the best: done.
                Some(b) if !policy::within_tolerance(&self.params, bound, b) => break,
                Some(b) => policy::awt_cutoff(&self.params, b, adt_in, ert, adt_out).unwrap_or(0),
                None => horizon[i],
            };
            match self.awt_within(j, servers[i], cutoff) {
                Wait::At(w) => {
                    let att = policy::att(Some(w), adt_in, ert, adt_out);
                    offers[i].att = att;
                    best = best.min(att).or(att);
                }
                Wait::Beyond if best.is_none() && cutoff < Millis::MAX && servers_fit(self, j, servers[i]) => {
                    // Not within this horizon: its ATT is above the bound below; look further
                    // next time it comes first.
                    horizon[i] = cutoff.saturating_mul(4);
                    let next = policy::att(Some(cutoff.saturating_add(1)), adt_in, ert, adt_out).unwrap_or(Millis::MAX);
                    heap.push(Reverse((next, i)));
                }
                Wait::Beyond => {}
            }
        }
        offers
    }

    fn arrive(&mut self, j: u32) {
        let origin = usize::from(self.jobs[j as usize].origin);
        match self.cfg.algorithm {
            Algorithm::Local => self.enqueue(j, origin),
            Algorithm::Centralized => {
                let all: Vec<usize> = (0..self.servers.len()).collect();
                let offers = self.offers(j, &all);
                let s = policy::centralized(&self.params, &offers).unwrap_or(origin);
                self.enqueue(j, s);
            }
            Algorithm::SenderInitiated | Algorithm::ReceiverInitiated | Algorithm::Symmetric => {
                if self.below_phi(j, origin) {
                    self.enqueue(j, origin);
                    return;
                }
                let passive = match self.cfg.algorithm {
                    Algorithm::ReceiverInitiated => true,
                    // SY-I waits for volunteers when there are any, else acts like S-I.
                    Algorithm::Symmetric => self.servers.iter().enumerate().any(|(s, srv)| s != origin && srv.volunteering),
                    _ => false,
                };
                if passive {
                    let gq = &mut self.servers[origin].gq;
                    gq.push_back(j);
                    self.counters.max_gq = self.counters.max_gq.max(gq.len());
                } else {
                    let target = self.sender_initiated(j, origin);
                    self.enqueue(j, target);
                }
            }
        }
    }

    /// The sender-initiated decision for job `j` at its origin, whose AWT has reached φ: the
    /// peers' offers, then the local ATT as far as the τ rule needs it.
    fn sender_initiated(&mut self, j: u32, origin: usize) -> usize {
        let peers: Vec<usize> = (0..self.servers.len()).filter(|&s| s != origin).collect();
        let offers = self.offers(j, &peers);
        let Some(min_peers) = offers.iter().filter_map(|o| o.att).min() else {
            return origin;
        };
        let (_, ert, _) = self.costs(j, origin);
        let local_att =
            policy::local_awt_cutoff(&self.params, min_peers, ert).and_then(|cutoff| match self.awt_within(j, origin, cutoff) {
                Wait::At(w) => policy::att(Some(w), 0, ert, 0),
                Wait::Beyond => None,
            });
        let local = Offer {
            att: local_att,
            ru: self.servers[origin].ru(),
        };
        let d = policy::sender_initiated(&self.params, local, &offers).target;
        if self.verify_decisions {
            self.verify_sender_initiated(j, origin, &peers, local.ru, d);
        }
        match d {
            Target::Local => origin,
            Target::Peer(i) => peers[i],
        }
    }

    /// Test aid: the decision computed from every offer in full (no bounds) must be `got`.
    fn verify_sender_initiated(&mut self, j: u32, origin: usize, peers: &[usize], local_ru: f64, got: Target) {
        let full: Vec<Offer> = peers
            .iter()
            .map(|&s| {
                let (adt_in, ert, adt_out) = self.costs(j, s);
                let w = match self.awt_within(j, s, Millis::MAX) {
                    Wait::At(w) => Some(w),
                    Wait::Beyond => None,
                };
                Offer {
                    att: policy::att(w, adt_in, ert, adt_out),
                    ru: self.servers[s].ru(),
                }
            })
            .collect();
        let (_, ert, _) = self.costs(j, origin);
        let w = match self.awt_within(j, origin, Millis::MAX) {
            Wait::At(w) => Some(w),
            Wait::Beyond => None,
        };
        let local = Offer {
            att: policy::att(w, 0, ert, 0),
            ru: local_ru,
        };
        let want = policy::sender_initiated(&self.params, local, &full).target;
        assert_eq!(
            got, want,
            "job {j} at {} ms: bounded offers decided {got:?}, full offers {want:?}",
            self.now
        );
    }

    /// R-I and SY-I every σ: grid queues re-examined (a job whose local AWT fell below φ goes
    /// to its local queue), then every server with RU < δ volunteers and each peer offers it
    /// the first job of its grid queue.
    fn tick(&mut self) {
        let n = self.servers.len();
        for s in 0..n {
            let mut i = 0;
            while i < self.servers[s].gq.len() {
                let j = self.servers[s].gq[i];
                if self.below_phi(j, s) {
                    self.servers[s].gq.remove(i);
                    self.enqueue(j, s);
                } else {
                    i += 1;
                }
            }
        }
        for v in 0..n {
            let ru = self.servers[v].ru();
            self.servers[v].volunteering = policy::volunteers(&self.params, ru);
        }
        for v in 0..n {
            if !self.servers[v].volunteering {
                continue;
            }
            for k in 1..n {
                let p = (v + k) % n;
                let Some(&j) = self.servers[p].gq.front() else { continue };
                let (_, ert, _) = self.costs(j, p);
                let local_att = match self.awt_within(j, p, Millis::MAX) {
                    Wait::At(w) => policy::att(Some(w), 0, ert, 0),
                    Wait::Beyond => None,
                };
                let (adt_in, ert_v, adt_out) = self.costs(j, v);
                let cutoff = match local_att {
                    Some(l) => policy::awt_cutoff(&self.params, l, adt_in, ert_v, adt_out),
                    None => Some(Millis::MAX),
                };
                let volunteer_att = cutoff.and_then(|c| match self.awt_within(j, v, c) {
                    Wait::At(w) => policy::att(Some(w), adt_in, ert_v, adt_out),
                    Wait::Beyond => None,
                });
                let local = Offer {
                    att: local_att,
                    ru: self.servers[p].ru(),
                };
                let volunteer = Offer {
                    att: volunteer_att,
                    ru: self.servers[v].ru(),
                };
                if policy::receiver_initiated(&self.params, local, volunteer) {
                    self.servers[p].gq.pop_front();
                    self.enqueue(j, v);
                }
            }
        }
    }

    fn records(&self) -> Vec<JobRecord> {
        self.jobs
            .iter()
            .zip(&self.state)
            .map(|(job, st)| JobRecord {
                origin: job.origin,
                exec: st.exec,
                nodes: st.nodes,
                cpus: st.nodes * self.servers[usize::from(st.exec)].cpus_per_node,
                submit: job.submit_ms,
                queued: st.queued.expect("every job is queued"),
                alloc: st.alloc.expect("every job gets nodes"),
                start: st.start.expect("every job runs"),
                run_end: st.run_end.expect("every job runs"),
                end: st.end.expect("every job ends"),
                input: st.input,
                output: st.output,
                input_done: st.input_done,
                output_start: st.output_start,
            })
            .collect()
    }
}
