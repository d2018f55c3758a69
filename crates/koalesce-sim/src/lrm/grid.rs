//! Grid claims and advance reservations.

use super::{Claim, ClaimRejected, GridKey, LocalRm, Millis, Reservation, ReservationId, ReservationRejected};

impl LocalRm {
    /// Takes `procs` processors for `key` immediately (no queueing), holding them until
    /// [`LocalRm::release`]. Rejected if fewer than `procs` are [`LocalRm::claimable`] or the key
    /// is in use.
    pub fn claim(&mut self, now: Millis, key: GridKey, procs: u32) -> Result<(), ClaimRejected> {
        self.sync(now);
        let now = self.now;
        if self.claims.contains_key(&key) || self.reservations.contains_key(&key) {
            return Err(ClaimRejected::DuplicateKey);
        }
        let available = self.claimable();
        if procs > available {
            return Err(ClaimRejected::NotEnoughIdle {
                requested: procs,
                available,
            });
        }
        self.claims.insert(
            key,
            Claim {
                procs,
                since: now,
                reservation_end: None,
            },
        );
        self.busy_grid += procs;
        self.debug_check();
        // A claim can move the EASY head's shadow time later, allowing new backfills.
        self.schedule_from(now, 0);
        Ok(())
    }

    /// Releases the claim held by `key` and runs a scheduling pass. Returns `false` if there was
    /// no such claim.
    pub fn release(&mut self, now: Millis, key: GridKey) -> bool {
        self.sync(now);
        let now = self.now;
        match self.claims.remove(&key) {
            None => false,
            Some(c) => {
                self.busy_grid -= c.procs;
                self.schedule_from(now, 0);
                true
            }
        }
    }

    /// Reserves `procs` processors for `key` during `[start, start + duration)` (`duration` at
    /// least 1 ms; `start` ≥ `now`). Granted if the profile leaves room during the whole window.
    pub fn reserve(
        &mut self,
        now: Millis,
        key: GridKey,
        procs: u32,
        start: Millis,
        duration: Millis,
    ) -> Result<ReservationId, ReservationRejected> {
        self.sync(now);
        let now = self.now;
        let none = ReservationRejected { earliest_possible: None };
        if !self.cfg.supports_reservations
            || self.claims.contains_key(&key)
            || self.reservations.contains_key(&key)
            || procs > self.cfg.procs
        {
            return Err(none);
        }
        let duration = duration.max(1);
        let prof = self.profile(now);
        if start >= now && prof.fits(start, start.saturating_add(duration), procs) {
            let id = ReservationId(self.next_reservation_id);
            self.next_reservation_id += 1;
            self.reservations.insert(
                key,
                Reservation {
                    id,
                    procs,
                    start,
                    end: start.saturating_add(duration),
                },
            );
            self.debug_check();
            // A reservation can move the EASY head's shadow time later, allowing backfills.
            self.schedule_from(now, 0);
            Ok(id)
        } else {
            Err(ReservationRejected {
                earliest_possible: prof.earliest_fit(start.max(now), duration, procs),
            })
        }
    }

    /// Converts the reservation of `key` into a grid claim holding its processors (until
    /// [`LocalRm::release`]; planned until the reservation's end). Allowed during
    /// `[start, end)`.
    pub fn claim_reservation(&mut self, now: Millis, key: GridKey) -> Result<(), ClaimRejected> {
        self.sync(now);
        let now = self.now;
        let Some(r) = self.reservations.get(&key).copied() else {
            return Err(ClaimRejected::NoReservation);
        };
        if now < r.start {
            return Err(ClaimRejected::TooEarly { start: r.start });
        }
        if now >= r.end {
            // Unreachable after sync (it would have expired), kept for safety.
            return Err(ClaimRejected::Expired { end: r.end });
        }
        let idle = self.idle();
        if r.procs > idle {
            // Only possible if a reservation-derived claim overran its reservation.
            return Err(ClaimRejected::NotEnoughIdle {
                requested: r.procs,
                available: idle,
            });
        }
        self.reservations.remove(&key);
        self.claims.insert(
            key,
            Claim {
                procs: r.procs,
                since: now,
                reservation_end: Some(r.end),
            },
        );
        self.busy_grid += r.procs;
        self.debug_check();
        // The profile is unchanged from `now` on: no scheduling pass needed.
        Ok(())
    }

    /// Cancels the unclaimed reservation of `key` at `now` and runs a scheduling pass. Returns
    /// `false` if there was none.
    pub fn cancel_reservation(&mut self, now: Millis, key: GridKey) -> bool {
        self.sync(now);
        let now = self.now;
        if self.reservations.remove(&key).is_some() {
            self.schedule_from(now, 0);
            true
        } else {
            false
        }
    }

    pub(super) fn reserved_at(&self, t: Millis) -> u32 {
        self.reservations
            .values()
            .filter(|r| r.start <= t && t < r.end)
            .map(|r| r.procs)
            .sum()
    }
}
