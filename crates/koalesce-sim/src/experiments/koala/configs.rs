//! The configurations of every experiment: which scenario each (experiment, label) pair runs.

use koalesce_core::model::PolicyKind;

use super::super::das2::{self, Net};
use super::super::Config;
use super::{policy_name, replicas_name, Exp, Options};
use crate::scenario::FaultSpec;

/// What a W30/W50 configuration changes from the setting of 003 §5.1.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Variant {
    net: Net,
    place_on_submit: bool,
    ordinary_users: bool,
}

const AS_IN_5_1: Variant = Variant {
    net: Net::DAS2,
    place_on_submit: true,
    ordinary_users: true,
};

/// W30/W50 on Table 5.1 with the 30–40% background band.
fn stable_config(load: u32, policy: PolicyKind, replicas: u32, v: Variant, key: String, label: String, opts: &Options) -> Config {
    let mut sched = das2::koala_5_1(policy);
    sched.place_on_submit = v.place_on_submit;
    Config {
        scenario: das2::scenario(
            &key,
            &das2::TABLE_5_1,
            v.net,
            das2::w(load, replicas, opts.jobs(200)),
            das2::band_with(0.30, 0.40, v.ordinary_users),
            sched,
            FaultSpec::default(),
        ),
        key,
        label,
    }
}

/// The configurations of one experiment.
pub fn configs(exp: Exp, opts: &Options) -> Vec<Config> {
    let mut out = Vec::new();
    match exp {
        Exp::Stable => {
            for load in [30, 50] {
                for policy in [PolicyKind::Cf, PolicyKind::Wf] {
                    for replicas in [1, 3] {
                        let key = format!("w{load}-{}-r{replicas}", policy.name());
                        let label = format!("W{load}, {}, {}", policy_name(policy), replicas_name(replicas));
                        out.push(stable_config(load, policy, replicas, AS_IN_5_1, key, label, opts));
                    }
                }
            }
        }
        Exp::HighBackground => {
            for (low, high) in [(0.5, 0.6), (0.6, 0.7)] {
                let key = format!("bg{:.0}-cf-r3", low * 100.0);
                let scenario = das2::scenario(
                    &key,
                    &das2::TABLE_5_1,
                    Net::DAS2,
                    das2::w(30, 3, opts.jobs(200)),
                    das2::band(low, high),
                    das2::koala_5_1(PolicyKind::Cf),
                    FaultSpec::default(),
                );
                out.push(Config {
                    label: format!("W30, CF, 3 replicas, background {:.0}–{:.0}%", low * 100.0, high * 100.0),
                    key,
                    scenario,
                });
            }
        }
        Exp::Spread => {
            for policy in [PolicyKind::Cf, PolicyKind::Wf] {
                for replicas in [1, 3] {
                    let key = format!("spread-{}-r{replicas}", policy.name());
                    let scenario = das2::scenario(
                        &key,
                        &das2::TABLE_5_1,
                        Net::DAS2,
                        das2::spread_workload(replicas, opts.jobs(200)),
                        das2::band(0.30, 0.40),
                        das2::koala_5_1(policy),
                        FaultSpec::default(),
                    );
                    out.push(Config {
                        label: format!("spread workload, {}, {}", policy_name(policy), replicas_name(replicas)),
                        key,
                        scenario,
                    });
                }
            }
        }
        Exp::Unreliable => {
            let key = "unreliable".to_string();
            let scenario = das2::scenario(
                &key,
                &das2::TABLE_5_2,
                Net::DAS2,
                das2::unreliable_workload(opts.jobs(500)),
                das2::band(0.30, 0.40),
                das2::koala_5_2(),
                das2::unreliable_faults(),
            );
            out.push(Config {
                label: "unreliable testbed: 500 jobs, high and low priority, Delft faulty".to_string(),
                key,
                scenario,
            });
        }
        Exp::Runners => {
            for coallocated in [false, true] {
                let key = if coallocated { "wc" } else { "wnc" }.to_string();
                let scenario = das2::scenario(
                    &key,
                    &das2::TABLE_6_2,
                    Net::DAS2,
                    das2::runners_workload(coallocated, opts.jobs(400)),
                    das2::band(0.30, 0.40),
                    das2::koala_6(),
                    FaultSpec::default(),
                );
                out.push(Config {
                    label: if coallocated {
                        "W_c (co-allocated)"
                    } else {
                        "W_nc (single component)"
                    }
                    .to_string(),
                    key,
                    scenario,
                });
            }
        }
        Exp::Sensitivity => {
            for (policy, replicas) in [(PolicyKind::Cf, 3), (PolicyKind::Wf, 1)] {
                let what = format!("{}, {}", policy_name(policy), replicas_name(replicas));
                let p = policy.name();
                let v = |net, place_on_submit, ordinary_users| Variant {
                    net,
                    place_on_submit,
                    ordinary_users,
                };
                out.push(stable_config(
                    30,
                    policy,
                    replicas,
                    v(Net::BACKBONE_100, true, true),
                    format!("net100-{p}-r{replicas}"),
                    format!("W30, {what}, 100 Mbit/s backbone (000 §2.1)"),
                    opts,
                ));
                out.push(stable_config(
                    30,
                    policy,
                    replicas,
                    v(Net::UNCONTENDED, true, true),
                    format!("netunc-{p}-r{replicas}"),
                    format!("W30, {what}, gigabit, uncontended site links"),
                    opts,
                ));
                out.push(stable_config(
                    30,
                    policy,
                    replicas,
                    v(Net::DAS2, false, true),
                    format!("scan-{p}-r{replicas}"),
                    format!("W30, {what}, placement only at scans"),
                    opts,
                ));
                out.push(stable_config(
                    30,
                    policy,
                    replicas,
                    v(Net::DAS2, true, false),
                    format!("dummy-{p}-r{replicas}"),
                    format!("W30, {what}, background of dummy jobs only"),
                    opts,
                ));
            }
            let key = "unreliable-bg60".to_string();
            let scenario = das2::scenario(
                &key,
                &das2::TABLE_5_2,
                Net::DAS2,
                das2::unreliable_workload(opts.jobs(500)),
                das2::band(0.60, 0.70),
                das2::koala_5_2(),
                das2::unreliable_faults(),
            );
            out.push(Config {
                label: "unreliable testbed, background 60–70%".to_string(),
                key,
                scenario,
            });
        }
    }
    out
}
