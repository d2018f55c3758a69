//! `koalesce netbed up|down|status`: the shaped network bed on its own (the `testbed`
//! command will bring it up with the sites).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};

use koalesce::netbed::{existing_namespaces, Mode, NetBed, NetbedConfig, DEFAULT_CONFIG};

#[derive(Debug, Subcommand)]
pub enum NetbedCommand {
    /// Create the bed: a network namespace per site (and host), veth links shaped with tc.
    Up(UpArgs),
    /// Stop what runs inside the bed's namespaces and delete them.
    Down(DirArgs),
    /// Show the bed's sites, namespaces, addresses and the rate matrix.
    Status(StatusArgs),
}

#[derive(Debug, Args)]
pub struct DirArgs {
    /// The bed's directory (its state file; the namespace names derive from it).
    #[arg(long)]
    pub dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct UpArgs {
    #[arg(long)]
    pub dir: PathBuf,
    /// Sites and rates (TOML, see examples/netbed.toml, which is also the default).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Fail instead of falling back to loopback when namespaces are not allowed.
    #[arg(long)]
    pub require_namespaces: bool,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[arg(long)]
    pub dir: PathBuf,
    /// Print the bed as JSON.
    #[arg(long)]
    pub json: bool,
}

impl NetbedCommand {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            NetbedCommand::Up(a) => {
                let text = match &a.config {
                    Some(p) => std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?,
                    None => DEFAULT_CONFIG.to_string(),
                };
                let what = a
                    .config
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|| "the default bed".into());
                let config = NetbedConfig::parse(&text).with_context(|| format!("in {what}"))?;
                let bed = NetBed::up(&a.dir, &config, a.require_namespaces)?;
                if let Mode::Loopback { reason } = &bed.mode {
                    eprintln!("warning: network namespaces are not available here: {reason}");
                    eprintln!("warning: falling back to loopback: every site is 127.0.0.1 and links are NOT shaped");
                }
                print_status(&bed, None);
                Ok(ExitCode::SUCCESS)
            }
            NetbedCommand::Down(a) => {
                let deleted = NetBed::down(&a.dir)?;
                println!("bed in {} is down ({} namespaces deleted)", a.dir.display(), deleted.len());
                Ok(ExitCode::SUCCESS)
            }
            NetbedCommand::Status(a) => {
                let bed = NetBed::load(&a.dir)?;
                let present = if bed.is_shaped() {
                    Some(existing_namespaces(&bed.plan.prefix)?)
                } else {
                    None
                };
                if a.json {
                    let mut v = serde_json::to_value(&bed)?;
                    v["present"] = serde_json::json!(present);
                    println!("{}", serde_json::to_string_pretty(&v)?);
                } else {
                    print_status(&bed, present.as_deref());
                }
                Ok(ExitCode::SUCCESS)
            }
        }
    }
}

fn print_status(bed: &NetBed, present: Option<&[String]>) {
    let how = match &bed.mode {
        Mode::Namespaces => format!("shaped namespaces, prefix {}", bed.plan.prefix),
        Mode::Loopback { .. } => "loopback (not shaped)".to_string(),
    };
    println!("bed in {}: {} sites on {how}", bed.dir.display(), bed.config.sites.len());
    println!(
        "{:<12} {:<28} {:<14} {:>5} {:>8}",
        "site", "namespace", "address", "hosts", "present"
    );
    for s in &bed.config.sites {
        let ns = bed.netns(&s.name).unwrap_or("-");
        let here = match present {
            Some(p) => {
                if p.iter().any(|n| n == ns) {
                    "yes"
                } else {
                    "NO"
                }
            }
            None => "-",
        };
        let addr = bed.address(&s.name).map(|a| a.to_string()).unwrap_or_default();
        println!("{:<12} {:<28} {:<14} {:>5} {:>8}", s.name, ns, addr, s.hosts, here);
        for k in 1..=s.hosts {
            if let Some(h) = bed.host_netns(&s.name, k) {
                let addr = koalesce::netbed::plan::host_address(bed.config.sites.iter().position(|x| x.name == s.name).unwrap_or(0), k);
                let here = present.map(|p| if p.iter().any(|n| n == h) { "yes" } else { "NO" }).unwrap_or("-");
                println!(
                    "{:<12} {:<28} {:<14} {:>5} {:>8}",
                    format!("  host {k}"),
                    h,
                    addr.to_string(),
                    "",
                    here
                );
            }
        }
    }
    if bed.is_shaped() {
        println!(
            "\nrates in Mbit/s (row sends to column); inside a site: {}",
            bed.config.intra_site_mbit
        );
        print!("{:<12}", "");
        for s in bed.sites() {
            print!(" {s:>10}");
        }
        println!();
        for from in bed.sites() {
            print!("{from:<12}");
            for to in bed.sites() {
                match bed.rate_mbit(from, to) {
                    Some(r) => print!(" {r:>10}"),
                    None => print!(" {:>10}", "-"),
                }
            }
            println!();
        }
        if let Some(first) = bed.sites().first() {
            println!(
                "\nan agent for site {first}: koalesce storage-agent --root DIR --listen 127.0.0.1:0 --netns {} --netns-listen {}:7000",
                bed.netns(first).unwrap_or("-"),
                bed.address(first).map(|a| a.to_string()).unwrap_or_default()
            );
        }
    }
}
