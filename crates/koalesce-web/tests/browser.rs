//! The real-browser harness against a real Chromium (never skipped: without Chromium these
//! fail): a page built from the crate's components and served with its embedded assets by a
//! small HTTP server, updated live over server-sent events by the embedded script; typing,
//! clicking, a confirmation dialog, a form post, console errors, a screenshot, and the browser
//! process group gone after drop.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::time::Duration;

use koalesce_web::assets;
use koalesce_web::browser::{Browser, BrowserError};
use koalesce_web::html::{self, Column, Table};
use maud::{html, Render};

const WAIT: Duration = Duration::from_secs(10);

fn page() -> String {
    let mut t = Table::new(vec![Column::num("id"), Column::text("state")]).id("jobs");
    t.row_with_id("job-1".into(), vec![html! { "1" }, html::state_badge("queued")]);
    let body = html! {
        h1 { "Jobs" }
        (html::live_region("/events", t.render()))
        form method="post" action="/cancel" data-confirm="Cancel job 1?" {
            input type="text" name="reason" id="reason";
            button id="cancel" type="submit" { "Cancel" }
        }
        p { "at " (html::instant(1_795_446_245_000)) }
    };
    html::app_page("Jobs", &[], Some(("alice", "/signout", "t0k")), body).into_string()
}

fn respond(mut s: &TcpStream, status: &str, ctype: &str, body: &str) {
    let _ = write!(
        s,
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// One request: method, path, body.
fn read_request(s: &TcpStream) -> Option<(String, String, String)> {
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next()?.to_string(), parts.next()?.to_string());
    let mut len = 0;
    loop {
        let mut h = String::new();
        r.read_line(&mut h).ok()?;
        if h.trim().is_empty() {
            break;
        }
        if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body).ok()?;
    Some((method, path, String::from_utf8_lossy(&body).into_owned()))
}

/// Serves the page, the assets, an event stream that marks job 1 succeeded after 300 ms, and
/// the form's target. Returns the base URL.
fn serve() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(s) = conn else { continue };
            std::thread::spawn(move || {
                let Some((method, path, body)) = read_request(&s) else { return };
                match (method.as_str(), path.as_str()) {
                    ("GET", "/") => respond(&s, "200 OK", "text/html; charset=utf-8", &page()),
                    ("GET", "/events") => {
                        let mut w = &s;
                        let _ = write!(
                            w,
                            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\n\r\n"
                        );
                        std::thread::sleep(Duration::from_millis(300));
                        let row = html! { tr id="job-1" { td.num { "1" } td { (html::state_badge("succeeded")) } } }.into_string();
                        let _ = w.write_all(html::sse_swap("job-1", &row).as_bytes());
                        let _ = w.flush();
                        // Keep the stream open as a live server would.
                        std::thread::sleep(Duration::from_secs(30));
                    }
                    ("POST", "/cancel") => {
                        let page = html::report_page("Cancelled", "", html! { p id="done" { "cancelled: " (body) } }).into_string();
                        respond(&s, "200 OK", "text/html; charset=utf-8", &page)
                    }
                    ("GET", p) => match assets::get(p) {
                        Some(a) => respond(&s, "200 OK", a.content_type, a.body),
                        None => respond(&s, "404 Not Found", "text/plain", "not found"),
                    },
                    _ => respond(&s, "405 Method Not Allowed", "text/plain", "no"),
                }
            });
        }
    });
    base
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.split_whitespace().nth(2) == Some("Z"))
}

#[test]
fn harness_drives_a_live_page_in_chromium() {
    let base = serve();
    let mut b = Browser::launch().expect("Chromium must be installed (apt-get install chromium)");
    let pid = b.pid();
    b.goto(&format!("{base}/")).unwrap();
    b.wait_for("#job-1 .state-queued", WAIT).unwrap();
    // The embedded script opened the event stream and swapped the row in.
    b.wait_for("#job-1 .state-succeeded", WAIT).unwrap();
    assert_eq!(b.text("#job-1").unwrap().replace('\t', " ").trim(), "1 succeeded");
    assert!(
        b.eval("document.querySelector('[data-live-status]').classList.contains('on')")
            .unwrap()
            == true
    );
    // The local time replaced the UTC text (the script ran on the page's data-ms).
    let t = b.text("time").unwrap();
    assert!(!t.contains("UTC") && !t.is_empty(), "{t}");
    // The stylesheet applied: the badge has the succeeded colour.
    let bg = b
        .eval("getComputedStyle(document.querySelector('#job-1 .badge')).backgroundColor")
        .unwrap();
    assert_eq!(bg, "rgb(0, 114, 178)");
    let shot = b.screenshot("harness-live-page").unwrap();
    let png = std::fs::read(&shot).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "{}", shot.display());
    assert!(shot.to_string_lossy().contains("screenshots"), "{}", shot.display());

    // A refused confirmation keeps the page; an accepted one posts the form.
    b.type_into("#reason", "too slow").unwrap();
    b.accept_dialogs(false);
    b.click("#cancel").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(b.url().unwrap().ends_with('/'), "the form was sent although the dialog was refused");
    b.accept_dialogs(true);
    b.click("#cancel").unwrap();
    b.wait_for("#done", WAIT).unwrap();
    assert_eq!(b.text("#done").unwrap(), "cancelled: reason=too+slow");
    assert!(b.console_errors().is_empty(), "{:?}", b.console_errors());

    // Errors in the page are reported.
    b.eval("setTimeout(() => { throw new Error('boom') }, 0); console.error('bad', 42)")
        .unwrap();
    b.wait_until("true", WAIT).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let errors = b.console_errors();
    assert!(errors.iter().any(|e| e == "bad 42"), "{errors:?}");
    assert!(errors.iter().any(|e| e.contains("boom")), "{errors:?}");
    assert!(matches!(b.click("#nothing"), Err(BrowserError::NoElement(_))));
    assert!(matches!(
        b.wait_for("#nothing", Duration::from_millis(200)),
        Err(BrowserError::Timeout { .. })
    ));
    assert!(matches!(b.goto("http://127.0.0.1:1/"), Err(BrowserError::Navigation { .. })));

    assert!(alive(pid));
    drop(b);
    assert!(!alive(pid), "the browser outlived its Browser");
}

#[test]
fn a_browser_that_cannot_start_is_an_error() {
    let started = std::time::Instant::now();
    assert!(matches!(
        Browser::launch_with(Path::new("/nonexistent/chromium")),
        Err(BrowserError::Launch(_))
    ));
    // A program that exits at once: reported without waiting for the 30 s launch timeout.
    let e = Browser::launch_with(Path::new("/bin/false")).err().expect("not a browser");
    assert!(matches!(e, BrowserError::Launch(_)), "{e}");
    assert!(started.elapsed() < Duration::from_secs(10));
}
