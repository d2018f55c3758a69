//! Attacks on the storage agent: every way out of the root (`..`, encoded `..`, absolute
//! paths, NUL, symlinks pointing out, the agent's own directory), requests without the
//! secret, oversized bodies, and clients that stall (slowloris headers, a body that stops, a
//! download nobody reads, a FIFO planted in the root).

mod agent_common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use agent_common::*;
use koalesce_server::dataplane::{Role, TransferError};

/// A root with one file, and a secret file beside the root that no request may touch.
fn setup() -> (TestAgent, std::path::PathBuf) {
    let a = TestAgent::start();
    std::fs::write(a.root.join("inside.txt"), b"inside").unwrap();
    let secret = a.outside().join("secret.txt");
    std::fs::write(&secret, b"top secret").unwrap();
    (a, secret)
}

fn assert_untouched(secret: &std::path::Path) {
    assert_eq!(
        std::fs::read(secret).unwrap(),
        b"top secret",
        "the file outside the root was changed"
    );
}

const TRAVERSALS: &[&str] = &[
    "../outside/secret.txt",
    "..%2Foutside%2Fsecret.txt",
    "%2e%2e/outside/secret.txt",
    "%2E%2E%2Foutside%2Fsecret.txt",
    "a/../../outside/secret.txt",
    "/../outside/secret.txt",
    "//etc/passwd",
    "%2Fetc%2Fpasswd",
    "inside.txt%00.png",
    "./inside.txt",
    "a//b",
    "..\\outside\\secret.txt",
    ".koalesce-agent/token",
    ".koalesce-agent/partial",
];

#[test]
fn traversal_in_any_form_is_refused_by_every_method() {
    let (a, secret) = setup();
    let auth = bearer();
    let body = b"overwritten".to_vec();
    let body_sha = sha(&body);
    for t in TRAVERSALS {
        for method in ["GET", "HEAD", "DELETE", "PUT"] {
            let path = format!("/v1/files/{t}");
            let headers: Vec<(&str, &str)> = vec![("Authorization", &auth), ("X-Sha256", &body_sha)];
            let (code, head, resp) = raw(a.addr(), method, &path, &headers, if method == "PUT" { &body } else { b"" });
            assert!(
                matches!(code, 400 | 403 | 404),
                "{method} {path}: {code}\n{head}{}",
                String::from_utf8_lossy(&resp)
            );
            assert!(!String::from_utf8_lossy(&resp).contains("top secret"));
            assert!(
                !String::from_utf8_lossy(&resp).contains("root:"),
                "{method} {path} leaked /etc/passwd"
            );
        }
        let (code, _, _) = raw(
            a.addr(),
            "GET",
            &format!("/v1/uploads/{t}?sha256={body_sha}"),
            &[("Authorization", &auth)],
            b"",
        );
        assert!(matches!(code, 400 | 403 | 404), "uploads {t}: {code}");
    }
    assert_untouched(&secret);
    assert_eq!(std::fs::read(a.root.join("inside.txt")).unwrap(), b"inside");
    assert!(std::fs::read(a.root.join(".koalesce-agent/partial")).is_err());
    // The listing cannot be pointed outside either.
    for prefix in ["..", "../outside", "/etc", ".koalesce-agent"] {
        let (code, _, _) = raw(
            a.addr(),
            "GET",
            &format!("/v1/list?prefix={prefix}"),
            &[("Authorization", &auth)],
            b"",
        );
        assert_eq!(code, 400, "list prefix {prefix}");
    }
}

#[test]
fn symlinks_pointing_out_of_the_root_are_not_followed() {
    let (a, secret) = setup();
    let outside = secret.parent().unwrap().to_path_buf();
    std::os::unix::fs::symlink(&outside, a.root.join("out")).unwrap();
    std::os::unix::fs::symlink(&secret, a.root.join("secret-link")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", a.root.join("passwd")).unwrap();
    std::os::unix::fs::symlink("../outside/secret.txt", a.root.join("rel-link")).unwrap();
    // A link that stays inside is fine.
    std::os::unix::fs::symlink("inside.txt", a.root.join("ok-link")).unwrap();
    let auth = bearer();
    for p in ["out/secret.txt", "secret-link", "passwd", "rel-link"] {
        let (code, _, body) = raw(a.addr(), "GET", &format!("/v1/files/{p}"), &[("Authorization", &auth)], b"");
        assert_eq!(code, 403, "GET {p}: {}", String::from_utf8_lossy(&body));
        assert!(!String::from_utf8_lossy(&body).contains("top secret"));
        let (code, _, _) = raw(a.addr(), "HEAD", &format!("/v1/files/{p}"), &[("Authorization", &auth)], b"");
        assert_eq!(code, 403, "HEAD {p}");
    }
    let (code, _, body) = raw(a.addr(), "GET", "/v1/files/ok-link", &[("Authorization", &auth)], b"");
    assert_eq!((code, body.as_slice()), (200, b"inside".as_slice()));

    // Writing through a link that points out: refused, nothing created outside.
    let data = b"planted".to_vec();
    let headers = [("Authorization", auth.as_str()), ("X-Sha256", &sha(&data))];
    let (code, _, _) = raw(a.addr(), "PUT", "/v1/files/out/new.txt", &headers, &data);
    assert_eq!(code, 403);
    assert!(!outside.join("new.txt").exists());
    let (code, _, _) = raw(a.addr(), "PUT", "/v1/files/out/deeper/new.txt", &headers, &data);
    assert_eq!(code, 403);
    assert!(!outside.join("deeper").exists());
    // Deleting through it: refused. Deleting the link itself removes only the link.
    let (code, _, _) = raw(a.addr(), "DELETE", "/v1/files/out/secret.txt", &[("Authorization", &auth)], b"");
    assert_eq!(code, 403);
    let (code, _, _) = raw(a.addr(), "DELETE", "/v1/files/secret-link", &[("Authorization", &auth)], b"");
    assert_eq!(code, 204);
    assert_untouched(&secret);
    // Replacing a file by an upload writes inside the root, never through the link.
    let (code, _, _) = raw(a.addr(), "PUT", "/v1/files/rel-link", &headers, &data);
    assert_eq!(code, 201);
    assert_untouched(&secret);
    assert_eq!(std::fs::read(a.root.join("rel-link")).unwrap(), data);

    // The listing does not follow links.
    let c = client();
    let files: Vec<String> = c.list(&a.ep, "", Role::Source).unwrap().into_iter().map(|e| e.path).collect();
    assert_eq!(files, vec!["inside.txt", "rel-link"]);
    let (code, _, _) = raw(a.addr(), "GET", "/v1/list?prefix=out", &[("Authorization", &auth)], b"");
    assert_eq!(code, 403);

    // A push cannot read through a link either, nor write through one at the destination.
    let b = TestAgent::start();
    let err = c.push(&a.ep, "out/secret.txt", &b.ep, "x", &expected(b"top secret")).unwrap_err();
    assert!(matches!(err, TransferError::SourceMissing { .. }), "{err}");
    std::os::unix::fs::symlink(&outside, b.root.join("out")).unwrap();
    let err = c.push(&a.ep, "inside.txt", &b.ep, "out/planted", &expected(b"inside")).unwrap_err();
    assert!(
        matches!(
            err,
            TransferError::Refused {
                role: Role::Destination,
                status: 403,
                ..
            }
        ),
        "{err}"
    );
    assert!(!outside.join("planted").exists());
    let err = c
        .push(&a.ep, "inside.txt", &b.ep, "../outside/planted", &expected(b"inside"))
        .unwrap_err();
    assert!(
        matches!(
            err,
            TransferError::Refused {
                role: Role::Source,
                status: 400,
                ..
            }
        ),
        "{err}"
    );
    assert!(!outside.join("planted").exists());
}

#[test]
fn every_endpoint_but_health_needs_the_secret() {
    let (a, _) = setup();
    let wrong = [
        None,
        Some("Bearer wrong".to_string()),
        Some(format!("Basic {SECRET}")),
        Some(format!("Bearer {}", &SECRET[..SECRET.len() - 1])),
        Some(format!("Bearer {SECRET}x")),
        Some("Bearer ".to_string()),
    ];
    let calls = [
        ("GET", "/v1/files/inside.txt"),
        ("HEAD", "/v1/files/inside.txt"),
        ("PUT", "/v1/files/new"),
        ("DELETE", "/v1/files/inside.txt"),
        ("GET", "/v1/uploads/new?sha256=00"),
        ("GET", "/v1/list"),
        ("GET", "/v1/stats"),
        ("POST", "/v1/push"),
        ("POST", "/v1/probe"),
        ("PUT", "/v1/sink"),
    ];
    for auth in &wrong {
        for (m, p) in calls {
            let headers: Vec<(&str, &str)> = auth.iter().map(|v| ("Authorization", v.as_str())).collect();
            let (code, _, body) = raw(a.addr(), m, p, &headers, b"{}");
            assert_eq!(code, 401, "{m} {p} with {auth:?}: {}", String::from_utf8_lossy(&body));
        }
    }
    assert!(a.root.join("inside.txt").exists());
    assert!(!a.root.join("new").exists());
    let (code, _, body) = raw(a.addr(), "GET", "/healthz", &[], b"");
    assert_eq!((code, body.as_slice()), (200, b"ok".as_slice()));
}

#[test]
fn oversized_and_malformed_requests_are_refused_before_their_body() {
    let a = TestAgent::with(|c| c.max_file_bytes = 1 << 20);
    let auth = bearer();
    let s = sha(b"x");
    // Declared too large: refused at once (the 1 TB body is never sent).
    let (code, _, _) = raw(
        a.addr(),
        "PUT",
        "/v1/files/big",
        &[("Authorization", &auth), ("X-Sha256", &s), ("Content-Length", "1000000000000")],
        b"",
    );
    assert_eq!(code, 413);
    // No length (chunked): refused.
    let (code, _, _) = raw(
        a.addr(),
        "PUT",
        "/v1/files/c",
        &[("Authorization", &auth), ("X-Sha256", &s), ("Transfer-Encoding", "chunked")],
        b"1\r\nx\r\n0\r\n\r\n",
    );
    assert_eq!(code, 411);
    // No or bad checksum.
    let (code, _, _) = raw(a.addr(), "PUT", "/v1/files/c", &[("Authorization", &auth)], b"x");
    assert_eq!(code, 400);
    let (code, _, _) = raw(
        a.addr(),
        "PUT",
        "/v1/files/c",
        &[("Authorization", &auth), ("X-Sha256", "abc")],
        b"x",
    );
    assert_eq!(code, 400);
    // A range that does not describe the rest of a file.
    for cr in ["bytes 0-0/10", "bytes 5-4/10", "bytes */10", "bytes 9-9/5"] {
        let (code, _, _) = raw(
            a.addr(),
            "PUT",
            "/v1/files/c",
            &[("Authorization", &auth), ("X-Sha256", &s), ("Content-Range", cr)],
            b"x",
        );
        assert_eq!(code, 400, "{cr}");
    }
    // Resuming at an offset the agent does not hold: 409 with the offset it holds.
    let (code, head, _) = raw(
        a.addr(),
        "PUT",
        "/v1/files/c",
        &[("Authorization", &auth), ("X-Sha256", &s), ("Content-Range", "bytes 5-5/6")],
        b"x",
    );
    assert_eq!(code, 409);
    assert!(head.to_ascii_lowercase().contains("x-upload-offset: 0"), "{head}");
    // A directory of that name.
    std::fs::create_dir_all(a.root.join("d/e")).unwrap();
    let (code, _, _) = raw(
        a.addr(),
        "PUT",
        "/v1/files/d/e",
        &[("Authorization", &auth), ("X-Sha256", &s)],
        b"x",
    );
    assert_eq!(code, 409);
    let (code, _, _) = raw(a.addr(), "DELETE", "/v1/files/d", &[("Authorization", &auth)], b"");
    assert_eq!(code, 409, "directories are not deleted");
    // A JSON body over 64 KiB, and nonsense JSON.
    let huge = format!("{{\"path\": \"{}\"}}", "a".repeat(70_000));
    let (code, _, _) = raw(a.addr(), "POST", "/v1/push", &[("Authorization", &auth)], huge.as_bytes());
    assert_eq!(code, 413);
    let (code, _, _) = raw(a.addr(), "POST", "/v1/push", &[("Authorization", &auth)], b"{\"path\": 1}");
    assert_eq!(code, 400);
    let bad_target = format!(
        "{{\"path\":\"x\",\"sha256\":\"{s}\",\"size\":1,\"dest\":{{\"url\":\"file:///etc/passwd\",\"token\":\"t\",\"path\":\"x\"}}}}"
    );
    let (code, _, _) = raw(a.addr(), "POST", "/v1/push", &[("Authorization", &auth)], bad_target.as_bytes());
    assert_eq!(code, 400);
    // Probe bodies are bounded too.
    let (code, _, _) = raw(
        a.addr(),
        "PUT",
        "/v1/sink",
        &[("Authorization", &auth), ("Content-Length", "1000000000000")],
        b"",
    );
    assert_eq!(code, 413);
    assert!(!a.root.join("c").exists() && !a.root.join("big").exists());
}

#[test]
fn a_client_that_never_finishes_its_headers_is_dropped() {
    let a = TestAgent::with(|c| c.header_timeout = Duration::from_millis(500));
    let mut s = TcpStream::connect(a.addr()).unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let started = Instant::now();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(3), "closed after {waited:?}");
    assert!(!String::from_utf8_lossy(&buf).contains(" 200 "), "no answer to a half request");
    // An idle kept-alive connection is closed the same way.
    let mut s = TcpStream::connect(a.addr()).unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let started = Instant::now();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    assert!(String::from_utf8_lossy(&buf).contains(" 200 "));
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[test]
fn an_upload_body_that_stops_is_given_up_and_kept_for_a_resume() {
    let a = TestAgent::with(|c| c.idle_timeout = Duration::from_millis(500));
    let data = content(100_000, 1);
    let mut s = TcpStream::connect(a.addr()).unwrap();
    let head = format!(
        "PUT /v1/files/slow HTTP/1.1\r\nHost: x\r\nAuthorization: {}\r\nX-Sha256: {}\r\nContent-Length: {}\r\n\r\n",
        bearer(),
        sha(&data),
        data.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(&data[..5000]).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let started = Instant::now();
    let mut buf = vec![0u8; 4096];
    let n = s.read(&mut buf).unwrap_or(0);
    assert!(started.elapsed() < Duration::from_secs(3));
    let (code, _, _) = parse_response(&buf[..n]);
    assert_eq!(code, 408);
    let c = client();
    assert_eq!(c.upload_status(&a.ep, "slow", &sha(&data)).unwrap().offset, 5000);
    assert!(!a.root.join("slow").exists());
}

#[test]
fn a_download_nobody_reads_is_dropped() {
    let a = TestAgent::with(|c| c.idle_timeout = Duration::from_millis(500));
    std::fs::write(a.root.join("big"), content(32 << 20, 2)).unwrap();
    let mut s = TcpStream::connect(a.addr()).unwrap();
    let req = format!("GET /v1/files/big HTTP/1.1\r\nHost: x\r\nAuthorization: {}\r\n\r\n", bearer());
    s.write_all(req.as_bytes()).unwrap();
    // Read nothing until the agent has given up on us, then drain: the stream ends early.
    std::thread::sleep(Duration::from_millis(2500));
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut got = 0usize;
    let mut buf = vec![0u8; 1 << 16];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
        got += n;
    }
    assert!(got < 32 << 20, "the agent kept the stalled download alive ({got} bytes)");
}

#[test]
fn a_fifo_in_the_root_does_not_hang_the_agent() {
    let (a, _) = setup();
    let fifo = a.root.join("fifo");
    let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o644) }, 0);
    let started = Instant::now();
    let (code, _, _) = raw(a.addr(), "GET", "/v1/files/fifo", &[("Authorization", &bearer())], b"");
    assert_eq!(code, 404);
    assert!(started.elapsed() < Duration::from_secs(2));
    let files: Vec<String> = client()
        .list(&a.ep, "", Role::Source)
        .unwrap()
        .into_iter()
        .map(|e| e.path)
        .collect();
    assert_eq!(files, vec!["inside.txt"]);
}
