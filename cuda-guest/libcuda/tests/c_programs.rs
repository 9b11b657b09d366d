//! Unmodified C programs written against the stock `cuda.h` and linked with `-lcuda`,
//! run on the shim in simulator mode: vector add, a D2D copy chain on two streams with
//! events, a JIT error with its log, an out-of-bounds kernel, and every entry point
//! resolved through `cuGetProcAddress_v2` (legacy and per-thread default stream).

mod support;

use support::*;

const SIM: &[(&str, &str)] = &[("VMGPU_CUDA_MODE", "sim"), ("VMGPU_SIM_THREADS", "2")];

#[test]
fn the_library_has_the_drivers_soname() {
    let out = std::process::Command::new("readelf")
        .arg("-d")
        .arg(shim_path())
        .output();
    if let Ok(out) = out {
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("Library soname: [libcuda.so.1]"), "{text}");
    }
    // The programs record libcuda.so.1 as their dependency.
    let exe = compile("jit_error");
    if let Ok(out) = std::process::Command::new("readelf")
        .arg("-d")
        .arg(&exe)
        .output()
    {
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("Shared library: [libcuda.so.1]"), "{text}");
    }
}

#[test]
fn vector_add_in_sim_mode() {
    let exe = compile("vector_add");
    let out = run_ok(&exe, &[&fixture("vector_add.nvrtc.ptx")], SIM);
    assert!(
        out.contains("vmgpu PTX simulator (virtual sm_80), sm_80"),
        "{out}"
    );
    assert!(out.contains("driver 13000"), "{out}");
    assert!(out.contains("1000 elements OK (c[999] = 1498.5)"), "{out}");
}

#[test]
fn d2d_chain_on_two_streams_with_events_in_sim_mode() {
    let exe = compile("d2d_streams");
    let out = run_ok(&exe, &[], SIM);
    assert!(out.contains("d2d_streams: 1048576 words OK"), "{out}");
}

#[test]
fn jit_error_prints_the_log_in_sim_mode() {
    let exe = compile("jit_error");
    let out = run_ok(&exe, &[], SIM);
    assert!(
        out.contains(
            "cuModuleLoadDataEx: 218 CUDA_ERROR_INVALID_PTX (a PTX JIT compilation failed)"
        ),
        "{out}"
    );
    assert!(out.contains("frobnicate"), "{out}");
    assert!(out.contains("jit_error: OK"), "{out}");
}

#[test]
fn out_of_bounds_kernel_is_an_illegal_address_at_the_next_sync_in_sim_mode() {
    let exe = compile("oob");
    let out = run_ok(&exe, &[&fixture("oob_write.nvrtc.ptx")], SIM);
    assert!(
        out.contains("after the out-of-bounds kernel: 700 CUDA_ERROR_ILLEGAL_ADDRESS"),
        "{out}"
    );
    assert!(out.contains("oob: OK"), "{out}");
}

/// `VMGPU_SIM_TIMEOUT` sets the simulator's launch time limit: a kernel that never ends
/// is stopped by it (a time limit, not the instruction budget), and a bad value is
/// named in a warning.
#[test]
fn the_launch_time_limit_comes_from_the_environment_in_sim_mode() {
    let exe = compile("timeout");
    let env = [
        SIM[0],
        SIM[1],
        ("VMGPU_SIM_TIMEOUT", "1"),
        ("VMGPU_CUDA_LOG", "debug"),
    ];
    let out = run(&exe, &[&fixture("infinite_loop.nvrtc.ptx")], &env);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("702 CUDA_ERROR_LAUNCH_TIMEOUT"), "{stdout}");
    assert!(stderr.contains("(time limit)"), "{stderr}");
    let env = [SIM[0], SIM[1], ("VMGPU_SIM_TIMEOUT", "soon")];
    let out = run(&exe, &[&fixture("vector_add.nvrtc.ptx")], &env);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("VMGPU_SIM_TIMEOUT=\"soon\" is not a number of seconds"),
        "{stderr}"
    );
}

/// `tests/c/link.c` on `env`'s mode: two NVRTC -rdc units linked with cuLink*.
fn link_program(env: &[(&str, &str)]) -> String {
    let exe = compile("link");
    let dir = repo().join("cuda-guest/tests/ptx/link");
    run_ok(
        &exe,
        &[
            &dir.join("link_main.nvrtc.ptx"),
            &dir.join("link_lib.nvrtc.ptx"),
        ],
        env,
    )
}

#[test]
fn the_drivers_linker_joins_ptx_units_in_sim_mode() {
    let out = link_program(SIM);
    assert!(out.contains("linked kernel: r[999] = 2997.5"), "{out}");
    assert!(
        out.contains(
            "link_main.nvrtc.ptx:19:1: error in link: unresolved extern variable offset: no unit defines it"
        ),
        "{out}"
    );
    assert!(out.contains("link: OK"), "{out}");
}

#[test]
fn device_printf_and_assert_in_sim_mode() {
    let exe = compile("device_io");
    let ptx = repo().join("cuda-guest/tests/ptx/device_io.nvrtc.ptx");
    let out = run(&exe, &[&ptx], SIM);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let want = "before the kernel\n\
                thread 0 of 3: x=0.000 ok|1.2e+03|A|-9000000000\n\
                thread 1 of 3: x=1.500 ok|1.2e+03|B|-9000000000\n\
                thread 2 of 3: x=3.000 ok|1.2e+03|C|-9000000000\n\
                after the kernel\n\
                printf returned 7 7 7\n\
                after the failed assert: 710 CUDA_ERROR_ASSERT\n\
                device_io: OK\n";
    assert_eq!(stdout, want, "{stderr}");
    assert!(
        stderr.contains("block: [1,0,0], thread: [1,0,0] Assertion `in[i] != 7` failed."),
        "{stderr}"
    );
}

#[test]
fn every_entry_point_through_cu_get_proc_address_v2() {
    let exe = compile("procaddr");
    let out = run_ok(&exe, &[&shim_path(), &fixture("vector_add.nvrtc.ptx")], SIM);
    assert!(
        out.contains("procaddr: 36 variants checked, vector_add legacy and per-thread OK"),
        "{out}"
    );
}

#[test]
fn the_clang_ptx_runs_too() {
    let exe = compile("vector_add");
    let out = run_ok(&exe, &[&fixture("vector_add.clang.ptx")], SIM);
    assert!(out.contains("1000 elements OK"), "{out}");
}

#[test]
fn calls_before_cu_init_and_without_a_context_fail_as_in_the_driver() {
    // Checked through the procaddr program's path: a bad mode is refused at cuInit.
    let exe = compile("jit_error");
    let out = run(&exe, &[], &[("VMGPU_CUDA_MODE", "bogus")]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cuInit(0) failed: 3 CUDA_ERROR_NOT_INITIALIZED"),
        "{err}"
    );
    assert!(err.contains("VMGPU_CUDA_MODE"), "{err}");
}

#[test]
fn several_simulated_devices_with_peer_copies() {
    let exe = compile("multi_device");
    let env = [
        ("VMGPU_CUDA_MODE", "sim"),
        ("VMGPU_SIM_THREADS", "2"),
        ("VMGPU_SIM_DEVICES", "3"),
    ];
    let out = run_ok(&exe, &[&fixture("vector_add.nvrtc.ptx")], &env);
    assert!(
        out.contains("multi_device: 3 devices, peer copies OK"),
        "{out}"
    );
}

#[test]
fn boundary_errors_are_the_drivers() {
    let exe = compile("errors");
    let out = run_ok(&exe, &[], SIM);
    assert!(out.contains("errors: 69 checks OK"), "{out}");
}

#[test]
fn unsupported_attributes_warn_once_in_sim_mode() {
    let exe = compile("warn_once");
    let out = run(&exe, &[&fixture("vector_add.nvrtc.ptx")], SIM);
    assert!(out.status.success());
    warned_once(&String::from_utf8_lossy(&out.stderr));
}

#[test]
fn many_launches_then_one_synchronisation() {
    let exe = compile("launch_rate");
    let out = run_ok(&exe, &[std::path::Path::new("2000")], SIM);
    assert!(out.contains("launch_rate: 2000 launches"), "{out}");
}
