//! The configurations of every experiment: which scenario each (experiment, key) runs.

use koalesce_core::config::SchedulerConfig;
use koalesce_core::model::PolicyKind;

use super::super::das2::{self, Arrivals, Net};
use super::super::Config;
use super::{policy_name, replicas_name, Exp, Options};
use crate::scenario::{BackgroundSpec, FaultSpec, Scenario};

/// The transfer efficiencies η of the calibration sweep (the chosen one,
/// [`das2::TRANSFER_EFFICIENCY`], is run by the stable-system experiment itself).
pub const CALIBRATION_ETAS: [f64; 4] = [1.0, 0.9, 0.7, 0.6];

/// The offered loads of the §5.2 arrival-rate sweep (share of the 312 processors).
pub const UNRELIABLE_LOADS: [f64; 2] = [0.30, 0.50];

/// What a W30/W50 configuration changes from the setting used for 003 §5.1.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Variant {
    net: Net,
    place_on_submit: bool,
    ordinary_users: bool,
    arrivals: Arrivals,
    /// 000's PDCA rules (adaptive scan interval, JST pushed by 4 minutes) instead of 003's.
    pdca: bool,
    band: (f64, f64),
}

const AS_IN_5_1: Variant = Variant {
    net: Net::DAS2,
    place_on_submit: true,
    ordinary_users: true,
    arrivals: Arrivals::Utilization,
    pdca: false,
    band: (0.30, 0.40),
};

fn scheduler(policy: PolicyKind, v: Variant) -> SchedulerConfig {
    let mut sched = if v.pdca { das2::pdca_000(policy) } else { das2::koala_5_1(policy) };
    sched.place_on_submit = v.place_on_submit;
    sched
}

/// W30/W50 on Table 5.1.
fn stable(load: u32, policy: PolicyKind, replicas: u32, v: Variant, key: String, label: String, opts: &Options) -> Config {
    Config {
        scenario: das2::scenario(
            &key,
            &das2::TABLE_5_1,
            v.net,
            das2::w(load, replicas, opts.jobs(200), v.arrivals),
            das2::band_with(v.band.0, v.band.1, v.ordinary_users),
            scheduler(policy, v),
            FaultSpec::default(),
        ),
        key,
        label,
    }
}

fn what(policy: PolicyKind, replicas: u32) -> String {
    format!("{}, {}", policy_name(policy), replicas_name(replicas))
}

fn config(key: impl Into<String>, label: impl Into<String>, scenario: Scenario) -> Config {
    Config {
        key: key.into(),
        label: label.into(),
        scenario,
    }
}

/// `scenario` with per-site background bands.
fn with_site_bands(mut s: Scenario, bands: &[(&str, (f64, f64))]) -> Scenario {
    for (name, band) in bands {
        if let Some(site) = s.sites.iter_mut().find(|x| x.name == *name) {
            site.background_band = Some(*band);
        }
    }
    s
}

fn unreliable(key: &str, label: String, sched: SchedulerConfig, load: f64, background: BackgroundSpec, opts: &Options) -> Config {
    config(
        key,
        label,
        das2::scenario(
            key,
            &das2::TABLE_5_2,
            Net::DAS2,
            das2::unreliable_workload(opts.jobs(500), load),
            background,
            sched,
            das2::unreliable_faults(),
        ),
    )
}

fn runners(key: &str, coallocated: bool, per_min: Option<f64>, faults: FaultSpec, label: String, opts: &Options) -> Config {
    let s = das2::scenario(
        key,
        &das2::TABLE_6_2,
        Net::DAS2,
        das2::runners_workload(coallocated, opts.jobs(400), per_min),
        das2::band(0.30, 0.40),
        das2::koala_6(),
        faults,
    );
    config(key, label, with_site_bands(s, &das2::RUNNERS_SITE_BANDS))
}

fn spread(key: &str, label: String, policy: PolicyKind, replicas: u32, bands: &[(&str, (f64, f64))], opts: &Options) -> Config {
    let s = das2::scenario(
        key,
        &das2::TABLE_5_1,
        Net::DAS2,
        das2::spread_workload(replicas, opts.jobs(200)),
        das2::band(0.30, 0.40),
        das2::koala_5_1(policy),
        FaultSpec::default(),
    );
    config(key, label, with_site_bands(s, bands))
}

const POLICIES: [PolicyKind; 2] = [PolicyKind::Cf, PolicyKind::Wf];

/// The configurations of one experiment.
pub fn configs(exp: Exp, opts: &Options) -> Vec<Config> {
    let mut out = Vec::new();
    match exp {
        Exp::Stable => {
            for load in [30, 50] {
                for policy in POLICIES {
                    for replicas in [1, 3] {
                        let key = format!("w{load}-{}-r{replicas}", policy.name());
                        let label = format!("W{load}, {}", what(policy, replicas));
                        out.push(stable(load, policy, replicas, AS_IN_5_1, key, label, opts));
                    }
                }
            }
        }
        Exp::HighBackground => {
            for (low, high) in [(0.5, 0.6), (0.6, 0.7)] {
                let v = Variant {
                    band: (low, high),
                    ..AS_IN_5_1
                };
                let key = format!("bg{:.0}-cf-r3", low * 100.0);
                let label = format!("W30, CF, 3 replicas, background {:.0}–{:.0}%", low * 100.0, high * 100.0);
                out.push(stable(30, PolicyKind::Cf, 3, v, key, label, opts));
            }
            // The same under 000's PDCA rules (the JST is pushed by 4 minutes instead of the job
            // going back to the queue with a lower L; adaptive scans): 000 §5.4 is this
            // experiment.
            for (low, high) in [(0.5, 0.6), (0.6, 0.7)] {
                let v = Variant {
                    band: (low, high),
                    pdca: true,
                    ..AS_IN_5_1
                };
                let key = format!("pdca-bg{:.0}-cf-r3", low * 100.0);
                let label = format!(
                    "W30, CF, 3 replicas, background {:.0}–{:.0}%, 000's rules",
                    low * 100.0,
                    high * 100.0
                );
                out.push(stable(30, PolicyKind::Cf, 3, v, key, label, opts));
            }
        }
        Exp::Spread => {
            for policy in POLICIES {
                for replicas in [1, 3] {
                    let key = format!("spread-{}-r{replicas}", policy.name());
                    let label = format!("spread workload, {}", what(policy, replicas));
                    out.push(spread(&key, label, policy, replicas, &[], opts));
                }
            }
        }
        Exp::Unreliable => {
            let bg = || das2::band(0.30, 0.40);
            let load = das2::UNRELIABLE_LOAD;
            out.push(unreliable(
                "unreliable",
                format!("unreliable testbed: one queue per 4-minute scan, load {:.0}%", load * 100.0),
                das2::koala_5_2(),
                load,
                bg(),
                opts,
            ));
            out.push(unreliable(
                "unreliable-cycle",
                format!(
                    "unreliable testbed: one queue cycle per 4 minutes (emulated), load {:.0}%",
                    load * 100.0
                ),
                das2::koala_5_2_cycle(),
                load,
                bg(),
                opts,
            ));
        }
        Exp::Runners => {
            for (co, name) in [(false, "wnc"), (true, "wc")] {
                let w = if co { "W_c (co-allocated)" } else { "W_nc (single component)" };
                out.push(runners(name, co, None, FaultSpec::default(), w.to_string(), opts));
                out.push(runners(
                    &format!("{name}-4"),
                    co,
                    Some(4.0),
                    FaultSpec::default(),
                    format!("{w}, 4 jobs/min"),
                    opts,
                ));
                out.push(runners(
                    &format!("{name}-f"),
                    co,
                    None,
                    das2::runners_faults(),
                    format!("{w}, soft errors"),
                    opts,
                ));
            }
        }
        Exp::Calibration => {
            for eta in CALIBRATION_ETAS.iter().map(|&r| Some(r)).chain([None]) {
                let (net, tag, how) = match eta {
                    Some(e) => (Net::calibrated(e), format!("{:.0}", e * 100.0), format!("η = {e:.1}")),
                    None => (
                        Net::FREE_LOCAL,
                        "free".to_string(),
                        format!("η = {:.1}, local replica free", das2::TRANSFER_EFFICIENCY),
                    ),
                };
                for policy in POLICIES {
                    for replicas in [1, 3] {
                        let v = Variant { net, ..AS_IN_5_1 };
                        let key = format!("cal{tag}-{}-r{replicas}", policy.name());
                        out.push(stable(
                            30,
                            policy,
                            replicas,
                            v,
                            key,
                            format!("W30, {}, {how}", what(policy, replicas)),
                            opts,
                        ));
                    }
                }
            }
            // The background's own limit: every cluster held at the band's top (40%), free local
            // replicas.
            let v = Variant {
                net: Net::FREE_LOCAL,
                band: (0.40, 0.40),
                ..AS_IN_5_1
            };
            out.push(stable(
                30,
                PolicyKind::Cf,
                3,
                v,
                "calbg40-cf-r3".to_string(),
                "W30, CF, 3 replicas, local replica free, background held at 40%".to_string(),
                opts,
            ));
        }
        Exp::Sensitivity => {
            for (policy, replicas) in [(PolicyKind::Cf, 3), (PolicyKind::Wf, 1)] {
                let w = what(policy, replicas);
                let p = format!("{}-r{replicas}", policy.name());
                let variants: [(&str, String, Variant); 6] = [
                    (
                        "net100",
                        format!("W30, {w}, 100 Mbit/s backbone (000 §2.1)"),
                        Variant {
                            net: Net::BACKBONE_100,
                            ..AS_IN_5_1
                        },
                    ),
                    (
                        "contended",
                        format!("W30, {w}, shared 1200 Mbit/s site links, local replica free"),
                        Variant {
                            net: Net::CONTENDED,
                            ..AS_IN_5_1
                        },
                    ),
                    (
                        "scan",
                        format!("W30, {w}, placement only at scans"),
                        Variant {
                            place_on_submit: false,
                            ..AS_IN_5_1
                        },
                    ),
                    (
                        "dummy",
                        format!("W30, {w}, background of dummy jobs only"),
                        Variant {
                            ordinary_users: false,
                            ..AS_IN_5_1
                        },
                    ),
                    (
                        "pdca",
                        format!("W30, {w}, 000's adaptive scans and JST push"),
                        Variant { pdca: true, ..AS_IN_5_1 },
                    ),
                    (
                        "span",
                        format!("W30, {w}, arrivals ending at 6500 s (the seed's span)"),
                        Variant {
                            arrivals: Arrivals::SeedSpan,
                            ..AS_IN_5_1
                        },
                    ),
                ];
                for (tag, label, v) in variants {
                    out.push(stable(30, policy, replicas, v, format!("{tag}-{p}"), label, opts));
                }
            }
            let v = Variant {
                arrivals: Arrivals::SeedSpan,
                ..AS_IN_5_1
            };
            out.push(stable(
                50,
                PolicyKind::Wf,
                1,
                v,
                "span50-wf-r1".to_string(),
                "W50, WF, unreplicated, arrivals ending at 3900 s (the seed's span)".to_string(),
                opts,
            ));
            for policy in POLICIES {
                let key = format!("spreadvu-{}-r3", policy.name());
                let label = format!("spread workload, {}, VU's background 10–20%", what(policy, 3));
                out.push(spread(&key, label, policy, 3, &[("vu", (0.10, 0.20))], opts));
            }
            for load in UNRELIABLE_LOADS {
                let pct = load * 100.0;
                out.push(unreliable(
                    &format!("unreliable-load{pct:.0}"),
                    format!("unreliable testbed, one queue per scan, load {pct:.0}%"),
                    das2::koala_5_2(),
                    load,
                    das2::band(0.30, 0.40),
                    opts,
                ));
                out.push(unreliable(
                    &format!("unreliable-cycle-load{pct:.0}"),
                    format!("unreliable testbed, one cycle per 4 minutes (emulated), load {pct:.0}%"),
                    das2::koala_5_2_cycle(),
                    load,
                    das2::band(0.30, 0.40),
                    opts,
                ));
            }
            out.push(unreliable(
                "unreliable-bg60",
                "unreliable testbed, background 60–70%".to_string(),
                das2::koala_5_2(),
                das2::UNRELIABLE_LOAD,
                das2::band(0.60, 0.70),
                opts,
            ));
        }
    }
    out
}
