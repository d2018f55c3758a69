//! Unit and property tests of the expression compiler against a direct tree-walking
//! evaluator of the parsed expression.

use proptest::prelude::*;

use super::parser::{self, BinOp, CmpOp, Kind, Node, UnOp};
use super::*;

fn site(mhz: i64, free: i64, arch: &str) -> SiteSnapshot {
    let mut s = SiteSnapshot::default();
    s.set_int(IntVar::CpuMhz, mhz);
    s.set_int(IntVar::QueueFreeNodeCount, free);
    s.set_int(IntVar::FreeMemMb, 512);
    s.set_str(StrVar::Arch, arch);
    s.set_str(StrVar::Hostname, "hydrus.dacya.ucm.es");
    s.set_str(StrVar::LrmsName, "jobmanager-pbs");
    s.set_str(StrVar::LrmsType, "pbs");
    s
}

#[test]
fn gridway_user_guide_examples() {
    let s = site(2800, 3, "i686");
    let t = |e: &str| Expr::compile(e).unwrap().matches(&s);
    assert!(t("ARCH = \"i686\" & CPU_MHZ > 1000;"));
    assert!(t("LRMS_NAME = \"*pbs*\";"));
    assert!(t("HOSTNAME = \"*.es\";"));
    assert!(!t("HOSTNAME = \"hydrus.dacya.ucm.nl\""));
    assert!(t("(ARCH = \"i686\" | ARCH=\"x86\") & CPU_MHZ > 1000"));
    assert!(t("LRMS_TYPE != \"Fork\" & HOSTNAME = \"*.ucm.es\""));
    assert!(t(""));
    assert!(t(";"));
    let r = Expr::compile("(CPU_MHZ * 2) + FREE_MEM_MB;").unwrap();
    assert_eq!(r.eval(&s), Value::Int(2800 * 2 + 512));
    assert_eq!(Expr::compile("").unwrap().rank(&s), 0);
}

#[test]
fn table3_ranks_of_seed_004() {
    // 004 §3.4.2 (c) and (d): site C (1001 MHz, no free node) holds the 405 MB file.
    let c = Expr::compile("CPU_MHZ + QUEUE_FREENODECOUNT + SIZE_CLOSE_DATA(\"myfile\") / 135").unwrap();
    let d = Expr::compile("CPU_MHZ + QUEUE_FREENODECOUNT + SIZE_CLOSE_DATA(\"myfile\") / 68").unwrap();
    assert_eq!(c.files(), ["myfile".to_string()]);
    let mut at_c = site(1001, 0, "x86_64");
    at_c.close_files = vec![Some(405_000_000)];
    assert_eq!(c.rank(&at_c), 4001); // Table 3, algorithm C, 405 MB
    assert_eq!(d.rank(&at_c), 6956); // Table 3, algorithm D, 405 MB
    let at_a = site(2800, 0, "x86_64");
    assert_eq!(c.rank(&at_a), 2800);
    let req = Expr::compile("CLOSE_DATA(\"myfile\")").unwrap();
    assert!(req.matches(&at_c));
    assert!(!req.matches(&at_a));
    let has = Expr::compile("HAS_CLOSE_DATA(\"myfile\") * 1000").unwrap();
    assert_eq!(has.rank(&at_c), 1000);
    assert_eq!(has.rank(&at_a), 0);
}

#[test]
fn gridway_precedence_is_left_to_right() {
    let s = site(500, 0, "sparc");
    // (true | false) & false = false in GridWay; conventional precedence would give true.
    assert!(!Expr::compile("CPU_MHZ = 500 | ARCH = \"x\" & ARCH = \"y\"").unwrap().matches(&s));
    assert!(Expr::compile("CPU_MHZ = 500 | (ARCH = \"x\" & ARCH = \"y\")").unwrap().matches(&s));
    assert!(Expr::compile("!ARCH = \"x86*\" & CPU_MHZ < 1000").unwrap().matches(&s));
    assert_eq!(Expr::compile("2 + 3 * 4 - 10 / 3").unwrap().constant(), Some(Value::Int(11)));
    assert_eq!(Expr::compile("-CPU_MHZ * 2").unwrap().rank(&s), -1000);
    assert!(Expr::compile("CPU_MHZ ! = 3").unwrap().matches(&s));
}

#[test]
fn errors_point_at_the_column() {
    let col = |e: &str| Expr::compile(e).unwrap_err().column;
    assert_eq!(col("CPU_MHZ > 1000 & FOO = 3"), 18);
    assert_eq!(col("ARCH = \"i686"), 8);
    assert_eq!(col("CPU_MHZ > "), 11);
    assert_eq!(col("(CPU_MHZ > 1"), 13);
    assert_eq!(col("ARCH > \"x\""), 6);
    assert_eq!(col("CPU_MHZ = \"fast\""), 11);
    assert_eq!(col("ARCH + 1"), 1);
    assert_eq!(col("CPU_MHZ > 1.5"), 12);
    assert_eq!(col("NOPE(\"x\")"), 1);
    assert_eq!(col("CLOSE_DATA(3)"), 12);
    assert_eq!(col("CLOSE_DATA"), 1);
    assert_eq!(col("1 < 2 < 3"), 7);
    assert_eq!(col("CPU_MHZ $ 3"), 9);
    assert_eq!(col("99999999999999999999"), 1);
    let e = Expr::compile("CPU_MHZ > 1000 & FOO = 3").unwrap_err();
    assert!(e.to_string().contains("unknown variable 'FOO'"), "{e}");
    assert_eq!(e.render("CPU_MHZ > 1000 & FOO = 3").lines().nth(1).unwrap().find('^'), Some(17));
    let deep = "(".repeat(200) + "1" + &")".repeat(200);
    assert!(Expr::compile(&deep).is_err());
}

#[test]
fn folding_metadata_and_arithmetic_corners() {
    let e = Expr::compile("1 + 2 = 3 & ARCH = \"x\"").unwrap();
    assert_eq!(e.variables(), [Var::Str(StrVar::Arch)]);
    assert!(!e.depends_on_load());
    assert!(Expr::compile("QUEUE_FREENODECOUNT > 2").unwrap().depends_on_load());
    assert_eq!(Expr::compile("\"abc\" = \"a*\"").unwrap().constant(), Some(Value::Bool(true)));
    assert_eq!(Expr::compile("5 / 0").unwrap().constant(), Some(Value::Int(0)));
    assert_eq!(
        Expr::compile("9223372036854775807 + 1").unwrap().constant(),
        Some(Value::Int(i64::MAX))
    );
    assert_eq!(Expr::compile("0 & CPU_MHZ > 3").unwrap().constant(), Some(Value::Bool(false)));
    let s = site(1, 0, "a");
    assert_eq!(
        Expr::compile("HAS_SOFTWARE(\"APPS/HEP\")").unwrap().software(),
        ["APPS/HEP".to_string()]
    );
    assert!(!Expr::compile("HAS_SOFTWARE(\"APPS/HEP\")").unwrap().matches(&s));
    assert!(Expr::compile("ARCH = HOSTNAME | ARCH != HOSTNAME").unwrap().matches(&s));
}

/// Direct evaluation of the parse tree: the reference the compiled program must agree with.
fn reference(n: &Node, h: &SiteSnapshot, files: &[String], sw: &[String]) -> Result<i64, &'static str> {
    enum V {
        N(i64),
        S(String),
    }
    fn val(n: &Node, h: &SiteSnapshot, files: &[String], sw: &[String]) -> V {
        match &n.kind {
            Kind::Int(v) => V::N(*v),
            Kind::Str(s) => V::S(s.clone()),
            Kind::Var(Var::Int(v)) => V::N(h.int(*v)),
            Kind::Var(Var::Str(v)) => V::S(h.str(*v).to_string()),
            Kind::Call(f, a) => {
                let fi = files.iter().position(|x| x == a);
                let close = fi.and_then(|i| h.close_file(i));
                V::N(match f {
                    Function::CloseData | Function::HasCloseData => close.is_some() as i64,
                    Function::SizeCloseData => close.map_or(0, |b| (b / 1000) as i64),
                    Function::HasSoftware => sw.iter().position(|x| x == a).is_some_and(|i| h.has_software(i)) as i64,
                    Function::HasFeature => {
                        let tag = format!("{}{a}", crate::expr::FEATURE_TAG_PREFIX);
                        sw.iter().position(|x| *x == tag).is_some_and(|i| h.has_software(i)) as i64
                    }
                })
            }
            Kind::Unary(UnOp::Neg, x) => V::N(num(x, h, files, sw).saturating_neg()),
            Kind::Unary(UnOp::Not, x) => V::N((num(x, h, files, sw) == 0) as i64),
            Kind::Binary(BinOp::And, a, b) => V::N((num(a, h, files, sw) != 0 && num(b, h, files, sw) != 0) as i64),
            Kind::Binary(BinOp::Or, a, b) => V::N((num(a, h, files, sw) != 0 || num(b, h, files, sw) != 0) as i64),
            Kind::Binary(BinOp::Cmp(op), a, b) => match (val(a, h, files, sw), val(b, h, files, sw)) {
                (V::N(x), V::N(y)) => V::N(compile::compare(*op, x, y) as i64),
                (V::S(x), V::S(y)) => {
                    let (pat, text, lit_both) = match (&a.kind, &b.kind) {
                        (Kind::Str(_), Kind::Var(_)) => (x, y, false),
                        (Kind::Var(_), Kind::Var(_)) => (x, y, true),
                        _ => (y, x, false),
                    };
                    let m = if lit_both {
                        pat.eq_ignore_ascii_case(&text)
                    } else {
                        glob_match(pat.as_bytes(), text.as_bytes())
                    };
                    V::N((m != (*op == CmpOp::Ne)) as i64)
                }
                _ => unreachable!("type checked"),
            },
            Kind::Binary(op, a, b) => V::N(compile::arith(*op, num(a, h, files, sw), num(b, h, files, sw))),
        }
    }
    fn num(n: &Node, h: &SiteSnapshot, files: &[String], sw: &[String]) -> i64 {
        match val(n, h, files, sw) {
            V::N(v) => v,
            V::S(_) => unreachable!("type checked"),
        }
    }
    Ok(num(n, h, files, sw))
}

fn arb_expr() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        (-5i64..3000).prop_map(|v| v.to_string()),
        prop::sample::select(vec!["CPU_MHZ", "QUEUE_FREENODECOUNT", "FREE_MEM_MB", "NODECOUNT"]).prop_map(String::from),
        prop::sample::select(vec!["a", "b", "c"]).prop_map(|f| format!("SIZE_CLOSE_DATA(\"{f}\")")),
        prop::sample::select(vec!["a", "b"]).prop_map(|f| format!("HAS_CLOSE_DATA(\"{f}\")")),
        prop::sample::select(vec![
            "\"x86*\"",
            "\"i?86\"",
            "\"sparc\"",
            "\"*\"",
            "\"*86*\"",
            "\"*86\"",
            "\"[xi]*\""
        ])
        .prop_map(|p| format!("ARCH = {p}")),
        prop::sample::select(vec!["a", "c"]).prop_map(|f| format!("CLOSE_DATA(\"{f}\")")),
    ];
    leaf.prop_recursive(5, 40, 2, |inner| {
        (
            inner.clone(),
            prop::sample::select(vec!["+", "-", "*", "/", "&", "|", "<", ">", "=", "!=", ">=", "<="]),
            inner.clone(),
        )
            .prop_flat_map(|(a, op, b)| {
                prop::bool::ANY.prop_map(move |paren| {
                    if paren {
                        format!("({a} {op} {b})")
                    } else {
                        format!("{a} {op} {b}")
                    }
                })
            })
            .boxed()
            .prop_union(inner.clone().prop_map(|a| format!("!({a})")).boxed())
            .or(inner.prop_map(|a| format!("-({a})")).boxed())
    })
}

fn arb_site() -> impl Strategy<Value = SiteSnapshot> {
    (
        0i64..4000,
        0i64..64,
        0i64..4096,
        prop::sample::select(vec!["x86_64", "i686", "sparc"]),
        prop::collection::vec(prop::option::of(0u64..10_000_000), 3),
    )
        .prop_map(|(mhz, free, mem, arch, files)| {
            let mut s = site(mhz, free, arch);
            s.set_int(IntVar::FreeMemMb, mem);
            s.set_int(IntVar::NodeCount, 64);
            s.close_files = files;
            s
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, .. ProptestConfig::default() })]

    /// Whatever compiles evaluates exactly like the parse tree (jumps, folding, coercions).
    #[test]
    fn compiled_agrees_with_tree_walk(src in arb_expr(), sites in prop::collection::vec(arb_site(), 1..4)) {
        let Ok(c) = Expr::compile(&src) else { return Ok(()) }; // string/number mixes are refused
        let tree = parser::parse(&src).unwrap().unwrap();
        for s in &sites {
            // The site's file sizes are indexed as the compiled expression's files.
            let mut s = s.clone();
            let by_name = |n: &str| ["a", "b", "c"].iter().position(|x| *x == n).and_then(|i| s.close_files[i]);
            let files: Vec<Option<u64>> = c.files().iter().map(|f| by_name(f)).collect();
            s.close_files = files;
            let want = reference(&tree, &s, c.files(), c.software()).unwrap();
            prop_assert_eq!(c.eval(&s).as_int(), want, "{}", src);
        }
    }

    /// Arbitrary text never panics the compiler or the evaluator.
    #[test]
    fn arbitrary_text_never_panics(src in ".{0,80}") {
        if let Ok(c) = Expr::compile(&src) {
            let _ = c.eval(&site(1, 1, "x"));
        }
    }

    /// Mutations of valid expressions (a character replaced, dropped or inserted) never panic,
    /// and an error's column lies within the text (+1 for the end).
    #[test]
    fn mutated_expressions_never_panic(src in arb_expr(), at in 0usize..200, ch in prop::sample::select(vec!['(', ')', '"', '!', '&', '=', ';', ' ', 'X', '9', '-', 'é']), mode in 0u8..3) {
        let mut chars: Vec<char> = src.chars().collect();
        let i = at % (chars.len() + 1);
        match mode {
            0 if i < chars.len() => chars[i] = ch,
            1 if i < chars.len() => { chars.remove(i); }
            _ => chars.insert(i, ch),
        }
        let text: String = chars.iter().collect();
        match Expr::compile(&text) {
            Ok(c) => { let _ = c.eval(&site(2000, 2, "i686")); }
            Err(e) => prop_assert!(e.column >= 1 && e.column <= text.chars().count() + 1, "{} in {:?}", e, text),
        }
    }
}

#[test]
fn features_and_software_are_separate_tags() {
    use crate::gridway::Matcher;
    use crate::model::{ReplicaCatalogue, Site, SiteAttributes, SiteId};
    let site = |name: &str, software: &[&str], features: &[&str]| Site {
        name: name.into(),
        processors: 8,
        speed: 1.0,
        supports_reservations: false,
        attributes: SiteAttributes {
            software: software.iter().map(|s| s.to_string()).collect(),
            features: features.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        },
    };
    let sites = [site("a", &["ib"], &["haswell"]), site("b", &[], &["IB", "haswell"])];
    let m = Matcher::new(&sites);
    let cat = ReplicaCatalogue::new();
    let at = |text: &str, s: u32| m.value_uncached(&Expr::compile(text).unwrap(), &cat, SiteId(s), 8);
    assert_eq!(
        (at("HAS_FEATURE(\"ib\")", 0), at("HAS_FEATURE(\"ib\")", 1)),
        (0, 1),
        "a software tag is no feature; case ignored"
    );
    assert_eq!((at("HAS_SOFTWARE(\"ib\")", 0), at("HAS_SOFTWARE(\"ib\")", 1)), (1, 0));
    assert_eq!(at("HAS_FEATURE(\"ib\") & HAS_FEATURE(\"haswell\")", 1), 1);
    assert_eq!(at("HAS_FEATURE(\"ib\") & HAS_FEATURE(\"haswell\")", 0), 0);
    assert_eq!(at("HAS_FEATURE(\"skylake\") | HAS_FEATURE(\"haswell\")", 0), 1);
    assert!(Expr::compile("HAS_FEATURE(\"\")").is_err());
}
