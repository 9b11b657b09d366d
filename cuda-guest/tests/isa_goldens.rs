//! The simulator against a real GPU, instruction by instruction (issue 14, point 3).
//!
//! `isa/mod.rs` generates one-instruction kernels per family (integer arithmetic,
//! bit operations, carry chains, f32, f64, f16/bf16, conversions in every rounding
//! mode, approximate functions, comparisons) over fixed operands: special values
//! crossed (zeros of both signs, subnormals, infinities, NaNs, width extremes, shift
//! counts at and past the width) and seeded random ones.
//!
//! - `record_goldens_on_the_gpu` (ignored; needs an NVIDIA GPU) runs every case on
//!   NVIDIA's driver through `NativeBackend` and writes `fixtures/isa-goldens/<family>.txt`
//!   (or into `VMGPU_GOLDENS_OUT`): the operands, each case's PTX, and the GPU's results.
//!   With `VMGPU_GOLDENS_BACKEND=sim` it runs on the simulator instead (a dry run of the
//!   generator; never commit its output).
//! - `the_simulator_gives_the_gpus_results` replays every committed golden on the
//!   simulator, on both engines: bit for bit, except the approximate instructions,
//!   compared within twice the PTX ISA's stated bound (both results are within it of
//!   the exact value).
//! - `the_goldens_are_the_generators_cases` holds the committed files to the generator,
//!   so a case added there without recording it again on a GPU fails, by name.

#[path = "isa/mod.rs"]
mod isa;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use cuda_guest::driver::{Backend, Device, LoadOptions, NativeBackend, SimBackend};
use cuda_guest::sim::{Engine, SimConfig};
use isa::{Case, Goldens, Outcome, Tolerance};

fn goldens_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/isa-goldens")
}

/// `backend` with device 0's primary context current.
fn current(backend: Arc<dyn Backend>) -> Arc<dyn Backend> {
    let ctx = backend
        .primary_context_retain(Device::new(0))
        .unwrap_or_else(|e| panic!("cuDevicePrimaryCtxRetain(0): {e}"));
    backend
        .context_set_current(&ctx)
        .unwrap_or_else(|e| panic!("cuCtxSetCurrent: {e}"));
    backend
}

fn simulator(engine: Engine) -> Arc<dyn Backend> {
    let sim = SimBackend::new(SimConfig {
        engine,
        threads: 1,
        ..SimConfig::default()
    })
    .expect("the simulator starts");
    current(Arc::new(sim))
}

/// The operand sets `cases` use.
fn inputs_of(cases: &[Case]) -> BTreeMap<String, Vec<[u64; 3]>> {
    cases
        .iter()
        .map(|c| (c.inputs.clone(), isa::operands(&c.inputs)))
        .collect()
}

#[test]
#[ignore = "needs an NVIDIA GPU (writes fixtures/isa-goldens, or VMGPU_GOLDENS_OUT)"]
fn record_goldens_on_the_gpu() {
    let on_sim = std::env::var("VMGPU_GOLDENS_BACKEND").is_ok_and(|b| b == "sim");
    let backend = if on_sim {
        simulator(Engine::Interpreter)
    } else {
        let native = NativeBackend::with_options(&LoadOptions::default())
            .unwrap_or_else(|e| panic!("NVIDIA's driver did not load: {e}"));
        current(Arc::new(native))
    };
    let dev = Device::new(0);
    let name = backend.device_name(dev).expect("cuDeviceGetName");
    let (major, minor) = backend.compute_capability(dev).expect("compute capability");
    let driver = backend.driver_version().expect("cuDriverGetVersion");
    let out = std::env::var_os("VMGPU_GOLDENS_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(goldens_dir);
    std::fs::create_dir_all(&out).expect("the goldens' directory");
    let (mut total, mut rejected) = (0, 0);
    for (family, cases) in isa::families() {
        let inputs = inputs_of(&cases);
        let outcomes = isa::run_cases(&*backend, &inputs, &cases);
        for (c, o) in cases.iter().zip(&outcomes) {
            if let Outcome::Rejected(why) = o {
                println!("{family}: {} rejected: {why}", c.name);
                rejected += 1;
            }
        }
        total += cases.len();
        let g = Goldens {
            header: vec![
                format!("vmgpu ISA goldens, family {family}: {} cases of {} lanes", cases.len(), isa::LANES),
                format!("recorded on {name} (sm_{major}{minor}), driver {driver}, by `cargo test -p cuda-guest --test isa_goldens -- --ignored record_goldens_on_the_gpu`"),
                "format: `inputs NAME N` then N lanes `a b c` (hex); `case NAME STY DTY TOLERANCE INPUTS BODY` then the results (hex) or `rejected WHY`".into(),
            ],
            inputs,
            cases: cases.into_iter().zip(outcomes).collect(),
        };
        let path = out.join(format!("{family}.txt"));
        std::fs::write(&path, g.to_text()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
    println!(
        "isa goldens: {total} cases recorded on {name}, {rejected} rejected by the driver, into {}",
        out.display()
    );
}

/// The committed golden files, by family.
fn committed() -> Vec<(String, Goldens)> {
    let dir = goldens_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "txt"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let family = p.file_stem().unwrap().to_string_lossy().into_owned();
            let text =
                std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            let g =
                Goldens::parse(&p.display().to_string(), &text).unwrap_or_else(|e| panic!("{e}"));
            (family, g)
        })
        .collect()
}

#[test]
fn the_simulator_gives_the_gpus_results() {
    let goldens = committed();
    assert!(
        !goldens.is_empty(),
        "no golden files in {}",
        goldens_dir().display()
    );
    let mut failures: Vec<String> = vec![];
    let (mut cases, mut lanes, mut unbounded, mut rejected) = (0, 0, 0, 0);
    for engine in [Engine::Interpreter, Engine::Jit] {
        for (family, g) in &goldens {
            let sim = simulator(engine);
            let list: Vec<Case> = g.cases.iter().map(|(c, _)| c.clone()).collect();
            let got = isa::run_cases(&*sim, &g.inputs, &list);
            for ((case, gpu), sim_outcome) in g.cases.iter().zip(got) {
                let where_ = format!("{} {family}/{} `{}`", engine.name(), case.name, case.body);
                let want = match gpu {
                    Outcome::Rejected(_) => {
                        rejected += 1;
                        continue;
                    }
                    Outcome::Results(d) => d,
                };
                let got = match sim_outcome {
                    Outcome::Rejected(why) => {
                        failures.push(format!(
                            "{where_}: the GPU runs it, the simulator refuses it: {why}"
                        ));
                        continue;
                    }
                    Outcome::Results(d) => d,
                };
                let tol = Tolerance::parse(&case.tol).unwrap_or_else(|e| panic!("{where_}: {e}"));
                let operands = &g.inputs[&case.inputs];
                let mut wrong = vec![];
                for (i, (&s, &w)) in got.iter().zip(want).enumerate() {
                    match tol.agrees(&case.sty, &case.dty, operands[i][0], s, w) {
                        None => unbounded += 1,
                        Some(true) => lanes += 1,
                        Some(false) => wrong.push(i),
                    }
                }
                cases += 1;
                if let Some(&i) = wrong.first() {
                    let [a, b, c] = operands[i];
                    failures.push(format!(
                        "{where_}: {} of {} lanes differ; first, lane {i}: a={a:#x} b={b:#x} c={c:#x}: simulator {:#x}, GPU {:#x}{}",
                        wrong.len(),
                        got.len(),
                        got[i],
                        want[i],
                        if case.tol == "exact" { String::new() } else { format!(" (tolerance {})", case.tol) }
                    ));
                }
            }
        }
    }
    println!(
        "isa goldens: {cases} case runs on both engines, {lanes} lanes agree, {unbounded} lanes outside the ISA's stated range (not compared), {rejected} case runs the GPU's driver rejected"
    );
    assert!(
        failures.is_empty(),
        "{} case runs differ from the GPU:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn the_goldens_are_the_generators_cases() {
    let goldens: BTreeMap<String, Goldens> = committed().into_iter().collect();
    for (family, cases) in isa::families() {
        let g = goldens
            .get(family)
            .unwrap_or_else(|| panic!("no goldens for family {family}: record them on a GPU"));
        let recorded: Vec<&Case> = g.cases.iter().map(|(c, _)| c).collect();
        for c in &cases {
            assert!(
                recorded.contains(&c),
                "{family}/{} `{}` has no golden: record the goldens again on a GPU",
                c.name,
                c.body
            );
        }
        assert_eq!(
            recorded.len(),
            cases.len(),
            "{family}: the goldens hold cases the generator no longer makes"
        );
        for (name, lanes) in &g.inputs {
            assert_eq!(
                lanes,
                &isa::operands(name),
                "{family}: operand set {name} is not the generator's"
            );
        }
    }
    let families: Vec<&str> = isa::families().iter().map(|(f, _)| *f).collect();
    for f in goldens.keys() {
        assert!(
            families.contains(&f.as_str()),
            "goldens of an unknown family {f}"
        );
    }
}

/// The file format reads back what it writes, rejected cases and tolerances included.
#[test]
fn golden_files_round_trip() {
    let cases = vec![
        Case {
            name: "add.s32".into(),
            sty: "s32".into(),
            dty: "s32".into(),
            tol: "exact".into(),
            inputs: "i32".into(),
            body: "add.s32 %y, %x1, %x2;".into(),
        },
        Case {
            name: "sin.approx.f32".into(),
            sty: "f32".into(),
            dty: "f32".into(),
            tol: "abs=2^-19.5 argmax=3.1415927".into(),
            inputs: "f32".into(),
            body: "sin.approx.f32 %y, %x1;".into(),
        },
    ];
    let inputs = inputs_of(&cases);
    let g = Goldens {
        header: vec!["test".into()],
        cases: vec![
            (
                cases[0].clone(),
                Outcome::Results((0..isa::LANES as u64).map(|i| i * 0x1_0001).collect()),
            ),
            (
                cases[1].clone(),
                Outcome::Rejected("ptxas fatal: something".into()),
            ),
        ],
        inputs,
    };
    let back = Goldens::parse("t", &g.to_text()).unwrap();
    assert_eq!(back, g);
    assert!(Goldens::parse("t", "case\tx\n")
        .unwrap_err()
        .contains("t:1"));
    let t = Tolerance::parse("abs=2^-19.5 argmax=3.1415927").unwrap();
    let f = |x: f32| x.to_bits() as u64;
    assert_eq!(
        t.agrees("f32", "f32", f(1.0), f(0.5), f(0.5 + 1e-7)),
        Some(true)
    );
    assert_eq!(
        t.agrees("f32", "f32", f(1.0), f(0.5), f(0.5001)),
        Some(false)
    );
    assert_eq!(t.agrees("f32", "f32", f(4.0), f(0.5), f(0.9)), None);
    let exact = Tolerance::parse("exact").unwrap();
    assert_eq!(
        exact.agrees("f32", "f32", 0, f(f32::NAN), 0x7fff_ffff),
        Some(false)
    );
    let ulp = Tolerance::parse("ulp=2").unwrap();
    assert_eq!(ulp.agrees("f32", "f32", 0, f(1.0), f(1.0) + 2), Some(true));
    assert_eq!(ulp.agrees("f32", "f32", 0, f(1.0), f(1.0) + 3), Some(false));
    assert_eq!(ulp.agrees("f32", "f32", 0, f(0.0), f(-0.0)), Some(true));
}
