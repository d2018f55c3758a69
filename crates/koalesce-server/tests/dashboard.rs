//! The dashboard's defences over plain HTTP: a wrong or missing token never shows data (pages
//! redirect to the sign-in form, event streams answer 401); forms without the CSRF token, or
//! posted from another origin, change nothing; users see only their own jobs in the table, in
//! the queue heads and on job pages; every asset is embedded; filters and paging work.

mod common;

use std::time::Duration;

use common::{json, server, shell_job, submit, token, wait_state};
use koalesce_server::http_request;

/// A fresh directory for one test, removed when dropped (also when the test fails).
fn tmp(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("koalesce-dashboard-http-{name}-"))
        .tempdir()
        .expect("a temporary directory")
}

/// GET or POST with a session cookie and extra headers; (status, location, body).
fn req(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    cookie: Option<&str>,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .into();
    let mut r = ureq::http::Request::builder().method(method).uri(format!("http://{addr}{path}"));
    if let Some(t) = cookie {
        r = r.header("Cookie", format!("koalesce_session={t}"));
    }
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    let mut resp = agent.run(r.body(body.as_bytes().to_vec()).unwrap()).unwrap();
    let loc = resp
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    (resp.status().as_u16(), loc, resp.body_mut().read_to_string().unwrap_or_default())
}

fn csrf(page: &str) -> String {
    let i = page.find("name=\"csrf\" value=\"").expect("a form with a CSRF token") + 19;
    page[i..i + 64].to_string()
}

#[test]
fn wrong_tokens_forged_forms_and_other_users_see_and_change_nothing() {
    let tmp = tmp("attacks");
    let dir = tmp.path().to_path_buf();
    let srv = server(&dir, &[("alpha", 2)]);
    let alice = token(&dir, "alice", false);
    let mallory = token(&dir, "mallory", false);
    let admin = token(&dir, "root", true);
    let a = srv.addr;
    let secret = submit(&srv, &alice, &shell_job("alice-secret-name", "sleep 60", 1, ""));
    wait_state(&srv, &alice, secret, &["running"], 30);
    // A second job that cannot be placed while the first holds one of the two processors.
    let queued = submit(&srv, &alice, &shell_job("alice-queued", "sleep 60", 2, ""));
    wait_state(&srv, &alice, queued, &["queued"], 10);

    // No token, a wrong token, a revoked token: the sign-in form, never data.
    for cookie in [None, Some("koa_wrong"), Some("")] {
        for path in ["/", "/jobs", &format!("/jobs/{secret}")] {
            let (code, loc, body) = req(a, "GET", path, cookie, &[], "");
            assert_eq!(code, 303, "{path} {cookie:?}");
            assert!(loc.starts_with("/signin?next="), "{loc}");
            assert!(!body.contains("alice"), "{body}");
        }
        for path in ["/events/overview", "/events/jobs", &format!("/events/jobs/{secret}")] {
            assert_eq!(req(a, "GET", path, cookie, &[], "").0, 401, "{path}");
        }
    }
    // Signing in with a wrong token: 401 and the form.
    let (_, _, form) = req(a, "GET", "/signin", None, &[], "");
    let pre = csrf(&form).chars().take(32).collect::<String>();
    let (code, _, body) = req(
        a,
        "POST",
        "/signin",
        None,
        &[
            ("Cookie", &format!("koalesce_signin={pre}")),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        &format!("csrf={pre}&token=koa_wrong&next=%2Fjobs"),
    );
    assert_eq!(code, 401, "{body}");
    assert!(body.contains("Unknown, revoked or expired token") && !body.contains("alice-secret"));
    // Without the double-submit cookie (login CSRF): refused even with a good token.
    let (code, _, _) = req(
        a,
        "POST",
        "/signin",
        None,
        &[("Content-Type", "application/x-www-form-urlencoded")],
        &format!("csrf={pre}&token={alice}"),
    );
    assert_eq!(code, 403);
    // With it: the session cookie, HttpOnly and SameSite=Strict.
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .into();
    let resp = agent
        .post(&format!("http://{a}/signin"))
        .header("Cookie", &format!("koalesce_signin={pre}"))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .send(format!("csrf={pre}&token={alice}&next=%2F%2Fevil.example%2F"))
        .unwrap();
    assert_eq!(resp.status(), 303);
    assert_eq!(resp.headers().get("location").unwrap(), "/", "no open redirect");
    let set = resp
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        set.contains(&format!("koalesce_session={alice}")) && set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );

    // Mallory sees neither Alice's jobs nor their names in the queue heads, and her job page
    // answers like a missing one.
    let (code, _, page) = req(a, "GET", "/jobs", Some(&mallory), &[], "");
    assert_eq!(code, 200);
    assert!(page.contains("No jobs match.") && !page.contains("alice-"), "{page}");
    let (_, _, page) = req(a, "GET", "/jobs?user=alice", Some(&mallory), &[], "");
    assert!(!page.contains("alice-"), "a user filter does not widen what a user sees");
    let (_, _, page) = req(a, "GET", "/", Some(&mallory), &[], "");
    assert!(!page.contains("alice-queued"), "queue heads of other users are not shown");
    let (code, _, page) = req(a, "GET", &format!("/jobs/{secret}"), Some(&mallory), &[], "");
    assert_eq!(code, 404);
    assert!(!page.contains("alice-secret-name"));
    let (code, _, missing) = req(a, "GET", "/jobs/999999", Some(&mallory), &[], "");
    assert_eq!(code, 404);
    assert_eq!(
        page.replace(&format!("job {secret} not"), "job X not"),
        missing.replace("job 999999 not", "job X not"),
        "same answer as a missing job"
    );

    // Cancel forms: Mallory's own CSRF token cannot cancel Alice's job; Alice's form without
    // its token, with a token of another session, or from another origin changes nothing.
    let (_, _, own) = req(a, "GET", "/jobs", Some(&mallory), &[], "");
    let mallory_csrf = csrf(&own);
    let form = [("Content-Type", "application/x-www-form-urlencoded")];
    let cancel = format!("/jobs/{secret}/cancel");
    assert_eq!(
        req(a, "POST", &cancel, Some(&mallory), &form, &format!("csrf={mallory_csrf}")).0,
        404
    );
    assert_eq!(req(a, "POST", &cancel, Some(&alice), &form, "").0, 403);
    assert_eq!(req(a, "POST", &cancel, Some(&alice), &form, &format!("csrf={mallory_csrf}")).0, 403);
    // Its page says why it waits.
    let (_, _, waiting) = req(a, "GET", &format!("/jobs/{queued}"), Some(&alice), &[], "");
    assert!(
        waiting.contains("Waiting for placement") && waiting.contains("components of 2 processors"),
        "{waiting}"
    );
    let (_, _, alice_page) = req(a, "GET", &format!("/jobs/{secret}"), Some(&alice), &[], "");
    let alice_csrf = csrf(&alice_page);
    assert!(alice_page.contains("alice-secret-name") && alice_page.contains("id=\"cancel\""));
    let evil = [
        ("Content-Type", "application/x-www-form-urlencoded"),
        ("Origin", "http://evil.example"),
    ];
    assert_eq!(req(a, "POST", &cancel, Some(&alice), &evil, &format!("csrf={alice_csrf}")).0, 403);
    let cross = [
        ("Content-Type", "application/x-www-form-urlencoded"),
        ("Sec-Fetch-Site", "cross-site"),
    ];
    assert_eq!(req(a, "POST", &cancel, Some(&alice), &cross, &format!("csrf={alice_csrf}")).0, 403);
    assert_eq!(common::job(&srv, &alice, secret)["state"], "running", "nothing cancelled");
    // The real form cancels; a second try says it already finished.
    let (code, loc, _) = req(a, "POST", &cancel, Some(&alice), &form, &format!("csrf={alice_csrf}"));
    assert_eq!((code, loc.as_str()), (303, format!("/jobs/{secret}").as_str()));
    wait_state(&srv, &alice, secret, &["cancelled"], 30);
    assert_eq!(req(a, "POST", &cancel, Some(&alice), &form, &format!("csrf={alice_csrf}")).0, 409);

    // The admin sees everyone's jobs; filters by state, user and name.
    wait_state(&srv, &alice, queued, &["running", "succeeded"], 30);
    let (_, _, page) = req(a, "GET", "/jobs?user=alice&state=cancelled", Some(&admin), &[], "");
    assert!(page.contains("alice-secret-name") && !page.contains("alice-queued"), "{page}");
    let (_, _, page) = req(a, "GET", "/jobs?name=QUEUED", Some(&admin), &[], "");
    assert!(page.contains("alice-queued") && !page.contains("alice-secret-name"));
    assert_eq!(req(a, "GET", "/jobs?state=bogus", Some(&admin), &[], "").0, 400);

    // Revoking the token signs the page out at once.
    let (code, body) = http_request(a, "GET", "/api/v1/tokens", Some(&mallory), None, b"").unwrap();
    assert_eq!(code, 200);
    let tid = json(&body)[0]["id"].as_str().unwrap().to_string();
    assert_eq!(
        http_request(a, "DELETE", &format!("/api/v1/tokens/{tid}"), Some(&mallory), None, b"")
            .unwrap()
            .0,
        200
    );
    assert_eq!(req(a, "GET", "/jobs", Some(&mallory), &[], "").0, 303);

    // Pages carry a content security policy; the assets are embedded and versioned.
    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let resp = agent.get(&format!("http://{a}/signin")).call().unwrap();
    let csp = resp.headers().get("content-security-policy").unwrap().to_str().unwrap().to_string();
    assert!(csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"), "{csp}");
    for asset in koalesce_web::assets::ALL {
        let mut r = agent.get(&format!("http://{a}{}", asset.url())).call().unwrap();
        assert_eq!(r.status(), 200, "{}", asset.name);
        assert_eq!(r.body_mut().read_to_string().unwrap(), asset.body);
    }
    // The API is untouched by the dashboard's routes.
    assert_eq!(http_request(a, "GET", "/api/v1/jobs", Some(&alice), None, b"").unwrap().0, 200);
    // Its long jobs do not outlive the test (an ended one answers 409, which is fine).
    for id in [secret, queued] {
        let _ = http_request(a, "POST", &format!("/api/v1/jobs/{id}/cancel"), Some(&alice), None, b"");
    }
    srv.stop();
}

#[test]
fn the_jobs_table_pages_newest_first_across_live_and_ended_jobs() {
    let tmp = tmp("pages");
    let dir = tmp.path().to_path_buf();
    let srv = server(&dir, &[("alpha", 1)]);
    let alice = token(&dir, "alice", false);
    let a = srv.addr;
    // 60 short jobs end; 60 more wait behind a long one: the table merges the store's ended
    // jobs with the core's live ones.
    let mut ids = Vec::new();
    for i in 0..60 {
        ids.push(submit(&srv, &alice, &shell_job(&format!("quick-{i}"), "true", 1, "")));
    }
    for id in &ids {
        wait_state(&srv, &alice, *id, &["succeeded"], 60);
    }
    let blocker = submit(&srv, &alice, &shell_job("blocker", "sleep 60", 1, ""));
    wait_state(&srv, &alice, blocker, &["running"], 30);
    for i in 0..60 {
        ids.push(submit(&srv, &alice, &shell_job(&format!("waiting-{i}"), "true", 1, "")));
    }
    let row_ids = |page: &str| -> Vec<u64> {
        page.match_indices("<tr id=\"job-")
            .map(|(i, _)| page[i + 12..].split('"').next().unwrap().parse().unwrap())
            .collect()
    };
    let mut all = Vec::new();
    for p in 1..=3 {
        let (code, _, page) = req(a, "GET", &format!("/jobs?page={p}"), Some(&alice), &[], "");
        assert_eq!(code, 200);
        assert!(page.contains("of 121"), "121 jobs in all");
        all.extend(row_ids(&page));
    }
    let mut expected: Vec<u64> = ids.iter().copied().chain([blocker]).collect();
    expected.sort_unstable_by(|x, y| y.cmp(x));
    assert_eq!(all, expected, "every job once, newest first, across three pages");
    let (_, _, page) = req(a, "GET", "/jobs?state=succeeded&page=2", Some(&alice), &[], "");
    assert_eq!(row_ids(&page), ids[..10].iter().rev().copied().collect::<Vec<_>>());
    let (_, _, page) = req(a, "GET", "/jobs?site=alpha&state=running", Some(&alice), &[], "");
    assert_eq!(row_ids(&page), vec![blocker]);
    let (_, _, page) = req(a, "GET", "/jobs?site=alpha&state=succeeded", Some(&alice), &[], "");
    assert!(page.contains("of 60"), "ended jobs filtered by site in SQL");
    let _ = http_request(a, "POST", &format!("/api/v1/jobs/{blocker}/cancel"), Some(&alice), None, b"");
    srv.stop();
}

#[test]
fn jobs_that_ran_out_of_time_are_listed_and_counted_with_the_ended_ones() {
    let tmp = tmp("timeout");
    let dir = tmp.path().to_path_buf();
    let srv = server(&dir, &[("alpha", 2)]);
    let alice = token(&dir, "alice", false);
    let a = srv.addr;
    let late = submit(&srv, &alice, &shell_job("too-slow", "sleep 30", 1, "walltime = \"1s\""));
    let done = submit(&srv, &alice, &shell_job("quick", "true", 1, ""));
    wait_state(&srv, &alice, late, &["timeout"], 30);
    wait_state(&srv, &alice, done, &["succeeded"], 30);
    let (code, _, page) = req(a, "GET", "/jobs", Some(&alice), &[], "");
    assert_eq!(code, 200);
    assert!(
        page.contains(&format!("<tr id=\"job-{late}\"")),
        "the timed-out job is listed: {page}"
    );
    assert!(page.contains("of 2"), "both ended jobs counted");
    let (code, _, page) = req(a, "GET", "/jobs?state=timeout", Some(&alice), &[], "");
    assert_eq!(code, 200, "{page}");
    assert!(page.contains(&format!("<tr id=\"job-{late}\"")) && !page.contains(&format!("<tr id=\"job-{done}\"")));
    srv.stop();
}

#[test]
fn a_token_revoked_by_another_process_signs_its_pages_out_at_once() {
    let tmp = tmp("revoked");
    let dir = tmp.path().to_path_buf();
    let srv = server(&dir, &[("alpha", 1)]);
    let alice = token(&dir, "alice", false);
    let a = srv.addr;
    // Signed in: the server remembers the token after the first page.
    for _ in 0..2 {
        assert_eq!(req(a, "GET", "/jobs", Some(&alice), &[], "").0, 200);
    }
    // `koalesce token revoke ID --data-dir DIR` while the server runs.
    let conn = koalesce_server::store::open_tokens(&dir).unwrap();
    let id = koalesce_server::store::list_tokens(&conn, Some("alice")).unwrap().remove(0).id;
    koalesce_server::store::revoke_token_at(&dir, &id).unwrap();
    let (code, loc, body) = req(a, "GET", "/jobs", Some(&alice), &[], "");
    assert_eq!(code, 303, "{body}");
    assert!(loc.starts_with("/signin?next="), "{loc}");
    assert_eq!(req(a, "GET", "/events/jobs", Some(&alice), &[], "").0, 401);
}
