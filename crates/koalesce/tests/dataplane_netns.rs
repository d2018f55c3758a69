//! The data plane on a real shaped network: `koalesce netbed up` makes two site namespaces
//! joined by a veth pair shaped with tc tbf, a `koalesce storage-agent` runs in each, and a
//! client in the host namespace asks one to push to the other (third-party transfer).
//!
//! - the measured throughput of a push is within 10 % of the shaped rate, each direction
//!   at its own (unequal) rate;
//! - a sending agent killed mid-transfer is restarted and the transfer resumes where it
//!   stopped: fewer than 1.2 × the file's bytes cross the link in all, the checksum is right;
//! - a corrupt source replica is refused by the receiver and the error blames the source.
//!
//! Needs root (network namespaces), as CI has; without it the tests fail with the reason.

use std::process::Command;
use std::time::{Duration, Instant};

// The storage agent's test helpers (content, checksums, a client with short timeouts).
#[path = "../../koalesce-server/tests/agent_common/mod.rs"]
mod agent_common;

use agent_common::{client, content, expected};
use koalesce_core::model::{NetworkForecast, SiteId};
use koalesce_core::nws::{NetworkWeather, NwsConfig};
use koalesce_server::dataplane::{Blame, Role, SiteAgent, TransferError};

mod netbed_common;

use netbed_common::*;

#[test]
fn a_push_runs_at_the_shaped_rate_of_each_direction() {
    let _turn = one_at_a_time();
    let bed = Bed::up(&two_sites(40, 80));
    let a = Agent::start(&bed, "a", &bed.dir.path().join("a"));
    let b = Agent::start(&bed, "b", &bed.dir.path().join("b"));
    let c = client();
    for (from, to, dir_name, mbit) in [(&a, &b, "a-to-b", 40.0), (&b, &a, "b-to-a", 80.0)] {
        // 4 MiB at 40 Mbit/s is 0.8 s; at 80, 0.4 s.
        let data = content(4 << 20, mbit as u64);
        std::fs::write(from.root.join(dir_name), &data).unwrap();
        let r = c.push(&from.control, dir_name, &to.data, dir_name, &expected(&data)).unwrap();
        assert_eq!(std::fs::read(to.root.join(dir_name)).unwrap(), data);
        let ratio = r.throughput_bps / (mbit * 1e6);
        println!(
            "{dir_name}: {:.2} Mbit/s measured on a link shaped to {mbit} Mbit/s: {:.1} % ({} bytes in {:.0} ms)",
            r.throughput_bps / 1e6,
            ratio * 100.0,
            r.bytes,
            r.duration_ms
        );
        assert!(
            (0.9..=1.1).contains(&ratio),
            "{dir_name}: measured {:.1} % of the shaped rate",
            ratio * 100.0
        );
    }
}

#[test]
fn a_push_whose_sender_is_killed_resumes_where_it_stopped() {
    let _turn = one_at_a_time();
    let bed = Bed::up(&two_sites(40, 80));
    let mut a = Agent::start(&bed, "a", &bed.dir.path().join("a"));
    let b = Agent::start(&bed, "b", &bed.dir.path().join("b"));
    let c = client();
    // 8 MiB at 40 Mbit/s: 1.7 s, time enough to kill the sender in the middle.
    let data = content(8 << 20, 11);
    let want = expected(&data);
    std::fs::write(a.root.join("big"), &data).unwrap();
    let wire_before = bed.tx_bytes("a", "s1-b");

    let (src, dst, w, c2) = (a.control.clone(), b.data.clone(), want.clone(), c.clone());
    let first = std::thread::spawn(move || c2.push(&src, "big", &dst, "big", &w));
    let got_some = || c.stats(&b.control, Role::Destination).map(|s| s.bytes_received).unwrap_or(0);
    let deadline = Instant::now() + Duration::from_secs(10);
    while got_some() < 2 << 20 {
        assert!(Instant::now() < deadline, "the push never got going");
        std::thread::sleep(Duration::from_millis(10));
    }
    a.kill();
    let err = first.join().unwrap().unwrap_err();
    assert!(matches!(err, TransferError::Unreachable { role: Role::Source, .. }), "{err}");
    assert_eq!(err.blame(), Blame::Source);
    // The receiver notices the cut and keeps what arrived; nothing is visible yet.
    let mut held = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    while held == 0 {
        held = c.upload_status(&b.control, "big", &want.sha256).unwrap().offset;
        assert!(Instant::now() < deadline, "the receiver kept nothing");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(held < want.size, "killed before the end ({held} of {})", want.size);
    assert!(!b.root.join("big").exists());

    // The agent comes back (same storage, same namespace) and is asked again.
    let a = Agent::start(&bed, "a", &a.root.clone());
    let r = c.push(&a.control, "big", &b.data, "big", &want).unwrap();
    assert_eq!(r.resumed_from, held, "resumed from what the receiver held");
    assert_eq!(r.bytes, want.size - held);
    assert_eq!(std::fs::read(b.root.join("big")).unwrap(), data, "checksum and content right");
    let received = c.stats(&b.control, Role::Destination).unwrap().bytes_received;
    let wire = bed.tx_bytes("a", "s1-b") - wire_before;
    println!(
        "killed after {held} of {} bytes; resumed: {} more; the receiver got {received} body bytes ({:.3} x the file), the link carried {wire} bytes ({:.3} x)",
        want.size,
        r.bytes,
        received as f64 / want.size as f64,
        wire as f64 / want.size as f64
    );
    assert!(
        received < want.size * 12 / 10,
        "{received} body bytes for a {} byte file",
        want.size
    );
    assert!(wire < want.size * 12 / 10, "{wire} bytes on the link for a {} byte file", want.size);
}

#[test]
fn probes_feed_a_forecast_that_follows_the_real_link() {
    let _turn = one_at_a_time();
    let bed = Bed::up(&two_sites(40, 80));
    let a = Agent::start(&bed, "a", &bed.dir.path().join("a"));
    let b = Agent::start(&bed, "b", &bed.dir.path().join("b"));
    let c = client();
    let site = |name: &str, agent: &Agent| SiteAgent {
        site: name.to_string(),
        control: agent.control.clone(),
        data_url: agent.data.url.clone(),
    };
    let (sa, sb) = (site("a", &a), site("b", &b));
    let (ia, ib) = (SiteId(0), SiteId(1));
    let mut weather = NetworkWeather::new(NwsConfig::default());
    let mut now = 0;
    let mut probe = |weather: &mut NetworkWeather| {
        let r = sb.probe_from(&c, &sa, 1 << 20).unwrap();
        now += 1000;
        weather.observe(ia, ib, r.measurement(now).expect("1 MiB is timed")).unwrap();
        let f = weather.forecast(ia, ib).unwrap().bandwidth;
        println!(
            "probe a->b: {:.2} Mbit/s; forecast {:.2} Mbit/s by {} (MAE {:.2} Mbit/s)",
            r.throughput_bps / 1e6,
            f.value / 1e6,
            f.method,
            f.mae / 1e6
        );
        f
    };
    // Probes until the forecast is within 10 % of the link's rate: at least 3 probes, and
    // more while a loaded machine (agents short of CPU) slows single probes down; fails if
    // 20 probes never get there.
    let mut probe_until_near = |weather: &mut NetworkWeather, mbit: f64| {
        let near = |v: f64| (0.9..=1.1).contains(&(v / (mbit * 1e6)));
        let mut last = 0.0;
        for n in 1..=20 {
            last = probe(weather).value;
            if n >= 3 && near(last) {
                return;
            }
        }
        panic!("forecast {:.2} Mbit/s on a {mbit} Mbit/s link after 20 probes", last / 1e6);
    };
    probe_until_near(&mut weather, 40.0);
    // The link slows to 16 Mbit/s: after a few probes the forecast has followed it.
    bed.reshape("a", "s1-b", 16_000);
    probe_until_near(&mut weather, 16.0);
    // And it drives the core's transfer-time estimate: 10 MB now take about 5 s, not 2.
    let mut net = NetworkForecast::uniform(2, 1e9, 1);
    weather.apply(&mut net);
    let ms = net.transfer_ms(ia, ib, 10_000_000);
    assert!((4_500..=5_600).contains(&ms), "estimated {ms} ms for 10 MB");
    assert!(
        c.list(&b.control, "", Role::Destination).unwrap().is_empty(),
        "probes store nothing"
    );
}

#[test]
fn a_corrupt_source_is_refused_by_the_receiver_and_blamed() {
    let _turn = one_at_a_time();
    let bed = Bed::up(&two_sites(1000, 1000));
    let a = Agent::start(&bed, "a", &bed.dir.path().join("a"));
    let b = Agent::start(&bed, "b", &bed.dir.path().join("b"));
    let c = client();
    let data = content(1 << 20, 5);
    let mut bad = data.clone();
    bad[123_456] ^= 0x01;
    std::fs::write(a.root.join("input"), &bad).unwrap();
    let err = c.push(&a.control, "input", &b.data, "input", &expected(&data)).unwrap_err();
    assert!(err.source_is_corrupt(), "{err}");
    assert_eq!(err.blame(), Blame::Source);
    assert!(err.to_string().contains("input"), "{err}");
    let sb = c.stats(&b.control, Role::Destination).unwrap();
    assert_eq!(sb.uploads_refused_checksum, 1, "the receiver hashed the bytes and refused them");
    assert!(sb.bytes_received >= data.len() as u64);
    assert!(!b.root.join("input").exists());
    assert!(c.list(&b.control, "", Role::Destination).unwrap().is_empty());
}

#[test]
fn the_bed_has_no_way_out_and_goes_down_completely() {
    let bed = Bed::up(
        r#"
        [[sites]]
        name = "x"
        hosts = 1
        [[sites]]
        name = "y"
        "#,
    );
    let prefix = bed.prefix();
    for ns in [bed.netns("x"), bed.netns("y"), format!("{}-h1", bed.netns("x"))] {
        let out = Command::new("ip").args(["-n", &ns, "route", "get", "1.1.1.1"]).output().unwrap();
        assert!(
            !out.status.success(),
            "{ns} has a route out: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let out = Command::new("ip").args(["-n", &ns, "route", "get", "127.0.0.53"]).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!out.status.success() || text.contains("dev lo"), "{ns}: {text}");
    }
    // A host of x reaches y's head through x's head.
    let probe = format!("exec 3<>/dev/tcp/{}/{DATA_PORT}", bed.address("y"));
    let y = Agent::start(&bed, "y", &bed.dir.path().join("y"));
    let out = Command::new("ip")
        .args(["netns", "exec", &format!("{}-h1", bed.netns("x")), "bash", "-c", &probe])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "host of x cannot reach y: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A second `up` in the same directory is refused.
    let out = Command::new(KOALESCE)
        .args(["netbed", "up", "--dir"])
        .arg(bed.dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("already up"));

    // `down` stops the agent still running inside and removes every namespace.
    let dir = bed.dir.path().to_path_buf();
    let out = Command::new(KOALESCE).args(["netbed", "down", "--dir"]).arg(&dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut y = y;
    let exited = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(20));
        matches!(y.child.try_wait(), Ok(Some(_)))
    });
    assert!(exited, "the agent inside the bed was stopped");
    let list = String::from_utf8_lossy(&Command::new("ip").args(["netns", "list"]).output().unwrap().stdout).into_owned();
    assert!(!list.contains(&prefix), "left over: {list}");
    assert!(!dir.join("netbed.json").exists());
}

#[test]
fn without_namespaces_the_bed_falls_back_to_loopback_with_a_clear_message() {
    require_root();
    // An unprivileged user cannot create namespaces.
    let dir = tempfile::tempdir().unwrap();
    let bed_dir = dir.path().join("bed");
    std::fs::create_dir(&bed_dir).unwrap();
    // A copy of the binary the unprivileged user can surely execute (the checkout may sit
    // in a directory only root may enter).
    let exe = dir.path().join("koalesce");
    std::fs::copy(KOALESCE, &exe).unwrap();
    Command::new("chmod").args(["755"]).arg(&exe).status().unwrap();
    Command::new("chmod").args(["777"]).arg(dir.path()).arg(&bed_dir).status().unwrap();
    let as_nobody = |args: &[&str]| {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&exe)
            .args(args)
            .arg("--dir")
            .arg(&bed_dir)
            .output()
            .unwrap()
    };
    let out = as_nobody(&["netbed", "up"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("not available here") && stderr.contains("loopback"), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("loopback (not shaped)"));
    let out = as_nobody(&["netbed", "down"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = as_nobody(&["netbed", "up", "--require-namespaces"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not running as root"));
}
