//! cudarc's own lib tests (cudarc 0.19.10 from crates.io, unmodified; features
//! `std,driver,nvrtc,dynamic-loading,cuda-12090`) on the shim, each test in a process of
//! its own: in simulator mode and forwarded to a vmgpu CUDA service on the simulator.
//!
//! `tests/run-all.sh` builds the test binary under `target/` and sets
//! `VMGPU_CUDARC_TESTS`; a plain `cargo test` skips these (`#[ignore]`), the CI runs
//! them with `--ignored`, and then a missing binary is a failure, not a skip.
//!
//! On a machine with an NVIDIA GPU, `cudarcs_own_tests_on_a_gpu` runs them on NVIDIA's
//! driver itself (no shim) and through the shim forwarded to a `vmgpu cuda serve
//! --backend native` at `VMGPU_NATIVE_SERVER` (`unix:/path`), and holds the second to
//! the first; `VMGPU_LIBNVRTC` is then that machine's NVRTC. Without a GPU it fails
//! (`VMGPU_NATIVE_SERVER` unset): leave it out with `--skip on_a_gpu`.

mod support;

use std::path::PathBuf;
use std::process::Command;

use support::*;

/// The tests that fail here, each with its cause, and the modes they fail in. Any other
/// failure fails this test, and so does one of these passing (the list stays exact).
const KNOWN: &[(&str, Modes, &str)] = &[(
    "driver::safe::unified_memory::tests::test_unified_memory_host",
    FORWARDED,
    "forwarded, managed memory is mirrored in the guest and coherent at \
     synchronisations, so CONCURRENT_MANAGED_ACCESS is 0; cudarc refuses a kernel on \
     memory attached to the host (CU_MEM_ATTACH_HOST) without concurrent access \
     (CUDA_ERROR_NOT_PERMITTED)",
)];

/// Timings, reported and not held to: each passes or fails by the machine's load, with
/// why it may fail here.
const TIMING: &[(&str, &str)] = &[
    (
        "driver::safe::core::tests::test_default_pinned_host_reads_are_faster_than_write_combined",
        "the simulator has no write-combined memory: reads of pinned and of write-combined \
         memory cost the same",
    ),
    (
        "driver::safe::core::tests::test_pinned_copy_is_faster",
        "a copy from pinned memory is no faster than from pageable memory on the \
         simulator (no DMA engine)",
    ),
    (
        "driver::safe::launch::tests::test_par_launch",
        "two one-thread kernels on two streams must take half the time of the same two \
         on one stream, within 10%: the simulator runs them at once on its device \
         threads, which takes two idle cores",
    ),
];

/// Tests that pass on any working driver (a context, a pinned copy), without NVRTC:
/// on a GPU, NVIDIA's driver must pass them, else the comparison is with nothing (no
/// driver found; `#[should_panic]` tests and NVRTC's pass without one).
const ON_ANY_DRIVER: &[&str] = &[
    "driver::safe::core::tests::test_post_build_arc_count",
    "driver::safe::core::tests::test_htod_copy_pinned",
];

/// The runs (simulator, forwarded, NVIDIA's driver) one at a time: the timings measure
/// the cores.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn tests_binary() -> PathBuf {
    std::env::var_os("VMGPU_CUDARC_TESTS")
        .map(PathBuf::from)
        .expect("VMGPU_CUDARC_TESTS: cudarc 0.19.10's lib-test binary (tests/run-all.sh builds it)")
}

/// The directory of NVRTC (`VMGPU_LIBNVRTC`), for cudarc's dynamic loading.
fn nvrtc_dir() -> PathBuf {
    let lib = std::env::var_os("VMGPU_LIBNVRTC")
        .map(PathBuf::from)
        .expect("VMGPU_LIBNVRTC: libnvrtc.so.12 (tests/run-all.sh sets it)");
    lib.parent().expect("NVRTC's directory").to_path_buf()
}

/// Runs each of cudarc's 57 lib tests in a process of its own: through the shim (a
/// `libcuda.so.1` of vmgpu's) when `shim`, else on the system's `libcuda.so.1` (NVIDIA's
/// driver), with NVRTC's directory and `env`. Prints "cudarc 0.19.10 lib tests,
/// {label}: N of 57 pass", each failure with its first panic or error line, and how the
/// timings ([`TIMING`]) went.
fn run_all(label: &str, shim: bool, env: &[(&str, &str)]) -> Outcome {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let bin = tests_binary();
    let list = Command::new(&bin)
        .args(["--list", "--format", "terse"])
        .output()
        .expect("cudarc's test binary");
    let names: Vec<String> = String::from_utf8_lossy(&list.stdout)
        .lines()
        .filter_map(|l| l.strip_suffix(": test").map(str::to_string))
        .collect();
    assert_eq!(
        names.len(),
        57,
        "cudarc 0.19.10 has 57 lib tests: {names:?}"
    );
    let path = if shim {
        format!("{}:{}", shim_dir().display(), nvrtc_dir().display())
    } else {
        nvrtc_dir().display().to_string()
    };
    println!("=== cudarc 0.19.10 lib tests, {label}: LD_LIBRARY_PATH={path} {env:?}");
    let (mut passed, mut failed) = (vec![], vec![]);
    for name in &names {
        let mut cmd = Command::new(&bin);
        cmd.args(["--exact", name, "--test-threads=1"])
            .env("LD_LIBRARY_PATH", &path)
            .env_remove("VMGPU_CUDA_SERVER")
            .env_remove("VMGPU_CUDA_MODE");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("a cudarc test");
        if out.status.success() {
            passed.push(name.clone());
        } else {
            let text = String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr);
            // "thread '…' panicked at file:line:col:" has its message on the next line.
            let mut lines = text.lines();
            let why = match lines.find(|l| l.contains("panicked") || l.contains("Error")) {
                Some(l) if l.contains("panicked at") && l.ends_with(':') => {
                    format!("{l} {}", lines.next().unwrap_or(""))
                }
                Some(l) => l.to_string(),
                None => String::new(),
            };
            // A long message (a library search's every name) cut at 300 characters.
            let why = match why.char_indices().nth(300) {
                Some((i, _)) => format!("{}…", &why[..i]),
                None => why,
            };
            failed.push((name.clone(), why));
        }
    }
    println!(
        "cudarc 0.19.10 lib tests, {label}: {} of {} pass",
        passed.len(),
        names.len()
    );
    for (name, why) in &failed {
        println!("  failed: {name}: {why}");
    }
    for (t, why) in TIMING {
        let verdict = if failed.iter().any(|(f, _)| f == t) {
            "failed"
        } else {
            "passed"
        };
        println!("  timing, not held to: {t}: {verdict} ({why})");
    }
    Outcome { passed, failed }
}

/// How the tests went in one run.
struct Outcome {
    /// The names of those that passed.
    passed: Vec<String>,
    /// Those that failed, each with its first panic or error line.
    failed: Vec<(String, String)>,
}

/// The names of [`TIMING`].
fn timing() -> Vec<&'static str> {
    TIMING.iter().map(|(t, _)| *t).collect()
}

/// Holds a run on the shim (`forwarded` or in simulator mode) to [`KNOWN`]: the timings
/// aside, it failed exactly the known failures of its mode.
fn only_known_failures(label: &str, failed: &[(String, String)], forwarded: bool) {
    let timing = timing();
    let known: Vec<&str> = known_in(KNOWN, forwarded)
        .into_iter()
        .filter(|k| !timing.contains(k))
        .collect();
    let failed: Vec<String> = failed
        .iter()
        .map(|(name, _)| name.clone())
        .filter(|f| !timing.contains(&f.as_str()))
        .collect();
    failures_are_the_known_ones(label, &failed, &known);
}

#[test]
#[ignore = "needs cudarc's lib-test binary: VMGPU_CUDARC_TESTS (tests/run-all.sh builds it)"]
fn cudarcs_own_tests_in_sim_mode() {
    let run = run_all(
        "sim",
        true,
        &[("VMGPU_CUDA_MODE", "sim"), ("VMGPU_SIM_THREADS", "2")],
    );
    only_known_failures("sim", &run.failed, false);
}

#[test]
#[ignore = "needs cudarc's lib-test binary: VMGPU_CUDARC_TESTS (tests/run-all.sh builds it)"]
fn cudarcs_own_tests_forwarded() {
    let server = Server::start();
    let addr = server.env();
    let run = run_all("forwarded", true, &[("VMGPU_CUDA_SERVER", addr.as_str())]);
    only_known_failures("forwarded", &run.failed, true);
    server.wait_idle();
}

/// On a machine with an NVIDIA GPU: the 57 tests on NVIDIA's driver itself, then through
/// the shim forwarded to `vmgpu cuda serve --backend native` (`VMGPU_NATIVE_SERVER`).
/// Every test that passes on NVIDIA's driver passes forwarded, except the timings
/// (reported, not held to) and the known failures of forwarding ([`KNOWN`]'s forwarded
/// ones, which come of how the shim forwards, whatever the backend: reported).
#[test]
#[ignore = "needs an NVIDIA GPU: VMGPU_NATIVE_SERVER"]
fn cudarcs_own_tests_on_a_gpu() {
    let server = std::env::var("VMGPU_NATIVE_SERVER").expect(
        "VMGPU_NATIVE_SERVER: the address (unix:/path) of a `vmgpu cuda serve --backend \
         native` on a machine with an NVIDIA GPU; without one, leave this test out \
         (--skip on_a_gpu)",
    );
    let on_nvidia = run_all("NVIDIA's driver", false, &[]);
    let forwarded = run_all(
        "forwarded to the native backend",
        true,
        &[("VMGPU_CUDA_SERVER", server.as_str())],
    );
    // Not a comparison with nothing: NVIDIA's driver was found and ran tests.
    for t in ON_ANY_DRIVER {
        assert!(
            on_nvidia.passed.iter().any(|p| p == t),
            "{t} fails on NVIDIA's driver (see its failures above): is its \
             libcuda.so.1 on the default library path?"
        );
    }
    let failed_on_nvidia = |name: &str| on_nvidia.failed.iter().any(|(f, _)| f == name);
    let timing = timing();
    let known = known_in(KNOWN, true);
    let mut lost = vec![];
    for (name, why) in &forwarded.failed {
        if failed_on_nvidia(name) || timing.contains(&name.as_str()) {
            continue;
        }
        if known.contains(&name.as_str()) {
            println!("  passes on NVIDIA's driver, fails forwarded as known: {name}");
        } else {
            lost.push(format!("{name}: {why}"));
        }
    }
    assert!(
        lost.is_empty(),
        "pass on NVIDIA's driver, fail forwarded to the native backend: {lost:#?}"
    );
}
