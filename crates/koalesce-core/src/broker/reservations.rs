//! Advance reservations as a service (001 §2.3), the decision part: a pure table of one site's
//! reserved processors over time that answers requests.
//!
//! A request names the processors, the duration, the earliest and latest acceptable start and an
//! optional *flexible* flag. The three replies of 001 §2.3 are
//! [`ReservationReply::Granted`], [`ReservationReply::Rejected`] ("never possible") and
//! [`ReservationReply::RejectedNext`] ("may be granted at a later time `T_next`"). *Modify* is
//! release + create, as in 001 §3.3.2: when the new request is refused the old reservation is gone.
//!
//! The table knows only its own reservations. Everything else that holds the site's processors
//! (running local jobs until their estimated end, claims, queued jobs the LRM has planned) comes
//! in with every call as a [`Profile`] of *other* commitments, so the same table serves the
//! daemon's local executor (which enforces it: no one else starts on reserved processors) and the
//! simulated LRM (which plans its local jobs around it).
//!
//! Decisions:
//! - A request is granted at the earliest start `s ≥ max(earliest, now)` where its processors fit
//!   during `[s, s + duration)` next to the other commitments and the reservations held, provided
//!   `s ≤ latest`. Otherwise it is rejected with `T_next = s` (the earliest start at which the very
//!   same request would be granted now), or plainly rejected when it never fits (more processors
//!   than the site has, or commitments that hold forever).
//! - **Flexible reservations** may be moved by the table inside their own start window (001 §2.3:
//!   "the local scheduler may alter the reservation start time within the start time window after
//!   the reservation is created"). The table does so only for a request that would otherwise be
//!   refused: it tries the request's earliest start and every instant of its window at which the
//!   committed processors change (and the same instants less the duration), takes the flexible,
//!   not yet started reservations overlapping the request out, places the request, and puts each
//!   of them back at its earliest feasible start inside its window (by id); the first candidate
//!   where all of them find room wins. Moves are reported by [`ReservationTable::take_relocations`].
//!   `T_next` is computed without moving anything (it is exact for that definition).
//! - When room frees up (a reservation released, a claim given back), the owner of the table
//!   calls [`ReservationTable::advance`]: every flexible reservation that has not begun moves to
//!   its earliest feasible start inside its window when that is earlier (never later). A
//!   restarted owner puts stored reservations back with [`ReservationTable::restore`], at their
//!   (possibly moved) start, with their window and flexibility.
//!
//! Invariant (property-tested): at no instant from `now` on do the other commitments plus the
//! reservations exceed the capacity, provided the other commitments alone did not; every
//! reservation starts inside its own window.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::profile::Profile;
use crate::model::Millis;

/// Identifier of a reservation, unique within one table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ReservationId(pub u64);

/// A reservation request (001 §2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReservationRequest {
    pub processors: u32,
    pub duration_ms: Millis,
    /// Earliest acceptable start.
    pub earliest_start: Millis,
    /// Latest acceptable start.
    pub latest_start: Millis,
    /// The site may move the reservation inside `[earliest_start, latest_start]` later.
    #[serde(default)]
    pub flexible: bool,
}

impl ReservationRequest {
    /// A request for exactly `start` (earliest = latest), not flexible.
    pub fn at(processors: u32, start: Millis, duration_ms: Millis) -> Self {
        ReservationRequest {
            processors,
            duration_ms,
            earliest_start: start,
            latest_start: start,
            flexible: false,
        }
    }

    /// A request for any start in `[earliest, latest]`, not flexible.
    pub fn window(processors: u32, duration_ms: Millis, earliest: Millis, latest: Millis) -> Self {
        ReservationRequest {
            processors,
            duration_ms,
            earliest_start: earliest,
            latest_start: latest,
            flexible: false,
        }
    }
}

/// The three replies of 001 §2.3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "reply")]
pub enum ReservationReply {
    /// `<granted>`: the reservation exists and starts at `start`.
    Granted { id: ReservationId, start: Millis },
    /// `<rejected>`: never possible (more processors than the site has, an invalid request, or
    /// commitments that hold forever).
    Rejected,
    /// `<rejected, T_next>`: not in the requested window; the same request starting at `t_next`
    /// would be granted now.
    RejectedNext { t_next: Millis },
}

impl ReservationReply {
    pub fn is_granted(&self) -> bool {
        matches!(self, ReservationReply::Granted { .. })
    }

    /// `T_next` of a rejection with one.
    pub fn t_next(&self) -> Option<Millis> {
        match self {
            ReservationReply::RejectedNext { t_next } => Some(*t_next),
            _ => None,
        }
    }
}

/// A granted reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    pub id: ReservationId,
    pub processors: u32,
    pub start: Millis,
    /// Exclusive end: `start + duration`.
    pub end: Millis,
    /// The window the requester accepted (a flexible reservation stays inside it).
    pub earliest_start: Millis,
    pub latest_start: Millis,
    pub flexible: bool,
}

impl Reservation {
    pub fn duration(&self) -> Millis {
        self.end - self.start
    }
}

/// A flexible reservation the table moved to make room for another request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Relocation {
    pub id: ReservationId,
    pub from: Millis,
    pub to: Millis,
}

/// One site's reservations. See the module docs.
#[derive(Debug, Clone, PartialEq)]
pub struct ReservationTable {
    capacity: u32,
    reservations: BTreeMap<ReservationId, Reservation>,
    /// Processors held by the reservations, from time 0.
    reserved: Profile,
    next_id: u64,
    relocations: Vec<Relocation>,
}

impl ReservationTable {
    pub fn new(capacity: u32) -> Self {
        ReservationTable {
            capacity,
            reservations: BTreeMap::new(),
            reserved: Profile::empty(capacity, 0),
            next_id: 1,
            relocations: Vec::new(),
        }
    }

    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    pub fn get(&self, id: ReservationId) -> Option<&Reservation> {
        self.reservations.get(&id)
    }

    /// Reservations by id.
    pub fn iter(&self) -> impl Iterator<Item = &Reservation> {
        self.reservations.values()
    }

    pub fn len(&self) -> usize {
        self.reservations.len()
    }

    pub fn is_empty(&self) -> bool {
        self.reservations.is_empty()
    }

    /// Processors held by reservations over time.
    pub fn reserved(&self) -> &Profile {
        &self.reserved
    }

    /// Reservations plus `others`, from `now` on.
    pub fn committed(&self, now: Millis, others: Option<&Profile>) -> Profile {
        // The table's own profile (kept up to date by every change) summed with the others:
        // linear in the steps, not one insertion per reservation.
        let reserved = self.reserved.since(now);
        match others {
            Some(o) => o.since(now).sum(&reserved).sum(&Profile::empty(self.capacity, now)),
            None => reserved.sum(&Profile::empty(self.capacity, now)),
        }
    }

    /// Answers a request (see the module docs); `others` are the site's other commitments
    /// (`None`: nothing else holds processors).
    pub fn request(&mut self, now: Millis, req: &ReservationRequest, others: Option<&Profile>) -> ReservationReply {
        if req.processors == 0 || req.processors > self.capacity || req.duration_ms == 0 || req.latest_start < req.earliest_start {
            return ReservationReply::Rejected;
        }
        let lo = req.earliest_start.max(now);
        let committed = self.committed(now, others);
        let plain = committed.earliest_fit(lo, req.duration_ms, req.processors);
        match plain {
            Some(s) if s <= req.latest_start => ReservationReply::Granted {
                id: self.insert(req, s),
                start: s,
            },
            _ => {
                if let Some((s, moves)) = self.relocate_for(now, lo, req, &committed) {
                    for (id, to) in moves {
                        self.move_to(id, to);
                    }
                    return ReservationReply::Granted {
                        id: self.insert(req, s),
                        start: s,
                    };
                }
                match plain {
                    Some(t_next) => ReservationReply::RejectedNext { t_next },
                    None => ReservationReply::Rejected,
                }
            }
        }
    }

    /// Releases a reservation (unused, or ended early). Returns it, or `None` if unknown.
    pub fn release(&mut self, id: ReservationId) -> Option<Reservation> {
        let r = self.reservations.remove(&id)?;
        self.reserved.remove(r.start, r.end, r.processors);
        Some(r)
    }

    /// Modify = release + create (001 §3.3.2): the old reservation is released first, so a
    /// refused modification loses it. An unknown `id` is just a create.
    pub fn modify(&mut self, now: Millis, id: ReservationId, req: &ReservationRequest, others: Option<&Profile>) -> ReservationReply {
        self.release(id);
        self.request(now, req, others)
    }

    /// Drops the reservations that ended at or before `now`, returning them.
    pub fn expire(&mut self, now: Millis) -> Vec<Reservation> {
        let ended: Vec<ReservationId> = self.reservations.values().filter(|r| r.end <= now).map(|r| r.id).collect();
        ended.into_iter().filter_map(|id| self.release(id)).collect()
    }

    /// Puts back a reservation granted earlier (a restarted server re-creating its table) at
    /// its granted start, with its own window and flexibility, provided it still fits next to
    /// the other reservations and `others` during its remaining time. A reservation that has
    /// begun keeps only its rest (`[now, end)`). `None`: it does not fit (or is invalid).
    pub fn restore(&mut self, now: Millis, r: &Reservation, others: Option<&Profile>) -> Option<ReservationId> {
        let start = r.start.max(now);
        if r.processors == 0 || r.processors > self.capacity || r.end <= start {
            return None;
        }
        if !self.committed(now, others).fits(start, r.end, r.processors) {
            return None;
        }
        let req = ReservationRequest {
            processors: r.processors,
            duration_ms: r.end - start,
            earliest_start: r.earliest_start,
            latest_start: r.latest_start.max(start),
            flexible: r.flexible,
        };
        Some(self.insert(&req, start))
    }

    /// Moves flexible reservations earlier when room has freed up (001 §2.3: the local
    /// scheduler may alter a flexible reservation's start inside its window). Every flexible
    /// reservation that has not begun (`start > now`), by start then id, moves to its earliest
    /// feasible start at or after `max(earliest, now)` next to `others` and every other
    /// reservation, when that is earlier than its start. Never later, never outside its
    /// window, never over capacity. Returns the moves (also kept for
    /// [`ReservationTable::take_relocations`]).
    pub fn advance(&mut self, now: Millis, others: Option<&Profile>) -> Vec<Relocation> {
        let mut flexible: Vec<(Millis, ReservationId)> = self
            .reservations
            .values()
            .filter(|r| r.flexible && r.start > now && r.earliest_start < r.start)
            .map(|r| (r.start, r.id))
            .collect();
        flexible.sort_unstable();
        let mut moved = Vec::new();
        for (_, id) in flexible {
            let r = self.reservations[&id];
            let mut committed = self.committed(now, others);
            committed.remove(r.start, r.end, r.processors);
            let lo = r.earliest_start.max(now);
            if let Some(s) = committed.earliest_fit(lo, r.duration(), r.processors) {
                if s < r.start && s <= r.latest_start {
                    moved.push(Relocation { id, from: r.start, to: s });
                    self.move_to(id, s);
                }
            }
        }
        moved
    }

    /// Flexible reservations moved since the last call.
    pub fn take_relocations(&mut self) -> Vec<Relocation> {
        std::mem::take(&mut self.relocations)
    }

    fn insert(&mut self, req: &ReservationRequest, start: Millis) -> ReservationId {
        let id = ReservationId(self.next_id);
        self.next_id += 1;
        let end = start.saturating_add(req.duration_ms);
        self.reservations.insert(
            id,
            Reservation {
                id,
                processors: req.processors,
                start,
                end,
                earliest_start: req.earliest_start,
                latest_start: req.latest_start,
                flexible: req.flexible,
            },
        );
        self.reserved.add(start, end, req.processors);
        id
    }

    fn move_to(&mut self, id: ReservationId, to: Millis) {
        let r = self.release(id).expect("relocated reservation exists");
        self.relocations.push(Relocation { id, from: r.start, to });
        let end = to.saturating_add(r.duration());
        self.reservations.insert(id, Reservation { start: to, end, ..r });
        self.reserved.add(to, end, r.processors);
    }

    /// Where the request could start if flexible reservations moved, and the moves.
    fn relocate_for(
        &self,
        now: Millis,
        lo: Millis,
        req: &ReservationRequest,
        committed: &Profile,
    ) -> Option<(Millis, Vec<(ReservationId, Millis)>)> {
        let movable: Vec<&Reservation> = self.reservations.values().filter(|r| r.flexible && r.start > now).collect();
        if movable.is_empty() || lo > req.latest_start {
            return None;
        }
        let dur = req.duration_ms;
        let mut candidates = vec![lo];
        for &(t, _) in committed.steps() {
            for c in [t, t.saturating_sub(dur)] {
                if c > lo && c <= req.latest_start {
                    candidates.push(c);
                }
            }
        }
        candidates.sort_unstable();
        candidates.dedup();
        for c in candidates {
            let end = c.saturating_add(dur);
            let conflicting: Vec<&Reservation> = movable.iter().copied().filter(|r| r.start < end && c < r.end).collect();
            if conflicting.is_empty() {
                continue;
            }
            let mut tmp = committed.clone();
            for r in &conflicting {
                tmp.remove(r.start, r.end, r.processors);
            }
            if !tmp.fits(c, end, req.processors) {
                continue;
            }
            tmp.add(c, end, req.processors);
            let mut moves = Vec::with_capacity(conflicting.len());
            for r in &conflicting {
                match tmp.earliest_fit(r.earliest_start.max(now), r.duration(), r.processors) {
                    Some(s) if s <= r.latest_start => {
                        tmp.add(s, s.saturating_add(r.duration()), r.processors);
                        moves.push((r.id, s));
                    }
                    _ => break,
                }
            }
            if moves.len() == conflicting.len() {
                return Some((c, moves));
            }
        }
        None
    }
}

/// The starts to ask an LRM that books reservations itself (Slurm's `scontrol create
/// reservation`), computed from what holds its processors (`committed`, from `now` on).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowPlan {
    /// Starts inside `[max(earliest, now), latest]` where the request fits next to
    /// `committed`, earliest first: the earliest fit, then the earliest fit after each later
    /// instant where the commitments change (an LRM may refuse a start the profile allows, e.g.
    /// when the free cores are split over nodes; the next one is its best retry).
    pub starts: Vec<Millis>,
    /// `T_next` should every start be refused: the earliest fit after the window (or after
    /// the last start listed, when the list was cut at its length); `None`: it never fits.
    pub t_next: Option<Millis>,
}

/// Plans a request next to `committed` (see [`WindowPlan`]), at most `tries` starts. An
/// invalid request (no processors, no duration, latest before earliest, more processors than
/// the site has) never fits.
pub fn plan_window(now: Millis, req: &ReservationRequest, committed: &Profile, tries: usize) -> WindowPlan {
    let never = WindowPlan {
        starts: Vec::new(),
        t_next: None,
    };
    if req.processors == 0
        || req.duration_ms == 0
        || req.latest_start < req.earliest_start
        || u64::from(req.processors) > committed.capacity()
    {
        return never;
    }
    let lo = req.earliest_start.max(now);
    let mut starts = Vec::new();
    let mut from = lo;
    while let Some(s) = committed.earliest_fit(from, req.duration_ms, req.processors) {
        if s > req.latest_start.max(lo) || starts.len() == tries {
            return WindowPlan { starts, t_next: Some(s) };
        }
        starts.push(s);
        // The next instant after `s` where the commitments change.
        let Some(next) = committed.steps().iter().map(|&(t, _)| t).find(|&t| t > s) else {
            // Nothing changes later: a refused start will not become possible by waiting
            // for these commitments; the instant after the window is the only guess.
            let after = req.latest_start.max(lo).saturating_add(1);
            return WindowPlan {
                t_next: committed.earliest_fit(after.max(s.saturating_add(1)), req.duration_ms, req.processors),
                starts,
            };
        };
        from = next;
    }
    WindowPlan { starts, t_next: None }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn granted_rejected_and_t_next() {
        let mut t = ReservationTable::new(8);
        let a = t.request(0, &ReservationRequest::at(8, 10, 10), None);
        assert!(matches!(a, ReservationReply::Granted { start: 10, .. }));
        // Overlaps [10, 20): the earliest start is 20.
        let b = t.request(0, &ReservationRequest::window(4, 5, 12, 15), None);
        assert_eq!(b, ReservationReply::RejectedNext { t_next: 20 });
        // Fits before it: [0, 10) is free.
        let c = t.request(0, &ReservationRequest::window(4, 10, 0, 5), None);
        assert!(matches!(c, ReservationReply::Granted { start: 0, .. }));
        assert_eq!(t.request(0, &ReservationRequest::at(9, 0, 1), None), ReservationReply::Rejected);
        // Other commitments forever leave no room.
        let others = Profile::build(8, 0, [(0, super::super::profile::FOREVER, 5)]);
        assert_eq!(
            t.request(0, &ReservationRequest::at(4, 30, 1), Some(&others)),
            ReservationReply::Rejected
        );
    }

    #[test]
    fn modify_is_release_then_create() {
        let mut t = ReservationTable::new(4);
        let ReservationReply::Granted { id, .. } = t.request(0, &ReservationRequest::at(4, 0, 10), None) else {
            panic!()
        };
        let blocker = Profile::build(4, 0, [(10, 20, 4)]);
        // Moving it to [15, 25) is refused by the other commitments, and the old one is gone.
        let r = t.modify(0, id, &ReservationRequest::at(4, 15, 10), Some(&blocker));
        assert_eq!(r, ReservationReply::RejectedNext { t_next: 20 });
        assert!(t.is_empty());
    }

    #[test]
    fn flexible_reservation_makes_room() {
        let mut t = ReservationTable::new(4);
        let flex = ReservationRequest {
            flexible: true,
            ..ReservationRequest::window(4, 10, 10, 40)
        };
        let ReservationReply::Granted { id, start: 10 } = t.request(0, &flex, None) else {
            panic!()
        };
        // A rigid request for exactly [10, 20) only fits if the flexible one moves to 20.
        let r = t.request(0, &ReservationRequest::at(4, 10, 10), None);
        assert!(matches!(r, ReservationReply::Granted { start: 10, .. }), "{r:?}");
        assert_eq!(t.get(id).unwrap().start, 20);
        assert_eq!(t.take_relocations(), vec![Relocation { id, from: 10, to: 20 }]);
        // [10, 30) is full; a rigid request of 25 ms starting by 29 cannot fit even if the
        // flexible one moves (the rigid one is in the way): the first free start is 30.
        let r = t.request(0, &ReservationRequest::window(4, 25, 5, 29), None);
        assert_eq!(r, ReservationReply::RejectedNext { t_next: 30 });
    }

    #[test]
    fn flexible_reservation_moves_earlier_when_room_frees_up() {
        let mut t = ReservationTable::new(4);
        let ReservationReply::Granted { id: blocker, start: 0 } = t.request(0, &ReservationRequest::at(4, 0, 30), None) else {
            panic!()
        };
        let flex = ReservationRequest {
            flexible: true,
            ..ReservationRequest::window(2, 10, 5, 50)
        };
        let ReservationReply::Granted { id, start: 30 } = t.request(0, &flex, None) else {
            panic!()
        };
        let rigid = t.request(0, &ReservationRequest::window(2, 10, 5, 50), None);
        let ReservationReply::Granted { id: rigid, start: 30 } = rigid else {
            panic!("{rigid:?}")
        };
        // Nothing freed: nothing moves.
        assert!(t.advance(1, None).is_empty());
        t.release(blocker);
        // The flexible one moves to its earliest start (5, not `now`); the rigid one stays.
        assert_eq!(t.advance(1, None), vec![Relocation { id, from: 30, to: 5 }]);
        assert_eq!((t.get(id).unwrap().start, t.get(id).unwrap().end), (5, 15));
        assert_eq!(t.get(rigid).unwrap().start, 30);
        assert_eq!(t.take_relocations(), vec![Relocation { id, from: 30, to: 5 }]);
        // Other commitments count; a reservation that began is never moved.
        let mut t = ReservationTable::new(4);
        let others = Profile::build(4, 0, [(0, 20, 3)]);
        let ReservationReply::Granted { id, start: 20 } = t.request(0, &flex, Some(&others)) else {
            panic!()
        };
        let fewer = Profile::build(4, 0, [(0, 12, 3)]);
        assert_eq!(t.advance(8, Some(&fewer)), vec![Relocation { id, from: 20, to: 12 }]);
        assert!(t.advance(13, None).is_empty(), "it began at 12");
    }

    #[test]
    fn restore_keeps_start_window_and_flexibility() {
        let mut t = ReservationTable::new(4);
        let flex = ReservationRequest {
            flexible: true,
            ..ReservationRequest::window(3, 10, 5, 50)
        };
        let ReservationReply::Granted { id, .. } = t.request(0, &flex, None) else {
            panic!()
        };
        let mut moved = t.get(id).copied().unwrap();
        moved.start = 20;
        moved.end = 30;
        let mut fresh = ReservationTable::new(4);
        let back = fresh.restore(0, &moved, None).unwrap();
        let r = fresh.get(back).unwrap();
        assert_eq!(
            (r.start, r.end, r.earliest_start, r.latest_start, r.flexible),
            (20, 30, 5, 50, true)
        );
        // It does not fit twice, nor next to commitments in its way; a begun one keeps its rest.
        assert_eq!(fresh.restore(0, &moved, None), None);
        let mut other = ReservationTable::new(4);
        assert_eq!(other.restore(0, &moved, Some(&Profile::build(4, 0, [(25, 26, 2)]))), None);
        let rest = other.restore(24, &moved, None).unwrap();
        assert_eq!((other.get(rest).unwrap().start, other.get(rest).unwrap().end), (24, 30));
    }

    #[test]
    fn window_plan_lists_starts_where_commitments_change() {
        use crate::broker::profile::FOREVER;
        // 8 processors: 6 held until 10, 2 until 20, reservations 4 during [30, 40).
        let committed = Profile::build(8, 0, [(0, 10, 4), (0, 20, 2), (30, 40, 4)]);
        // 6 for 5 ms from 0: after 10 (2 used), then 20 (0 used) ... up to 3 tries.
        let p = plan_window(0, &ReservationRequest::window(6, 5, 0, 100), &committed, 3);
        assert_eq!(p.starts, vec![10, 20, 40]);
        // Nothing drops after 40: the guess past a refusal is the first fit after the window.
        assert_eq!(p.t_next, Some(101));
        // Window closing at 15: one start inside, T_next is the next fit (20).
        let p = plan_window(0, &ReservationRequest::window(6, 5, 0, 15), &committed, 3);
        assert_eq!(p.starts, vec![10]);
        assert_eq!(p.t_next, Some(20));
        // Window [0, 5]: nothing inside; T_next 10. `now` past the earliest start counts.
        let p = plan_window(0, &ReservationRequest::window(6, 5, 0, 5), &committed, 3);
        assert_eq!((p.starts.as_slice(), p.t_next), (&[][..], Some(10)));
        let p = plan_window(12, &ReservationRequest::window(6, 5, 0, 100), &committed, 1);
        assert_eq!((p.starts.as_slice(), p.t_next), (&[12][..], Some(20)));
        // Never: too many processors, a zero duration, an inverted window, forever held.
        for bad in [
            ReservationRequest::window(9, 5, 0, 100),
            ReservationRequest::window(1, 0, 0, 100),
            ReservationRequest::window(1, 5, 50, 40),
        ] {
            assert_eq!(
                plan_window(0, &bad, &committed, 3),
                WindowPlan {
                    starts: vec![],
                    t_next: None
                }
            );
        }
        let full = Profile::build(8, 0, [(0, FOREVER, 8)]);
        assert_eq!(plan_window(0, &ReservationRequest::window(1, 5, 0, 9), &full, 3).t_next, None);
    }

    /// Every planned start fits, lies in the window, and is the earliest fit at or after
    /// the previous drop; T_next (when some) fits too and is past every listed start.
    #[test]
    fn window_plan_starts_fit_random() {
        use crate::broker::profile::FOREVER;
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut rnd = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for _ in 0..500 {
            let items: Vec<(Millis, Millis, u32)> = (0..rnd(6))
                .map(|_| {
                    let s = rnd(50);
                    let e = if rnd(10) == 0 { FOREVER } else { s + 1 + rnd(40) };
                    (s, e, 1 + rnd(6) as u32)
                })
                .collect();
            let committed = Profile::build(8, 0, items);
            let now = rnd(20);
            let e = rnd(40);
            let req = ReservationRequest::window(1 + rnd(8) as u32, 1 + rnd(20), e, e + rnd(40));
            let p = plan_window(now, &req, &committed, 4);
            let lo = req.earliest_start.max(now);
            assert!(p.starts.windows(2).all(|w| w[0] < w[1]), "{p:?}");
            for &s in &p.starts {
                assert!(s >= lo && s <= req.latest_start.max(lo), "{s} outside the window, {p:?}");
                assert!(committed.fits(s, s + req.duration_ms, req.processors), "{s} does not fit");
            }
            if let Some(&first) = p.starts.first() {
                assert_eq!(committed.earliest_fit(lo, req.duration_ms, req.processors), Some(first));
            }
            if let Some(t) = p.t_next {
                assert!(committed.fits(t, t + req.duration_ms, req.processors));
                assert!(p.starts.iter().all(|&s| s < t));
            }
        }
    }
}
