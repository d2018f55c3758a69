//! End-to-end test of `koalesce server` against bad input: malformed, oversized and
//! unauthorised requests are answered with a 4xx naming the reason, and the server keeps
//! serving. `KOALESCE_E2E_KEEP=1` keeps the test server's directory for inspection.

mod server_common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use server_common::*;

/// Sends a request whose Content-Length is over the limit, writing the body from another
/// thread (the server may answer before reading it); returns the status line's code.
fn oversized_status(url: &str, token: &str, bytes: usize) -> u16 {
    let addr = url.trim_start_matches("http://");
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let head = format!(
        "POST /api/v1/jobs HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/toml\r\nContent-Length: {bytes}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).unwrap();
    let mut w = stream.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        let chunk = vec![b'#'; 64 * 1024];
        let mut left = bytes;
        while left > 0 {
            let n = left.min(chunk.len());
            if w.write_all(&chunk[..n]).is_err() {
                break;
            }
            left -= n;
        }
    });
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut tmp) {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&tmp[..n]),
        }
    }
    let _ = stream.shutdown(std::net::Shutdown::Both);
    let _ = writer.join();
    let text = String::from_utf8_lossy(&buf);
    text.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {text:?}"))
}

#[test]
fn bad_input_answers_4xx_naming_the_reason_and_the_server_keeps_serving() {
    let _g = serial();
    let mut s = TestServer::new(&test_config(&[("alpha", 4), ("beta", 8)]));
    let token = s.token("carol", false);
    s.start();
    let good = "name = \"ok\"\nexecutable = \"/bin/true\"\n[[components]]\nprocessors = 1\n";
    let cases: [(&str, String, u16, &[&str]); 6] = [
        ("malformed TOML", "name = = \"x\"\n".into(), 400, &["TOML"]),
        (
            "unknown key",
            "name = \"x\"\nexecutable = \"/bin/true\"\nwalltime = 5\n[[components]]\nprocessors = 1\n".into(),
            422,
            &["walltime"],
        ),
        (
            "fixed site that does not exist",
            "name = \"x\"\nexecutable = \"/bin/true\"\n[[components]]\nprocessors = 1\nsite = \"atlantis\"\n".into(),
            422,
            &["atlantis"],
        ),
        (
            "component larger than every site",
            "name = \"x\"\nexecutable = \"/bin/true\"\n[[components]]\nprocessors = 1\n[[components]]\nprocessors = 500\n".into(),
            422,
            &["500", "processors"],
        ),
        (
            "input file missing from the catalogue",
            "name = \"x\"\nexecutable = \"/bin/true\"\ninputs = [\"ghost.dat\"]\n[[components]]\nprocessors = 1\n".into(),
            422,
            &["ghost.dat"],
        ),
        (
            "missing required field",
            "executable = \"/bin/true\"\n[[components]]\nprocessors = 1\n".into(),
            422,
            &["name"],
        ),
    ];
    for (what, body, want, words) in &cases {
        let (status, text) = submit_raw(&s, &token, body);
        assert_eq!(status, *want, "{what}: {text}");
        let msg = json(&text)["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{what}: no error field: {text}"))
            .to_string();
        for w in *words {
            assert!(msg.contains(w), "{what}: message does not name '{w}': {msg}");
        }
        // Still serving: a good job is accepted right after.
        let (status, text) = submit_raw(&s, &token, good);
        assert_eq!(status, 201, "after {what}: {text}");
    }

    // The client prints the server's message verbatim with the status.
    let bad = s.path().join("bad.toml");
    std::fs::write(&bad, &cases[1].1).unwrap();
    let (code, _, err) = cli(&s, &token, &["submit", bad.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(err.contains("422") && err.contains("walltime"), "{err}");

    // Oversized request: 413.
    assert_eq!(oversized_status(&s.url, &token, 2 << 20), 413);
    let (status, text) = submit_raw(&s, &token, good);
    assert_eq!(status, 201, "after oversized: {text}");

    // Bad and missing tokens: 401 with a message.
    for tok in [Some("not-a-token"), None] {
        let (status, text) = http(&s.url, "GET", "/api/v1/jobs", tok, None, b"").unwrap();
        assert_eq!(status, 401, "{text}");
        assert!(json(&text)["error"].as_str().is_some_and(|m| m.contains("token")), "{text}");
    }
    let (code, _, err) = cli(&s, "not-a-token", &["jobs"]);
    assert_ne!(code, 0);
    assert!(err.contains("401"), "{err}");

    // Bad file registrations: a server path from a user who may not register one (403, naming
    // the field), unknown site.
    let body = serde_json::json!({"name": "f", "path": "/nonexistent/file", "site": "alpha"}).to_string();
    let (status, text) = http(
        &s.url,
        "POST",
        "/api/v1/files",
        Some(&token),
        Some("application/json"),
        body.as_bytes(),
    )
    .unwrap();
    assert_eq!(status, 403, "{text}");
    assert!(json(&text)["error"].as_str().unwrap().contains("path"), "{text}");
    let real = s.path().join("real.dat");
    std::fs::write(&real, b"data").unwrap();
    let body = serde_json::json!({"name": "f", "path": real, "site": "nowhere"}).to_string();
    let (status, text) = http(
        &s.url,
        "POST",
        "/api/v1/files",
        Some(&token),
        Some("application/json"),
        body.as_bytes(),
    )
    .unwrap();
    assert_eq!(status, 422, "{text}");
    assert!(json(&text)["error"].as_str().unwrap().contains("nowhere"), "{text}");

    // A connection error names the URL.
    let dead = format!("http://127.0.0.1:{}", free_port());
    let out = Command::new(BIN).args(["jobs", "--url", &dead, "--token", "x"]).output().unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&dead),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // And it keeps serving.
    let (status, _) = http(&s.url, "GET", "/healthz", None, None, b"").unwrap();
    assert_eq!(status, 200);
    let (status, body) = http(&s.url, "GET", "/api/v1/jobs", Some(&token), None, b"").unwrap();
    assert_eq!(status, 200);
    assert_eq!(json(&body).as_array().unwrap().len(), cases.len() + 1);
}
