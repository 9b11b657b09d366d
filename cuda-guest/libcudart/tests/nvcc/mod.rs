//! Builds the programs of `tests/cu` with NVIDIA's nvcc 13 (`VMGPU_NVCC`) against
//! vmgpu's `libcudart.so.13` and runs them: shared by the nvcc tests and the runtime's
//! bench.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use crate::support::shim_dir;

/// nvcc (`VMGPU_NVCC`).
pub fn nvcc() -> PathBuf {
    std::env::var_os("VMGPU_NVCC")
        .map(PathBuf::from)
        .expect("VMGPU_NVCC: nvcc 13 (tests/run-all.sh installs it from PyPI)")
}

/// The directory with `libcuda.so.1` (the shim) and this crate's `libcudart.so.13`.
pub fn lib_dir() -> &'static Path {
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
pub fn build(name: &str, tag: &str, flags: &[&str]) -> PathBuf {
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

pub fn nvcc_build(name: &str, tag: &str, flags: &[&str]) -> PathBuf {
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
pub fn run(exe: &Path, env: &[(&str, &str)]) -> Output {
    run_args(exe, &[], env)
}

/// Runs `exe` with `args` on vmgpu's libraries with `env`.
pub fn run_args(exe: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(exe);
    cmd.args(args);
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

pub const SIM: &[(&str, &str)] = &[("VMGPU_CUDA_MODE", "sim"), ("VMGPU_SIM_THREADS", "2")];
/// PTX for compute_80 (zstd-compressed: nvcc 13's default).
pub const PTX80: &[&str] = &["-gencode", "arch=compute_80,code=compute_80"];
