//! The simulator's side of the broker (001): queue-wait estimates computed by simulating each
//! site's LRM queue, handed to the core with `update_site_queue_estimate`.

use koalesce_core::broker::{QueueEstimate, QueueOrder, FOREVER};
use koalesce_core::model::Millis;

use crate::lrm::{LocalPolicy, LocalRm};

/// What `lrm` holds at `now` — running local jobs until their estimated end (the LRM plans
/// with estimates, not the runtimes it cannot know), claims (forever, or until the end of the
/// reservation they came from), unclaimed reservations — as `(start, end, processors)`.
pub fn held(lrm: &LocalRm, now: Millis) -> Vec<(Millis, Millis, u32)> {
    let mut items = Vec::new();
    for id in lrm.running() {
        let r = lrm.job(id).expect("running job has a record");
        let start = r.start_ms.expect("running job has a start");
        items.push((start, (start + r.estimate_ms).max(now + 1), r.procs));
    }
    for (_, c) in lrm.claims() {
        let end = match c.reservation_end {
            Some(e) if e > now => e,
            _ => FOREVER,
        };
        items.push((c.since, end, c.procs));
    }
    for (_, r) in lrm.reservations() {
        items.push((r.start, r.end, r.procs));
    }
    items
}

/// The site's queue-wait estimate: what it holds, and its queued local jobs planned in queue
/// order with their estimates (an FCFS queue keeps the order; an EASY queue is predicted as
/// conservative backfilling, the usual predictor for backfilling LRMs).
pub fn queue_estimate(lrm: &LocalRm, now: Millis) -> QueueEstimate {
    let queued: Vec<(u32, Millis)> = lrm
        .queue()
        .map(|id| {
            let r = lrm.job(id).expect("queued job has a record");
            (r.procs, r.estimate_ms)
        })
        .collect();
    let order = match lrm.config().policy {
        LocalPolicy::Fcfs => QueueOrder::Fcfs,
        LocalPolicy::EasyBackfill => QueueOrder::Backfill,
    };
    QueueEstimate::plan(lrm.capacity(), now, held(lrm, now), queued, order)
}
