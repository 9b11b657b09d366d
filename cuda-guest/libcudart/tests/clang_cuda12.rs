//! Programs built for CUDA 12 against vmgpu's `libcudart.so.12` and `libcuda.so.1`: on
//! the simulator in-process and forwarded to a vmgpu CUDA service. PyPI has no CUDA 12
//! nvcc that compiles CUDA C++ (no cudafe++), so clang compiles them as CUDA, against a
//! CUDA 12.9 installation made of NVIDIA's wheels (`tests/cu12/make-cuda-path.sh`), linked
//! against NVIDIA's `libcudart.so.12` (so they ask for `name@libcudart.so.12`, as every
//! CUDA 12 program does) and run on ours. `VMGPU_CLANG_CUDA` (clang++-19) and
//! `VMGPU_CUDA12_PATH` (that installation) name them; tests/run-all.sh makes both, so
//! these tests are `#[ignore]`d in a plain `cargo test` and run by CI's compilers step.

#[path = "../../libcuda/tests/support/mod.rs"]
mod support;

mod cudart;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, OnceLock};

use support::{shim_dir, Server};

/// The directory with `libcuda.so.1` (the shim) and this workspace's `libcudart.so.12`.
fn lib_dir() -> &'static Path {
    static DONE: OnceLock<()> = OnceLock::new();
    let dir = shim_dir();
    DONE.get_or_init(|| cudart::install(dir, 12));
    dir
}

fn env_path(var: &str, what: &str) -> PathBuf {
    std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("{var}: {what} (tests/run-all.sh makes it)"))
}

/// Builds `tests/<source>` with clang for sm_80 (machine code, and PTX unless `flags`
/// say otherwise), once per test process for each `tag`.
fn build(source: &str, tag: &str, flags: &[&str]) -> PathBuf {
    static BUILT: Mutex<Vec<(String, PathBuf)>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, exe)) = built.iter().find(|(k, _)| k == tag) {
        return exe.clone();
    }
    let clang = env_path("VMGPU_CLANG_CUDA", "clang++-19");
    let cuda = env_path("VMGPU_CUDA12_PATH", "a CUDA 12 installation");
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(source);
    let exe = lib_dir().join(format!("cuda12-{tag}"));
    let o = Command::new(&clang)
        .args(["-x", "cuda", "--cuda-gpu-arch=sm_80", "-O1"])
        .arg(format!("--cuda-path={}", cuda.display()))
        // clang-19 knows CUDA up to 12.4; 12.9's headers work.
        .arg("-Wno-unknown-cuda-version")
        .args(flags)
        .arg(&src)
        .arg("-L")
        .arg(cuda.join("lib64"))
        .args(["-lcudart", "-o"])
        .arg(&exe)
        .output()
        .expect("run clang");
    assert!(
        o.status.success(),
        "{clang:?} {src:?} {flags:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    // A CUDA 12 program: it needs libcudart.so.12 and its symbols of that version.
    let dynamic = Command::new("objdump")
        .arg("-T")
        .arg(&exe)
        .output()
        .expect("run objdump (binutils)");
    let dynamic = String::from_utf8_lossy(&dynamic.stdout);
    assert!(
        dynamic
            .lines()
            .any(|l| l.contains("libcudart.so.12") && l.ends_with(" cudaLaunchKernel")),
        "{dynamic}"
    );
    built.push((tag.to_string(), exe.clone()));
    exe
}

/// Runs `exe` on vmgpu's libraries with `env`.
fn run(exe: &Path, env: &[(&str, &str)]) -> Output {
    lib_dir();
    support::run(exe, &[], env)
}

const SIM: &[(&str, &str)] = &[("VMGPU_CUDA_MODE", "sim"), ("VMGPU_SIM_THREADS", "2")];

/// Both programs, with `env`: every check passes, with real values.
fn programs(env: &[(&str, &str)]) {
    let exe = build("cu12/cuda12_api.cu", "api", &[]);
    let out = run(&exe, env);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let fails: Vec<&str> = stdout.lines().filter(|l| l.starts_with("FAIL")).collect();
    assert!(
        stdout.contains("cuda12_api: 98 checks, 0 failed"),
        "{fails:#?}\n{stdout}"
    );
    for line in [
        "cudaRuntimeGetVersion: 12090",
        "sizeof(cudaDeviceProp) 1032, name vmgpu PTX simulator (virtual sm_80), sm_80, 108 SMs, clockRate 1410000 kHz",
        "managed: 0 of 4096 wrong after prefetches to the device and back",
        "cudaMemPrefetchAsync to device 99: cudaErrorInvalidDevice",
        "scale: 0 of 10000 wrong",
    ] {
        assert!(stdout.contains(line), "{line}:\n{stdout}");
    }
    assert!(out.status.success());
    // Nothing the programs call is unsupported.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("warning"), "{stderr}");

    // nvcc's vector add, built by clang for CUDA 12.
    let exe = build("cu/vector_add.cu", "vector_add", &[]);
    let out = run(&exe, env);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("vector_add: cudaSuccess, 0 of 5000 wrong"),
        "{stdout}"
    );
}

#[test]
#[ignore = "needs clang-19 and CUDA 12's headers: VMGPU_CLANG_CUDA, VMGPU_CUDA12_PATH (tests/run-all.sh)"]
fn cuda12_programs_on_the_simulator() {
    programs(SIM);
}

#[test]
#[ignore = "needs clang-19 and CUDA 12's headers: VMGPU_CLANG_CUDA, VMGPU_CUDA12_PATH (tests/run-all.sh)"]
fn cuda12_programs_forwarded() {
    let server = Server::start();
    let addr = server.env();
    programs(&[("VMGPU_CUDA_SERVER", addr.as_str())]);
    server.wait_idle();
}

#[test]
#[ignore = "needs clang-19 and CUDA 12's headers: VMGPU_CLANG_CUDA, VMGPU_CUDA12_PATH (tests/run-all.sh)"]
fn cuda12_program_with_per_thread_default_streams() {
    // What nvcc's `--default-stream per-thread` does: the `_ptsz`/`_ptds` entry points,
    // among them 12's `cudaMemPrefetchAsync_ptsz` (a device number) and 13's form as
    // `cudaMemPrefetchAsync_v2_ptsz`.
    let flags = [
        "-fgpu-default-stream=per-thread",
        "-DCUDA_API_PER_THREAD_DEFAULT_STREAM",
    ];
    let exe = build("cu12/cuda12_api.cu", "api-per-thread", &flags);
    let dynamic = Command::new("objdump")
        .arg("-T")
        .arg(&exe)
        .output()
        .expect("run objdump (binutils)");
    let dynamic = String::from_utf8_lossy(&dynamic.stdout);
    for name in [
        "cudaMemPrefetchAsync_ptsz",
        "cudaMemPrefetchAsync_v2_ptsz",
        "cudaMemcpy_ptds",
    ] {
        assert!(
            dynamic.lines().any(|l| l.ends_with(&format!(" {name}"))),
            "{name}: {dynamic}"
        );
    }
    let out = run(&exe, SIM);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("cuda12_api: 98 checks, 0 failed"),
        "{stdout}"
    );
}

#[test]
#[ignore = "needs clang-19 and CUDA 12's headers: VMGPU_CLANG_CUDA, VMGPU_CUDA12_PATH (tests/run-all.sh)"]
fn machine_code_only_is_no_kernel_image() {
    // Clang's fatbin without the PTX: sm_80 machine code only, which the simulator
    // cannot run; the launch's error says so.
    let exe = build(
        "cu/vector_add.cu",
        "sass-only",
        &["--no-cuda-include-ptx=sm_80"],
    );
    let out = run(&exe, &[SIM[0], SIM[1], ("VMGPU_CUDA_LOG", "debug")]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("vector_add: cudaErrorNoKernelImageForDevice"),
        "{stdout}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no PTX in the fatbin"), "{stderr}");
}
