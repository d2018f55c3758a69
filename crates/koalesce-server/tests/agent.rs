//! The storage agent and the transfer client together: uploads, downloads with resume,
//! third-party pushes, probes, and errors that say whose fault they are.

mod agent_common;

use std::io::Write;
use std::net::TcpStream;

use agent_common::*;
use koalesce_server::dataplane::partial::Partial;
use koalesce_server::dataplane::{partial_path, Blame, Endpoint, Role, TransferError};

#[test]
fn upload_download_list_and_delete() {
    let a = TestAgent::start();
    let c = client();
    let dir = tempfile::tempdir().unwrap();
    let data = content(3 << 20, 1);
    let src = local_file(dir.path(), "in.bin", &data);
    let up = c.upload(&a.ep, "sets/one/in.bin", &src, None).unwrap();
    assert_eq!((up.size, up.bytes, up.resumed_from), (data.len() as u64, data.len() as u64, 0));
    assert_eq!(up.sha256, sha(&data));
    assert!(up.throughput_bps > 0.0 && up.latency_ms.is_some());
    assert_eq!(std::fs::read(a.root.join("sets/one/in.bin")).unwrap(), data);

    assert_eq!(c.stat(&a.ep, "sets/one/in.bin", Role::Source).unwrap(), Some(expected(&data)));
    assert_eq!(c.stat(&a.ep, "sets/none", Role::Source).unwrap(), None);

    let dest = dir.path().join("out.bin");
    let down = c.download(&a.ep, "sets/one/in.bin", &dest, &expected(&data)).unwrap();
    assert_eq!((down.bytes, down.resumed_from), (data.len() as u64, 0));
    assert_eq!(std::fs::read(&dest).unwrap(), data);
    assert!(!partial_path(&dest, &sha(&data)).exists(), "no partial left behind");

    // Uploading the same content again moves nothing.
    let again = c.upload(&a.ep, "sets/one/in.bin", &src, None).unwrap();
    assert_eq!(again.bytes, 0);

    let listed = c.list(&a.ep, "", Role::Source).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].path.as_str(), listed[0].size), ("sets/one/in.bin", data.len() as u64));
    assert_eq!(c.list(&a.ep, "sets/one", Role::Source).unwrap().len(), 1);
    assert!(c.delete(&a.ep, "sets/one/in.bin", Role::Destination).unwrap());
    assert!(!c.delete(&a.ep, "sets/one/in.bin", Role::Destination).unwrap());
    assert!(c.list(&a.ep, "", Role::Source).unwrap().is_empty());

    // An empty file is a file too.
    let empty = local_file(dir.path(), "empty", b"");
    c.upload(&a.ep, "empty", &empty, None).unwrap();
    let out = dir.path().join("empty.out");
    c.download(&a.ep, "empty", &out, &expected(b"")).unwrap();
    assert_eq!(std::fs::read(out).unwrap(), b"");
}

#[test]
fn a_download_resumes_from_its_partial_file() {
    let a = TestAgent::start();
    let c = client();
    let data = content(4 << 20, 2);
    std::fs::write(a.root.join("big.bin"), &data).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("big.bin");
    let want = expected(&data);

    // An earlier download stopped after 1.5 MB (what a broken connection leaves).
    let have = 3 << 19;
    let mut part = Partial::open(partial_path(&dest, &want.sha256), &want.sha256).unwrap();
    part.write_all(&data[..have]).unwrap();
    part.checkpoint().unwrap();
    drop(part);

    let before = c.stats(&a.ep, Role::Source).unwrap().bytes_sent;
    let r = c.download(&a.ep, "big.bin", &dest, &want).unwrap();
    assert_eq!(r.resumed_from, have as u64);
    assert_eq!(r.bytes, (data.len() - have) as u64);
    let sent = c.stats(&a.ep, Role::Source).unwrap().bytes_sent - before;
    assert_eq!(sent, (data.len() - have) as u64, "only the missing bytes crossed the wire");
    assert_eq!(std::fs::read(&dest).unwrap(), data);

    // A damaged partial (wrong bytes that were checkpointed) is detected at the end; the
    // download starts over once and the result is right.
    std::fs::remove_file(&dest).unwrap();
    let mut part = Partial::open(partial_path(&dest, &want.sha256), &want.sha256).unwrap();
    part.write_all(&vec![0u8; have]).unwrap();
    part.checkpoint().unwrap();
    drop(part);
    let r = c.download(&a.ep, "big.bin", &dest, &want).unwrap();
    assert_eq!((r.resumed_from, r.bytes), (0, data.len() as u64));
    assert_eq!(std::fs::read(&dest).unwrap(), data);
}

#[test]
fn a_download_of_other_content_blames_the_source_and_leaves_nothing() {
    let a = TestAgent::start();
    let c = client();
    let data = content(1 << 20, 3);
    let mut bad = data.clone();
    bad[1000] ^= 0xff;
    std::fs::write(a.root.join("f"), &bad).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("f");
    let err = c.download(&a.ep, "f", &dest, &expected(&data)).unwrap_err();
    assert!(err.source_is_corrupt(), "{err}");
    assert_eq!(err.blame(), Blame::Source);
    match &err {
        TransferError::SourceCorrupt { actual_sha256, .. } => assert_eq!(actual_sha256, &sha(&bad)),
        other => panic!("{other:?}"),
    }
    assert!(!dest.exists() && !partial_path(&dest, &sha(&data)).exists());
    // Other size: refused before any byte is fetched.
    std::fs::write(a.root.join("g"), &data[..10]).unwrap();
    let err = c.download(&a.ep, "g", &dest, &expected(&data)).unwrap_err();
    assert!(matches!(err, TransferError::SourceCorrupt { actual_size: 10, .. }), "{err}");
    let err = c.download(&a.ep, "missing", &dest, &expected(&data)).unwrap_err();
    assert!(matches!(err, TransferError::SourceMissing { .. }), "{err}");
    assert_eq!(err.blame(), Blame::Source);
}

/// Sends the first `n` bytes of an upload of `data` to `path` and drops the connection.
fn interrupted_upload(a: &TestAgent, path: &str, data: &[u8], n: usize) {
    let mut s = TcpStream::connect(a.addr()).unwrap();
    let head = format!(
        "PUT /v1/files/{path} HTTP/1.1\r\nHost: x\r\nAuthorization: {}\r\nX-Sha256: {}\r\nContent-Length: {}\r\n\r\n",
        bearer(),
        sha(data),
        data.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(&data[..n]).unwrap();
    s.flush().unwrap();
    drop(s);
}

#[test]
fn an_interrupted_upload_resumes_where_it_stopped() {
    let a = TestAgent::start();
    let c = client();
    let data = content(3 << 20, 4);
    let half = data.len() / 2;
    interrupted_upload(&a, "d/x.bin", &data, half);
    assert!(
        wait_until(5, || c.upload_status(&a.ep, "d/x.bin", &sha(&data)).unwrap().offset == half as u64),
        "the agent keeps the bytes that arrived"
    );
    assert!(!a.root.join("d/x.bin").exists(), "an incomplete upload is not visible");
    assert!(c.list(&a.ep, "", Role::Source).unwrap().is_empty());

    let dir = tempfile::tempdir().unwrap();
    let src = local_file(dir.path(), "x.bin", &data);
    let r = c.upload(&a.ep, "d/x.bin", &src, Some(&expected(&data))).unwrap();
    assert_eq!(r.resumed_from, half as u64);
    assert_eq!(r.bytes, (data.len() - half) as u64);
    assert_eq!(std::fs::read(a.root.join("d/x.bin")).unwrap(), data);
    let st = c.stats(&a.ep, Role::Destination).unwrap();
    assert_eq!(st.bytes_received, data.len() as u64, "every byte crossed once");
    assert_eq!((st.uploads_interrupted, st.uploads_completed), (1, 1));
}

#[test]
fn a_newer_upload_supersedes_one_whose_client_went_quiet() {
    let a = TestAgent::start();
    let c = client();
    let data = content(1 << 20, 5);
    // A client that sent half and then hangs (its connection stays open).
    let mut s = TcpStream::connect(a.addr()).unwrap();
    let head = format!(
        "PUT /v1/files/y HTTP/1.1\r\nHost: x\r\nAuthorization: {}\r\nX-Sha256: {}\r\nContent-Length: {}\r\n\r\n",
        bearer(),
        sha(&data),
        data.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(&data[..1000]).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let dir = tempfile::tempdir().unwrap();
    let src = local_file(dir.path(), "y", &data);
    let r = c.upload(&a.ep, "y", &src, None).unwrap();
    assert_eq!(std::fs::read(a.root.join("y")).unwrap(), data);
    assert!(r.resumed_from <= 1000);
    drop(s);
}

#[test]
fn a_corrupt_upload_is_refused_and_never_visible() {
    let a = TestAgent::start();
    let c = client();
    let data = content(1 << 20, 6);
    let mut bad = data.clone();
    bad[77] ^= 1;
    let dir = tempfile::tempdir().unwrap();
    let src = local_file(dir.path(), "bad", &bad);
    // The uploader claims the good content; the agent hashes what it got and refuses.
    let err = c.upload(&a.ep, "z", &src, Some(&expected(&data))).unwrap_err();
    assert!(err.source_is_corrupt(), "the sender hashed its own bytes: {err}");
    assert_eq!(err.blame(), Blame::Source);
    assert!(!a.root.join("z").exists());
    assert_eq!(c.stat(&a.ep, "z", Role::Source).unwrap(), None);
    let st = c.upload_status(&a.ep, "z", &sha(&data)).unwrap();
    assert_eq!((st.offset, st.complete), (0, false), "the refused bytes are not kept for a resume");
    assert_eq!(c.stats(&a.ep, Role::Destination).unwrap().uploads_refused_checksum, 1);

    // The same through raw HTTP: 422 with what the agent computed.
    let (code, _, body) = raw(
        a.addr(),
        "PUT",
        "/v1/files/z",
        &[("Authorization", &bearer()), ("X-Sha256", &sha(&data))],
        &bad,
    );
    assert_eq!(code, 422);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["code"], "checksum_mismatch");
    assert_eq!(v["actual_sha256"], sha(&bad));
    assert!(!a.root.join("z").exists());
}

#[test]
fn a_push_moves_a_file_between_agents_and_measures_it() {
    let (a, b) = (TestAgent::start(), TestAgent::start());
    let c = client();
    let data = content(2 << 20, 7);
    std::fs::create_dir_all(a.root.join("in")).unwrap();
    std::fs::write(a.root.join("in/data"), &data).unwrap();
    let r = c.push(&a.ep, "in/data", &b.ep, "staged/data", &expected(&data)).unwrap();
    assert_eq!((r.size, r.bytes, r.resumed_from), (data.len() as u64, data.len() as u64, 0));
    assert!(r.throughput_bps > 0.0 && r.duration_ms > 0.0 && r.latency_ms.is_some());
    assert_eq!(r.sha256, sha(&data));
    assert_eq!(std::fs::read(b.root.join("staged/data")).unwrap(), data);
    let sa = c.stats(&a.ep, Role::Source).unwrap();
    assert_eq!((sa.pushes_completed, sa.bytes_sent), (1, data.len() as u64));
    // Asked again (the first answer lost, say): nothing moves.
    let again = c.push(&a.ep, "in/data", &b.ep, "staged/data", &expected(&data)).unwrap();
    assert_eq!(again.bytes, 0);
    // Without a destination path the same path is used.
    let ep_b = Endpoint::new(b.ep.url.clone(), SECRET);
    c.push(&a.ep, "in/data", &ep_b, "", &expected(&data)).unwrap();
    assert!(b.root.join("in/data").exists());
}

#[test]
fn a_push_of_a_corrupt_replica_is_refused_by_the_receiver_and_blames_the_source() {
    let (a, b) = (TestAgent::start(), TestAgent::start());
    let c = client();
    let data = content(1 << 20, 8);
    let mut bad = data.clone();
    bad[4096] ^= 0x10;
    std::fs::write(a.root.join("r"), &bad).unwrap();
    let err = c.push(&a.ep, "r", &b.ep, "r", &expected(&data)).unwrap_err();
    assert!(err.source_is_corrupt(), "{err}");
    assert_eq!(err.blame(), Blame::Source);
    match &err {
        TransferError::SourceCorrupt {
            url, path, actual_sha256, ..
        } => {
            assert_eq!(url, &a.ep.url);
            assert_eq!(path, "r");
            assert_eq!(actual_sha256, &sha(&bad));
        }
        other => panic!("{other:?}"),
    }
    assert!(!b.root.join("r").exists(), "the receiver never exposes it");
    let sb = c.stats(&b.ep, Role::Destination).unwrap();
    assert_eq!(sb.uploads_refused_checksum, 1, "the receiver itself refused the bytes");
    assert_eq!(c.upload_status(&b.ep, "r", &sha(&data)).unwrap().offset, 0);
}

#[test]
fn push_failures_say_whose_fault_they_are() {
    let (a, b) = (TestAgent::start(), TestAgent::start());
    let c = client();
    let data = content(64 << 10, 9);
    std::fs::write(a.root.join("f"), &data).unwrap();
    let want = expected(&data);

    let err = c.push(&a.ep, "nope", &b.ep, "f", &want).unwrap_err();
    assert!(matches!(err, TransferError::SourceMissing { .. }), "{err}");

    // A port nobody listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let gone = Endpoint::new(format!("http://{closed}"), SECRET);
    let err = c.push(&a.ep, "f", &gone, "f", &want).unwrap_err();
    assert!(
        matches!(
            err,
            TransferError::Unreachable {
                role: Role::Destination,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.blame(), Blame::Destination);
    let err = c.push(&gone, "f", &b.ep, "f", &want).unwrap_err();
    assert!(matches!(err, TransferError::Unreachable { role: Role::Source, .. }), "{err}");
    assert_eq!(err.blame(), Blame::Source);

    let wrong = Endpoint::new(b.ep.url.clone(), "wrong-secret-0123456789");
    let err = c.push(&a.ep, "f", &wrong, "f", &want).unwrap_err();
    assert!(
        matches!(
            err,
            TransferError::Refused {
                role: Role::Destination,
                status: 401,
                ..
            }
        ),
        "{err}"
    );
    let wrong = Endpoint::new(a.ep.url.clone(), "wrong-secret-0123456789");
    let err = c.push(&wrong, "f", &b.ep, "f", &want).unwrap_err();
    assert!(
        matches!(
            err,
            TransferError::Refused {
                role: Role::Source,
                status: 401,
                ..
            }
        ),
        "{err}"
    );

    let full = TestAgent::with(|cfg| cfg.min_free_bytes = u64::MAX / 2);
    let err = c.push(&a.ep, "f", &full.ep, "f", &want).unwrap_err();
    assert!(matches!(err, TransferError::DestinationFull { .. }), "{err}");
    assert_eq!(err.blame(), Blame::Destination);

    let small = TestAgent::with(|cfg| cfg.max_file_bytes = 1000);
    let err = c.push(&a.ep, "f", &small.ep, "f", &want).unwrap_err();
    assert!(
        matches!(
            err,
            TransferError::Refused {
                role: Role::Destination,
                status: 413,
                ..
            }
        ),
        "{err}"
    );
    assert!(!b.root.join("f").exists() && !full.root.join("f").exists() && !small.root.join("f").exists());
}

#[test]
fn a_probe_measures_the_path_and_stores_nothing() {
    let (a, b) = (TestAgent::start(), TestAgent::start());
    let c = client();
    let r = c.probe(&a.ep, &b.ep, 1 << 20).unwrap();
    assert_eq!(r.bytes, 1 << 20);
    assert!(r.throughput_bps > 0.0 && r.latency_ms.is_some());
    assert!(c.list(&b.ep, "", Role::Destination).unwrap().is_empty());
    assert_eq!(c.stats(&b.ep, Role::Destination).unwrap().bytes_received, 1 << 20);
    let too_big = c.probe(&a.ep, &b.ep, 1 << 40).unwrap_err();
    assert!(
        matches!(
            too_big,
            TransferError::Refused {
                role: Role::Source,
                status: 400,
                ..
            }
        ),
        "{too_big}"
    );
}
