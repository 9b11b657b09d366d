//! The accelerator's suite ([`accel_common`]) on the simulator, plus what only the
//! simulator has: the documented virtual device, quotas, timeouts, misaligned faults
//! and backend selection.

#[macro_use]
mod accel_common;

accel_suite!(accel_common::sim, accel_common::Faults::InProcess);

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
    assert!(!p.ecc && p.unified_addressing && !p.integrated && p.concurrent_kernels);
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
        foreign
            .as_ref()
            .is_err_and(|e| e.cuda_name() == Some("CUDA_ERROR_INVALID_HANDLE")),
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

#[test]
fn the_sticky_error_reaches_every_stream() {
    let (_sim, gpu) = sim_with(SimConfig::default());
    let module = gpu.load_ptx(POKE_PTX).unwrap();
    let poke = module.function("poke").unwrap();
    let mut buf = gpu.htod(&[5u32; 16]).unwrap();
    let mut after = gpu.htod(&[5u32; 16]).unwrap();
    let s1 = gpu.stream(StreamFlags::default()).unwrap();
    let s2 = gpu.stream(StreamFlags::default()).unwrap();
    // SAFETY: the simulator reaches device memory only.
    unsafe {
        poke.launch(
            &s1,
            LaunchConfig::linear(1, 1),
            &kernel_args![&mut buf, 1u64 << 30],
        )
    }
    .unwrap();
    // Queued behind the faulting kernel (the simulator drops it).
    let _ = after.as_mut_slice().memset_async(0, &s1);
    let err = s1.synchronize().unwrap_err();
    assert_eq!(err.cuda_name(), Some("CUDA_ERROR_ILLEGAL_ADDRESS"), "{err}");
    // Another stream's synchronisation reports it too (the error is the context's).
    let err = s2.synchronize().unwrap_err();
    assert_eq!(err.cuda_name(), Some("CUDA_ERROR_ILLEGAL_ADDRESS"), "{err}");
    assert_eq!(err.as_cuda().unwrap().stream, Some(s2.raw().raw()));
    // SAFETY: no raw handle is used after the reset.
    unsafe { gpu.reset() }.unwrap();
    let fresh = gpu.alloc_zeroed::<u32>(4).unwrap();
    assert_eq!(fresh.to_vec().unwrap(), [0; 4]);
}

#[test]
fn an_allocation_larger_than_the_host_can_back_is_out_of_memory() {
    let (_sim, gpu) = sim_with(SimConfig {
        memory_limit: u64::MAX / 2,
        ..SimConfig::default()
    });
    let err = gpu.alloc_zeroed::<u8>(1 << 50).unwrap_err();
    let e = err.as_cuda().unwrap();
    assert_eq!(e.name, "CUDA_ERROR_OUT_OF_MEMORY", "{err}");
    assert!(e.detail.as_deref().unwrap().contains("host"), "{err}");
    gpu.synchronize().unwrap();
}

/// Thousands of raw calls with random sizes, addresses, handles and PTX: every one
/// returns (no panic, no hang), none is an internal simulator failure, and the backend
/// works afterwards.
#[test]
fn the_backend_survives_random_calls() {
    use cuda_guest::driver::{Event, EventFlags, Stream};
    let (sim, gpu) = sim_with(SimConfig {
        memory_limit: 64 << 20,
        instruction_budget: 1_000_000,
        ..SimConfig::default()
    });
    // Another seed: VMGPU_FUZZ_SEED=N.
    let mut state = std::env::var("VMGPU_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(0x9e37_79b9_7f4a_7c15)
        | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    // Host memory for asynchronous copies: only ever reached through this pointer, by
    // the device, and leaked at the end (queued copies may use it until then).
    const HOST: usize = 1 << 16;
    let host: *mut u8 = Box::into_raw(vec![0u8; HOST].into_boxed_slice()).cast();
    let module = sim.module_load_ptx(POKE_PTX).unwrap();
    let mut poke = sim.module_get_function(&module, "poke").unwrap();
    let mut live: Vec<(DevicePtr, usize)> = vec![];
    let mut streams: Vec<Stream> = vec![];
    let mut events: Vec<Event> = vec![];
    let mut module = Some(module);
    let mut errors = std::collections::BTreeMap::<String, usize>::new();
    for _ in 0..3000 {
        gpu.bind().unwrap();
        let r = next();
        let pick = |r: u64, live: &[(DevicePtr, usize)]| -> DevicePtr {
            match (r % 4, live.is_empty()) {
                (0, _) | (_, true) => DevicePtr(r >> 8),
                (1, false) => live[(r >> 8) as usize % live.len()]
                    .0
                    .offset((r >> 32) % 8192),
                (_, false) => live[(r >> 8) as usize % live.len()].0,
            }
        };
        let len = (next() % 8192) as usize;
        let stream = if streams.is_empty() || r % 3 == 0 {
            &Stream::DEFAULT
        } else {
            &streams[(r >> 16) as usize % streams.len()]
        };
        let result: Result<(), DriverError> = match r % 14 {
            0 => {
                let size = [0usize, 1, 4096, (next() % (1 << 20)) as usize, 1 << 40]
                    [(r >> 8) as usize % 5];
                sim.mem_alloc(size).map(|p| live.push((p, size)))
            }
            1 if !live.is_empty() && r % 2 == 0 => {
                let (p, _) = live.swap_remove((r >> 8) as usize % live.len());
                sim.mem_free(p)
            }
            1 => sim.mem_free(pick(next(), &live)),
            // For 2..=7: device ranges are checked by the simulator, which never reaches
            // host memory through a device address; host ranges are valid Rust buffers
            // or inside `host`, which lives to the end.
            // SAFETY: see above.
            2 => unsafe { sim.memset_d8(pick(next(), &live), r as u8, len) },
            // SAFETY: see above.
            3 => unsafe { sim.memcpy_htod(pick(next(), &live), &vec![7u8; len]) },
            // SAFETY: see above.
            4 => unsafe { sim.memcpy_dtoh(&mut vec![0u8; len], pick(next(), &live)) },
            // SAFETY: see above.
            5 => unsafe {
                sim.memcpy_dtod_async(pick(next(), &live), pick(next(), &live), len, stream)
            },
            // SAFETY: see above.
            6 => unsafe {
                let off = (next() % (HOST as u64 - 8192)) as usize;
                sim.memcpy_htod_async(pick(next(), &live), host.add(off), len, stream)
            },
            // SAFETY: see above.
            7 => unsafe {
                let off = (next() % (HOST as u64 - 8192)) as usize;
                sim.memcpy_dtoh_async(host.add(off), pick(next(), &live), len, stream)
            },
            8 if streams.len() < 4 || r % 2 == 0 => sim
                .stream_create(StreamFlags::default())
                .map(|s| streams.push(s)),
            8 => sim.stream_destroy(streams.swap_remove((r >> 8) as usize % streams.len())),
            9 if events.len() < 4 => sim
                .event_create(EventFlags::default())
                .map(|e| events.push(e)),
            9 => {
                let e = &events[(r >> 8) as usize % events.len()];
                match (r >> 4) % 5 {
                    0 => sim.event_record(e, stream),
                    1 => sim.event_query(e).map(drop),
                    2 => sim.event_synchronize(e),
                    3 => sim.event_elapsed_ms(&events[0], e).map(drop),
                    _ => sim.event_destroy(events.swap_remove((r >> 8) as usize % events.len())),
                }
            }
            10 => {
                let ptr = pick(next(), &live).0.to_le_bytes();
                let off = (next() % 16384).to_le_bytes();
                let args: Vec<&[u8]> = match (r >> 8) % 4 {
                    0 => vec![&ptr],
                    1 => vec![&ptr, &off[..4]],
                    _ => vec![&ptr, &off],
                };
                let cfg = LaunchConfig::linear((next() % 3) as u32, (next() % 70) as u32);
                // SAFETY: the simulator reaches device memory only.
                unsafe { sim.launch(&poke, &cfg, stream, &args) }
            }
            11 => {
                let src = accel_common::KERNELS_PTX;
                let cut = (next() as usize) % src.len();
                let text = if r % 2 == 0 {
                    src[..cut].to_string()
                } else {
                    // One byte replaced by a printable character.
                    let mut b = src.as_bytes().to_vec();
                    b[cut] = b" %.;,[]{}()0123456789abcdefrsu_$"[(next() % 32) as usize];
                    String::from_utf8(b).unwrap_or_default()
                };
                sim.module_load_ptx(&text).map(|m| {
                    // SAFETY: nothing of it was launched.
                    let _ = unsafe { sim.module_unload(m) };
                })
            }
            12 => match sim.context_synchronize() {
                Err(e) => {
                    *errors
                        .entry(format!("sync: {}", e.cuda_name().unwrap_or("?")))
                        .or_default() += 1;
                    // SAFETY: every handle and address from before is forgotten below.
                    unsafe { sim.primary_context_reset(Device::new(0)) }.unwrap();
                    live.clear();
                    streams.clear();
                    events.clear();
                    let m = sim.module_load_ptx(POKE_PTX).unwrap();
                    poke = sim.module_get_function(&m, "poke").unwrap();
                    module = Some(m);
                    Ok(())
                }
                Ok(()) => Ok(()),
            },
            _ => sim.mem_get_info().map(drop),
        };
        if let Err(e) = result {
            assert_ne!(e.code(), Some(999), "an internal simulator failure: {e}");
            *errors
                .entry(e.cuda_name().unwrap_or("other").to_string())
                .or_default() += 1;
        }
    }
    println!("errors seen: {errors:?}");
    assert!(
        errors.contains_key("CUDA_ERROR_INVALID_VALUE"),
        "{errors:?}"
    );
    let _ = sim.context_synchronize();
    // SAFETY: nothing from before is used afterwards.
    unsafe { sim.primary_context_reset(Device::new(0)) }.unwrap();
    assert!(module.is_some());
    let buf = gpu.htod(&[9u32; 8]).unwrap();
    assert_eq!(buf.to_vec().unwrap(), [9; 8]);
}

#[test]
fn a_reset_concerns_every_gpu_of_the_device() {
    let acc = Accelerator::builder().backend(Choice::Sim).build().unwrap();
    let (one, two) = (acc.gpu(0).unwrap(), acc.gpu(0).unwrap());
    let buf = two.htod(&[1u32, 2, 3]).unwrap();
    let pinned = two.pinned(64, Default::default()).unwrap();
    // SAFETY: no raw handle is used after a reset.
    let refused = unsafe { one.reset() }.unwrap_err();
    assert!(refused.to_string().contains("pinned"), "{refused}");
    drop(pinned);
    // SAFETY: as above.
    unsafe { one.reset() }.unwrap();
    let stale = buf.to_vec().unwrap_err();
    assert_eq!(stale.cuda_name(), Some("CUDA_ERROR_CONTEXT_IS_DESTROYED"));
    assert_eq!(two.htod(&[4u8]).unwrap().to_vec().unwrap(), [4]);
    // Another backend instance is another device.
    let other = Accelerator::builder().backend(Choice::Sim).build().unwrap();
    let kept = other.gpu(0).unwrap().htod(&[5u8]).unwrap();
    // SAFETY: as above.
    unsafe { one.reset() }.unwrap();
    assert_eq!(kept.to_vec().unwrap(), [5]);
}

/// The isolation that the native suite gives its faulting tests, exercised here: the
/// test runs in a child process of this binary, and the parent checks that the child
/// ran it and that it passed.
#[test]
fn a_faulting_test_in_a_child_process() {
    accel_common::faulting(
        "a_faulting_test_in_a_child_process",
        accel_common::Faults::ChildProcess,
        accel_common::sim,
        accel_common::a_faulting_kernel_fails_its_future,
    );
}

fn fails(_: &accel_common::Fixture) {
    panic!("this test fails in its child");
}

/// A test failing in its child process fails its parent.
#[test]
#[should_panic(expected = "failed in its child process")]
fn a_failing_child_process_fails_the_test() {
    accel_common::faulting(
        "a_failing_child_process_fails_the_test",
        accel_common::Faults::ChildProcess,
        accel_common::sim,
        fails,
    );
}

/// A module loaded under a name (or from a file) is named so in the simulator's JIT log;
/// unnamed ones are `moduleN.ptx`.
#[test]
fn the_jit_log_names_the_module() {
    let f = accel_common::sim();
    let bad = ".version 7.0\n.target sm_80\n.address_size 64\n\
               .visible .entry k(.param .u64 p)\n{\n    frobnicate.u32 %r1, 3;\n    ret;\n}\n";
    let log = |err: DriverError| err.as_cuda().unwrap().jit_log.clone().unwrap();
    let named = log(f.gpu.load_ptx_named("kernels/bad.ptx", bad).unwrap_err());
    assert!(named.contains("kernels/bad.ptx:6: error"), "{named}");
    let unnamed = log(f.gpu.load_ptx(bad).unwrap_err());
    assert!(
        unnamed.contains("module") && unnamed.contains(".ptx:6: error"),
        "{unnamed}"
    );
    assert!(!unnamed.contains("kernels/bad.ptx"), "{unnamed}");
    let path = std::env::temp_dir().join(format!("vmgpu-bad-{}.ptx", std::process::id()));
    std::fs::write(&path, bad).unwrap();
    let from_file = log(f.gpu.load_ptx_file(&path).unwrap_err());
    std::fs::remove_file(&path).unwrap();
    assert!(
        from_file.contains(&format!("{}:6: error", path.display())),
        "{from_file}"
    );
    // A good module loads under its name as usual.
    let m = f
        .gpu
        .load_ptx_named("kernels.ptx", accel_common::KERNELS_PTX)
        .unwrap();
    assert_eq!(m.function("empty").unwrap().params().unwrap().len(), 0);
}
