//! Unmodified programs built by NVIDIA's nvcc 13 (`-cudart shared`) against vmgpu's
//! `libcudart.so.13` and `libcuda.so.1`: on the simulator in-process and forwarded to a
//! vmgpu CUDA service. nvcc comes from PyPI (`VMGPU_NVCC`; tests/run-all.sh installs
//! it), so these tests are `#[ignore]`d in a plain `cargo test` and run by CI's
//! compilers step.
//!
//! On a machine with an NVIDIA GPU (issue 15: each program runs forwarded to
//! `--backend native` and with NVIDIA's libcudart, with the same results), two
//! variables add two runs to each program's runs below (all but the simulator-only
//! machine-code cases), held to the same checks (see [`nvcc::Mode::on_a_gpu`]):
//! - `VMGPU_NATIVE_SERVER=unix:/path`: a `vmgpu cuda serve --backend native` the caller
//!   started; the program runs on vmgpu's libraries forwarded to it
//!   (`VMGPU_CUDA_SERVER`);
//! - `VMGPU_NVIDIA_CUDART_DIR=/usr/local/cuda/lib64` (needed with the first): the
//!   directory of NVIDIA's `libcudart.so.13`; the program runs with it alone on
//!   `LD_LIBRARY_PATH`, on the system's `libcuda.so.1` (NVIDIA's driver), no vmgpu
//!   library.
//!
//! `VMGPU_NVCC` is then the machine's nvcc 13 (`/usr/local/cuda/bin/nvcc`). Each run's
//! log starts with `=== <mode>: <command line>`; vmgpu's stderr warnings are checked on
//! vmgpu's libraries only, a kernel's printf wherever it reaches the program (not
//! forwarded), and the checks of the programs that hold for vmgpu alone
//! ([`VMGPU_ONLY_CHECKS`]) may fail on NVIDIA's runtime.

mod nvcc;
#[path = "../../libcuda/tests/support/mod.rs"]
mod support;

use std::process::Output;

use nvcc::{build, run, run_args_in, run_in, Mode, PTX80, SIM};
use support::Server;

/// Checks of the programs that hold for vmgpu's libraries alone, by the start of their
/// `FAIL` line: what vmgpu does not support and NVIDIA's runtime does.
/// `runtime_api.cu` calls `cudaMemcpy3DPeer(nullptr)`, unsupported by vmgpu
/// (`cudaErrorNotSupported`), on purpose: NVIDIA's runtime may answer otherwise.
const VMGPU_ONLY_CHECKS: &[&str] = &[
    "FAIL an unsupported entry point (",
    // NVIDIA's runtime leaves cudaDeviceProp's reserved words as they were (stack
    // contents, measured on an H200); vmgpu's zeroes them.
    "FAIL properties: the reserved tail is zeroed (",
];

/// Asserts that a run in `mode` printed `summary` (a program's "name: N checks, 0
/// failed"); on NVIDIA's runtime the failed checks of [`VMGPU_ONLY_CHECKS`] are left
/// out (the summary counts them: "M failed"). Returns the exit status the run must have
/// had: 0, or 1 where such checks failed.
fn assert_summary(mode: &Mode, out: &Output, summary: &str) -> i32 {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let fails: Vec<&str> = stdout.lines().filter(|l| l.starts_with("FAIL")).collect();
    let vmgpu_only = if mode.is_vmgpu() {
        0
    } else {
        fails
            .iter()
            .filter(|l| VMGPU_ONLY_CHECKS.iter().any(|c| l.starts_with(c)))
            .count()
    };
    if vmgpu_only == 0 {
        assert!(stdout.contains(summary), "{mode}: {fails:#?}\n{stdout}");
        return 0;
    }
    println!("{mode}: {vmgpu_only} check(s) that hold for vmgpu alone failed: {fails:?}");
    let summary = summary.replace(", 0 failed", &format!(", {vmgpu_only} failed"));
    assert!(stdout.contains(&summary), "{mode}: {fails:#?}\n{stdout}");
    1
}

fn runtime_api(mode: &Mode) {
    let exe = build("runtime_api", "zstd", PTX80);
    let out = run_in(&exe, mode);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let code = assert_summary(mode, &out, "runtime_api: 140 checks, 0 failed");
    // A kernel's printf reaches the program in-process; forwarded it is printed by the
    // service (the protocol does not carry it yet).
    if mode.printf_in_process() {
        assert!(
            stdout.contains("hello from the device: 42"),
            "{mode}: {stdout}"
        );
    }
    assert_eq!(out.status.code(), Some(code), "{mode}");
    // Only the unsupported entry point the program calls on purpose is logged.
    if mode.is_vmgpu() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.matches("warning").count(), 1, "{mode}: {stderr}");
        assert!(
            stderr.contains("cudaMemcpy3DPeer is not supported"),
            "{mode}: {stderr}"
        );
    }
}

/// Runs `exe` with `args` on the simulator and forwarded to a service on it (and on a
/// GPU, [`Mode::on_a_gpu`]): each run prints `summary` (its "name: N checks, 0 failed"
/// line) and every one of `lines`, exits 0, and (on vmgpu's libraries) logs no
/// unsupported entry point.
fn on_sim_and_forwarded(exe: &std::path::Path, args: &[&str], summary: &str, lines: &[&str]) {
    let server = Server::start();
    let addr = server.env();
    let mut modes = vec![Mode::sim(), Mode::forwarded("forwarded", &addr)];
    modes.extend(Mode::on_a_gpu());
    for mode in &modes {
        let out = run_args_in(exe, args, mode);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let code = assert_summary(mode, &out, summary);
        for l in lines {
            assert!(stdout.contains(l), "{mode}: no `{l}` in\n{stdout}");
        }
        assert_eq!(out.status.code(), Some(code), "{mode}");
        if mode.is_vmgpu() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!stderr.contains("not supported"), "{mode}: {stderr}");
        }
    }
    server.wait_idle();
}

#[test]
#[ignore = "needs nvcc: VMGPU_NVCC (tests/run-all.sh installs it)"]
fn runtime_api_program_on_the_simulator() {
    runtime_api(&Mode::sim());
}

#[test]
#[ignore = "needs nvcc: VMGPU_NVCC (tests/run-all.sh installs it)"]
fn runtime_api_program_forwarded() {
    let server = Server::start();
    let addr = server.env();
    // On a GPU, forwarded to the native backend and on NVIDIA's runtime too.
    for mode in Mode::forwarded("forwarded", &addr).and_on_a_gpu() {
        runtime_api(&mode);
    }
    server.wait_idle();
}

#[test]
#[ignore = "needs nvcc: VMGPU_NVCC (tests/run-all.sh installs it)"]
fn runtime_api_program_with_per_thread_default_streams() {
    let flags = [PTX80[0], PTX80[1], "--default-stream", "per-thread"];
    let exe = build("runtime_api", "per-thread", &flags);
    for mode in Mode::sim().and_on_a_gpu() {
        let out = run_in(&exe, &mode);
        assert_summary(&mode, &out, "runtime_api: 140 checks, 0 failed");
        // The program called the `_ptsz`/`_ptds` entry points.
        if mode.is_vmgpu() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.contains("cudaMemcpy3DPeer_ptds is not supported"),
                "{mode}: {stderr}"
            );
        }
    }
}

/// `managed_var.cu` (with `managed_var_lib.cu`): `__managed__` variables that the host
/// and kernels share, on the simulator (host memory at the variable's address) and
/// forwarded (mirrored in the program's process at the device address).
#[test]
#[ignore = "needs nvcc: VMGPU_NVCC (tests/run-all.sh installs it)"]
fn managed_variables_on_the_simulator_and_forwarded() {
    let exe = build("managed_var+managed_var_lib", "zstd", PTX80);
    let server = Server::start();
    let addr = server.env();
    let mut modes = vec![Mode::sim(), Mode::forwarded("forwarded", &addr)];
    modes.extend(Mode::on_a_gpu());
    for mode in &modes {
        let out = run_in(&exe, mode);
        let code = assert_summary(mode, &out, "managed_var: 34 checks, 0 failed");
        assert_eq!(out.status.code(), Some(code), "{mode}");
        if mode.is_vmgpu() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!stderr.contains("warning"), "{mode}: {stderr}");
        }
    }
    server.wait_idle();
    // Built with -rdc=true: the variables are registered against the empty fatbin and
    // found in the linked relocatable PTX.
    let flags = [PTX80[0], PTX80[1], "-rdc=true"];
    let exe = build("managed_var+managed_var_lib", "rdc", &flags);
    for mode in Mode::sim().and_on_a_gpu() {
        let out = run_in(&exe, &mode);
        assert_summary(&mode, &out, "managed_var: 34 checks, 0 failed");
    }
    // Machine code only: the variables cannot be placed, and the program ends at the
    // host's first access with an error naming them (not a write through null).
    let exe = build(
        "managed_var+managed_var_lib",
        "sass-only",
        &["-gencode", "arch=compute_90,code=sm_90"],
    );
    let out = run(&exe, SIM);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("(counter, vals, seeded) cannot be reached from the host")
            && stderr.contains("no PTX in the fatbin, only machine code for [90]"),
        "{stderr}"
    );
}

/// `indirect_calls.cu`: virtual functions of objects made with `new`, a table of device
/// function pointers, a function's address fetched by the host and passed back, and a
/// call through a host function's address (`cudaErrorInvalidPc`, sticky), on the
/// simulator and forwarded.
#[test]
#[ignore = "needs nvcc: VMGPU_NVCC (tests/run-all.sh installs it)"]
fn virtual_functions_and_function_pointers() {
    let exe = build("indirect_calls", "zstd", PTX80);
    on_sim_and_forwarded(
        &exe,
        &[],
        "indirect_calls: 24 checks, 0 failed",
        &["call through a host function's address: cudaErrorInvalidPc (718)"],
    );
}

/// `pitched.cu`: cudaMallocPitch/cudaMalloc3D, 2-D and 3-D copies and memsets on the
/// driver's pitched entry points, kernels walking the pitched memory; on the simulator
/// and forwarded.
#[test]
#[ignore = "needs nvcc: VMGPU_NVCC (tests/run-all.sh installs it)"]
fn pitched_memory_copies_and_memsets() {
    let exe = build("pitched", "zstd", PTX80);
    on_sim_and_forwarded(
        &exe,
        &[],
        "pitched: 28 checks, 0 failed",
        &["volume: hv2[2][3][8] = 2359.5 (want 2359.5)"],
    );
}

/// `runtime_queries.cu`: driver entry points through the runtime, stream and device
/// queries, the thread's capture mode, user objects and graph upload, kernel names and
/// occupancy; on the simulator and forwarded.
#[test]
#[ignore = "needs nvcc: VMGPU_NVCC (tests/run-all.sh installs it)"]
fn runtime_queries_that_libraries_make() {
    let exe = build("runtime_queries", "zstd", PTX80);
    on_sim_and_forwarded(
        &exe,
        &[],
        "runtime_queries: 60 checks, 0 failed",
        &["kernel name: _Z5scalePffi"],
    );
}

/// `graph_update.cu`: node parameters set in a graph and in an executable graph,
/// `cudaGraphExecUpdate` (and its refusal for another shape), node dependencies; on the
/// simulator and forwarded.
#[test]
#[ignore = "needs nvcc: VMGPU_NVCC (tests/run-all.sh installs it)"]
fn graphs_changed_after_they_are_built() {
    let exe = build("graph_update", "zstd", PTX80);
    on_sim_and_forwarded(
        &exe,
        &[],
        "graph_update: 44 checks, 0 failed",
        &["after update: out2[0] = 0.75, host saw 11"],
    );
}

/// `textures.cu`: texture objects over arrays, linear and pitched memory (point and
/// bilinear sampling, clamp/wrap/border, normalized coordinates, 8-bit texels as
/// normalized floats and integers, layered and 3-D arrays) and a surface read and
/// written in place; a trapping surface access outside fails the launch. On the
/// simulator and forwarded to it.
#[test]
#[ignore = "needs nvcc: VMGPU_NVCC (tests/run-all.sh installs it)"]
fn textures_and_surfaces() {
    let exe = build("textures", "zstd", PTX80);
    on_sim_and_forwarded(
        &exe,
        &[],
        "textures: 60 checks, 0 failed",
        &["bilinear: out[2][15] = 207.5"],
    );
}

/// `wmma.cu`: warp matrix multiply-accumulate (what tensor cores run) in every input
/// type (f16 with f32 and f16 accumulators, bf16, tf32, f64, s8, u8 saturating) and
/// shape family, row- and column-major, from global and shared memory; on the
/// simulator and forwarded to it.
#[test]
#[ignore = "needs nvcc: VMGPU_NVCC (tests/run-all.sh installs it)"]
fn warp_matrix_multiply_accumulate() {
    let exe = build("wmma", "zstd", PTX80);
    on_sim_and_forwarded(
        &exe,
        &[],
        "wmma: 15 checks, 0 failed",
        &["f16 gemm 64x64x64 (alpha 2, beta -1): C[5][7] = "],
    );
}

/// `cdp.cu`: dynamic parallelism (built with `-rdc=true -lcudadevrt`): a tree of
/// launches, children of one stream in order (a later child sees an earlier one's own
/// children's writes), device-side cudaMalloc/cudaMemcpyAsync/cudaFree on a named
/// stream, a refused launch's error and text, the nesting limit; on the simulator and
/// forwarded to it.
#[test]
#[ignore = "needs nvcc: VMGPU_NVCC (tests/run-all.sh installs it)"]
fn kernels_launching_kernels() {
    let flags = [PTX80[0], PTX80[1], "-rdc=true", "-lcudadevrt"];
    let exe = build("cdp", "rdc", &flags);
    on_sim_and_forwarded(
        &exe,
        &[],
        "cdp: 25 checks, 0 failed",
        &["a tree of launches 4 deep: 62 threads ran, depth sum 196"],
    );
}

/// `graph_memory.cu`: graph memory nodes, captured (`cudaMallocAsync`/`cudaFreeAsync`
/// in a capture) and built by hand (with 1-D copy nodes), an allocation freed outside
/// its graph, node parameters, graph memory attributes; on the simulator and forwarded.
#[test]
#[ignore = "needs nvcc: VMGPU_NVCC (tests/run-all.sh installs it)"]
fn graph_memory_nodes() {
    let exe = build("graph_memory", "zstd", PTX80);
    on_sim_and_forwarded(
        &exe,
        &[],
        "graph_memory: 59 checks, 0 failed",
        &["captured: 4 nodes, the first of type 10, the last 11"],
    );
}

/// `cooperative.cu`: cooperative launches (`cudaLaunchCooperativeKernel`, and
/// `cudaLaunchKernelExC` with the cooperative attribute), cooperative groups'
/// `grid.sync()` across 48 blocks, a grid too large refused; on the simulator and
/// forwarded.
#[test]
#[ignore = "needs nvcc: VMGPU_NVCC (tests/run-all.sh installs it)"]
fn cooperative_launches() {
    let exe = build("cooperative", "zstd", PTX80);
    on_sim_and_forwarded(
        &exe,
        &[],
        "cooperative: 21 checks, 0 failed",
        &["cudaLaunchCooperativeKernel: 48 blocks across two grid.sync(): out[127] = "],
    );
}

/// `graph_conditional.cu`: conditional graph nodes (IF, IF/ELSE, WHILE with a default
/// value at each launch, SWITCH), a WHILE node added to a graph being captured with its
/// body captured into it, a bad node refused; on the simulator and forwarded.
#[test]
#[ignore = "needs nvcc: VMGPU_NVCC (tests/run-all.sh installs it)"]
fn conditional_graph_nodes() {
    let exe = build("graph_conditional", "zstd", PTX80);
    on_sim_and_forwarded(
        &exe,
        &[],
        "graph_conditional: 104 checks, 0 failed",
        &["ok   SWITCH values 0..3: 1 10 100 0"],
    );
}

/// Runs `program` with `args`, which must succeed.
fn tool(program: &std::path::Path, args: &[&std::ffi::OsStr]) {
    let o = std::process::Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", program.display()));
    assert!(
        o.status.success(),
        "{} {args:?}: {}{}",
        program.display(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `link_inputs.cu`: the driver's linker given `nvcc -rdc=true -c`'s host object
/// (`CU_JIT_INPUT_OBJECT`), an `ar` archive of it and NVIDIA's libcudadevrt.a
/// (`CU_JIT_INPUT_LIBRARY`) with rdc_main.cu's PTX; each module unloaded right after
/// its launch; on the simulator and forwarded.
#[test]
#[ignore = "needs nvcc: VMGPU_NVCC (tests/run-all.sh installs it)"]
fn the_linker_takes_objects_and_libraries() {
    let nvcc = nvcc::nvcc();
    let dir = nvcc::lib_dir();
    let cu = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cu");
    let obj = dir.join("rdc_lib-link.o");
    let lib = dir.join("liblink.a");
    let ptx = dir.join("rdc_main-link.ptx");
    let os = |p: &std::path::Path| p.as_os_str().to_owned();
    let arg = |s: &str| std::ffi::OsString::from(s);
    tool(
        &nvcc,
        &[
            &arg("-rdc=true"),
            &arg("-c"),
            &arg(PTX80[0]),
            &arg(PTX80[1]),
            &os(&cu.join("rdc_lib.cu")),
            &arg("-o"),
            &os(&obj),
        ],
    );
    let _ = std::fs::remove_file(&lib);
    tool(
        std::path::Path::new("ar"),
        &[&arg("rcs"), &os(&lib), &os(&obj)],
    );
    tool(
        &nvcc,
        &[
            &arg("-rdc=true"),
            &arg("-ptx"),
            &arg("-arch=compute_80"),
            &os(&cu.join("rdc_main.cu")),
            &arg("-o"),
            &os(&ptx),
        ],
    );
    let devrt = nvcc::nvcc_libs().join("libcudadevrt.a");
    let libs = dir.to_str().expect("a UTF-8 path").to_string();
    let exe = build("link_inputs", "drv", &["-L", &libs, "-lcuda"]);
    let paths: Vec<String> = [&ptx, &obj, &lib, &devrt]
        .iter()
        .map(|p| p.to_str().expect("a UTF-8 path").to_string())
        .collect();
    let args: Vec<&str> = paths.iter().map(String::as_str).collect();
    on_sim_and_forwarded(
        &exe,
        &args,
        "link_inputs: 36 checks, 0 failed",
        &[
            "ok   an object (CU_JIT_INPUT_OBJECT): 0 of 1000 wrong (v[999] = 2997.5)",
            "ok   a library and libcudadevrt.a (CU_JIT_INPUT_LIBRARY): 0 of 1000 wrong",
            "ok   PTX text as an object: 200",
        ],
    );
}

/// `recursion.cu`: recursive device functions (two-way, mutual, lanes at different
/// depths, a callee writing its caller's local array, structs by value, printf inside)
/// against the same functions on the host, and a recursion too deep for the stack; on
/// the simulator and forwarded.
#[test]
#[ignore = "needs nvcc: VMGPU_NVCC (tests/run-all.sh installs it)"]
fn recursive_device_functions() {
    let exe = build("recursion", "zstd", PTX80);
    on_sim_and_forwarded(
        &exe,
        &[],
        "recursion: 12 checks, 0 failed",
        &["ok   recursion 2^24 deep: cudaErrorLaunchFailure"],
    );
}

/// `fatbin_add.cu` as `nvcc -fatbin` makes it with `flags`, in the libraries' folder.
fn fatbin(tag: &str, flags: &[&str]) -> std::path::PathBuf {
    let out = nvcc::lib_dir().join(format!("fatbin_add-{tag}.fatbin"));
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cu/fatbin_add.cu");
    let o = std::process::Command::new(nvcc::nvcc())
        .arg("-fatbin")
        .args(flags)
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .output()
        .expect("run nvcc");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    out
}

/// `driver_interop.cu`: a driver-API program with its own context (CUDA 13's
/// `cuCtxCreate`), which the runtime's calls use, loading `nvcc -fatbin` files by path,
/// from memory, through `cuModuleLoadFatBinary` and the linker; a machine-code-only
/// fatbin is `CUDA_ERROR_NO_BINARY_FOR_GPU`; on the simulator and forwarded.
#[test]
#[ignore = "needs nvcc: VMGPU_NVCC (tests/run-all.sh installs it)"]
fn driver_api_programs_load_fatbins_in_their_own_context() {
    let lib = nvcc::lib_dir().to_str().expect("a UTF-8 path").to_string();
    let exe = build("driver_interop", "zstd", &["-L", &lib, "-lcuda"]);
    let ptx = fatbin("zstd", PTX80);
    let plain = fatbin("plain", &[PTX80[0], PTX80[1], "--no-compress"]);
    let sass = fatbin("sass", &["-gencode", "arch=compute_90,code=sm_90"]);
    let args = [&ptx, &plain, &sass].map(|p| p.to_str().expect("a UTF-8 path").to_string());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    on_sim_and_forwarded(
        &exe,
        &args,
        "driver_interop: 35 checks, 0 failed",
        &["machine-code-only fatbin: 209"],
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
        for mode in Mode::sim().and_on_a_gpu() {
            let out = run_in(&exe, &mode);
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                stdout.contains("vector_add: cudaSuccess, 0 of 5000 wrong"),
                "{tag}, {mode}: {stdout}"
            );
        }
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
    let mut modes = vec![Mode::sim(), Mode::forwarded("forwarded", &addr)];
    modes.extend(Mode::on_a_gpu());
    for mode in &modes {
        let out = run_in(&exe, mode);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("rdc: cudaSuccess, 0 of 1000 wrong"),
            "{mode}: {stdout}"
        );
    }
    server.wait_idle();
    // runtime_api.cu built the same way: its one unit, linked (libcudadevrt's unit, which
    // needs the device runtime, left out).
    let exe = build("runtime_api", "rdc", &flags);
    for mode in Mode::sim().and_on_a_gpu() {
        let out = run_in(&exe, &mode);
        assert_summary(&mode, &out, "runtime_api: 140 checks, 0 failed");
    }
}

#[test]
#[ignore = "needs nvcc: VMGPU_NVCC (tests/run-all.sh installs it)"]
fn graphs_built_node_by_node() {
    let exe = build("graph_nodes", "zstd", PTX80);
    on_sim_and_forwarded(
        &exe,
        &[],
        "graph_nodes: 75 checks, 0 failed",
        &["graph_nodes: 0 of 1036 elements wrong"],
    );
}
