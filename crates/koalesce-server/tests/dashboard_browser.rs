//! The dashboard as people use it, in a real headless Chromium (never skipped: without
//! Chromium this fails; CI installs it): a wrong token shows no data; sign in; a job submitted
//! through the API appears in the jobs table live (no reload) and reaches "succeeded"; its
//! page shows the timeline and its output; another job is cancelled from its page; another
//! user sees none of it. Screenshots go to target/screenshots/dashboard-*.png.

mod common;

use std::time::Duration;

use common::{server, shell_job, submit, token, wait_state};
use koalesce_web::browser::Browser;

const WAIT: Duration = Duration::from_secs(30);

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("koalesce-dashboard-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn sign_in(b: &mut Browser, url: &str, token: &str) {
    b.type_into("#token", token).unwrap();
    b.click("#signin button[type=submit]").unwrap();
    b.wait_load("sign-in answer").unwrap();
    let _ = url;
}

fn text(b: &mut Browser, css: &str) -> String {
    b.text(css).unwrap_or_default()
}

#[test]
fn sign_in_watch_a_job_live_open_its_timeline_and_cancel_another() {
    let dir = tmp("live");
    let srv = server(&dir, &[("alpha", 4), ("beta", 4)]);
    let alice = token(&dir, "alice", false);
    let bob = token(&dir, "bob", false);
    let url = srv.url();
    let mut b = Browser::launch().expect("Chromium must be installed (apt-get install chromium)");

    // Not signed in: the jobs page sends us to the sign-in form, which comes back after.
    b.goto(&format!("{url}/jobs")).unwrap();
    assert!(b.url().unwrap().contains("/signin?next=%2Fjobs"), "{}", b.url().unwrap());
    // A wrong token: the form again with the reason, no data.
    sign_in(&mut b, &url, "koa_0000000000000000000000000000000000000000000000000000000000000000");
    assert!(text(&mut b, ".notice.error").contains("Unknown, revoked or expired token"));
    assert!(b
        .eval("document.querySelector('#jobs-list, table') === null")
        .unwrap()
        .as_bool()
        .unwrap());
    b.screenshot("dashboard-signin-refused").unwrap();

    // Alice signs in and lands on the jobs page; her session cookie is HttpOnly and Strict.
    sign_in(&mut b, &url, &alice);
    assert!(b.url().unwrap().ends_with("/jobs"), "{}", b.url().unwrap());
    b.wait_for("#jobs-list", WAIT).unwrap();
    let cookies = b.cookies().unwrap();
    let session = cookies.iter().find(|c| c["name"] == "koalesce_session").expect("session cookie");
    assert_eq!(session["httpOnly"], true, "{session}");
    assert_eq!(session["sameSite"], "Strict", "{session}");
    assert_eq!(b.eval("document.cookie").unwrap(), "", "no cookie readable by scripts");
    b.wait_until("document.querySelector('.live-dot.on') !== null", WAIT).unwrap();

    // A job submitted through the API appears without a reload and reaches succeeded.
    b.eval("window.__stayed = true").unwrap();
    let id = submit(
        &srv,
        &alice,
        &shell_job("hello-dashboard", "sleep 1; echo hello from $KOALESCE_SITE", 2, ""),
    );
    b.wait_for(&format!("#job-{id}"), WAIT).unwrap();
    b.wait_until(
        &format!("(document.querySelector('#job-{id}') || {{}}).innerText.includes('succeeded')"),
        WAIT,
    )
    .unwrap();
    assert_eq!(b.eval("window.__stayed === true").unwrap(), true, "updated live, not reloaded");
    assert!(text(&mut b, &format!("#job-{id}")).contains("hello-dashboard"));
    b.screenshot("dashboard-jobs").unwrap();

    // Its page: a Gantt row per component at its site, the figures, the output's tail.
    b.click(&format!("#job-{id} td:nth-child(2) a")).unwrap();
    b.wait_load("job page").unwrap();
    b.wait_for("#job-gantt svg", WAIT).unwrap();
    let head = text(&mut b, "#job-head");
    assert!(head.contains(&format!("Job {id}")) && head.contains("succeeded"), "{head}");
    let gantt = b.html().unwrap();
    assert!(
        gantt.contains("c0 @ alpha") || gantt.contains("c0 @ beta"),
        "component row with its site"
    );
    let timeline = text(&mut b, "#job-timeline");
    for fig in ["PGT", "PWT", "TWT", "started", "finished"] {
        assert!(timeline.contains(fig), "{fig} in {timeline}");
    }
    assert!(text(&mut b, "#job-output").contains("hello from"), "stdout tail");
    assert!(
        b.eval("document.querySelector('#cancel') === null").unwrap().as_bool().unwrap(),
        "no cancel once ended"
    );
    b.screenshot("dashboard-job").unwrap();
    b.screenshot_of("#job-gantt", "dashboard-job-gantt").unwrap();

    // Another job, cancelled from its page (the confirmation accepted).
    let long = submit(&srv, &alice, &shell_job("long-one", "sleep 120", 1, ""));
    wait_state(&srv, &alice, long, &["running"], 30);
    // The overview while it runs: its processor is claimed by koalesce at its site.
    b.goto(&format!("{url}/")).unwrap();
    b.wait_for("#site-processors svg", WAIT).unwrap();
    b.wait_until("document.querySelector('#overview-stats').innerText.includes('1 of 8')", WAIT)
        .unwrap();
    b.wait_for("#utilization svg", WAIT).unwrap();
    b.screenshot("dashboard-overview").unwrap();
    b.goto(&format!("{url}/jobs/{long}")).unwrap();
    b.wait_for("#cancel", WAIT).unwrap();
    b.accept_dialogs(true);
    b.click("#cancel").unwrap();
    b.wait_load("cancel answer").unwrap();
    b.wait_until("document.querySelector('#job-head').innerText.includes('cancelled')", WAIT)
        .unwrap();
    let j = wait_state(&srv, &alice, long, &["cancelled"], 30);
    assert_eq!(j["state"], "cancelled");
    b.screenshot("dashboard-job-cancelled").unwrap();

    // The overview: sites, queues, charts.
    b.goto(&format!("{url}/")).unwrap();
    b.wait_for("#site-processors svg", WAIT).unwrap();
    assert_eq!(b.rects("#overview-queues tbody tr").unwrap().len(), 4);
    let sites = text(&mut b, "#overview-sites");
    assert!(sites.contains("alpha") && sites.contains("beta"), "{sites}");
    b.wait_for("#utilization svg", WAIT).unwrap();
    b.wait_for("#bandwidth svg", WAIT).unwrap();
    assert!(
        text(&mut b, "#overview-stats").contains("0 of 8"),
        "the cancelled job let go of its processor"
    );
    // The only failed load is the refused sign-in (401) from the start.
    let errors: Vec<String> = b
        .console_errors()
        .into_iter()
        .filter(|e| !(e.contains("status of 401") && e.ends_with("/signin")))
        .collect();
    assert!(errors.is_empty(), "console errors: {errors:?}");

    // Bob signs in: none of Alice's jobs, and her job's page answers like a missing one.
    b.click("header.top form button").unwrap();
    b.wait_load("sign-out").unwrap();
    assert!(b.url().unwrap().contains("/signin"));
    sign_in(&mut b, &url, &bob);
    b.goto(&format!("{url}/jobs")).unwrap();
    b.wait_for("#jobs-list", WAIT).unwrap();
    assert!(text(&mut b, "#jobs-list").contains("No jobs match."));
    b.goto(&format!("{url}/jobs/{id}")).unwrap();
    let page = b.html().unwrap();
    assert!(page.contains(&format!("job {id} not found")) && !page.contains("hello-dashboard"));
    drop(b);
    srv.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
