//! `koalesce demo --federation 2` as users run it: two peered server processes, the same jobs
//! without and with S-I migration; exit 0 only if every job succeeded, and migration must have
//! moved jobs and lowered the average response time.

use std::process::Command;

#[test]
fn federation_demo_moves_jobs_and_lowers_turnaround() {
    let out = Command::new(env!("CARGO_BIN_EXE_koalesce"))
        .args(["demo", "--federation", "2", "--timeout", "90s"])
        .output()
        .expect("koalesce runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}\n{stdout}\n{stderr}", out.status);
    // The numbers after `label` on the first line that has only numbers after it.
    let row = |label: &str| -> Vec<f64> {
        stdout
            .lines()
            .filter_map(|l| l.strip_prefix(label))
            .find_map(|rest| rest.split_whitespace().map(|x| x.parse().ok()).collect::<Option<Vec<f64>>>())
            .unwrap_or_else(|| panic!("no '{label}' row in\n{stdout}"))
    };
    let art = row("ART (s)");
    let moved = row("jobs moved to a peer");
    let ok = row("jobs succeeded");
    let jobs = row("jobs ");
    assert_eq!(moved[0], 0.0, "{stdout}");
    assert!(moved[1] >= 1.0, "{stdout}");
    assert_eq!(ok, jobs, "{stdout}");
    assert!(art[1] < art[0], "S-I {} s not below local {} s\n{stdout}", art[1], art[0]);
}
