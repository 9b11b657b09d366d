//! Every PTX file of the corpus (and of `tests/ptx`) loads: parses and decodes.

use cuda_guest::sim::{SimConfig, Simulator};
use std::path::PathBuf;

fn dirs() -> Vec<PathBuf> {
    vec![
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/ptx"),
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/ptx"),
    ]
}

#[test]
fn every_corpus_module_loads() {
    let mut n = 0;
    let mut failures = vec![];
    for d in dirs() {
        let rd = std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
        let mut files: Vec<_> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "ptx"))
            .collect();
        files.sort();
        for f in files {
            let mut s = Simulator::new(SimConfig::default());
            let name = f.file_name().unwrap().to_string_lossy().to_string();
            match s.load_module(&name, &std::fs::read_to_string(&f).unwrap()) {
                Ok(m) => assert!(!m.kernel_names().is_empty()),
                Err(e) => failures.push(e.to_string()),
            }
            n += 1;
        }
    }
    // 24 corpus kernels from two compilers, plus tests/ptx.
    assert!(n >= 50, "only {n} PTX files found");
    assert!(
        failures.is_empty(),
        "{} of {n} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
