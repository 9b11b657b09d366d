//! The C half of the conformance suite: `tests/c/conformance.c` (the entry points of
//! `libcuda.so.1` that the `Backend` trait does not reach), compiled against the stock
//! `cuda.h` and linked with `-lcuda`, one process per group, as one `#[test]` per group
//! ([`c_conformance!`]) on each path: the shim in simulator mode, forwarded to a
//! service, or NVIDIA's driver.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Where the program's `libcuda.so.1` comes from and what it runs on.
#[derive(Debug, Clone)]
pub enum Target {
    /// vmgpu's library, in-process on the simulator.
    Sim,
    /// vmgpu's library, forwarded to the service at this `VMGPU_CUDA_SERVER` address.
    Forward(String),
    /// NVIDIA's driver: the system's `libcuda.so.1` (no `LD_LIBRARY_PATH` to the shim).
    Driver,
}

/// The program, compiled once per test process.
pub fn program() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| crate::support::compile("conformance"))
}

/// Runs group `group` of the program on `target`; fails the test when a check of the
/// group failed (every check is in the test's output).
pub fn run_group(group: &str, target: &Target) {
    let fixtures = crate::support::repo().join("fixtures/ptx");
    let mut cmd = Command::new(program());
    cmd.arg(group)
        .arg(&fixtures)
        .env_remove("VMGPU_CUDA_SERVER")
        .env_remove("VMGPU_CUDA_MODE")
        .env_remove("VMGPU_CUDA_BACKEND")
        .env_remove("VMGPU_LIBCUDA");
    match target {
        Target::Sim => {
            cmd.env("LD_LIBRARY_PATH", crate::support::shim_dir())
                .env("VMGPU_CUDA_MODE", "sim")
                .env("VMGPU_SIM_THREADS", "2");
        }
        Target::Forward(addr) => {
            cmd.env("LD_LIBRARY_PATH", crate::support::shim_dir())
                .env("VMGPU_CUDA_SERVER", addr);
        }
        Target::Driver => {
            cmd.env_remove("LD_LIBRARY_PATH");
        }
    }
    let out = cmd.output().expect("run the conformance program");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("--- conformance {group} on {target:?}:\n{stdout}--- stderr:\n{stderr}");
    let summary = format!("conformance {group}: ");
    assert!(
        stdout.contains(&summary),
        "conformance {group} did not finish ({}): {stdout}{stderr}",
        out.status
    );
    let failed: Vec<&str> = stdout.lines().filter(|l| l.starts_with("FAIL")).collect();
    assert!(
        out.status.success() && failed.is_empty(),
        "conformance {group} on {target:?} ({}):\n{}",
        out.status,
        failed.join("\n")
    );
}

/// One `#[test]` per group of `tests/c/conformance.c`, named `c_GROUP`, run on the
/// [`Target`] that `$target` (a `fn() -> Target`) gives, with the given attributes.
#[macro_export]
macro_rules! c_conformance {
    ($target:path $(, #[$attr:meta])*) => {
        c_conformance!(@each $target, [$(#[$attr])*],
            c_errors,
            c_init,
            c_device,
            c_primary,
            c_stack,
            c_ctx_create,
            c_module_ex,
            c_module_file,
            c_globals,
            c_func_attr,
            c_func_set_attr,
            c_launch_extra,
            c_per_thread,
            c_procaddr,
            c_host_ptr,
            c_pointer_attr,
            c_mem_async,
            c_streams,
            c_host_func,
            c_library,
            c_occupancy,
            c_limits,
            c_graphs,
            c_graph_nodes,
            c_managed,
            c_copies_2d,
            c_arrays,
            c_graph_memory,
            c_cooperative,
            c_stream_attributes,
            c_graph_child_event,
        );
    };
    (@each $target:path, [$($attr:tt)*], $name:ident $(, $rest:ident)* $(,)?) => {
        #[test]
        $($attr)*
        fn $name() {
            conformance::check(module_path!(), stringify!($name), || {
                let group = stringify!($name).trim_start_matches("c_");
                c_conformance::run_group(group, &$target());
            });
        }
        c_conformance!(@each $target, [$($attr)*] $(, $rest)*);
    };
    (@each $target:path, [$($attr:tt)*] $(,)?) => {};
}
