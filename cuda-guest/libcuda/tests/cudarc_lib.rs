//! cudarc's own lib tests (cudarc 0.19.10 from crates.io, unmodified; features
//! `std,driver,nvrtc,dynamic-loading,cuda-12090`) on the shim, each test in a process of
//! its own: in simulator mode and forwarded to a vmgpu CUDA service on the simulator.
//!
//! `tests/run-all.sh` builds the test binary under `target/` and sets
//! `VMGPU_CUDARC_TESTS`; a plain `cargo test` skips these (`#[ignore]`), the CI runs
//! them with `--ignored`, and then a missing binary is a failure, not a skip.

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

/// The two runs (simulator and forwarded) one at a time: the timings measure the cores.
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

fn run_all(env: &[(&str, &str)], forwarded: bool) {
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
    let path = format!("{}:{}", shim_dir().display(), nvrtc_dir().display());
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
            let why = text
                .lines()
                .find(|l| l.contains("panicked") || l.contains("Error"))
                .unwrap_or("")
                .to_string();
            failed.push((name.clone(), why));
        }
    }
    let mode = if forwarded { "forwarded" } else { "sim" };
    println!(
        "cudarc 0.19.10 lib tests, {mode}: {} of {} pass",
        passed.len(),
        names.len()
    );
    for (name, why) in &failed {
        println!("  failed: {name}: {why}");
    }
    let timing: Vec<&str> = TIMING.iter().map(|(t, _)| *t).collect();
    for (t, why) in TIMING {
        let verdict = if failed.iter().any(|(f, _)| f == t) {
            "failed"
        } else {
            "passed"
        };
        println!("  timing, not held to: {t}: {verdict} ({why})");
    }
    let known: Vec<&str> = known_in(KNOWN, forwarded)
        .into_iter()
        .filter(|k| !timing.contains(k))
        .collect();
    let failed: Vec<String> = failed
        .into_iter()
        .map(|(name, _)| name)
        .filter(|f| !timing.contains(&f.as_str()))
        .collect();
    failures_are_the_known_ones(mode, &failed, &known);
}

#[test]
#[ignore = "needs cudarc's lib-test binary: VMGPU_CUDARC_TESTS (tests/run-all.sh builds it)"]
fn cudarcs_own_tests_in_sim_mode() {
    run_all(
        &[("VMGPU_CUDA_MODE", "sim"), ("VMGPU_SIM_THREADS", "2")],
        false,
    );
}

#[test]
#[ignore = "needs cudarc's lib-test binary: VMGPU_CUDARC_TESTS (tests/run-all.sh builds it)"]
fn cudarcs_own_tests_forwarded() {
    let server = Server::start();
    let addr = server.env();
    run_all(&[("VMGPU_CUDA_SERVER", addr.as_str())], true);
    server.wait_idle();
}
