//! Unmodified programs built by NVIDIA's nvcc 13 (`-cudart shared`) against vmgpu's
//! `libcudart.so.13` and `libcuda.so.1`: on the simulator in-process and forwarded to a
//! vmgpu CUDA service. nvcc comes from PyPI (`VMGPU_NVCC`; tests/run-all.sh installs
//! it), so these tests are `#[ignore]`d in a plain `cargo test` and run by CI's
//! compilers step.

#[path = "../../libcuda/tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use support::{shim_dir, Server};

/// nvcc (`VMGPU_NVCC`).
fn nvcc() -> PathBuf {
    std::env::var_os("VMGPU_NVCC")
        .map(PathBuf::from)
        .expect("VMGPU_NVCC: nvcc 13 (tests/run-all.sh installs it from PyPI)")
}

/// The directory with `libcuda.so.1` (the shim) and this crate's `libcudart.so.13`.
fn lib_dir() -> &'static Path {
    static DONE: OnceLock<()> = OnceLock::new();
    let dir = shim_dir();
    DONE.get_or_init(|| {
        let exe = std::env::current_exe().expect("the test binary");
        let deps = exe.parent().expect("target/<profile>/deps");
        let lib = [
            deps.join("libvmgpu_libcudart.so"),
            deps.parent().unwrap().join("libvmgpu_libcudart.so"),
        ]
        .into_iter()
        .filter(|p| p.is_file())
        .max_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
        .expect("libvmgpu_libcudart.so is built (cargo test -p vmgpu-libcudart builds it)");
        std::fs::copy(lib, dir.join("libcudart.so.13")).expect("install libcudart.so.13");
    });
    dir
}

/// Builds `tests/cu/<name>.cu` with `flags` (after `-cudart shared`), once per test
/// process for each `tag` (tests running at once share the build).
fn build(name: &str, tag: &str, flags: &[&str]) -> PathBuf {
    static BUILT: std::sync::Mutex<Vec<(String, PathBuf)>> = std::sync::Mutex::new(Vec::new());
    let key = format!("{name}-{tag}");
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, exe)) = built.iter().find(|(k, _)| *k == key) {
        return exe.clone();
    }
    let exe = nvcc_build(name, tag, flags);
    built.push((key, exe.clone()));
    exe
}

fn nvcc_build(name: &str, tag: &str, flags: &[&str]) -> PathBuf {
    // `a+b` builds `a.cu` and `b.cu` into one program.
    let sources: Vec<PathBuf> = name
        .split('+')
        .map(|n| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/cu")
                .join(format!("{n}.cu"))
        })
        .collect();
    let name = name.replace('+', "-");
    let nvcc = nvcc();
    let libs = nvcc
        .parent()
        .and_then(Path::parent)
        .expect("nvcc's folder")
        .join("lib");
    let out = lib_dir().join(format!("{name}-{tag}"));
    let o = Command::new(&nvcc)
        .args(["-cudart", "shared", "-L"])
        .arg(&libs)
        .args(flags)
        .args(&sources)
        .arg("-o")
        .arg(&out)
        .output()
        .expect("run nvcc");
    assert!(
        o.status.success(),
        "nvcc {sources:?} {flags:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// Runs `exe` on vmgpu's libraries with `env`.
fn run(exe: &Path, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(exe);
    cmd.env("LD_LIBRARY_PATH", lib_dir())
        .env_remove("VMGPU_CUDA_SERVER")
        .env_remove("VMGPU_CUDA_MODE");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run the program");
    println!(
        "--- {}:\n{}--- stderr:\n{}",
        exe.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

const SIM: &[(&str, &str)] = &[("VMGPU_CUDA_MODE", "sim"), ("VMGPU_SIM_THREADS", "2")];
/// PTX for compute_80 (zstd-compressed: nvcc 13's default).
const PTX80: &[&str] = &["-gencode", "arch=compute_80,code=compute_80"];

fn runtime_api(env: &[(&str, &str)], forwarded: bool) {
    let exe = build("runtime_api", "zstd", PTX80);
    let out = run(&exe, env);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let fails: Vec<&str> = stdout.lines().filter(|l| l.starts_with("FAIL")).collect();
    assert!(
        stdout.contains("runtime_api: 140 checks, 0 failed"),
        "{fails:#?}\n{stdout}"
    );
    // A kernel's printf reaches the program in-process; forwarded it is printed by the
    // service (the protocol does not carry it yet).
    if !forwarded {
        assert!(stdout.contains("hello from the device: 42"), "{stdout}");
    }
    assert!(out.status.success());
    // Only the unsupported entry point the program calls on purpose is logged.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches("warning").count(), 1, "{stderr}");
    assert!(stderr.contains("cudaMemcpy3D is not supported"), "{stderr}");
}

#[test]
#[ignore = "needs nvcc: VMGPU_NVCC (tests/run-all.sh installs it)"]
fn runtime_api_program_on_the_simulator() {
    runtime_api(SIM, false);
}

#[test]
#[ignore = "needs nvcc: VMGPU_NVCC (tests/run-all.sh installs it)"]
fn runtime_api_program_forwarded() {
    let server = Server::start();
    let addr = server.env();
    runtime_api(&[("VMGPU_CUDA_SERVER", addr.as_str())], true);
    server.wait_idle();
}

#[test]
#[ignore = "needs nvcc: VMGPU_NVCC (tests/run-all.sh installs it)"]
fn runtime_api_program_with_per_thread_default_streams() {
    let flags = [PTX80[0], PTX80[1], "--default-stream", "per-thread"];
    let exe = build("runtime_api", "per-thread", &flags);
    let out = run(&exe, SIM);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("runtime_api: 140 checks, 0 failed"),
        "{stdout}"
    );
    // The program called the `_ptsz`/`_ptds` entry points.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cudaMemcpy3D_ptds is not supported"),
        "{stderr}"
    );
}

#[test]
#[ignore = "needs nvcc: VMGPU_NVCC (tests/run-all.sh installs it)"]
fn every_way_nvcc_stores_ptx() {
    let ways: [(&str, &[&str]); 4] = [
        ("zstd", PTX80),
        (
            "lz4",
            &[
                "-gencode",
                "arch=compute_80,code=compute_80",
                "-compress-mode=speed",
            ],
        ),
        (
            "plain",
            &[
                "-gencode",
                "arch=compute_80,code=compute_80",
                "--no-compress",
            ],
        ),
        (
            "sass-and-ptx",
            &[
                "-gencode",
                "arch=compute_90,code=sm_90",
                "-gencode",
                "arch=compute_80,code=compute_80",
            ],
        ),
    ];
    for (tag, flags) in ways {
        let exe = build("vector_add", tag, flags);
        let out = run(&exe, SIM);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("vector_add: cudaSuccess, 0 of 5000 wrong"),
            "{tag}: {stdout}"
        );
    }
}

#[test]
#[ignore = "needs nvcc: VMGPU_NVCC (tests/run-all.sh installs it)"]
fn machine_code_only_is_no_kernel_image_named_in_the_log() {
    let exe = build(
        "vector_add",
        "sass-only",
        &["-gencode", "arch=compute_90,code=sm_90"],
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

#[test]
#[ignore = "needs nvcc: VMGPU_NVCC (tests/run-all.sh installs it)"]
fn separate_compilation_links_the_relocatable_ptx() {
    let flags = [PTX80[0], PTX80[1], "-rdc=true"];
    let exe = build("rdc_main+rdc_lib", "rdc", &flags);
    let server = Server::start();
    let addr = server.env();
    let forwarded = [("VMGPU_CUDA_SERVER", addr.as_str())];
    for env in [SIM, &forwarded[..]] {
        let out = run(&exe, env);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("rdc: cudaSuccess, 0 of 1000 wrong"),
            "{env:?}: {stdout}"
        );
    }
    server.wait_idle();
    // runtime_api.cu built the same way: its one unit, linked (libcudadevrt's unit, which
    // needs the device runtime, left out).
    let exe = build("runtime_api", "rdc", &flags);
    let out = run(&exe, SIM);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("runtime_api: 140 checks, 0 failed"),
        "{stdout}"
    );
}
