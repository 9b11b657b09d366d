//! When forward mode opens its session, and what a process that only compiles sees.
//! NVRTC loads `libcuda.so.1` itself while it compiles and calls `cuInit` and
//! `cuGetExportTable`: that opens no session on the service (the library connects at the
//! first call that needs the service, and sends `Init` first) and prints no warning. The
//! service sits behind a [`Proxy`] that records every connection.

mod support;

use support::*;

use std::path::Path;

use cuda_guest::proto::Opcode;

const SIM: &[(&str, &str)] = &[("VMGPU_CUDA_MODE", "sim"), ("VMGPU_SIM_THREADS", "2")];

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn cu_init_and_an_export_table_probe_open_no_session_and_warn_nothing() {
    let server = Server::start();
    let proxy = Proxy::start(&server);
    let exe = compile("export_probe");
    let addr = proxy.env();
    let out = run(&exe, &[], &[("VMGPU_CUDA_SERVER", addr.as_str())]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("export_probe: probe OK"));
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
    assert_eq!(proxy.connections(), 0, "cuInit/cuGetExportTable connected");

    // The probe is logged at debug level.
    let out = run(
        &exe,
        &[],
        &[
            ("VMGPU_CUDA_SERVER", addr.as_str()),
            ("VMGPU_CUDA_LOG", "debug"),
        ],
    );
    assert!(out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains(
            "vmgpu libcuda: debug: cuGetExportTable: export table da9151d33ae6cc41a5c04f26d533e328"
        ),
        "{err}"
    );
    assert!(!err.contains("warning"), "{err}");
    assert_eq!(proxy.connections(), 0);

    // The same in simulator mode.
    let out = run(&exe, &[], SIM);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
}

#[test]
fn the_first_call_that_needs_the_service_connects_and_sends_init_first() {
    let server = Server::start();
    let proxy = Proxy::start(&server);
    let exe = compile("export_probe");
    let addr = proxy.env();
    let out = run_ok(
        &exe,
        &[Path::new("devices")],
        &[("VMGPU_CUDA_SERVER", &addr)],
    );
    assert!(out.contains("export_probe: devices OK"), "{out}");
    assert_eq!(proxy.connections(), 1);
    let requests = proxy.requests(0);
    assert_eq!(
        requests.first(),
        Some(&Opcode::Init),
        "the session's first request: {requests:?}"
    );
    assert_eq!(requests.iter().filter(|o| **o == Opcode::Init).count(), 1);
    assert_eq!(requests[1], Opcode::DeviceGetCount, "{requests:?}");
    server.wait_idle();

    // cuDriverGetVersion works before cuInit (and connects); Init follows cuInit before
    // the next request.
    let out = run_ok(
        &exe,
        &[Path::new("version-first")],
        &[("VMGPU_CUDA_SERVER", &addr)],
    );
    assert!(out.contains("export_probe: devices OK"), "{out}");
    assert_eq!(proxy.connections(), 2);
    let requests = proxy.requests(1);
    assert_eq!(
        requests[..3],
        [
            Opcode::DriverGetVersion,
            Opcode::Init,
            Opcode::DeviceGetCount
        ],
        "{requests:?}"
    );
    server.wait_idle();

    // Simulator mode answers the same.
    let sim = run_ok(&exe, &[Path::new("version-first")], SIM);
    assert!(sim.contains("export_probe: devices OK"), "{sim}");
}

#[test]
fn a_missing_server_fails_the_first_call_that_needs_it_and_every_later_one() {
    let exe = compile("export_probe");
    let out = run(
        &exe,
        &[Path::new("devices")],
        &[("VMGPU_CUDA_SERVER", "unix:/nonexistent/vmgpu.sock")],
    );
    assert!(!out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    // cuInit and the probe succeed; every call that needs the service fails as cuInit
    // did when it connected.
    assert!(stdout.contains("export_probe: probe OK"), "{stdout}");
    for call in ["cuDeviceGetCount", "cuDeviceGet", "cuCtxCreate"] {
        assert!(
            stdout.contains(&format!("{call} = 3 CUDA_ERROR_NOT_INITIALIZED")),
            "{stdout}"
        );
    }
    let err = stderr(&out);
    // Logged once, naming the server.
    assert_eq!(
        err.matches(
            "cannot open a session with the vmgpu CUDA service: \
             VMGPU_CUDA_SERVER=unix:/nonexistent/vmgpu.sock"
        )
        .count(),
        1,
        "{err}"
    );
}

#[test]
fn a_malformed_server_address_fails_cu_init() {
    let exe = compile("export_probe");
    let out = run(&exe, &[], &[("VMGPU_CUDA_SERVER", "tcp:localhost:1")]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("cuInit(0) failed: 3 CUDA_ERROR_NOT_INITIALIZED"),
        "{err}"
    );
    assert!(err.contains("VMGPU_CUDA_SERVER=tcp:localhost:1"), "{err}");
}

/// NVRTC itself (`VMGPU_LIBNVRTC`, as the CI sets it) compiling a kernel in a process
/// whose `libcuda.so.1` is the shim: the compile succeeds, the service sees no
/// connection, and nothing is printed but at debug level, where the export-table probe
/// shows that NVRTC did load the shim.
#[test]
fn nvrtc_compiles_without_a_session_or_a_warning() {
    let Some(nvrtc) = std::env::var_os("VMGPU_LIBNVRTC").filter(|v| !v.is_empty()) else {
        println!(
            "skipped: VMGPU_LIBNVRTC is unset (point it at the nvidia-cuda-nvrtc-cu12 wheel's \
             libnvrtc.so.12 to run this test)"
        );
        return;
    };
    let nvrtc = std::path::PathBuf::from(nvrtc);
    let server = Server::start();
    let proxy = Proxy::start(&server);
    // Not linked with libcuda: NVRTC loads it.
    let exe = compile_with("nvrtc_compile", false);
    let addr = proxy.env();

    let out = run(&exe, &[&nvrtc], &[("VMGPU_CUDA_SERVER", addr.as_str())]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("bytes of PTX OK"));
    assert!(!stderr(&out).contains("vmgpu libcuda"), "{}", stderr(&out));
    assert_eq!(proxy.connections(), 0, "compiling opened a session");

    let out = run(
        &exe,
        &[&nvrtc],
        &[
            ("VMGPU_CUDA_SERVER", addr.as_str()),
            ("VMGPU_CUDA_LOG", "debug"),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("vmgpu libcuda: debug: cuGetExportTable"),
        "NVRTC did not load the shim: {err}"
    );
    assert!(!err.contains("warning"), "{err}");
    assert_eq!(proxy.connections(), 0);

    let out = run(&exe, &[&nvrtc], SIM);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("vmgpu libcuda"), "{}", stderr(&out));
}
