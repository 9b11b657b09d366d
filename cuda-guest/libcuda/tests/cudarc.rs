//! cudarc on the shim: cudarc looks every driver entry point up by its versioned name
//! with `dlsym` when it loads `libcuda` and panics if one is missing; then vector add
//! through its safe API (events per buffer, async copies to pageable memory, stream-
//! ordered frees), in simulator and in forward mode. The test re-runs itself as a child process with `LD_LIBRARY_PATH` on
//! the shim, since cudarc opens `libcuda.so` by name.

mod support;

use std::process::Command;

use cudarc::driver::{CudaContext, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;

const CHILD: &str = "VMGPU_SHIM_CUDARC_CHILD";

fn child() {
    let ctx = CudaContext::new(0).expect("a context");
    println!("device: {}", ctx.name().expect("its name"));
    let stream = ctx.default_stream();
    let module = ctx
        .load_module(Ptx::from_file(support::fixture("vector_add.nvrtc.ptx")))
        .expect("the module");
    let f = module.load_function("vector_add").expect("the kernel");
    let n = 1000usize;
    let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let b: Vec<f32> = (0..n).map(|i| 0.25 * i as f32).collect();
    let da = stream.memcpy_stod(&a).expect("upload a");
    let db = stream.memcpy_stod(&b).expect("upload b");
    let mut dc = stream.alloc_zeros::<f32>(n).expect("alloc c");
    let n32 = n as i32;
    let mut launch = stream.launch_builder(&f);
    launch.arg(&da).arg(&db).arg(&mut dc).arg(&n32);
    // SAFETY: vector_add(a, b, c, n) reads a and b and writes c within n elements, and
    // every buffer holds n f32s.
    unsafe { launch.launch(LaunchConfig::for_num_elems(n as u32)) }.expect("launch");
    let c = stream.memcpy_dtov(&dc).expect("download c");
    for i in 0..n {
        assert_eq!(c[i], a[i] + b[i], "element {i}");
    }
    let other = ctx.new_stream().expect("a stream");
    let copy = other.clone_dtod(&dc).expect("a device copy");
    other.synchronize().expect("sync");
    assert_eq!(
        other.memcpy_dtov(&copy).expect("download")[999],
        999.0 * 1.25
    );
    println!("cudarc: vector_add OK ({} elements)", n);
}

/// Runs `child` in a process of its own on the shim with `env`; returns its stdout.
fn run_child(env: &[(&str, &str)]) -> String {
    let mut cmd = Command::new(std::env::current_exe().expect("this test binary"));
    cmd.args([
        "--exact",
        "cudarc_loads_the_shim_and_runs_vector_add",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD, "1")
    .env("LD_LIBRARY_PATH", support::shim_dir())
    .env_remove("VMGPU_CUDA_SERVER")
    .env_remove("VMGPU_CUDA_MODE");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run the child");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the child failed");
    stdout
}

#[test]
fn cudarc_loads_the_shim_and_runs_vector_add() {
    if std::env::var_os(CHILD).is_some() {
        child();
        return;
    }
    let sim = run_child(&[("VMGPU_CUDA_MODE", "sim")]);
    assert!(
        sim.contains("device: vmgpu PTX simulator (virtual sm_80)"),
        "{sim}"
    );
    assert!(
        sim.contains("cudarc: vector_add OK (1000 elements)"),
        "{sim}"
    );
    // The same through the service.
    let server = support::Server::start();
    let addr = server.env();
    let fwd = run_child(&[("VMGPU_CUDA_SERVER", addr.as_str())]);
    assert!(
        fwd.contains("cudarc: vector_add OK (1000 elements)"),
        "{fwd}"
    );
    server.wait_idle();
}
