//! The component supervisor as a stand-alone program, for the koalesce-server crate's own
//! integration tests (which cannot run the `koalesce` binary). `koalesce server` uses
//! `koalesce supervise` instead; both call the same [`koalesce_server::supervise::supervise_main`].
//!
//! Usage: `koalesce-supervise --dir DIR -- PROGRAM [ARGS...]`

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (dir, rest) = match args.as_slice() {
        [flag, dir, sep, rest @ ..] if flag == "--dir" && sep == "--" && !rest.is_empty() => (dir.clone(), rest.to_vec()),
        _ => {
            eprintln!("usage: koalesce-supervise --dir DIR -- PROGRAM [ARGS...]");
            std::process::exit(2);
        }
    };
    let code = koalesce_server::supervise::supervise_main(std::path::Path::new(&dir), &rest[0], &rest[1..]);
    std::process::exit(code);
}
