//! Unit tests of the LRM: FCFS, EASY, claims, reservations, accounting.

use super::*;

pub(super) fn lrm(procs: u32, policy: LocalPolicy) -> LocalRm {
    LocalRm::new(LrmConfig {
        procs,
        policy,
        supports_reservations: true,
    })
}

fn start(l: &LocalRm, id: LocalJobId) -> Option<Millis> {
    l.job(id).unwrap().start_ms
}

fn ok(l: &LocalRm) {
    l.check_invariants().unwrap();
}

#[test]
fn fcfs_starts_in_order_and_does_not_backfill() {
    let mut l = lrm(10, LocalPolicy::Fcfs);
    let a = l.submit_local(0, LocalJob::new(6, 100, 100)).unwrap();
    let b = l.submit_local(1, LocalJob::new(6, 10, 10)).unwrap();
    let c = l.submit_local(2, LocalJob::new(2, 10, 10)).unwrap();
    assert_eq!(start(&l, a), Some(0));
    assert_eq!(start(&l, b), None);
    assert_eq!(start(&l, c), None, "FCFS must not let C overtake B");
    assert_eq!(l.queued_local(), 2);
    assert_eq!(l.next_event_time(), Some(100));
    let ev = l.advance(100);
    assert_eq!(start(&l, b), Some(100));
    assert_eq!(start(&l, c), Some(100));
    assert_eq!(
        ev,
        vec![
            LrmEvent::LocalJobStarted { id: a },
            LrmEvent::LocalJobFinished { id: a },
            LrmEvent::LocalJobStarted { id: b },
            LrmEvent::LocalJobStarted { id: c },
        ]
    );
    assert_eq!(l.busy_local(), 8);
    l.advance(110);
    assert_eq!(l.busy_local(), 0);
    assert_eq!(l.job(b).unwrap().end_ms, Some(110));
    assert_eq!(l.job(b).unwrap().state, LocalJobState::Finished);
    assert_eq!(l.job(b).unwrap().wait_ms(), Some(99));
    ok(&l);
}

#[test]
fn easy_backfills_short_job_ahead_of_blocked_head() {
    let mut l = lrm(10, LocalPolicy::EasyBackfill);
    let a = l.submit_local(0, LocalJob::new(6, 100, 100)).unwrap();
    let b = l.submit_local(0, LocalJob::new(6, 50, 50)).unwrap();
    let c = l.submit_local(0, LocalJob::new(4, 50, 50)).unwrap();
    assert_eq!(start(&l, a), Some(0));
    assert_eq!(start(&l, b), None);
    assert_eq!(start(&l, c), Some(0), "C ends before the shadow time 100");
    l.advance(100);
    assert_eq!(start(&l, b), Some(100));
    ok(&l);
}

#[test]
fn easy_backfills_into_extra_processors() {
    // Head B needs 6 at shadow 100 where 10 are free: extra = 4.
    let mut l = lrm(10, LocalPolicy::EasyBackfill);
    l.submit_local(0, LocalJob::new(6, 100, 100)).unwrap();
    let b = l.submit_local(0, LocalJob::new(6, 50, 50)).unwrap();
    let c = l.submit_local(0, LocalJob::new(4, 500, 500)).unwrap();
    assert_eq!(start(&l, c), Some(0), "C runs past the shadow time but uses only extra");
    l.advance(100);
    assert_eq!(start(&l, b), Some(100));
    ok(&l);
}

#[test]
fn easy_does_not_backfill_a_job_that_delays_the_head() {
    let mut l = lrm(10, LocalPolicy::EasyBackfill);
    let a = l.submit_local(0, LocalJob::new(6, 80, 100)).unwrap();
    let b = l.submit_local(0, LocalJob::new(8, 50, 50)).unwrap(); // shadow 100, extra 2
    let c = l.submit_local(0, LocalJob::new(3, 200, 200)).unwrap(); // would delay B
    let d = l.submit_local(0, LocalJob::new(3, 40, 50)).unwrap(); // ends by 100
    assert_eq!(start(&l, a), Some(0));
    assert_eq!(start(&l, c), None);
    assert_eq!(start(&l, d), Some(0));
    // A really ends at 80 (before its estimate): B starts then, C still waits.
    l.advance(80);
    assert_eq!(start(&l, b), Some(80));
    assert_eq!(start(&l, c), None);
    l.advance(130);
    assert_eq!(start(&l, c), Some(130));
    ok(&l);
}

#[test]
fn submit_rejects_impossible_jobs_and_clamps_times() {
    let mut l = lrm(4, LocalPolicy::Fcfs);
    assert!(l.submit_local(0, LocalJob::new(5, 10, 10)).is_err());
    assert!(l.submit_local(0, LocalJob::new(0, 10, 10)).is_err());
    let id = l.submit_local(0, LocalJob::new(1, 0, 0)).unwrap();
    let r = *l.job(id).unwrap();
    assert_eq!((r.runtime_ms, r.estimate_ms), (1, 1));
    let id = l.submit_local(0, LocalJob::new(1, 50, 10)).unwrap();
    assert_eq!(l.job(id).unwrap().estimate_ms, 50);
}

#[test]
fn claim_takes_idle_processors_and_is_rejected_when_too_few() {
    let mut l = lrm(10, LocalPolicy::EasyBackfill);
    l.submit_local(0, LocalJob::new(6, 100, 100)).unwrap();
    assert_eq!(l.idle(), 4);
    l.claim(5, GridKey(1, 0), 3).unwrap();
    assert_eq!((l.idle(), l.busy_grid(), l.busy_local()), (1, 3, 6));
    assert_eq!(
        l.claim(5, GridKey(2, 0), 2),
        Err(ClaimRejected::NotEnoughIdle {
            requested: 2,
            available: 1
        })
    );
    assert_eq!(l.claim(5, GridKey(1, 0), 1), Err(ClaimRejected::DuplicateKey));
    l.claim(5, GridKey(1, 1), 1).unwrap();
    assert_eq!(l.idle(), 0);
    assert_eq!(l.claim_of(GridKey(1, 1)).unwrap().since, 5);
    ok(&l);
}

#[test]
fn release_starts_queued_local_jobs() {
    let mut l = lrm(10, LocalPolicy::Fcfs);
    l.claim(0, GridKey(7, 0), 8).unwrap();
    let j = l.submit_local(10, LocalJob::new(4, 100, 100)).unwrap();
    assert_eq!(start(&l, j), None);
    assert!(l.release(30, GridKey(7, 0)));
    assert!(!l.release(30, GridKey(7, 0)));
    assert_eq!(start(&l, j), Some(30));
    assert_eq!(l.busy_grid(), 0);
    assert_eq!(l.take_events(), vec![LrmEvent::LocalJobStarted { id: j }]);
    ok(&l);
}

#[test]
fn reservation_granted_when_free_and_rejected_with_earliest_possible() {
    let mut l = lrm(10, LocalPolicy::EasyBackfill);
    l.submit_local(0, LocalJob::new(6, 60, 100)).unwrap();
    let r1 = l.reserve(0, GridKey(1, 0), 4, 50, 100).unwrap(); // [50, 150)
    assert_eq!(l.reservation(GridKey(1, 0)).unwrap().id, r1);
    // 6 more at 50: the local job holds 6 until its estimated end 100 → earliest 100.
    assert_eq!(
        l.reserve(0, GridKey(2, 0), 6, 50, 100),
        Err(ReservationRejected {
            earliest_possible: Some(100)
        })
    );
    // 7 at 50 for 100: also blocked by R1 until 150.
    assert_eq!(
        l.reserve(0, GridKey(2, 0), 7, 50, 100),
        Err(ReservationRejected {
            earliest_possible: Some(150)
        })
    );
    assert_eq!(
        l.reserve(0, GridKey(2, 0), 11, 50, 100),
        Err(ReservationRejected { earliest_possible: None })
    );
    let r2 = l.reserve(0, GridKey(2, 0), 6, 100, 100).unwrap();
    assert_ne!(r1, r2);
    // Duplicate key, start in the past.
    assert_eq!(l.reserve(0, GridKey(2, 0), 1, 500, 10).unwrap_err().earliest_possible, None);
    l.advance(20);
    assert_eq!(
        l.reserve(20, GridKey(3, 0), 0, 10, 10),
        Err(ReservationRejected {
            earliest_possible: Some(20)
        })
    );
    // A claim that may hold forever cannot take reserved processors.
    assert_eq!(l.idle(), 4);
    assert_eq!(l.claimable(), 0);
    assert!(matches!(
        l.claim(20, GridKey(4, 0), 1),
        Err(ClaimRejected::NotEnoughIdle { available: 0, .. })
    ));
    ok(&l);
}

#[test]
fn reservations_unsupported_are_rejected() {
    let mut l = LocalRm::new(LrmConfig {
        procs: 10,
        policy: LocalPolicy::Fcfs,
        supports_reservations: false,
    });
    assert_eq!(
        l.reserve(0, GridKey(1, 0), 1, 10, 10),
        Err(ReservationRejected { earliest_possible: None })
    );
}

#[test]
fn local_jobs_are_not_started_into_a_reservation_window() {
    for policy in [LocalPolicy::Fcfs, LocalPolicy::EasyBackfill] {
        let mut l = lrm(10, policy);
        l.reserve(0, GridKey(1, 0), 8, 100, 100).unwrap(); // [100, 200)
        assert_eq!(l.free_now(), 10);
        // Overlaps the window on needed processors: waits.
        let x = l.submit_local(0, LocalJob::new(4, 150, 150)).unwrap();
        assert_eq!(start(&l, x), None, "{policy:?}");
        if policy == LocalPolicy::EasyBackfill {
            // Ends before the window: runs.
            let y = l.submit_local(0, LocalJob::new(4, 50, 50)).unwrap();
            assert_eq!(start(&l, y), Some(0));
            // Fits beside the reservation and beside X's shadow reservation at 200.
            let z = l.submit_local(0, LocalJob::new(2, 500, 500)).unwrap();
            assert_eq!(start(&l, z), Some(0));
        }
        l.advance(100);
        assert_eq!(start(&l, x), None);
        assert_eq!(l.reserved_now(), 8);
        l.claim_reservation(100, GridKey(1, 0)).unwrap();
        l.advance(199);
        assert_eq!(start(&l, x), None);
        assert!(l.release(199, GridKey(1, 0)));
        assert_eq!(start(&l, x), Some(199), "{policy:?}");
        ok(&l);
    }
}

#[test]
fn a_job_ending_before_the_window_starts_under_fcfs() {
    let mut l = lrm(10, LocalPolicy::Fcfs);
    l.reserve(0, GridKey(1, 0), 10, 100, 100).unwrap();
    let y = l.submit_local(0, LocalJob::new(10, 100, 100)).unwrap();
    assert_eq!(start(&l, y), Some(0), "ends exactly at the window start");
    let x = l.submit_local(0, LocalJob::new(1, 50, 101)).unwrap();
    assert_eq!(start(&l, x), None);
    l.advance(100);
    assert_eq!(start(&l, x), None, "starting now it would overlap the window");
    assert_eq!(
        l.advance(200),
        vec![
            LrmEvent::ReservationExpired { key: GridKey(1, 0) },
            LrmEvent::LocalJobStarted { id: x },
        ]
    );
    assert_eq!(start(&l, x), Some(200));
}

#[test]
fn claim_reservation_at_start_succeeds() {
    let mut l = lrm(10, LocalPolicy::EasyBackfill);
    // Local work keeps the site busy, with estimates reaching the window.
    l.submit_local(0, LocalJob::new(5, 90, 100)).unwrap();
    l.reserve(0, GridKey(9, 2), 5, 100, 50).unwrap();
    for _ in 0..20 {
        l.submit_local(1, LocalJob::new(3, 30, 40)).unwrap();
    }
    assert_eq!(l.claim_reservation(50, GridKey(9, 2)), Err(ClaimRejected::TooEarly { start: 100 }));
    assert_eq!(l.claim_reservation(50, GridKey(9, 3)), Err(ClaimRejected::NoReservation));
    let mut t = 50;
    while let Some(n) = l.next_event_time() {
        if n > 100 {
            break;
        }
        t = n;
        l.advance(t);
        ok(&l);
    }
    assert_eq!(t, 100);
    l.claim_reservation(100, GridKey(9, 2)).unwrap();
    assert_eq!(l.busy_grid(), 5);
    let c = *l.claim_of(GridKey(9, 2)).unwrap();
    assert_eq!(c.reservation_end, Some(150));
    assert!(l.reservation(GridKey(9, 2)).is_none());
    // The claim is planned to end at 150: local jobs may plan around it.
    l.advance(130);
    assert!(l.release(130, GridKey(9, 2)));
    ok(&l);
}

#[test]
fn unclaimed_reservation_expires() {
    let mut l = lrm(10, LocalPolicy::EasyBackfill);
    l.reserve(0, GridKey(1, 0), 10, 100, 100).unwrap();
    assert_eq!(l.next_event_time(), Some(100));
    assert!(l.advance(100).is_empty());
    assert_eq!(l.next_event_time(), Some(200));
    assert_eq!(l.advance(250), vec![LrmEvent::ReservationExpired { key: GridKey(1, 0) }]);
    assert_eq!(l.next_event_time(), None);
    assert_eq!(l.claim_reservation(250, GridKey(1, 0)), Err(ClaimRejected::NoReservation));
    // Cancelling.
    l.reserve(250, GridKey(2, 0), 10, 300, 100).unwrap();
    let j = l.submit_local(250, LocalJob::new(1, 100, 100)).unwrap();
    assert_eq!(start(&l, j), None);
    assert!(l.cancel_reservation(260, GridKey(2, 0)));
    assert!(!l.cancel_reservation(260, GridKey(2, 0)));
    assert_eq!(start(&l, j), Some(260));
    ok(&l);
}

#[test]
fn kill_running_and_queued_jobs() {
    let mut l = lrm(10, LocalPolicy::Fcfs);
    let a = l.submit_local(0, LocalJob::injected(8, 100, 100)).unwrap();
    let b = l.submit_local(0, LocalJob::new(8, 100, 100)).unwrap();
    let c = l.submit_local(0, LocalJob::new(2, 100, 100)).unwrap();
    assert_eq!(l.busy_injected(), 8);
    assert!(l.kill_local(10, c));
    assert_eq!(l.job(c).unwrap().state, LocalJobState::Killed);
    assert!(l.kill_local(20, a));
    assert!(!l.kill_local(20, a));
    assert_eq!(l.busy_injected(), 0);
    assert_eq!(start(&l, b), Some(20));
    assert_eq!(l.job(a).unwrap().end_ms, Some(20));
    assert!(!l.kill_local(20, LocalJobId(99)));
    // The killed job's end is not an event any more.
    assert_eq!(l.next_event_time(), Some(120));
    ok(&l);
}

#[test]
fn busy_processor_time_accounting() {
    let mut l = lrm(10, LocalPolicy::Fcfs);
    l.submit_local(0, LocalJob::injected(2, 100, 100)).unwrap();
    l.submit_local(0, LocalJob::new(3, 50, 50)).unwrap();
    l.claim(10, GridKey(1, 0), 4).unwrap();
    l.advance(200);
    assert_eq!(l.local_busy_proc_ms(200), 2 * 100 + 3 * 50);
    assert_eq!(l.injected_busy_proc_ms(200), 200);
    assert_eq!(l.grid_busy_proc_ms(300), 4 * 290);
    let total: u64 = l.jobs().iter().map(|r| r.proc_ms_until(200)).sum();
    assert_eq!(total, 350);
}

#[test]
fn many_jobs_are_handled_quickly() {
    // 20k jobs on a 256-processor site at ~90% offered load (queues of hundreds).
    let mut l = lrm(256, LocalPolicy::EasyBackfill);
    let mut rng = crate::rng::Rng::new(3);
    let mut t = 0;
    for _ in 0..20_000 {
        t += rng.exponential(14_000.0) as Millis;
        l.advance(t);
        let procs = rng.range_inclusive_u64(1, 64) as u32;
        let rt = rng.range_inclusive_u64(1_000, 200_000);
        let est = rt + rng.range_inclusive_u64(0, 200_000);
        l.submit_local(t, LocalJob::new(procs, rt, est)).unwrap();
    }
    while let Some(n) = l.next_event_time() {
        l.advance(n);
    }
    assert_eq!(l.queued_local(), 0);
    assert!(l.jobs().iter().all(|r| r.state == LocalJobState::Finished));
    let used = l.local_busy_proc_ms(l.now()) as f64 / (256.0 * l.now() as f64);
    assert!(used > 0.8, "utilization {used}");
    ok(&l);
}
