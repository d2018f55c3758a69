//! Hostile job files: each must be refused with an error naming what is wrong, never a panic,
//! a stack overflow (which aborts the whole process) or an unbounded allocation.

use koalesce_formats::{convert, decode, Format, Options};

fn refused(text: &str, format: Format, words: &[&str]) {
    let e = convert(text, format, &Options::default()).expect_err("must be refused");
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
}

/// A deadline that fits in seconds but not in milliseconds: refused or kept, never a panic.
#[test]
fn deadline_past_the_millisecond_range_does_not_panic() {
    let text = "EXECUTABLE=/bin/true\nDEADLINE=300000000000000000\n";
    if let Err(e) = convert(text, Format::GridWay, &Options::default()) {
        assert!(e.to_string().to_lowercase().contains("deadline"), "{e}");
    }
}
