//! Hostile job files: each must be refused with an error naming what is wrong, never a panic,
//! a stack overflow (which aborts the whole process) or an unbounded allocation.

use koalesce_formats::{convert, decode, Format, Options};

fn refused(text: &str, format: Format, words: &[&str]) {
    let e = convert(text, format, &Options::default())
        .err()
        .unwrap_or_else(|| panic!("must be refused: {}", text.chars().take(200).collect::<String>()));
    for w in words {
        assert!(e.to_string().contains(w), "'{w}' not in: {e}");
    }
}

/// XML nested deeper than any JSDL document: the XML parser recurses once per level, so a few
/// hundred levels overflowed the stack (aborting the daemon or the client) before.
#[test]
fn deeply_nested_xml_is_refused_not_a_stack_overflow() {
    for depth in [150, 5_000, 90_000] {
        let text = format!("<?xml version='1.0'?>{}{}", "<a>".repeat(depth), "</a>".repeat(depth));
        refused(&text, Format::Jsdl, &["line 1", "nested deeper than"]);
    }
    // Comments, CDATA, self-closing elements and quoted '>' do not count as levels.
    let flat = format!(
        "<?xml version='1.0'?><!-- <b><b><b> --><a x='>>' y=\"<\">{}<![CDATA[<c><c>]]></a>",
        "<e/>".repeat(10_000)
    );
    let e = convert(&flat, Format::Jsdl, &Options::default()).expect_err("not JSDL");
    assert!(!e.to_string().contains("nested"), "{e}");
}

#[test]
fn huge_gridway_deadline_is_refused() {
    for v in ["18446744073709551615", "1:18446744073709551615:0", "307445734561825861:0:0"] {
        refused(&format!("EXECUTABLE=/bin/true\nDEADLINE={v}\n"), Format::GridWay, &["DEADLINE", v]);
    }
}

#[test]
fn utf16_without_a_byte_order_mark_is_named() {
    let mut bytes = Vec::new();
    for u in "<?xml version='1.0'?><a/>".encode_utf16() {
        bytes.extend(u.to_le_bytes());
    }
    let e = decode(&bytes).expect_err("NUL bytes are no job file");
    assert!(e.contains("byte-order mark"), "{e}");
    // UTF-32 with its byte-order mark starts as UTF-16's: NUL characters, named.
    let mut utf32 = vec![0xFF, 0xFE, 0, 0];
    for c in "&(executable=/bin/true)".chars() {
        utf32.extend((c as u32).to_le_bytes());
    }
    let e = decode(&utf32).expect_err("UTF-32 is not read");
    assert!(e.contains("NUL"), "{e}");
}

/// A deadline that fits in seconds but not in milliseconds: refused or kept, never a panic.
#[test]
fn deadline_past_the_millisecond_range_does_not_panic() {
    let text = "EXECUTABLE=/bin/true\nDEADLINE=300000000000000000\n";
    if let Err(e) = convert(text, Format::GridWay, &Options::default()) {
        assert!(e.to_string().to_lowercase().contains("deadline"), "{e}");
    }
}

fn jsdl(application: &str, resources: &str) -> String {
    format!(
        r#"<JobDefinition xmlns="http://schemas.ggf.org/jsdl/2005/11/jsdl" xmlns:jsdl-posix="http://schemas.ggf.org/jsdl/2005/11/jsdl-posix" xmlns:jsdl-spmd="http://schemas.ogf.org/jsdl/2007/02/jsdl-spmd"><JobDescription><Application>{application}</Application><Resources>{resources}</Resources></JobDescription></JobDefinition>"#
    )
}

const POSIX: &str = "<jsdl-posix:POSIXApplication><jsdl-posix:Executable>/bin/true</jsdl-posix:Executable></jsdl-posix:POSIXApplication>";

fn exact(element: &str, v: &str) -> String {
    format!("<{element}><Exact>{v}</Exact></{element}>")
}

/// CPU and resource counts whose products overflow 64 bits: refused naming them, no panic.
#[test]
fn cpu_counts_whose_product_overflows_are_refused() {
    let huge = "4294967296";
    let resources = exact("IndividualCPUCount", huge) + &exact("TotalCPUCount", "8589934592") + &exact("TotalResourceCount", huge);
    refused(&jsdl(POSIX, &resources), Format::Jsdl, &["TotalCPUCount"]);
    let spmd = "<jsdl-spmd:SPMDApplication><jsdl-posix:Executable>a.out</jsdl-posix:Executable>\
        <jsdl-spmd:NumberOfProcesses>4</jsdl-spmd:NumberOfProcesses>\
        <jsdl-spmd:ThreadsPerProcess actualindividualcpucount=\"true\"/>\
        <jsdl-spmd:SPMDVariation>http://www.ogf.org/jsdl/2007/02/jsdl-spmd/MPICH2</jsdl-spmd:SPMDVariation></jsdl-spmd:SPMDApplication>";
    for resources in [
        exact("IndividualCPUCount", "9223372036854775808") + &exact("TotalCPUCount", "4"),
        exact("IndividualCPUCount", "9223372036854775808"),
        exact("IndividualCPUCount", "9223372036854775808") + &exact("TotalResourceCount", "1"),
    ] {
        let e = convert(&jsdl(spmd, &resources), Format::Jsdl, &Options::default()).expect_err("too many CPUs");
        assert!(e.line.is_some(), "{e}");
    }
}

mod counts {
    use super::*;
    use proptest::prelude::*;

    fn number() -> impl Strategy<Value = String> {
        prop_oneof![
            (1u64..10).prop_map(|n| n.to_string()),
            any::<u64>().prop_map(|n| n.to_string()),
            Just("18446744073709551615".to_string()),
            Just("4294967296".to_string()),
            Just("9223372036854775808".to_string()),
            Just("1e308".to_string()),
            Just("0".to_string()),
            Just("0.5".to_string()),
            Just("-1".to_string()),
        ]
    }

    fn resources() -> impl Strategy<Value = String> {
        let el = |name: &'static str| {
            prop::option::of((number(), 0u8..3)).prop_map(move |v| match v {
                None => String::new(),
                Some((n, 0)) => exact(name, &n),
                Some((n, 1)) => format!("<{name}><UpperBoundedRange>{n}</UpperBoundedRange></{name}>"),
                Some((n, _)) => format!("<{name}><LowerBoundedRange>{n}</LowerBoundedRange></{name}>"),
            })
        };
        (
            el("IndividualCPUCount"),
            el("TotalCPUCount"),
            el("TotalResourceCount"),
            el("IndividualPhysicalMemory"),
            el("TotalPhysicalMemory"),
        )
            .prop_map(|(a, b, c, d, e)| a + &b + &c + &d + &e)
    }

    fn application() -> impl Strategy<Value = String> {
        let opt = |name: &'static str, attr: &'static str| {
            prop::option::of((number(), any::<bool>())).prop_map(move |v| match v {
                None => String::new(),
                Some((n, true)) if !attr.is_empty() => format!("<jsdl-spmd:{name} {attr}=\"true\">{n}</jsdl-spmd:{name}>"),
                Some((n, _)) => format!("<jsdl-spmd:{name}>{n}</jsdl-spmd:{name}>"),
            })
        };
        prop_oneof![
            Just(POSIX.to_string()),
            (
                opt("NumberOfProcesses", "actualtotalcpucount"),
                opt("ProcessesPerHost", ""),
                opt("ThreadsPerProcess", "actualindividualcpucount")
            )
                .prop_map(|(n, p, t)| format!(
                    "<jsdl-spmd:SPMDApplication><jsdl-posix:Executable>a.out</jsdl-posix:Executable>{n}{p}{t}\
                     <jsdl-spmd:SPMDVariation>http://www.ogf.org/jsdl/2007/02/jsdl-spmd/MPICH2</jsdl-spmd:SPMDVariation>\
                     </jsdl-spmd:SPMDApplication>"
                )),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 400, .. ProptestConfig::default() })]

        /// Any combination of counts, ranges and SPMD settings converts or is refused with a
        /// line; none panics (an overflow in debug builds, a wrong job in release builds).
        #[test]
        fn any_counts_convert_or_are_refused(app in application(), res in resources()) {
            if let Err(e) = convert(&jsdl(&app, &res), Format::Jsdl, &Options::default()) {
                prop_assert!(!e.message.is_empty());
            }
        }
    }
}

/// `count` (RSL) or `NP` (GridWay) with a job type of one process per component: a few bytes
/// asked for one component per process, up to 2^32 of them (hundreds of GB) before.
#[test]
fn one_component_per_process_is_bounded() {
    for count in ["200001", "4294967295"] {
        for kind in ["multiple", "mpi"] {
            let rsl = format!("&(executable=/bin/true)(count={count})(jobType={kind})");
            refused(&rsl, Format::Rsl, &[count, "at most 100000"]);
            let jt = format!("EXECUTABLE=/bin/true\nNP={count}\nTYPE={kind}\n");
            refused(&jt, Format::GridWay, &[count, "at most 100000"]);
        }
    }
    // One component of many processors is no allocation: still accepted.
    assert!(convert("&(executable=/bin/true)(count=200001)", Format::Rsl, &Options::default()).is_ok());
}
