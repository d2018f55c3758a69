//! `koalesce bench dashboard`: the server-side cost of rendering each dashboard page with
//! many jobs. A fresh data directory gets `ended` finished jobs (written straight into the
//! store, as ended jobs are kept), a server starts on it and `live` jobs are submitted through
//! its API (the placement scan is an hour away, so they stay queued in the core); then every
//! page is rendered `rounds` times as the handlers render it (signed-in admin and user) and
//! once more over HTTP.

use std::time::Instant;

use koalesce_api::dto::{ComponentDetail, JobDetail, Timeline};
use koalesce_core::config::ScanInterval;
use rusqlite::params;

use super::jobs::JobsQuery;
use super::query::Filter;
use super::{history, job, jobs, overview, session, Viewer, Web};
use crate::{create_token, store, test_options, BackgroundServer, SupervisorCommand};

/// One measured page.
#[derive(Debug, Clone)]
pub struct Timing {
    pub page: String,
    pub median_ms: f64,
    pub p95_ms: f64,
    pub max_ms: f64,
    pub bytes: usize,
}

/// The result of [`run`].
#[derive(Debug, Clone)]
pub struct DashboardBench {
    pub ended: usize,
    pub live: usize,
    pub setup_s: f64,
    pub timings: Vec<Timing>,
}

const SITES: [(&str, u32); 4] = [("alpha", 64), ("beta", 64), ("gamma", 32), ("delta", 32)];
const STATES: [&str; 3] = ["succeeded", "failed", "cancelled"];

fn ended_detail(id: u64, user: &str, state: &str, now: u64) -> JobDetail {
    let site = |k: u64| SITES[(k % 4) as usize].0.to_string();
    let submitted = now - 86_400_000 + id;
    let components: Vec<ComponentDetail> = (0..1 + id % 2)
        .map(|i| ComponentDetail {
            index: i,
            processors: 4,
            site: Some(site(id + i)),
            state: "finished".into(),
            exit_code: Some(0),
            stdout: None,
            stderr: None,
        })
        .collect();
    let mut sites: Vec<String> = components.iter().filter_map(|c| c.site.clone()).collect();
    sites.sort();
    JobDetail {
        id,
        name: format!("bench-{id}"),
        user: user.into(),
        state: state.into(),
        priority: "high".into(),
        size: 4 * components.len() as u64,
        components,
        sites,
        submitted_ms: submitted,
        started_ms: Some(submitted + 5_000),
        finished_ms: Some(submitted + 65_000),
        exit_ok: Some(state == "succeeded"),
        timeline: Timeline {
            submitted,
            placed: Some(submitted + 1_000),
            claimed: Some(submitted + 4_000),
            started: Some(submitted + 5_000),
            finished: Some(submitted + 65_000),
            ftt_ms: 0,
            transfer_ms: None,
            pgt_ms: Some(3_000),
            pwt_ms: Some(1_000),
            twt_ms: Some(5_000),
        },
        placement_tries: 1,
        claiming_tries: 1,
        failure: (state != "succeeded").then(|| format!("bench job {state}")),
        outputs: vec![],
        ..JobDetail::default()
    }
}

fn fill(dir: &std::path::Path, ended: usize) -> anyhow::Result<()> {
    let mut conn = store::open_db(&dir.join(crate::DB_FILE))?;
    let tx = conn.transaction()?;
    {
        let mut ins = tx.prepare(
            "INSERT INTO jobs (id, user, name, description, spec, state, core, meta, detail, submitted_ms) \
             VALUES (?1, ?2, ?3, ?4, '{}', ?5, '{}', '{}', ?6, ?7)",
        )?;
        let now = crate::now_ms();
        for i in 1..=ended as u64 {
            let user = format!("user{}", i % 10);
            let state = STATES[(i % 3) as usize];
            let d = ended_detail(i, &user, state, now);
            let desc = format!("name = \"bench-{i}\"\nexecutable = \"/bin/true\"\n[[components]]\nprocessors = 4\n");
            ins.execute(params![
                i as i64,
                user,
                d.name,
                desc,
                state,
                serde_json::to_string(&d)?,
                d.submitted_ms as i64
            ])?;
        }
    }
    tx.commit()?;
    Ok(())
}

fn time(page: &str, rounds: usize, mut f: impl FnMut() -> usize) -> Timing {
    let mut ms = Vec::with_capacity(rounds);
    let mut bytes = 0;
    for _ in 0..rounds.max(1) {
        let t = Instant::now();
        bytes = f();
        ms.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
    Timing {
        page: page.to_string(),
        median_ms: at(0.5),
        p95_ms: at(0.95),
        max_ms: ms[ms.len() - 1],
        bytes,
    }
}

/// Runs the benchmark in a temporary directory (removed afterwards).
pub fn run(ended: usize, live: usize, rounds: usize) -> anyhow::Result<DashboardBench> {
    let t0 = Instant::now();
    let tmp = tempfile_dir()?;
    let dir = tmp.join("data");
    std::fs::create_dir_all(&dir)?;
    fill(&dir, ended)?;
    let admin_token = create_token(&dir, "root", true)?;
    let user_token = create_token(&dir, "user3", false)?;
    let mut opts = test_options(
        &dir,
        &SITES,
        SupervisorCommand {
            program: "/bin/false".into(),
            args: vec![],
            launcher: None,
        },
    );
    opts.config.scheduler.scan_interval = ScanInterval::Fixed { interval_ms: 3_600_000 };
    let server = BackgroundServer::start(opts)?;
    for i in 0..live {
        let body =
            format!("name = \"live-{i}\"\nexecutable = \"/bin/true\"\n[[components]]\nprocessors = 8\n[[components]]\nprocessors = 8\n");
        let (code, answer) = server.request("POST", "/api/v1/jobs", Some(&user_token), body.as_bytes());
        anyhow::ensure!(code == 201, "submitting a live job: {code} {answer}");
    }
    let web = Web::new(server.shared());
    {
        // An hour of samples, as the overview has after an hour.
        let now = crate::now_ms();
        let mut h = web.history();
        for i in (0..=history::WINDOW_MS / history::INTERVAL_MS).rev() {
            h.push(history::sample(&web.shared, now - i * history::INTERVAL_MS));
        }
    }
    let setup_s = t0.elapsed().as_secs_f64();
    let admin = session::viewer_of_token(&web.shared, &admin_token).ok_or_else(|| anyhow::anyhow!("admin token refused"))?;
    let user = session::viewer_of_token(&web.shared, &user_token).ok_or_else(|| anyhow::anyhow!("user token refused"))?;
    let q = |f: Filter, page: Option<usize>| JobsQuery { filter: f, page };
    let by = |k: &str, v: &str| {
        let mut f = Filter::default();
        match k {
            "state" => f.state = Some(v.into()),
            "site" => f.site = Some(v.into()),
            "name" => f.name = Some(v.into()),
            _ => f.user = Some(v.into()),
        }
        f
    };
    let last_page = (ended + live).div_ceil(super::query::PER_PAGE);
    let cases: Vec<(String, &Viewer, JobsQuery)> = vec![
        ("jobs, page 1 (admin)".into(), &admin, q(Filter::default(), None)),
        (
            format!("jobs, page {last_page} (admin, the last)"),
            &admin,
            q(Filter::default(), Some(last_page)),
        ),
        (
            "jobs, state=failed, page 100 (admin)".into(),
            &admin,
            q(by("state", "failed"), Some(100)),
        ),
        ("jobs, site=gamma (admin)".into(), &admin, q(by("site", "gamma"), None)),
        ("jobs, name contains 4242 (admin)".into(), &admin, q(by("name", "4242"), None)),
        ("jobs, user=user7 (admin)".into(), &admin, q(by("user", "user7"), None)),
        ("jobs, page 1 (user3: own jobs)".into(), &user, q(Filter::default(), None)),
        ("jobs, state=queued (user3)".into(), &user, q(by("state", "queued"), None)),
    ];
    let mut timings = vec![
        time("overview (admin)", rounds, || overview::render(&web, &admin).len()),
        time("overview (user3)", rounds, || overview::render(&web, &user).len()),
    ];
    for (name, v, query) in &cases {
        timings.push(time(name, rounds, || jobs::render(&web, v, query).len()));
    }
    let ended_id = (ended as u64).max(1);
    timings.push(time(&format!("job page, ended job {ended_id}"), rounds, || {
        job::render(&web, &admin, ended_id).map_or(0, |p| p.len())
    }));
    let live_id = ended as u64 + 1;
    if live > 0 {
        timings.push(time(&format!("job page, queued job {live_id}"), rounds, || {
            job::render(&web, &user, live_id).map_or(0, |p| p.len())
        }));
    }
    let cookie = format!("{}={admin_token}", session::SESSION_COOKIE);
    timings.push(time("GET /jobs over HTTP (admin, end to end)", rounds, || {
        http_get(server.addr, "/jobs", &cookie).map_or(0, |b| b.len())
    }));
    drop(server);
    let _ = std::fs::remove_dir_all(&tmp);
    Ok(DashboardBench {
        ended,
        live,
        setup_s,
        timings,
    })
}

fn tempfile_dir() -> anyhow::Result<std::path::PathBuf> {
    let d = std::env::temp_dir().join(format!("koalesce-bench-dashboard-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d)?;
    Ok(d)
}

fn http_get(addr: std::net::SocketAddr, path: &str, cookie: &str) -> anyhow::Result<String> {
    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let mut r = agent.get(&format!("http://{addr}{path}")).header("Cookie", cookie).call()?;
    anyhow::ensure!(r.status() == 200, "GET {path}: {}", r.status());
    Ok(r.body_mut().with_config().limit(64 << 20).read_to_string()?)
}

impl DashboardBench {
    /// The table `koalesce bench dashboard` prints.
    pub fn table(&self) -> String {
        use std::fmt::Write;
        let mut o = format!(
            "dashboard pages, server-side render time with {} ended jobs in the store and {} queued jobs in the core (setup {:.1} s)\n",
            self.ended, self.live, self.setup_s
        );
        let _ = writeln!(
            o,
            "{:<48} {:>10} {:>10} {:>10} {:>10}",
            "page", "median ms", "p95 ms", "max ms", "KiB"
        );
        for t in &self.timings {
            let _ = writeln!(
                o,
                "{:<48} {:>10.2} {:>10.2} {:>10.2} {:>10.1}",
                t.page,
                t.median_ms,
                t.p95_ms,
                t.max_ms,
                t.bytes as f64 / 1024.0
            );
        }
        o
    }
}
