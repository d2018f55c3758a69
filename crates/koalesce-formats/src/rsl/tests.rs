//! Unit tests of the RSL tokenizer, parser, substitution and dialect detection.

use super::*;

fn rels(src: &str) -> Vec<Rel> {
    match resolve(src, Format::Rsl).unwrap() {
        Req::And(r, _) => r,
        other => panic!("{other:?}"),
    }
}

#[test]
fn spec_example_substitution_and_concatenation() {
    // The example of the GT2 RSL v1.0 specification.
    let src = r#"&(rsl_substitution = (TOPDIR "/home/nobody")
            (DATADIR $(TOPDIR)"/data")
            (EXECDIR $(TOPDIR)/bin) )
  (executable = $(EXECDIR)/a.out (* implicit concatenation *))
  (directory  = $(TOPDIR) )
  (arguments  = $(DATADIR)/file1
            $(DATADIR) # /file2
            '$(FOO)'            (* a quoted literal *))
  (environment = (DATADIR $(DATADIR)))
  (count = 1)"#;
    let r = rels(src);
    let get = |a: &str| r.iter().find(|x| x.canon == a).unwrap().clone();
    assert_eq!(get("executable").one(Format::Rsl).unwrap(), "/home/nobody/bin/a.out");
    assert_eq!(
        get("arguments").strings(Format::Rsl).unwrap(),
        ["/home/nobody/data/file1", "/home/nobody/data/file2", "$(FOO)"]
    );
    assert_eq!(
        get("environment").tuples(Format::Rsl).unwrap(),
        vec![vec!["DATADIR".to_string(), "/home/nobody/data".into()]]
    );
}

#[test]
fn quoting_forms_and_names() {
    let r = rels(r#"&(arguments = "a ""b"" c" 'd''e' ^!f "g!!h! )(MAX_WALL_TIME=5)(Job_Type = mpi)"#);
    assert_eq!(r[0].strings(Format::Rsl).unwrap(), ["a \"b\" c", "d'e", "f \"g!h"]);
    assert_eq!(r[1].canon, "maxwalltime");
    assert_eq!(r[2].canon, "jobtype");
    assert_eq!(rels("(executable=/bin/date)(count=2)").len(), 2);
}

#[test]
fn multirequest_scopes_and_errors() {
    let src = "+( &(rsl_substitution=(X a))(executable=$(X)) )( &(executable=$(X)) )";
    let e = resolve(src, Format::Rsl).unwrap_err();
    assert!(e.message.contains("$(X)"), "{e}");
    assert_eq!(e.line, Some(1));
    let ok = "+( &(rsl_substitution=(X a))(executable=$(X)) )( &(executable=$(X b)) )";
    assert!(matches!(resolve(ok, Format::Rsl).unwrap(), Req::Multi(v, _) if v.len() == 2));
    for (bad, line, col) in [
        ("&(executable=/bin/ls", 1, 21),
        ("&(a=\"x)", 1, 5),
        ("&(a b)", 1, 5),
        ("&\n(* open", 2, 1),
        ("&(a=b) junk", 1, 8),
    ] {
        let e = resolve(bad, Format::Rsl).unwrap_err();
        assert_eq!((e.line, e.column), (Some(line), Some(col)), "{bad}: {e}");
    }
}

#[test]
fn dialects() {
    assert_eq!(dialect("&(executable=a)(inputFiles=(a \"\"))(jobName=x)"), Format::Xrsl);
    assert_eq!(dialect("&(executable=a)(maxWallTime=4)(directory=/tmp)"), Format::Rsl);
    assert_eq!(dialect("&(executable=a)"), Format::Rsl);
    assert_eq!(dialect("(* ARC *) &(executable=a)(stdout=o)"), Format::Xrsl);
    assert_eq!(dialect("(* GT2 *) &(executable=a)(directory=/tmp)"), Format::Rsl);
}
