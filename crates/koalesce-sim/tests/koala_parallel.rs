//! `koalesce experiment koala` runs its (configuration, seed) pairs in parallel: the report must
//! be the same bytes whatever the number of threads.

use std::path::PathBuf;

use koalesce_sim::experiments::koala::{self, Exp, Options};

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn report(threads: usize, dir: &TempDir) -> Vec<(String, Vec<u8>)> {
    let opts = Options {
        seeds: vec![1, 2, 3],
        scale: 0.25,
    };
    let exps = [Exp::Stable, Exp::Spread, Exp::Runners];
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
    let outcome = pool.install(|| koala::run(&exps, &opts, &|_, _, _| {}));
    let out = dir.0.join(format!("t{threads}"));
    let mut files: Vec<(String, Vec<u8>)> = koala::write_report(&outcome, &out)
        .unwrap()
        .into_iter()
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
        .collect();
    files.sort();
    files
}

#[test]
fn one_thread_and_several_threads_write_identical_bytes() {
    let dir = TempDir(std::env::temp_dir().join(format!("koalesce-koala-parallel-{}", std::process::id())));
    let one = report(1, &dir);
    let three = report(3, &dir);
    assert!(one.iter().any(|(n, _)| n == "koala.md") && one.iter().any(|(n, _)| n == "runs.csv"));
    assert!(one.len() > 10, "{} files", one.len());
    assert_eq!(one.len(), three.len());
    for ((na, a), (nb, b)) in one.iter().zip(&three) {
        assert_eq!(na, nb);
        assert!(a == b, "{na} differs between 1 and 3 threads");
    }
    // runs.csv is real CSV: every row has the header's number of fields.
    let csv = &one.iter().find(|(n, _)| n == "runs.csv").unwrap().1;
    let mut r = csv::Reader::from_reader(csv.as_slice());
    let width = r.headers().unwrap().len();
    let rows: Vec<csv::StringRecord> = r.records().map(|x| x.unwrap()).collect();
    assert_eq!(
        rows.len(),
        koala::run_count(
            &[Exp::Stable, Exp::Spread, Exp::Runners],
            &Options {
                seeds: vec![1, 2, 3],
                scale: 0.25
            }
        )
    );
    assert!(rows.iter().all(|row| row.len() == width));
}
