//! The accelerator's suite ([`accel_common`]) on the simulator, plus what only the
//! simulator has: the documented virtual device, quotas, timeouts, misaligned faults
//! and backend selection.

#[macro_use]
mod accel_common;

accel_suite!(accel_common::sim);

use std::sync::Arc;

use cuda_guest::accel::{Accelerator, Choice, BACKEND_ENV};
use cuda_guest::driver::safe::Gpu;
use cuda_guest::driver::sim::{SIM_DEVICE_NAME, SIM_DEVICE_UUID, SIM_DRIVER_VERSION};
use cuda_guest::driver::{
    Backend, BackendKind, Device, DeviceAttribute, DevicePtr, DriverError, HostRegisterFlags,
    LaunchConfig, SimBackend, StreamFlags,
};
use cuda_guest::kernel_args;
use cuda_guest::sim::SimConfig;

const POKE_PTX: &str = r#"
.version 7.0
.target sm_80
.address_size 64
.visible .entry poke(.param .u64 p, .param .u64 off)
{
    .reg .b32 %r<2>; .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [p];
    ld.param.u64 %rd2, [off];
    cvta.to.global.u64 %rd3, %rd1;
    add.s64 %rd4, %rd3, %rd2;
    mov.u32 %r1, 1;
    st.global.u32 [%rd4], %r1;
    ret;
}
"#;

fn sim_with(config: SimConfig) -> (Arc<SimBackend>, Gpu) {
    let sim = Arc::new(SimBackend::new(config).unwrap());
    let backend: Arc<dyn Backend> = sim.clone();
    let gpu = Gpu::new(backend, Device::new(0)).unwrap();
    (sim, gpu)
}

#[test]
fn the_virtual_device_is_as_documented() {
    let (sim, gpu) = sim_with(SimConfig {
        memory_limit: 3 << 30,
        ..SimConfig::default()
    });
    let p = gpu.properties().unwrap();
    assert_eq!(p.name, SIM_DEVICE_NAME);
    assert_eq!(p.uuid, SIM_DEVICE_UUID);
    assert_eq!(
        cuda_guest::driver::safe::format_uuid(&p.uuid),
        "766d6770-752d-7369-6d2d-6465762d3030"
    );
    assert_eq!(p.pci_address.to_string(), "0000:ff:00.0");
    assert_eq!(p.compute_capability, (8, 0));
    assert_eq!(p.total_memory, 3 << 30);
    assert_eq!(
        (p.multiprocessors, p.max_threads_per_multiprocessor),
        (108, 2048)
    );
    assert_eq!(
        (p.shared_memory_per_block, p.shared_memory_per_block_optin),
        (49152, 166_912)
    );
    assert_eq!(
        (p.clock_khz, p.memory_clock_khz, p.memory_bus_width),
        (1_410_000, 1_215_000, 5120)
    );
    assert_eq!(p.l2_cache_bytes, 40 << 20);
    assert!(!p.ecc && p.unified_addressing && !p.integrated && !p.concurrent_kernels);
    assert!(p.host_register);
    assert_eq!(sim.driver_version().unwrap(), SIM_DRIVER_VERSION);
    assert_eq!(sim.device_count().unwrap(), 1);
    assert_eq!(sim.kind(), BackendKind::Simulator);
    let warp = DeviceAttribute::Raw(DeviceAttribute::WarpSize.code());
    assert_eq!(sim.device_attribute(Device::new(0), warp).unwrap(), 32);
    let unknown = sim
        .device_attribute(Device::new(0), DeviceAttribute::Raw(9999))
        .unwrap_err();
    assert_eq!(unknown.cuda_name(), Some("CUDA_ERROR_INVALID_VALUE"));
    let other = sim.device_name(Device::new(1)).unwrap_err();
    assert_eq!(other.cuda_name(), Some("CUDA_ERROR_INVALID_DEVICE"));
}

#[test]
fn the_memory_quota_is_the_device_memory() {
    let (sim, gpu) = sim_with(SimConfig {
        memory_limit: 1 << 20,
        ..SimConfig::default()
    });
    let a = gpu.alloc_zeroed::<u8>(768 << 10).unwrap();
    let info = gpu.mem_info().unwrap();
    assert_eq!((info.free, info.total), (256 << 10, 1 << 20));
    let err = gpu.alloc_zeroed::<u8>(512 << 10).unwrap_err();
    let e = err.as_cuda().unwrap();
    assert_eq!(e.name, "CUDA_ERROR_OUT_OF_MEMORY");
    assert!(e.detail.as_deref().unwrap().contains("786432"), "{err}");
    drop(a);
    assert_eq!(gpu.mem_info().unwrap().free, 1 << 20);
    let zero = sim.mem_alloc(0).unwrap_err();
    assert_eq!(zero.cuda_name(), Some("CUDA_ERROR_INVALID_VALUE"));
}

#[test]
fn a_runaway_kernel_times_out_at_the_next_sync() {
    let (_sim, gpu) = sim_with(SimConfig {
        instruction_budget: 100_000,
        ..SimConfig::default()
    });
    let module = gpu.load_ptx(accel_common::KERNELS_PTX).unwrap();
    let spin = module.function("spin").unwrap();
    let mut flag = gpu.alloc_zeroed::<u32>(1).unwrap();
    let stream = gpu.stream(StreamFlags::default()).unwrap();
    // SAFETY: spin writes one u32 to its flag buffer.
    unsafe {
        spin.launch(
            &stream,
            LaunchConfig::linear(1, 32),
            &kernel_args![i64::MAX, &mut flag, 1u32],
        )
    }
    .unwrap();
    let err = stream.synchronize().unwrap_err();
    let e = err.as_cuda().unwrap();
    assert_eq!(e.name, "CUDA_ERROR_LAUNCH_TIMEOUT", "{err}");
    assert!(
        e.detail.as_deref().unwrap().contains("instruction budget"),
        "{err}"
    );
    // Sticky.
    assert_eq!(
        gpu.synchronize().unwrap_err().cuda_name(),
        Some("CUDA_ERROR_LAUNCH_TIMEOUT")
    );
}

#[test]
fn misaligned_and_out_of_bounds_faults_carry_the_report() {
    let (_sim, gpu) = sim_with(SimConfig::default());
    let module = gpu.load_ptx(POKE_PTX).unwrap();
    let poke = module.function("poke").unwrap();
    let mut buf = gpu.alloc_zeroed::<u32>(64).unwrap();
    let stream = gpu.stream(StreamFlags::default()).unwrap();
    // SAFETY: the simulator reaches device memory only.
    unsafe {
        poke.launch(
            &stream,
            LaunchConfig::linear(1, 1),
            &kernel_args![&mut buf, 2u64],
        )
    }
    .unwrap();
    let err = gpu.synchronize().unwrap_err();
    let e = err.as_cuda().unwrap();
    assert_eq!(e.name, "CUDA_ERROR_MISALIGNED_ADDRESS", "{err}");
    assert!(
        err.to_string().contains("misaligned write of size 4"),
        "{err}"
    );
    // SAFETY: no raw handle is used after the reset.
    unsafe { gpu.reset() }.unwrap();
    let module = gpu.load_ptx(POKE_PTX).unwrap();
    let poke = module.function("poke").unwrap();
    let mut buf = gpu.alloc_zeroed::<u32>(64).unwrap();
    // SAFETY: as above.
    unsafe {
        poke.launch(
            &gpu.default_stream(),
            LaunchConfig::linear(1, 1),
            &kernel_args![&mut buf, 256u64],
        )
    }
    .unwrap();
    let err = buf.to_vec().unwrap_err();
    let e = err.as_cuda().unwrap();
    assert_eq!(e.name, "CUDA_ERROR_ILLEGAL_ADDRESS", "{err}");
    let fault = e.fault.as_deref().unwrap();
    let nearest = fault.nearest.as_ref().unwrap();
    assert_eq!((nearest.offset, nearest.size), (256, 256), "{fault}");
    assert!(
        err.to_string()
            .contains("0 bytes after the end of allocation"),
        "{err}"
    );
}

#[test]
fn raw_backend_checks() {
    let (sim, gpu) = sim_with(SimConfig::default());
    // No context current on a new thread.
    let s = sim.clone();
    let err = std::thread::spawn(move || s.mem_alloc(16).unwrap_err())
        .join()
        .unwrap();
    assert_eq!(err.cuda_name(), Some("CUDA_ERROR_INVALID_CONTEXT"));
    // Handles of another backend are refused.
    let (other, _other_gpu) = sim_with(SimConfig::default());
    gpu.bind().unwrap();
    let stream = sim.stream_create(StreamFlags::default()).unwrap();
    let foreign = other.stream_query(&stream);
    assert!(
        matches!(foreign, Err(DriverError::InvalidArgument { .. })),
        "{foreign:?}"
    );
    gpu.bind().unwrap();
    sim.stream_destroy(stream).unwrap();
    // Ranges are checked when the work is queued.
    let buf = gpu.alloc_zeroed::<u8>(100).unwrap();
    let mut out = [0u8; 101];
    // SAFETY: the simulator reaches its own memory only.
    let err = unsafe { sim.memcpy_dtoh(&mut out, buf.ptr()) }.unwrap_err();
    assert_eq!(err.cuda_name(), Some("CUDA_ERROR_INVALID_VALUE"), "{err}");
    // SAFETY: as above.
    let err = unsafe { sim.memset_d8(DevicePtr(0x1234), 0, 4) }.unwrap_err();
    assert_eq!(err.cuda_name(), Some("CUDA_ERROR_INVALID_VALUE"), "{err}");
    let err = sim.mem_free(buf.ptr().offset(4)).unwrap_err();
    assert_eq!(err.cuda_name(), Some("CUDA_ERROR_INVALID_VALUE"), "{err}");
    // Host registration: overlapping ranges and unknown ones.
    let mut host = vec![0u8; 8192];
    let p = host.as_mut_ptr();
    // SAFETY: `host` outlives the registration, which is undone below.
    unsafe {
        sim.host_register(p, 8192, HostRegisterFlags::default())
            .unwrap();
        let again = sim
            .host_register(p.add(100), 10, HostRegisterFlags::default())
            .unwrap_err();
        assert_eq!(again.code(), Some(712), "{again}");
        let unknown = sim.host_unregister(p.add(1)).unwrap_err();
        assert_eq!(unknown.code(), Some(713), "{unknown}");
        sim.host_unregister(p).unwrap();
    }
    // Launch arguments are checked against the PTX by the backend too.
    let module = sim.module_load_ptx(POKE_PTX).unwrap();
    let f = sim.module_get_function(&module, "poke").unwrap();
    let one = 0u64.to_le_bytes();
    // SAFETY: refused before anything runs.
    let err = unsafe {
        sim.launch(
            &f,
            &LaunchConfig::linear(1, 1),
            &cuda_guest::driver::Stream::DEFAULT,
            &[&one],
        )
    }
    .unwrap_err();
    let e = err.as_cuda().unwrap();
    assert_eq!(e.name, "CUDA_ERROR_INVALID_VALUE");
    assert!(
        e.detail
            .as_deref()
            .unwrap()
            .contains("takes 2 parameter(s)"),
        "{err}"
    );
    let missing = sim.module_get_function(&module, "nope").unwrap_err();
    assert_eq!(missing.cuda_name(), Some("CUDA_ERROR_NOT_FOUND"));
    // SAFETY: no launch of it is pending or follows.
    unsafe { sim.module_unload(module) }.unwrap();
    // SAFETY: the function's module is gone: refused.
    let gone = unsafe {
        sim.launch(
            &f,
            &LaunchConfig::linear(1, 1),
            &cuda_guest::driver::Stream::DEFAULT,
            &[&one, &one],
        )
    }
    .unwrap_err();
    assert_eq!(gone.cuda_name(), Some("CUDA_ERROR_INVALID_HANDLE"));
}

#[test]
fn backend_selection() {
    let acc = Accelerator::builder()
        .backend(Choice::Auto)
        .libcuda("/nonexistent/libcuda.so.1")
        .build()
        .unwrap();
    assert_eq!(acc.kind(), BackendKind::Simulator);
    let sel = acc.selection();
    assert_eq!((sel.requested, sel.source), (Choice::Auto, "builder"));
    assert!(sel.reason.contains("/nonexistent/libcuda.so.1"), "{sel}");
    let err = Accelerator::builder()
        .backend(Choice::Native)
        .libcuda("/nonexistent/libcuda.so.1")
        .build()
        .unwrap_err();
    assert!(matches!(err, DriverError::NoBackend { .. }), "{err}");
    assert!(
        err.to_string().contains("/nonexistent/libcuda.so.1"),
        "{err}"
    );
    assert_eq!("SIM".parse::<Choice>().unwrap(), Choice::Sim);
    assert_eq!("native".parse::<Choice>().unwrap(), Choice::Native);
    assert_eq!("auto".parse::<Choice>().unwrap(), Choice::Auto);
    assert!("gpu0".parse::<Choice>().is_err());
    // The environment decides when the builder does not.
    std::env::set_var(BACKEND_ENV, "sim");
    let acc = Accelerator::builder().build().unwrap();
    assert_eq!(acc.selection().source, BACKEND_ENV);
    assert_eq!(acc.kind(), BackendKind::Simulator);
    std::env::set_var(BACKEND_ENV, "bogus");
    assert!(Accelerator::builder().build().is_err());
    let acc = Accelerator::builder()
        .ignore_env()
        .backend(Choice::Sim)
        .build()
        .unwrap();
    assert_eq!(acc.selection().source, "builder");
    std::env::remove_var(BACKEND_ENV);
}

#[test]
#[ignore = "needs libnvrtc (set VMGPU_LIBNVRTC; run with --ignored)"]
fn cuda_c_through_nvrtc_runs_on_the_simulator() {
    let (_sim, gpu) = sim_with(SimConfig::default());
    let src = r#"
        extern "C" __global__ void saxpy(float *y, const float *x, float a, unsigned n) {
            unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) y[i] = a * x[i] + y[i];
        }"#;
    let module = gpu.compile_cuda(src, "saxpy.cu", &[]).unwrap();
    let saxpy = module.function("saxpy").unwrap();
    let n = 777u32;
    let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let dx = gpu.htod(&x).unwrap();
    let mut dy = gpu.htod(&vec![1.0f32; n as usize]).unwrap();
    let stream = gpu.stream(StreamFlags::default()).unwrap();
    // SAFETY: saxpy stays within n elements of each buffer.
    unsafe {
        saxpy.launch(
            &stream,
            LaunchConfig::for_elements(n, 128),
            &kernel_args![&mut dy, &dx, 3.0f32, n],
        )
    }
    .unwrap();
    let y = dy.to_vec().unwrap();
    for i in 0..n as usize {
        assert_eq!(y[i], 3.0f32.mul_add(x[i], 1.0), "element {i}");
    }
    let err = gpu
        .compile_cuda("__global__ void k() { nope; }", "bad.cu", &[])
        .unwrap_err();
    assert!(matches!(err, DriverError::Nvrtc { .. }), "{err}");
    assert!(err.to_string().contains("nope"), "{err}");
}
