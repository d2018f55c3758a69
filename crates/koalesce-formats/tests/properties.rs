//! Random and mutated inputs never panic any importer; an error's line lies within the file;
//! whatever is accepted is a valid native description.

use koalesce_api::JobDescription;
use koalesce_formats::{convert, detect, Format, Options};
use proptest::prelude::*;

const SAMPLES: [(&str, Format); 12] = [
    ("jsdl/posix-basic.jsdl", Format::Jsdl),
    ("jsdl/default-ns.jsdl", Format::Jsdl),
    ("jsdl/hpcpa.jsdl", Format::Jsdl),
    ("jsdl/ranges.jsdl", Format::Jsdl),
    ("jt/full.jt", Format::GridWay),
    ("jt/pi.jt", Format::GridWay),
    ("jt/ls.jt", Format::GridWay),
    ("rsl/spec-example.rsl", Format::Rsl),
    ("rsl/stage.rsl", Format::Rsl),
    ("rsl/multi.rsl", Format::Rsl),
    ("xrsl/data.xrsl", Format::Xrsl),
    ("xrsl/hello.xrsl", Format::Xrsl),
];

fn sample(i: usize) -> (String, Format) {
    let (p, f) = SAMPLES[i % SAMPLES.len()];
    (
        std::fs::read_to_string(format!("{}/tests/data/{p}", env!("CARGO_MANIFEST_DIR"))).unwrap(),
        f,
    )
}

fn check(text: &str, format: Format) -> Result<(), TestCaseError> {
    let lines = text.lines().count().max(1);
    match convert(text, format, &Options::default()) {
        Ok(jobs) => {
            for j in jobs {
                prop_assert!(JobDescription::parse(&j.to_toml()).is_ok(), "invalid native job from {:?}", format);
            }
        }
        Err(e) => {
            if let Some(l) = e.line {
                prop_assert!(l >= 1 && l <= lines + 1, "line {} outside a file of {} lines: {}", l, lines, e);
            }
        }
    }
    Ok(())
}

/// Pieces of the formats' syntax, so that random text reaches deep into the parsers.
fn fragment() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "&",
            "+",
            "|",
            "(",
            ")",
            "(*",
            "*)",
            "=",
            "!=",
            "$(",
            "#",
            "\"",
            "'",
            "^!",
            "executable",
            "count",
            "jobType",
            "rsl_substitution",
            "(X y)",
            "inputFiles",
            "EXECUTABLE = ",
            "ARGUMENTS = ",
            "${TASK_ID}",
            "TYPE = mpi",
            "NP = 3",
            "REQUIREMENTS = ",
            "CPU_MHZ > ",
            "\n",
            " ",
            ",",
            "<jsdl:JobDefinition xmlns:jsdl=\"http://schemas.ggf.org/jsdl/2005/11/jsdl\">",
            "<jsdl:JobDescription>",
            "</jsdl:JobDescription>",
            "<![CDATA[",
            "]]>",
            "&amp;",
            "<x:",
            "/>",
            ">",
            "koalesce:",
            "gsiftp://h/",
            "/bin/ls",
            "${KOALESCE_JOB_ID}",
            "\u{feff}",
            "é",
        ])
        .prop_map(String::from),
        "[ -~]{0,6}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, .. ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(text in ".{0,300}") {
        check(&text, detect(&text))?;
        for f in Format::ALL {
            check(&text, f)?;
        }
    }

    #[test]
    fn syntax_soup_never_panics(parts in prop::collection::vec(fragment(), 0..60)) {
        let text: String = parts.concat();
        for f in Format::ALL {
            check(&text, f)?;
        }
    }

    /// Valid files with a piece replaced, removed, duplicated or a byte flipped.
    #[test]
    fn mutated_files_never_panic(which in 0usize..12, at in 0usize..10_000, len in 0usize..40, mode in 0u8..4, ins in fragment()) {
        let (text, format) = sample(which);
        let mut b: Vec<char> = text.chars().collect();
        let i = at % (b.len() + 1);
        let j = (i + len).min(b.len());
        match mode {
            0 => { b.splice(i..j, ins.chars()); }
            1 => { b.drain(i..j); }
            2 => { let dup: Vec<char> = b[i..j].to_vec(); b.splice(i..i, dup); }
            _ => { if i < b.len() { b[i] = ins.chars().next().unwrap_or('('); } }
        }
        let text: String = b.into_iter().collect();
        check(&text, format)?;
        check(&text, detect(&text))?;
    }
}

#[test]
fn the_samples_convert() {
    for (i, (path, _)) in SAMPLES.iter().enumerate() {
        let (text, f) = sample(i);
        assert!(convert(&text, f, &Options::default()).is_ok(), "{path}");
    }
}
