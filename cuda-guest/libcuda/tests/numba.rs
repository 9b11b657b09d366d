//! Real Python clients on the shim, unmodified: numba-cuda (its kernels, and numba's own
//! `numba.cuda.tests.cudadrv` suite) and NVIDIA's `cuda-bindings`, in simulator mode and
//! forwarded to a vmgpu CUDA service on the simulator.
//!
//! They need a Python with numba-cuda (pinned in `tests/run-all.sh`, which makes the
//! environment under `target/numba-venv` and sets `VMGPU_NUMBA_PYTHON`); a plain `cargo
//! test` skips them (`#[ignore]`), the CI runs them with `--ignored`, and then a missing
//! environment is a failure, not a skip.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use support::*;

fn python() -> PathBuf {
    std::env::var_os("VMGPU_NUMBA_PYTHON")
        .map(PathBuf::from)
        .expect("VMGPU_NUMBA_PYTHON: a python with numba-cuda 0.30.4 (tests/run-all.sh makes one)")
}

fn scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python")
}

/// Runs `python args` on the shim with `env`; prints its output (shown on failure).
fn run_python(args: &[&std::ffi::OsStr], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(python());
    cmd.args(args)
        .env("LD_LIBRARY_PATH", shim_dir())
        .env_remove("VMGPU_CUDA_SERVER")
        .env_remove("VMGPU_CUDA_MODE")
        // numba finds the driver by name; the shim is the only libcuda.so.1 there.
        .env("NUMBA_CUDA_DRIVER", shim_dir().join("libcuda.so.1"));
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("the numba python");
    println!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

const SIM: &[(&str, &str)] = &[("VMGPU_CUDA_MODE", "sim"), ("VMGPU_SIM_THREADS", "2")];

fn numba_wide(env: &[(&str, &str)]) {
    let script = scripts().join("numba_wide.py");
    let out = run_python(&[script.as_os_str(), scripts().as_os_str()], env);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("numba_wide: 16 checks, 0 failed"),
        "{stdout}"
    );
    assert!(out.status.success());
}

#[test]
#[ignore = "needs numba-cuda: VMGPU_NUMBA_PYTHON (tests/run-all.sh installs it)"]
fn numba_kernels_in_sim_mode() {
    numba_wide(SIM);
}

#[test]
#[ignore = "needs numba-cuda: VMGPU_NUMBA_PYTHON (tests/run-all.sh installs it)"]
fn numba_kernels_forwarded() {
    let server = Server::start();
    let addr = server.env();
    numba_wide(&[("VMGPU_CUDA_SERVER", addr.as_str())]);
    server.wait_idle();
}

/// The tests of numba's own `cudadrv` suite that fail here, each with its cause; any
/// other failure fails this test, and so does one of these passing (the list stays
/// exact).
const CUDADRV_KNOWN: &[(&str, Modes, &str)] = &[
    (
        "test_cuda_ndarray.TestCoreContiguous.test_kernel_with_buffer",
        BOTH,
        "no cupy",
    ),
    (
        "test_cuda_ndarray.TestCoreContiguous.test_kernel_with_strided_memory_view",
        BOTH,
        "no cupy",
    ),
];

fn cudadrv_suite(env: &[(&str, &str)], label: &str) {
    let args: Vec<&std::ffi::OsStr> = ["-m", "numba.runtests", "-v", "numba.cuda.tests.cudadrv"]
        .iter()
        .map(std::ffi::OsStr::new)
        .collect();
    let out = run_python(&args, env);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // unittest's verbose lines: "name (numba.cuda.tests.cudadrv.module.Class.name) ...
    // verdict", or, for a test with a docstring, that head alone and then "first line of
    // the docstring ... verdict"; a warning printed meanwhile puts the verdict on a line
    // of its own further down.
    let (mut passed, mut skipped, mut failed) = (0, 0, vec![]);
    let id_of = |head: &str| {
        head.trim_end()
            .split_once(" (numba.cuda.tests.cudadrv.")
            .and_then(|(_, rest)| rest.strip_suffix(')'))
            .map(str::to_string)
    };
    let verdict_of = |v: &str| {
        let w = v.split_whitespace().next()?;
        ["ok", "ERROR", "FAIL", "skipped"]
            .into_iter()
            .find(|k| *k == w)
    };
    let mut record = |id: String, verdict: &str| match verdict {
        "ok" => passed += 1,
        "skipped" => skipped += 1,
        _ => failed.push(id),
    };
    let (mut pending, mut awaiting): (Option<String>, Option<String>) = (None, None);
    for line in text.lines() {
        if let Some((head, v)) = line.rsplit_once(" ... ") {
            let Some(id) = id_of(head).or_else(|| pending.take()) else {
                continue;
            };
            pending = None;
            match verdict_of(v) {
                Some(verdict) => record(id, verdict),
                None => awaiting = Some(id),
            }
            continue;
        }
        let lone = line.trim();
        if let (Some(id), Some(verdict)) = (awaiting.as_ref(), verdict_of(lone)) {
            if lone == verdict || lone.starts_with("skipped") {
                record(id.clone(), verdict);
                awaiting = None;
                continue;
            }
        }
        if let Some(id) = id_of(line) {
            pending = Some(id);
        }
    }
    let ran = passed + skipped + failed.len();
    println!(
        "numba cudadrv {label}: {ran} tests, {passed} passed, {} failed or errors, {skipped} skipped",
        failed.len()
    );
    assert!(
        text.contains(&format!("Ran {ran} tests")),
        "{label}: the run did not finish: {text}"
    );
    let known = known_in(CUDADRV_KNOWN, label == "forwarded");
    failures_are_the_known_ones(label, &failed, &known);
}

#[test]
#[ignore = "needs numba-cuda: VMGPU_NUMBA_PYTHON (tests/run-all.sh installs it)"]
fn numbas_own_cudadrv_suite_in_sim_mode() {
    cudadrv_suite(SIM, "sim");
}

#[test]
#[ignore = "needs numba-cuda: VMGPU_NUMBA_PYTHON (tests/run-all.sh installs it)"]
fn numbas_own_cudadrv_suite_forwarded() {
    let server = Server::start();
    let addr = server.env();
    cudadrv_suite(&[("VMGPU_CUDA_SERVER", addr.as_str())], "forwarded");
    server.wait_idle();
}

#[test]
#[ignore = "needs numba-cuda: VMGPU_NUMBA_PYTHON (tests/run-all.sh installs it)"]
fn nvidia_python_bindings_run_on_the_shim() {
    let script = scripts().join("driver_api.py");
    let ptx = fixture("vector_add.nvrtc.ptx");
    let out = run_python(&[script.as_os_str(), ptx.as_os_str()], SIM);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(
        stdout.contains("name vmgpu PTX simulator (virtual sm_80)"),
        "{stdout}"
    );
    assert!(stdout.contains("python: vector_add OK"), "{stdout}");
}
