//! Tests of the local executor's site layout and backend.

use super::*;

/// A site's `jobs/` spreads its new directories wherever the file system can (here: when
/// a directory beside it takes the flag).
#[test]
fn jobs_directory_spreads_new_directories() {
    use rustix::fs::{ioctl_getflags, ioctl_setflags, IFlags};
    let tmp = tempfile::tempdir().unwrap();
    let probe = tmp.path().join("probe");
    std::fs::create_dir(&probe).unwrap();
    let f = std::fs::File::open(&probe).unwrap();
    let supported = ioctl_getflags(&f).and_then(|fl| ioctl_setflags(&f, fl | IFlags::TOPDIR)).is_ok();
    let paths = SitePaths::create(tmp.path(), "s").unwrap();
    let jobs = std::fs::File::open(&paths.jobs).unwrap();
    let flagged = ioctl_getflags(&jobs).is_ok_and(|fl| fl.contains(IFlags::TOPDIR));
    assert_eq!(
        flagged,
        supported,
        "jobs/ under {} (TOPDIR supported: {supported})",
        tmp.path().display()
    );
    assert!(!ioctl_getflags(std::fs::File::open(&paths.storage).unwrap()).is_ok_and(|fl| fl.contains(IFlags::TOPDIR)));
    // Created again (a restart): still flagged, no error.
    SitePaths::create(tmp.path(), "s").unwrap();
    assert_eq!(spread_new_directories(&paths.jobs), supported);
}

fn site(slots: u32) -> LocalBackend {
    let sup = SupervisorCommand {
        program: "/bin/false".into(),
        args: Vec::new(),
        launcher: None,
    };
    LocalBackend::new("s", slots, true, sup)
}

fn at(processors: u32, start_ms: u64, duration_ms: u64) -> ReservationRequest {
    ReservationRequest {
        site: "s".into(),
        processors,
        start_ms,
        duration_ms,
    }
}

/// One batch answers as the same requests one after the other would, in order: a
/// refusal in the middle does not stop the rest; an unknown site is an error of its own.
#[test]
fn a_batch_answers_like_requests_one_by_one() {
    let t = crate::now_ms() + 3_600_000;
    let mut reqs = vec![at(3, t, 60_000), at(2, t, 60_000), at(1, t, 60_000), at(1, t + 60_000, 1_000)];
    reqs.push(ReservationRequest {
        site: "elsewhere".into(),
        ..at(1, t, 1)
    });
    let (one, many) = (site(4), site(4));
    let single: Vec<_> = reqs.iter().map(|r| one.reserve(r).map_err(|e| e.to_string())).collect();
    let batch: Vec<_> = many.reserve_many(&reqs).into_iter().map(|r| r.map_err(|e| e.to_string())).collect();
    assert_eq!(single, batch);
    assert!(
        batch[0].is_ok() && batch[1].is_err() && batch[2].is_ok() && batch[3].is_ok(),
        "{batch:?}"
    );
    assert!(
        batch[1].as_ref().unwrap_err().contains("2 processors requested, 1 idle"),
        "{batch:?}"
    );
    assert!(matches!(many.reserve_many(&reqs[4..])[0], Err(BackendError::UnknownSite(_))));
    // Both hold 4 reserved processors during [t, t + 1 min): no plain claim fits.
    assert_eq!(many.processors("s").unwrap().idle, 0);
}

/// A flexible reservation the site moves shows in `take_moves` with its new times, once;
/// one moved later cannot be claimed before its start.
#[test]
fn moves_are_reported_once_and_a_reservation_is_claimed_only_from_its_start() {
    let b = site(4);
    let t = crate::now_ms() + 3_600_000;
    let w = |p: u32, lo: u64, hi: u64, flexible: bool| WindowRequest {
        site: "s".into(),
        processors: p,
        duration_ms: 60_000,
        earliest_ms: lo,
        latest_ms: hi,
        flexible,
    };
    let WindowAnswer::Granted { id: flex, start_ms } = b.reserve_window(&w(4, t, t + 600_000, true)).unwrap() else {
        panic!()
    };
    assert_eq!(start_ms, t);
    assert!(b.take_moves().is_empty());
    // A fixed one at t: the flexible one moves to t + 1 min.
    assert!(matches!(b.reserve_window(&w(4, t, t, false)).unwrap(), WindowAnswer::Granted { start_ms, .. } if start_ms == t));
    let moves = b.take_moves();
    assert_eq!(
        moves,
        vec![ReservationMove {
            id: flex.clone(),
            start_ms: t + 60_000,
            end_ms: t + 120_000
        }]
    );
    assert!(b.take_moves().is_empty());
    let e = b.claim_reserved(&flex).unwrap_err().to_string();
    assert!(e.contains("not yet"), "{e}");
    // Slurm-like sites say they do not move; this one does.
    assert!(b.moves_flexible());
}
