//! Builds the programs of `tests/cu` with NVIDIA's nvcc 13 (`VMGPU_NVCC`) against
//! vmgpu's `libcudart.so.13` and runs them: shared by the nvcc tests and the runtime's
//! bench.
//!
//! Where a program runs is a [`Mode`]: vmgpu's libraries on the simulator or forwarded
//! to a service, or, on a machine with an NVIDIA GPU ([`Mode::on_a_gpu`]), vmgpu's
//! libraries forwarded to a `vmgpu cuda serve --backend native` (`VMGPU_NATIVE_SERVER`)
//! and NVIDIA's own runtime and driver (`VMGPU_NVIDIA_CUDART_DIR`).

#![allow(dead_code)]

use std::ffi::OsString;
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

/// nvcc's libraries (`libcudart.so`, `libcudadevrt.a`): `lib` beside its `bin` (the
/// PyPI wheels), else `lib64` (a CUDA installation such as `/usr/local/cuda`).
pub fn nvcc_libs() -> PathBuf {
    let nvcc = nvcc();
    let top = nvcc.parent().and_then(Path::parent).expect("nvcc's folder");
    ["lib", "lib64"]
        .into_iter()
        .map(|d| top.join(d))
        .find(|d| d.join("libcudadevrt.a").is_file())
        .unwrap_or_else(|| top.join("lib"))
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
    let libs = nvcc_libs();
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

/// Which libraries a [`Mode`] runs a program on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Libraries {
    /// vmgpu's `libcudart.so.13` and `libcuda.so.1` ([`lib_dir`]), on the simulator in
    /// the program's process.
    Vmgpu,
    /// vmgpu's libraries forwarded to a service (`VMGPU_CUDA_SERVER`), which runs the
    /// kernels (and prints their `printf`).
    VmgpuForwarded,
    /// NVIDIA's `libcudart.so.13` and the system's `libcuda.so.1`: no vmgpu library.
    Nvidia,
}

/// Where a program runs: its libraries (`LD_LIBRARY_PATH`) and environment, with a name
/// for the log. `VMGPU_CUDA_SERVER` and `VMGPU_CUDA_MODE` are removed from the
/// environment the tests run in before `env` is added.
#[derive(Debug, Clone)]
pub struct Mode {
    /// What the log and the assertions call it.
    pub name: String,
    /// Which libraries run.
    pub libraries: Libraries,
    /// `LD_LIBRARY_PATH`.
    pub lib_path: PathBuf,
    /// Variables added to the environment.
    pub env: Vec<(String, String)>,
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}

impl Mode {
    /// vmgpu's libraries with `env`: forwarded where it sets `VMGPU_CUDA_SERVER`.
    pub fn vmgpu(name: &str, env: &[(&str, &str)]) -> Mode {
        let forwarded = env.iter().any(|(k, _)| *k == "VMGPU_CUDA_SERVER");
        Mode {
            name: name.to_string(),
            libraries: if forwarded {
                Libraries::VmgpuForwarded
            } else {
                Libraries::Vmgpu
            },
            lib_path: lib_dir().to_path_buf(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    /// vmgpu's libraries on the simulator in-process ([`SIM`]).
    pub fn sim() -> Mode {
        Mode::vmgpu("on the simulator", SIM)
    }

    /// vmgpu's libraries forwarded to the service at `server` (`unix:/path`, ...).
    pub fn forwarded(name: &str, server: &str) -> Mode {
        Mode::vmgpu(name, &[("VMGPU_CUDA_SERVER", server)])
    }

    /// NVIDIA's runtime (`libcudart.so.13` in `cudart_dir`) and driver (the system's
    /// `libcuda.so.1`).
    pub fn nvidia(cudart_dir: &Path) -> Mode {
        assert!(
            cudart_dir.join("libcudart.so.13").is_file(),
            "no libcudart.so.13 in {} (VMGPU_NVIDIA_CUDART_DIR)",
            cudart_dir.display()
        );
        Mode {
            name: "NVIDIA's runtime and driver".to_string(),
            libraries: Libraries::Nvidia,
            lib_path: cudart_dir.to_path_buf(),
            env: Vec::new(),
        }
    }

    /// The modes of a machine with an NVIDIA GPU, where `VMGPU_NATIVE_SERVER` names a
    /// `vmgpu cuda serve --backend native` (`unix:/path`): vmgpu's libraries forwarded
    /// to it, and NVIDIA's runtime from `VMGPU_NVIDIA_CUDART_DIR` (which must then be
    /// set) with its driver. None without `VMGPU_NATIVE_SERVER`.
    pub fn on_a_gpu() -> Vec<Mode> {
        let Ok(server) = std::env::var("VMGPU_NATIVE_SERVER") else {
            return Vec::new();
        };
        let cudart = std::env::var_os("VMGPU_NVIDIA_CUDART_DIR")
            .map(PathBuf::from)
            .expect(
                "VMGPU_NATIVE_SERVER is set: VMGPU_NVIDIA_CUDART_DIR must name the directory \
             of NVIDIA's libcudart.so.13 (such as /usr/local/cuda/lib64)",
            );
        vec![
            Mode::forwarded("forwarded to the native backend", &server),
            Mode::nvidia(&cudart),
        ]
    }

    /// `self` followed by the GPU's modes ([`Mode::on_a_gpu`]).
    pub fn and_on_a_gpu(self) -> Vec<Mode> {
        let mut modes = vec![self];
        modes.extend(Mode::on_a_gpu());
        modes
    }

    /// Whether vmgpu's libraries run (and log what they do not support on stderr).
    pub fn is_vmgpu(&self) -> bool {
        self.libraries != Libraries::Nvidia
    }

    /// Whether a kernel's `printf` reaches the program's stdout: in-process, on
    /// vmgpu's simulator or NVIDIA's driver; forwarded, the service prints it.
    pub fn printf_in_process(&self) -> bool {
        self.libraries != Libraries::VmgpuForwarded
    }

    /// The command that runs `exe` with `args` in this mode, as a shell would take it.
    pub fn command_line(&self, exe: &Path, args: &[&str]) -> String {
        let mut line = format!(
            "env -u VMGPU_CUDA_SERVER -u VMGPU_CUDA_MODE LD_LIBRARY_PATH={}",
            self.lib_path.display()
        );
        for (k, v) in &self.env {
            line += &format!(" {k}={v}");
        }
        line += &format!(" {}", exe.display());
        for a in args {
            line += &format!(" {a}");
        }
        line
    }
}

/// Runs `exe` on vmgpu's libraries with `env`.
pub fn run(exe: &Path, env: &[(&str, &str)]) -> Output {
    run_args(exe, &[], env)
}

/// Runs `exe` with `args` on vmgpu's libraries with `env`.
pub fn run_args(exe: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let forwarded = env.iter().any(|(k, _)| *k == "VMGPU_CUDA_SERVER");
    let name = if forwarded { "forwarded" } else { "vmgpu" };
    run_args_in(exe, args, &Mode::vmgpu(name, env))
}

/// Runs `exe` in `mode`.
pub fn run_in(exe: &Path, mode: &Mode) -> Output {
    run_args_in(exe, &[], mode)
}

/// Runs `exe` with `args` in `mode`, printing the mode and the command line, then the
/// program's output.
pub fn run_args_in(exe: &Path, args: &[&str], mode: &Mode) -> Output {
    let mut cmd = Command::new(exe);
    cmd.args(args);
    cmd.env("LD_LIBRARY_PATH", OsString::from(&mode.lib_path))
        .env_remove("VMGPU_CUDA_SERVER")
        .env_remove("VMGPU_CUDA_MODE");
    for (k, v) in &mode.env {
        cmd.env(k, v);
    }
    println!("=== {mode}: {}", mode.command_line(exe, args));
    let out = cmd.output().expect("run the program");
    println!(
        "--- {} ({mode}):\n{}--- stderr:\n{}",
        exe.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

pub const SIM: &[(&str, &str)] = &[("VMGPU_CUDA_MODE", "sim"), ("VMGPU_SIM_THREADS", "2")];
/// PTX for compute_80 (zstd-compressed: nvcc 13's default).
pub const PTX80: &[&str] = &["-gencode", "arch=compute_80,code=compute_80"];
