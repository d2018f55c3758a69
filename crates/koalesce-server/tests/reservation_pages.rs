//! `GET /api/v1/reservations` comes in pages like the job list: no request renders an unbounded
//! list, hostile queries get clear errors, and each user sees only their own on every page.

mod common;

use common::*;
use serde_json::{json, Value};

#[test]
fn reservation_lists_come_in_pages_and_refuse_hostile_queries() {
    let tmp = tempfile::tempdir().unwrap();
    let alice = token(tmp.path(), "alice", false);
    let bob = token(tmp.path(), "bob", false);
    let admin = token(tmp.path(), "root", true);
    let mut opts = koalesce_server::test_options(tmp.path(), &[("res", 8)], supervisor());
    opts.config.sites[0].reservations = true;
    let srv = koalesce_server::BackgroundServer::start(opts).unwrap();
    let t0 = koalesce_server::now_ms() + 600_000;
    let mut mine = Vec::new();
    for k in 0..5u64 {
        let tok = if k == 2 { &bob } else { &alice };
        let body = json!({"site": "res", "processors": 1, "duration": "1m", "earliest_start_ms": t0 + k * 120_000});
        let (code, text) = srv.request("POST", "/api/v1/reservations", Some(tok), body.to_string().as_bytes());
        assert_eq!(code, 201, "{text}");
        if k != 2 {
            mine.push(json(&text)["reservation"]["id"].as_str().unwrap().to_string());
        }
    }
    let page = |tok: &str, query: &str| -> (u16, Vec<String>, Option<String>, String) {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(std::time::Duration::from_secs(30)))
            .build()
            .into();
        let mut resp = agent
            .get(format!("{}/api/v1/reservations{query}", srv.url()))
            .header("Authorization", format!("Bearer {tok}"))
            .call()
            .unwrap();
        let code = resp.status().as_u16();
        let header = |name: &str| resp.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
        let (next, link) = (header("x-koalesce-next-after"), header("link").unwrap_or_default());
        let text = resp.body_mut().read_to_string().unwrap();
        let ids = match serde_json::from_str::<Value>(&text) {
            Ok(Value::Array(a)) => a.iter().map(|r| r["id"].as_str().unwrap().to_string()).collect(),
            _ => Vec::new(),
        };
        (code, ids, next, link + &text)
    };
    // Alice's four, two at a time, without Bob's.
    let (code, p1, next, link) = page(&alice, "?limit=2");
    assert_eq!((code, p1.as_slice()), (200, &mine[..2]), "{link}");
    let next = next.expect("a cursor after a cut page");
    assert!(link.contains(&format!("after={next}")) && link.contains("rel=\"next\""), "{link}");
    let (_, p2, next2, _) = page(&alice, &format!("?limit=2&after={next}"));
    assert_eq!((p2.as_slice(), next2), (&mine[2..4], None), "the last page has no cursor");
    let (_, p3, next3, _) = page(&alice, &format!("?limit=3&after={next}"));
    assert_eq!((p3.as_slice(), next3), (&mine[2..4], None));
    // Without a limit: all of them, no cursor; an admin sees Bob's too.
    let (_, all, none, _) = page(&alice, "");
    assert_eq!((all, none), (mine.clone(), None));
    assert_eq!(page(&admin, "").1.len(), 5);
    assert_eq!(page(&bob, "?limit=10").1.len(), 1);
    // Hostile queries: clear errors naming the parameter, never a panic.
    for (q, want, says) in [
        ("?limit=0", 422, "limit"),
        ("?limit=10001", 422, "limit"),
        ("?limit=-1", 400, "limit"),
        ("?after=abc", 400, "after"),
        ("?after=99999999999999999999", 400, "after"),
        ("?after=18446744073709551615", 422, "after"),
    ] {
        let (code, _, _, body) = page(&alice, q);
        assert_eq!(code, want, "{q}: {body}");
        assert!(body.contains(says), "{q}: {body}");
    }
}
