//! `scontrol show config`: Slurm 22.05's `Key = Value` listing with what koalesce can state
//! truthfully, and the controller's line (`Slurmctld(primary) at HOST is UP`) once the server
//! answered; `scontrol ping`: that line alone (`DOWN` and exit 1 when it does not answer). Tools run it to read a value (Snakemake: MinJobAge) or to check that the
//! controller answers; a value koalesce has no counterpart for is left out, not invented.

use super::timefmt::{now_ms, timestamp};
use super::{SResult, CLUSTER_NAME, SLURM_VERSION};
use crate::client_cmds::api::Client;

/// Asks the server whether it answers, then prints the listing.
pub(crate) fn run(client: &Client) -> SResult<()> {
    client.health()?;
    print!("{}", render(now_ms(), client.base_url()));
    Ok(())
}

/// `scontrol ping`: Slurm 22.05's line for the controller, `UP` when the server answers;
/// otherwise `DOWN` and Slurm's banner, exit 1 (checked on the test bed with a stopped
/// controller).
pub(crate) fn ping(client: &Client) -> std::process::ExitCode {
    let (host, _) = host_port(client.base_url());
    match client.health() {
        Ok(()) => {
            println!("Slurmctld(primary) at {host} is UP");
            std::process::ExitCode::SUCCESS
        }
        Err(_) => {
            print!("{}", down(&host));
            std::process::ExitCode::from(1)
        }
    }
}

/// What `scontrol ping` prints for a controller that does not answer.
fn down(host: &str) -> String {
    let stars = "*".repeat(41);
    format!("Slurmctld(primary) at {host} is DOWN\n{stars}\n** RESTORE SLURMCTLD DAEMON TO SERVICE **\n{stars}\n")
}

/// The server's host and port in `url` (`http://h:7878/x` → `("h", 7878)`; the scheme's port
/// when none is given), read by the HTTP library's URI parser. A URL it cannot read gives the
/// URL itself as the host (the client refused such a URL before this is reached).
fn host_port(url: &str) -> (String, u16) {
    let Ok(uri) = url.parse::<ureq::http::Uri>() else {
        return (url.to_string(), 80);
    };
    let default_port = if uri.scheme_str().is_some_and(|s| s.eq_ignore_ascii_case("https")) {
        443
    } else {
        80
    };
    (uri.host().unwrap_or(url).to_string(), uri.port_u16().unwrap_or(default_port))
}

/// The listing at `now_ms` for the server at `url`, as Slurm 22.05 pads it: the key left-aligned
/// in 23 columns, then ` = `.
pub(crate) fn render(now_ms: u64, url: &str) -> String {
    let (host, port) = host_port(url);
    let pairs: [(&str, String); 5] = [
        ("ClusterName", CLUSTER_NAME.to_string()),
        // koalesce keeps every job's record; Slurm's 0 means records are never purged.
        ("MinJobAge", "0 sec".to_string()),
        ("SlurmctldHost[0]", host.clone()),
        ("SlurmctldPort", port.to_string()),
        // Last, as in Slurm's listing (after the SLURM_CONF line koalesce has no counterpart for).
        ("SLURM_VERSION", SLURM_VERSION.to_string()),
    ];
    let mut out = format!("Configuration data as of {}\n", timestamp(now_ms));
    for (k, v) in pairs {
        out.push_str(&format!("{k:<23} = {v}\n"));
    }
    out.push_str(&format!("\nSlurmctld(primary) at {host} is UP\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_controller_down_reads_as_slurm_22_05_prints_it() {
        // Slurm 22.05.8's `scontrol ping` with the bed's beta controller stopped.
        assert_eq!(
            down("vm"),
            "Slurmctld(primary) at vm is DOWN\n*****************************************\n\
             ** RESTORE SLURMCTLD DAEMON TO SERVICE **\n*****************************************\n"
        );
    }

    #[test]
    fn hosts_and_ports_of_urls() {
        assert_eq!(host_port("http://127.0.0.1:7878"), ("127.0.0.1".into(), 7878));
        assert_eq!(host_port("https://grid.example.org/koalesce"), ("grid.example.org".into(), 443));
        assert_eq!(host_port("http://[::1]:9000/"), ("[::1]".into(), 9000));
        assert_eq!(host_port("http://[::1]"), ("[::1]".into(), 80));
    }

    #[test]
    fn keys_come_in_slurm_22_05s_order() {
        // The order of these keys in Slurm 22.05.8's `scontrol show config` on the test bed
        // (lines 28, 93, 144, 146 and 166 of its listing).
        let real = ["ClusterName", "MinJobAge", "SlurmctldHost[0]", "SlurmctldPort", "SLURM_VERSION"];
        let s = render(0, "http://h.example:7000");
        let ours: Vec<&str> = s.lines().filter_map(|l| l.split_once(" = ")).map(|(k, _)| k.trim_end()).collect();
        assert_eq!(ours, real, "{s}");
    }

    #[test]
    fn listing_is_padded_like_slurm_22_05() {
        let s = render(0, "http://h.example:7000");
        let lines: Vec<&str> = s.lines().collect();
        assert!(lines[0].starts_with("Configuration data as of "), "{s}");
        // Lines copied from Slurm 22.05.8's `scontrol show config` (the bed's alpha cluster),
        // with koalesce's values.
        assert!(lines.contains(&"ClusterName             = koalesce"), "{s}");
        assert!(lines.contains(&"MinJobAge               = 0 sec"), "{s}");
        assert!(lines.contains(&"SLURM_VERSION           = 22.05.8"), "{s}");
        assert!(lines.contains(&"SlurmctldHost[0]        = h.example"), "{s}");
        assert!(lines.contains(&"SlurmctldPort           = 7000"), "{s}");
        assert!(s.ends_with("\n\nSlurmctld(primary) at h.example is UP\n"), "{s}");
        // Every value line is `Key = Value` with the key in 23 columns.
        for l in &lines[1..lines.len() - 2] {
            assert_eq!(l.find(" = "), Some(23), "{l}");
        }
    }
}
