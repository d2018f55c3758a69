//! The bed's configuration and the pure plan made from it: which namespaces, links, rates,
//! addresses and routes, and the exact `ip`/`tc` commands that create them. Nothing here
//! touches the machine, so all of it is unit-tested without root.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

/// `netbed.toml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetbedConfig {
    /// Rate of the links between a site's head (its storage agent) and its hosts, Mbit/s.
    #[serde(default = "default_intra")]
    pub intra_site_mbit: f64,
    /// Rate of a link between two sites that `links` does not name, Mbit/s.
    #[serde(default = "default_inter")]
    pub inter_site_mbit: f64,
    pub sites: Vec<SiteSpec>,
    #[serde(default)]
    pub links: Vec<LinkSpec>,
}

fn default_intra() -> f64 {
    1000.0
}

fn default_inter() -> f64 {
    100.0
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SiteSpec {
    pub name: String,
    /// Extra namespaces inside the site (compute hosts), each joined to the head by a link
    /// at `intra_site_mbit`.
    #[serde(default)]
    pub hosts: u32,
}

/// The rate of one pair of sites: `mbit` from `from` to `to`, `reverse_mbit` (default the
/// same) back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    pub from: String,
    pub to: String,
    pub mbit: f64,
    #[serde(default)]
    pub reverse_mbit: Option<f64>,
}

/// A configuration that cannot make a bed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("a bed needs at least one site")]
    NoSites,
    #[error("at most {MAX_SITES} sites")]
    TooManySites,
    #[error("site name '{0}' must be 1 to {MAX_NAME} characters of a-z, 0-9, '-' and '_'")]
    BadName(String),
    #[error("site '{0}' is listed twice")]
    DuplicateSite(String),
    #[error("site '{0}': at most {MAX_HOSTS} hosts")]
    TooManyHosts(String),
    #[error("link {0}: no site named '{1}'")]
    UnknownSite(String, String),
    #[error("link {0}: a link joins two different sites")]
    SelfLink(String),
    #[error("link {0} is given twice")]
    DuplicateLink(String),
    #[error("{0}: a rate must be between 0.01 and 100000 Mbit/s, got {1}")]
    BadRate(String, String),
}

pub const MAX_SITES: usize = 200;
pub const MAX_HOSTS: u32 = 250;
pub const MAX_NAME: usize = 20;

fn check_rate(what: &str, mbit: f64) -> Result<u64, ConfigError> {
    if !(0.01..=100_000.0).contains(&mbit) {
        return Err(ConfigError::BadRate(what.to_string(), mbit.to_string()));
    }
    Ok((mbit * 1000.0).round() as u64)
}

impl NetbedConfig {
    pub fn parse(text: &str) -> Result<NetbedConfig, toml::de::Error> {
        toml::from_str(text)
    }

    /// Rates in kbit/s of the ordered pair (from, to), by site index.
    fn rates(&self) -> Result<Vec<Vec<u64>>, ConfigError> {
        let n = self.sites.len();
        if n == 0 {
            return Err(ConfigError::NoSites);
        }
        if n > MAX_SITES {
            return Err(ConfigError::TooManySites);
        }
        let mut seen = BTreeSet::new();
        for s in &self.sites {
            let ok = !s.name.is_empty()
                && s.name.len() <= MAX_NAME
                && s.name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
            if !ok {
                return Err(ConfigError::BadName(s.name.clone()));
            }
            if !seen.insert(s.name.as_str()) {
                return Err(ConfigError::DuplicateSite(s.name.clone()));
            }
            if s.hosts > MAX_HOSTS {
                return Err(ConfigError::TooManyHosts(s.name.clone()));
            }
        }
        check_rate("intra_site_mbit", self.intra_site_mbit)?;
        let inter = check_rate("inter_site_mbit", self.inter_site_mbit)?;
        let mut rates = vec![vec![inter; n]; n];
        let mut given = BTreeSet::new();
        for l in &self.links {
            let label = format!("{} -> {}", l.from, l.to);
            let index = |name: &str| {
                self.sites
                    .iter()
                    .position(|s| s.name == name)
                    .ok_or_else(|| ConfigError::UnknownSite(label.clone(), name.to_string()))
            };
            let (a, b) = (index(&l.from)?, index(&l.to)?);
            if a == b {
                return Err(ConfigError::SelfLink(label));
            }
            if !given.insert((a.min(b), a.max(b))) {
                return Err(ConfigError::DuplicateLink(label));
            }
            rates[a][b] = check_rate(&label, l.mbit)?;
            rates[b][a] = check_rate(&label, l.reverse_mbit.unwrap_or(l.mbit))?;
        }
        Ok(rates)
    }
}

/// One namespace of the bed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NsPlan {
    pub name: String,
    pub site: String,
    /// `None` for the site's head, `Some(k)` for its k-th host (from 1).
    pub host: Option<u32>,
    pub address: Ipv4Addr,
}

/// One veth pair and the egress rate of each end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkPlan {
    pub ns_a: String,
    pub dev_a: String,
    pub ns_b: String,
    pub dev_b: String,
    /// Egress of `dev_a` (a → b), kbit/s.
    pub a_to_b_kbit: u64,
    /// Egress of `dev_b` (b → a), kbit/s.
    pub b_to_a_kbit: u64,
}

/// Everything the bed consists of.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub prefix: String,
    pub namespaces: Vec<NsPlan>,
    pub links: Vec<LinkPlan>,
    /// Site-to-site rates in kbit/s, `[from][to]` by site order.
    pub site_kbit: Vec<Vec<u64>>,
    pub intra_site_kbit: u64,
    /// Commands (argument lists of `ip` or `tc`) that build it, in order.
    pub commands: Vec<Vec<String>>,
}

/// The address of site `i`'s head.
pub fn site_address(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 250, 0, (i + 1) as u8)
}

/// The address of host `k` (from 1) of site `i`.
pub fn host_address(i: usize, k: u32) -> Ipv4Addr {
    Ipv4Addr::new(10, 250, (i + 1) as u8, k as u8)
}

/// The name of site `i`'s end of the link to site `j` (interface names have 15 bytes).
fn site_dev(j: usize, name: &str) -> String {
    let mut s = format!("s{j}-{name}");
    s.truncate(15);
    s
}

/// A token bucket at `kbit` kbit/s; the bucket holds 10 ms of traffic (at least 64 KiB, so
/// that full-size segments pass) and 100 ms may queue.
pub fn tbf_args(kbit: u64) -> Vec<String> {
    let burst = (kbit * 1000 / 8 / 100).max(64 << 10);
    ["qdisc", "add", "dev", "DEV", "root", "tbf", "rate"]
        .iter()
        .map(|s| s.to_string())
        .chain([
            format!("{kbit}kbit"),
            "burst".into(),
            burst.to_string(),
            "latency".into(),
            "100ms".into(),
        ])
        .collect()
}

fn cmd(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| s.to_string()).collect()
}

/// `ip -n NS route add DST [via GW] dev DEV [onlink] src SRC`. A gateway is always on-link:
/// the bed's addresses live on `lo`, not on the links.
fn route(ns: &str, dst: &str, via: Option<&str>, dev: &str, src: &str) -> Vec<String> {
    let mut c = cmd(&["ip", "-n", ns, "route", "add", dst]);
    if let Some(gw) = via {
        c.extend(cmd(&["via", gw]));
    }
    c.extend(cmd(&["dev", dev]));
    if via.is_some() {
        c.push("onlink".into());
    }
    c.extend(cmd(&["src", src]));
    c
}

/// The plan of `config` with namespace names starting with `prefix`.
pub fn plan(config: &NetbedConfig, prefix: &str) -> Result<Plan, ConfigError> {
    let rates = config.rates()?;
    let intra = check_rate("intra_site_mbit", config.intra_site_mbit)?;
    let mut namespaces = Vec::new();
    let mut links = Vec::new();
    for (i, s) in config.sites.iter().enumerate() {
        let head = format!("{prefix}-{}", s.name);
        namespaces.push(NsPlan {
            name: head.clone(),
            site: s.name.clone(),
            host: None,
            address: site_address(i),
        });
        for k in 1..=s.hosts {
            let name = format!("{prefix}-{}-h{k}", s.name);
            namespaces.push(NsPlan {
                name: name.clone(),
                site: s.name.clone(),
                host: Some(k),
                address: host_address(i, k),
            });
            links.push(LinkPlan {
                ns_a: name,
                dev_a: "to-head".into(),
                ns_b: head.clone(),
                dev_b: format!("h{k}"),
                a_to_b_kbit: intra,
                b_to_a_kbit: intra,
            });
        }
    }
    let head = |i: usize| format!("{prefix}-{}", config.sites[i].name);
    let pairs = (0..config.sites.len()).flat_map(|i| (i + 1..config.sites.len()).map(move |j| (i, j)));
    for (i, j) in pairs {
        links.push(LinkPlan {
            ns_a: head(i),
            dev_a: site_dev(j, &config.sites[j].name),
            ns_b: head(j),
            dev_b: site_dev(i, &config.sites[i].name),
            a_to_b_kbit: rates[i][j],
            b_to_a_kbit: rates[j][i],
        });
    }

    let mut commands = Vec::new();
    for ns in &namespaces {
        commands.push(cmd(&["ip", "netns", "add", &ns.name]));
        commands.push(cmd(&["ip", "-n", &ns.name, "link", "set", "lo", "up"]));
        commands.push(cmd(&[
            "ip",
            "-n",
            &ns.name,
            "addr",
            "add",
            &format!("{}/32", ns.address),
            "dev",
            "lo",
        ]));
    }
    for l in &links {
        commands.push(cmd(&[
            "ip", "link", "add", &l.dev_a, "netns", &l.ns_a, "type", "veth", "peer", "name", &l.dev_b, "netns", &l.ns_b,
        ]));
        for (ns, dev, kbit) in [(&l.ns_a, &l.dev_a, l.a_to_b_kbit), (&l.ns_b, &l.dev_b, l.b_to_a_kbit)] {
            commands.push(cmd(&["ip", "-n", ns, "link", "set", dev, "up"]));
            let mut tc = cmd(&["tc", "-n", ns]);
            tc.extend(tbf_args(kbit).into_iter().map(|a| if a == "DEV" { dev.clone() } else { a }));
            commands.push(tc);
        }
    }
    // Routes: each head reaches every other head over their direct link (and that site's
    // hosts through it); hosts reach everything through their head. No default route.
    let n = config.sites.len();
    for i in 0..n {
        let src = site_address(i).to_string();
        for j in (0..n).filter(|&j| j != i) {
            let dev = site_dev(j, &config.sites[j].name);
            let via = site_address(j).to_string();
            commands.push(route(&head(i), &format!("{via}/32"), None, &dev, &src));
            if config.sites[j].hosts > 0 {
                commands.push(route(&head(i), &format!("10.250.{}.0/24", j + 1), Some(&via), &dev, &src));
            }
        }
        for k in 1..=config.sites[i].hosts {
            let addr = host_address(i, k).to_string();
            commands.push(route(&head(i), &format!("{addr}/32"), None, &format!("h{k}"), &src));
            commands.push(route(&format!("{}-h{k}", head(i)), "10.250.0.0/16", Some(&src), "to-head", &addr));
        }
        if config.sites[i].hosts > 0 {
            commands.push(cmd(&[
                "ip",
                "netns",
                "exec",
                &head(i),
                "sysctl",
                "-q",
                "-w",
                "net.ipv4.ip_forward=1",
            ]));
        }
    }
    Ok(Plan {
        prefix: prefix.to_string(),
        namespaces,
        links,
        site_kbit: rates,
        intra_site_kbit: intra,
        commands,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> NetbedConfig {
        NetbedConfig::parse(text).unwrap()
    }

    const TWO: &str = r#"
        intra_site_mbit = 1000
        inter_site_mbit = 50
        [[sites]]
        name = "vu"
        hosts = 1
        [[sites]]
        name = "leiden"
        [[sites]]
        name = "delft"
        [[links]]
        from = "vu"
        to = "leiden"
        mbit = 40
        reverse_mbit = 20
    "#;

    #[test]
    fn plan_of_three_sites() {
        let p = plan(&config(TWO), "kdpx").unwrap();
        let names: Vec<&str> = p.namespaces.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["kdpx-vu", "kdpx-vu-h1", "kdpx-leiden", "kdpx-delft"]);
        assert_eq!(p.namespaces[0].address, Ipv4Addr::new(10, 250, 0, 1));
        assert_eq!(p.namespaces[1].address, Ipv4Addr::new(10, 250, 1, 1));
        // Unequal: 40 one way, 20 back; unnamed pairs at the default.
        assert_eq!(p.site_kbit[0][1], 40_000);
        assert_eq!(p.site_kbit[1][0], 20_000);
        assert_eq!(p.site_kbit[0][2], 50_000);
        assert_eq!(p.site_kbit[2][1], 50_000);
        // One intra-site link, three site links.
        assert_eq!(p.links.len(), 4);
        let vu_leiden = p.links.iter().find(|l| l.ns_a == "kdpx-vu" && l.ns_b == "kdpx-leiden").unwrap();
        assert_eq!((vu_leiden.dev_a.as_str(), vu_leiden.dev_b.as_str()), ("s1-leiden", "s0-vu"));
        assert_eq!((vu_leiden.a_to_b_kbit, vu_leiden.b_to_a_kbit), (40_000, 20_000));
        let text: Vec<String> = p.commands.iter().map(|c| c.join(" ")).collect();
        assert!(text.contains(&"tc -n kdpx-vu qdisc add dev s1-leiden root tbf rate 40000kbit burst 65536 latency 100ms".to_string()));
        assert!(text.contains(&"tc -n kdpx-leiden qdisc add dev s0-vu root tbf rate 20000kbit burst 65536 latency 100ms".to_string()));
        assert!(text.contains(&"ip -n kdpx-leiden route add 10.250.1.0/24 via 10.250.0.1 dev s0-vu onlink src 10.250.0.2".to_string()));
        assert!(text.contains(&"ip -n kdpx-vu-h1 route add 10.250.0.0/16 via 10.250.0.1 dev to-head onlink src 10.250.1.1".to_string()));
        // Nothing routes out of the bed: every route stays in 10.250.0.0/16.
        for c in p.commands.iter().filter(|c| c.get(3).map(String::as_str) == Some("route")) {
            assert!(c[5].starts_with("10.250."), "{c:?}");
            assert_ne!(c[5], "default");
        }
        // Every namespace command names one of the bed's namespaces.
        for c in &p.commands {
            if let Some(i) = c.iter().position(|a| a == "-n" || a == "netns") {
                assert!(c[i + 1].starts_with("kdpx-") || c[i + 1] == "add" || c[i + 1] == "exec", "{c:?}");
            }
        }
    }

    #[test]
    fn interface_names_fit_and_differ() {
        let long = r#"
            [[sites]]
            name = "a-very-long-name-1"
            [[sites]]
            name = "a-very-long-name-2"
            [[sites]]
            name = "b"
        "#;
        let p = plan(&config(long), "kdpx").unwrap();
        for l in &p.links {
            assert!(l.dev_a.len() <= 15 && l.dev_b.len() <= 15, "{l:?}");
        }
        let in_b: Vec<&str> = p.links.iter().filter(|l| l.ns_b == "kdpx-b").map(|l| l.dev_b.as_str()).collect();
        assert_eq!(in_b, ["s0-a-very-long-", "s1-a-very-long-"]);
    }

    #[test]
    fn tbf_burst_grows_with_the_rate() {
        assert_eq!(tbf_args(40_000)[9], "65536");
        assert_eq!(tbf_args(1_000_000)[9], "1250000");
    }

    #[test]
    fn bad_configurations_are_named() {
        let err = |t: &str| plan(&config(t), "p").unwrap_err();
        assert_eq!(err("sites = []"), ConfigError::NoSites);
        assert_eq!(err("[[sites]]\nname = \"Bad Name\""), ConfigError::BadName("Bad Name".into()));
        assert_eq!(
            err("[[sites]]\nname = \"a\"\n[[sites]]\nname = \"a\""),
            ConfigError::DuplicateSite("a".into())
        );
        let two = "[[sites]]\nname = \"a\"\n[[sites]]\nname = \"b\"\n";
        assert!(matches!(err(&format!("{two}[[links]]\nfrom = \"a\"\nto = \"c\"\nmbit = 1")), ConfigError::UnknownSite(_, c) if c == "c"));
        assert!(matches!(
            err(&format!("{two}[[links]]\nfrom = \"a\"\nto = \"a\"\nmbit = 1")),
            ConfigError::SelfLink(_)
        ));
        assert!(matches!(
            err(&format!("{two}[[links]]\nfrom = \"a\"\nto = \"b\"\nmbit = 0")),
            ConfigError::BadRate(..)
        ));
        assert!(matches!(
            err(&format!("{two}[[links]]\nfrom = \"a\"\nto = \"b\"\nmbit = 1\nreverse_mbit = -3")),
            ConfigError::BadRate(..)
        ));
        let dup = format!("{two}[[links]]\nfrom = \"a\"\nto = \"b\"\nmbit = 1\n[[links]]\nfrom = \"b\"\nto = \"a\"\nmbit = 2");
        assert!(matches!(err(&dup), ConfigError::DuplicateLink(_)));
        assert!(matches!(
            err("inter_site_mbit = 1e9\n[[sites]]\nname = \"a\""),
            ConfigError::BadRate(..)
        ));
        assert!(
            NetbedConfig::parse("[[sites]]\nname = \"a\"\nspeed = 3").is_err(),
            "unknown keys are errors"
        );
    }
}
