//! `GET /metrics`: the server's Prometheus metrics (jobs by state, queues, scans, transfers,
//! the database writer, the sites; and how long acknowledgements and the state lock took,
//! see [`crate::daemon::Latency`]).

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use axum::body::Body;
use axum::extract::State as AxState;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use koalesce_core::Priority;

use crate::api::S;
use crate::daemon::Shared;

const STATES: &[&str] = &koalesce_core::JobState::NAMES;

/// One unlabelled sample with its `# TYPE` line.
fn scalar(o: &mut String, kind: &str, name: &str, value: impl std::fmt::Display) {
    use std::fmt::Write;
    let _ = writeln!(o, "# TYPE {name} {kind}\n{name} {value}");
}

pub(crate) async fn metrics(AxState(s): AxState<S>) -> Response {
    let text = render_metrics(&s);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], Body::from(text)).into_response()
}

pub fn render_metrics(s: &Shared) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    // The core's figures under the state lock (and the few sections that read the state,
    // rendered there: a handful of lines per site); everything else after releasing it.
    let st = s.lock();
    let mut by_state: HashMap<&str, u64> = STATES.iter().map(|k| (*k, 0)).collect();
    // Live jobs from the core; ended ones are counted when they end (and loaded at startup).
    for j in st.core.jobs().filter(|j| !j.state.is_terminal()) {
        *by_state.entry(j.state.name()).or_default() += 1;
    }
    for (k, n) in &st.ended {
        *by_state.entry(k).or_default() += n;
    }
    let queued: Vec<(&str, usize)> = Priority::ALL.iter().map(|p| (p.name(), st.core.queued(*p).count())).collect();
    let stats = st.core.stats().clone();
    let mut tail = String::new();
    let _ = writeln!(tail, "# TYPE koalesce_site_processors gauge");
    crate::gridway::render_metrics(&st, &s.data_catalogue, &mut tail);
    crate::daemon::network::render_metrics(s, &st, &mut tail);
    for (i, site) in st.core.sites().iter().enumerate() {
        let used = s.sites[i].used.load(Ordering::Relaxed);
        let v = st.core.site_view(koalesce_core::SiteId(i as u32));
        let _ = writeln!(
            tail,
            "koalesce_site_processors{{site=\"{}\",kind=\"total\"}} {}",
            site.name, site.processors
        );
        let _ = writeln!(tail, "koalesce_site_processors{{site=\"{}\",kind=\"used\"}} {}", site.name, used);
        let _ = writeln!(
            tail,
            "koalesce_site_processors{{site=\"{}\",kind=\"placed_unclaimed\"}} {}",
            site.name, v.placed_unclaimed
        );
    }
    drop(st);
    let _ = writeln!(o, "# HELP koalesce_jobs Jobs by state.\n# TYPE koalesce_jobs gauge");
    for k in STATES {
        let _ = writeln!(o, "koalesce_jobs{{state=\"{k}\"}} {}", by_state[k]);
    }
    let _ = writeln!(
        o,
        "# HELP koalesce_queue_length Jobs in each placement queue.\n# TYPE koalesce_queue_length gauge"
    );
    for (p, n) in queued {
        let _ = writeln!(o, "koalesce_queue_length{{priority=\"{p}\"}} {n}");
    }
    let m = &s.metrics;
    let r = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    scalar(&mut o, "counter", "koalesce_placement_tries_total", stats.placement_tries);
    scalar(&mut o, "counter", "koalesce_claiming_tries_total", stats.claiming_tries);
    scalar(&mut o, "counter", "koalesce_preemptions_total", stats.preemptions);
    scalar(&mut o, "counter", "koalesce_soft_errors_total", stats.soft_errors);
    let _ = writeln!(
        o,
        "# HELP koalesce_scan_duration_seconds Placement scan (timer handling) duration.\n# TYPE koalesce_scan_duration_seconds summary\nkoalesce_scan_duration_seconds_sum {}\nkoalesce_scan_duration_seconds_count {}",
        r(&m.scan_micros_total) as f64 / 1e6,
        r(&m.scans)
    );
    let _ = writeln!(
        o,
        "# HELP koalesce_reservations_granted_total Advance reservations the sites granted.\n# TYPE koalesce_reservations_granted_total counter\nkoalesce_reservations_granted_total {}\n# HELP koalesce_reservations_refused_total Advance reservations the sites refused.\n# TYPE koalesce_reservations_refused_total counter\nkoalesce_reservations_refused_total {}\n# HELP koalesce_reservations_moved_total Flexible reservations the sites moved inside their windows.\n# TYPE koalesce_reservations_moved_total counter\nkoalesce_reservations_moved_total {}\n# HELP koalesce_reservation_calls_total Calls the LRM worker made to sites for the scheduler's reservations (one per site per batch).\n# TYPE koalesce_reservation_calls_total counter\nkoalesce_reservation_calls_total {}",
        r(&m.reservations_granted),
        r(&m.reservations_refused),
        r(&m.reservations_moved),
        r(&m.reservation_calls)
    );
    let secs = |ms: i64| ms as f64 / 1e3;
    let n = r(&m.broker_finished);
    for (what, sum, abs) in [
        ("ttd", &m.broker_ttd_error_ms, &m.broker_ttd_abs_error_ms),
        ("tts", &m.broker_tts_error_ms, &m.broker_tts_abs_error_ms),
    ] {
        let _ = writeln!(
            o,
            "# HELP koalesce_broker_{what}_error_seconds Actual minus predicted {} of the broker's jobs that succeeded (001 §3.1).\n# TYPE koalesce_broker_{what}_error_seconds summary\nkoalesce_broker_{what}_error_seconds_sum {}\nkoalesce_broker_{what}_error_seconds_count {n}\n# HELP koalesce_broker_{what}_abs_error_seconds Absolute prediction error, summed.\n# TYPE koalesce_broker_{what}_abs_error_seconds summary\nkoalesce_broker_{what}_abs_error_seconds_sum {}\nkoalesce_broker_{what}_abs_error_seconds_count {n}",
            if what == "ttd" { "Total Time to Delivery" } else { "Total Time to Start" },
            secs(sum.load(Ordering::Relaxed)),
            r(abs) as f64 / 1e3,
        );
    }
    scalar(
        &mut o,
        "gauge",
        "koalesce_last_scan_duration_seconds",
        r(&m.last_scan_micros) as f64 / 1e6,
    );
    scalar(&mut o, "counter", "koalesce_transfer_bytes_total", r(&m.transfer_bytes));
    scalar(&mut o, "counter", "koalesce_transfers_total", r(&m.transfers));
    scalar(&mut o, "counter", "koalesce_transfer_failures_total", r(&m.transfer_failures));
    scalar(&mut o, "counter", "koalesce_submissions_total", r(&m.submissions));
    scalar(&mut o, "counter", "koalesce_launches_total", r(&m.launches));
    scalar(&mut o, "counter", "koalesce_action_chunks_left_total", r(&m.action_chunks_left));
    scalar(&mut o, "counter", "koalesce_replica_checks_total", r(&m.replica_checks));
    scalar(&mut o, "counter", "koalesce_replicas_quarantined_total", r(&m.replicas_quarantined));
    let w = s.store.stats();
    scalar(&mut o, "counter", "koalesce_db_commits_total", w.commits);
    scalar(&mut o, "counter", "koalesce_db_writes_total", w.ops);
    scalar(&mut o, "counter", "koalesce_db_wal_catch_ups_total", w.catch_ups);
    let _ = writeln!(
        o,
        "# HELP koalesce_db_wal_catch_up_max_seconds The longest checkpoint the writer ran itself (no commit meanwhile).\n# TYPE koalesce_db_wal_catch_up_max_seconds gauge\nkoalesce_db_wal_catch_up_max_seconds {}",
        w.longest_catch_up_us as f64 / 1e6
    );
    let _ = writeln!(
        o,
        "# HELP koalesce_db_group_max_seconds The longest group commit.\n# TYPE koalesce_db_group_max_seconds gauge\nkoalesce_db_group_max_seconds {}\n# TYPE koalesce_db_largest_group gauge\nkoalesce_db_largest_group {}\n# HELP koalesce_db_first_groups_total Groups of new jobs' rows committed ahead of other pending writes.\n# TYPE koalesce_db_first_groups_total counter\nkoalesce_db_first_groups_total {}",
        w.longest_group_us as f64 / 1e6,
        w.largest_group,
        w.first_groups
    );
    let l = &m.latency;
    let (held, at) = l.lock_held_max();
    let _ = writeln!(
        o,
        "# HELP koalesce_state_lock_held_max_seconds The longest hold of the daemon's state lock, and where it was taken.\n# TYPE koalesce_state_lock_held_max_seconds gauge\nkoalesce_state_lock_held_max_seconds{{at=\"{}\"}} {}\n# HELP koalesce_state_lock_long_holds_total Holds of the state lock of 5 ms or more.\n# TYPE koalesce_state_lock_long_holds_total counter\nkoalesce_state_lock_long_holds_total {}",
        at.unwrap_or_default(),
        held as f64 / 1e6,
        r(&l.lock_long_holds)
    );
    let _ = writeln!(
        o,
        "# HELP koalesce_submit_ack_max_seconds The longest a submission took from its request to its answer (durable), and its longest waits for the state lock and for the commit.\n# TYPE koalesce_submit_ack_max_seconds gauge\nkoalesce_submit_ack_max_seconds{{part=\"total\"}} {}\nkoalesce_submit_ack_max_seconds{{part=\"lock_wait\"}} {}\nkoalesce_submit_ack_max_seconds{{part=\"commit\"}} {}\n# HELP koalesce_submit_acks_slow_total Submissions answered after more than 20 ms.\n# TYPE koalesce_submit_acks_slow_total counter\nkoalesce_submit_acks_slow_total {}",
        r(&l.ack_max_us) as f64 / 1e6,
        r(&l.ack_lock_wait_max_us) as f64 / 1e6,
        r(&l.ack_commit_max_us) as f64 / 1e6,
        r(&l.acks_slow)
    );
    let _ = writeln!(
        o,
        "# HELP koalesce_state_lock_site_held_max_seconds The longest hold of the state lock by the line that took it (holds of 1 ms or more).\n# TYPE koalesce_state_lock_site_held_max_seconds gauge"
    );
    let sites = l.lock_sites();
    for (at, h) in &sites {
        let _ = writeln!(
            o,
            "koalesce_state_lock_site_held_max_seconds{{at=\"{at}\"}} {}",
            h.max_us as f64 / 1e6
        );
    }
    let _ = writeln!(
        o,
        "# HELP koalesce_state_lock_site_holds_total Holds of the state lock of 1 ms or more by the line that took it.\n# TYPE koalesce_state_lock_site_holds_total counter"
    );
    for (at, h) in &sites {
        let _ = writeln!(o, "koalesce_state_lock_site_holds_total{{at=\"{at}\"}} {}", h.count);
    }
    let _ = writeln!(
        o,
        "# HELP koalesce_state_lock_site_held_seconds_total Time those holds kept the state lock, by the line that took it.\n# TYPE koalesce_state_lock_site_held_seconds_total counter"
    );
    for (at, h) in &sites {
        let _ = writeln!(
            o,
            "koalesce_state_lock_site_held_seconds_total{{at=\"{at}\"}} {}",
            h.total_us as f64 / 1e6
        );
    }
    o.push_str(&tail);
    o
}
