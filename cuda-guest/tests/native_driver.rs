//! The native backend over the real driver. Without a GPU these tests are reported as
//! ignored; on one, run them with `cargo test -p cuda-guest --test native_driver --
//! --ignored`.

mod native_common;

use std::sync::Arc;
use std::time::Instant;

use cuda_guest::driver::{
    Backend, Device, DeviceAttribute, DevicePciAddress, DevicePtr, EventFlags, HostAllocFlags,
    HostRegisterFlags, LaunchConfig, NativeBackend, Resolution, Stream, StreamFlags,
};
use native_common::*;

#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored)"]
fn device_queries_report_the_gpu() {
    let (native, gpu) = native_gpu();
    let cuda = gpu.backend();
    let dev = Device::new(0);
    assert!(cuda.device_count().unwrap() >= 1);
    let version = cuda.driver_version().unwrap();
    assert!(version >= 12000, "driver version {version}");
    let name = cuda.device_name(dev).unwrap();
    assert!(!name.is_empty());
    let uuid = cuda.device_uuid(dev).unwrap();
    assert_ne!(uuid, [0u8; 16]);
    let (major, minor) = cuda.compute_capability(dev).unwrap();
    assert!(major >= 5, "compute capability {major}.{minor}");
    let bus = cuda.device_pci_bus_id(dev).unwrap();
    let domain = cuda
        .device_attribute(dev, DeviceAttribute::PciDomainId)
        .unwrap();
    let busn = cuda
        .device_attribute(dev, DeviceAttribute::PciBusId)
        .unwrap();
    let slot = cuda
        .device_attribute(dev, DeviceAttribute::PciDeviceId)
        .unwrap();
    assert_eq!(bus, format!("{domain:04x}:{busn:02x}:{slot:02x}.0"));
    let addr = cuda.device_pci_address(dev).unwrap();
    assert_eq!(
        (
            addr.domain as i32,
            addr.bus as i32,
            addr.device as i32,
            addr.function
        ),
        (domain, busn, slot, 0)
    );
    assert_eq!(
        cuda.device_attribute(dev, DeviceAttribute::WarpSize)
            .unwrap(),
        32
    );
    let max_threads = cuda
        .device_attribute(dev, DeviceAttribute::MaxThreadsPerBlock)
        .unwrap();
    assert!(max_threads >= 512);
    assert!(
        cuda.device_attribute(dev, DeviceAttribute::MaxBlockDimX)
            .unwrap()
            >= max_threads
    );
    assert!(
        cuda.device_attribute(dev, DeviceAttribute::MaxGridDimX)
            .unwrap()
            >= 65535
    );
    let sms = cuda
        .device_attribute(dev, DeviceAttribute::MultiprocessorCount)
        .unwrap();
    assert!(sms > 0);
    let shared = cuda
        .device_attribute(dev, DeviceAttribute::MaxSharedMemoryPerBlock)
        .unwrap();
    assert!(shared >= 48 * 1024);
    let l2 = cuda
        .device_attribute(dev, DeviceAttribute::L2CacheSize)
        .unwrap();
    assert!(l2 > 0);
    assert_eq!(
        cuda.device_attribute(dev, DeviceAttribute::UnifiedAddressing)
            .unwrap(),
        1
    );
    let clock = cuda
        .device_attribute(dev, DeviceAttribute::ClockRate)
        .unwrap();
    let ecc = cuda
        .device_attribute(dev, DeviceAttribute::EccEnabled)
        .unwrap();
    let total = cuda.device_total_mem(dev).unwrap();
    assert!(total > 1 << 30);
    let info = gpu.mem_info().unwrap();
    assert!(
        info.total <= total && info.total >= total / 10 * 9,
        "{info:?} vs {total}"
    );
    assert!(info.free > 0 && info.free <= info.total);
    let uuid_s: String = uuid.iter().map(|b| format!("{b:02x}")).collect();
    println!(
        "device 0: {name}, uuid {uuid_s}, pci {bus}, cc {major}.{minor}, {sms} SMs, \
         {max_threads} threads/block, {shared} B shared/block, L2 {l2} B, clock {clock} kHz, \
         ecc {ecc}, {total} B total, {} B free; driver {version}; library {} by {:?}",
        info.free,
        native.driver().path(),
        native.driver().resolution()
    );
    // Out of range ordinals are errors, not crashes.
    let err = cuda.device_name(Device::new(4096)).unwrap_err();
    assert_eq!(err.cuda_name(), Some("CUDA_ERROR_INVALID_DEVICE"));
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored)"]
fn entry_points_resolve_to_the_cuda_12_variants() {
    let (native, _gpu) = native_gpu();
    let driver = native.driver();
    assert_eq!(
        driver.resolution(),
        Resolution::ProcAddress {
            cuda_version: 12000,
            flags: 1
        }
    );
    let mut versioned_matches = 0;
    let mut checked = 0;
    for (name, versioned, addr) in native.raw_api().addresses() {
        assert_ne!(addr, 0, "{name}");
        let by_versioned = driver.dlsym_address(versioned);
        let by_name = driver.dlsym_address(name);
        println!(
            "{name:24} -> {addr:#x}; dlsym({versioned}) = {by_versioned:x?}, dlsym({name}) = \
             {by_name:x?}"
        );
        if versioned != name {
            checked += 1;
            // Never the legacy (pre-_v2) variant when the two differ.
            if let (Some(v), Some(n)) = (by_versioned, by_name) {
                if v != n {
                    assert_ne!(addr, n, "{name} resolved to the legacy symbol {name}");
                }
            }
            if by_versioned == Some(addr) {
                versioned_matches += 1;
            }
        }
    }
    println!(
        "{versioned_matches} of {checked} versioned entry points equal dlsym of their _v2 name"
    );
    // The per-thread-default-stream flag selects other variants of the stream-ordered
    // entry points (the _ptsz/_ptds ones).
    let per_thread = cuda_guest::driver::Driver::load(&cuda_guest::driver::LoadOptions {
        per_thread_default_stream: true,
        ..Default::default()
    })
    .unwrap();
    let legacy = native.raw_api().addresses();
    let mut differing = Vec::new();
    for ((name, _, a), (_, _, b)) in legacy.iter().zip(per_thread.api().addresses()) {
        if *a != b {
            differing.push(*name);
        }
    }
    println!("per-thread default stream variants differ for: {differing:?}");
    assert!(differing.contains(&"cuLaunchKernel"), "{differing:?}");
    assert!(differing.contains(&"cuMemcpyDtoDAsync"), "{differing:?}");
    assert!(!differing.contains(&"cuMemAlloc"), "{differing:?}");
    for (name, _, addr) in per_thread.api().addresses() {
        for suffix in ["_ptsz", "_ptds", "_v2_ptsz", "_v2_ptds"] {
            let sym = format!("{name}{suffix}");
            if let Some(a) = per_thread.dlsym_address(&sym) {
                println!("{name:24} per-thread -> {addr:#x}; dlsym({sym}) = {a:#x}");
            }
        }
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored)"]
fn sync_copies_round_trip_and_memset() {
    let (_native, gpu) = native_gpu();
    let n = (1 << 20) + 3;
    let data: Vec<u8> = (0..n).map(|i| (i * 7 + 1) as u8).collect();
    let a = gpu.htod(&data).unwrap();
    assert_eq!(a.to_vec().unwrap(), data);
    let mut b = gpu.alloc_zeroed::<u8>(n).unwrap();
    assert!(b.to_vec().unwrap().iter().all(|&x| x == 0));
    b.copy_from_device(&a).unwrap();
    assert_eq!(b.to_vec().unwrap(), data);
    b.memset(0xa5).unwrap();
    assert!(b.to_vec().unwrap().iter().all(|&x| x == 0xa5));
    // memset_d32 on the first 1024 words, the rest untouched.
    // SAFETY: inside `b`'s own device memory.
    unsafe { gpu.backend().memset_d32(b.ptr(), 0xdead_beef, 1024) }.unwrap();
    let v = b.to_vec().unwrap();
    assert!(bytes_u32(&v[..4096]).iter().all(|&w| w == 0xdead_beef));
    assert!(v[4096..].iter().all(|&x| x == 0xa5));
    // Length mismatches are refused before the driver.
    assert!(b.copy_from_host(&data[..10]).is_err());
    let mut short = vec![0u8; 5];
    assert!(a.copy_to_host(&mut short).is_err());
    // A part of a buffer through the raw trait: offset copies.
    let mut out = vec![0u8; 100];
    // SAFETY: `a` holds n > 1100 bytes of device memory.
    unsafe { gpu.backend().memcpy_dtoh(&mut out, a.ptr().offset(1000)) }.unwrap();
    assert_eq!(out, data[1000..1100]);
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored)"]
fn async_copies_on_a_stream_with_pinned_memory() {
    let (_native, gpu) = native_gpu();
    let cuda = gpu.backend().clone();
    let n = 8 << 20;
    let mut src = gpu.pinned(n, HostAllocFlags::default()).unwrap();
    for (i, b) in src.as_mut_slice().iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    let dst = gpu.pinned(n, HostAllocFlags::default()).unwrap();
    let stream = gpu.stream(StreamFlags { non_blocking: true }).unwrap();
    let d1 = gpu.alloc_zeroed::<u8>(n).unwrap();
    let mut d2 = gpu.alloc_zeroed::<u8>(n).unwrap();
    // SAFETY: pinned buffers outlive the stream synchronisation below and are not
    // touched until then; the device ranges are the buffers' own.
    unsafe {
        cuda.memcpy_htod_async(d1.ptr(), src.as_ptr(), n, stream.raw())
            .unwrap();
    }
    d2.copy_from_device_async(&d1, &stream).unwrap();
    // SAFETY: as above.
    unsafe {
        cuda.memset_d8_async(d1.ptr(), 0, n, stream.raw()).unwrap();
        cuda.memcpy_dtoh_async(dst.as_ptr(), d2.ptr(), n, stream.raw())
            .unwrap();
    }
    stream.synchronize().unwrap();
    assert!(stream.query().unwrap());
    assert_eq!(dst.as_slice(), src.as_slice());
    assert!(d1.to_vec().unwrap().iter().all(|&b| b == 0));
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored)"]
fn registered_host_memory_round_trip() {
    let (_native, gpu) = native_gpu();
    let cuda = gpu.backend().clone();
    let n = 4 << 20;
    let mut host = Aligned::new(n);
    for (i, b) in host.as_mut_slice().iter_mut().enumerate() {
        *b = (i * 13 % 256) as u8;
    }
    let expected = host.as_slice().to_vec();
    // SAFETY: `host` stays allocated until after the unregistration below.
    unsafe { cuda.host_register(host.as_ptr(), n, HostRegisterFlags::default()) }.unwrap();
    // Registering twice is an error, not a crash.
    // SAFETY: as above.
    let err =
        unsafe { cuda.host_register(host.as_ptr(), n, HostRegisterFlags::default()) }.unwrap_err();
    assert_eq!(
        err.cuda_name(),
        Some("CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED")
    );
    let d = gpu.alloc_zeroed::<u8>(n).unwrap();
    let stream = gpu.stream(StreamFlags::default()).unwrap();
    // SAFETY: `host` is registered, alive and untouched until the stream is synchronised.
    unsafe { cuda.memcpy_htod_async(d.ptr(), host.as_ptr(), n, stream.raw()) }.unwrap();
    stream.synchronize().unwrap();
    host.as_mut_slice().fill(0);
    // SAFETY: as above.
    unsafe { cuda.memcpy_dtoh_async(host.as_ptr(), d.ptr(), n, stream.raw()) }.unwrap();
    stream.synchronize().unwrap();
    assert_eq!(host.as_slice(), &expected[..]);
    // SAFETY: no operation on the range is pending (the stream was synchronised).
    unsafe { cuda.host_unregister(host.as_ptr()) }.unwrap();
    // SAFETY: as above.
    let err = unsafe { cuda.host_unregister(host.as_ptr()) }.unwrap_err();
    assert_eq!(
        err.cuda_name(),
        Some("CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED")
    );
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored)"]
fn ptx_module_launches_vector_add_and_block_sum() {
    let (_native, gpu) = native_gpu();
    let cuda = gpu.backend().clone();
    let module = cuda.module_load_ptx(KERNELS_PTX).unwrap();
    let vector_add = cuda.module_get_function(&module, "vector_add").unwrap();
    let n: u32 = 1_000_003; // leaves a partial block
    let a: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let b: Vec<f32> = (0..n).map(|i| 1.0 / (i as f32 + 1.0)).collect();
    let da = gpu.htod(&f32_bytes(&a)).unwrap();
    let db = gpu.htod(&f32_bytes(&b)).unwrap();
    let dc = gpu.alloc_zeroed::<u8>(n as usize * 4).unwrap();
    let args: [&[u8]; 4] = [
        &da.ptr().0.to_le_bytes(),
        &db.ptr().0.to_le_bytes(),
        &dc.ptr().0.to_le_bytes(),
        &n.to_le_bytes(),
    ];
    // SAFETY: four arguments of the sizes vector_add takes (three pointers, a u32); the
    // buffers hold n f32 each; the module stays loaded until after the synchronisation.
    unsafe {
        cuda.launch(
            &vector_add,
            &LaunchConfig::for_elements(n, 256),
            &Stream::DEFAULT,
            &args,
        )
    }
    .unwrap();
    gpu.synchronize().unwrap();
    let c = bytes_f32(&dc.to_vec().unwrap());
    for i in 0..n as usize {
        assert_eq!(c[i].to_bits(), (a[i] + b[i]).to_bits(), "element {i}");
    }

    // Dynamic shared memory: each block sums its 256 elements.
    let block_sum = cuda.module_get_function(&module, "block_sum").unwrap();
    let n: u32 = 100_000;
    let input: Vec<u32> = (0..n).map(|i| i % 1000).collect();
    let din = gpu
        .htod(
            &input
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect::<Vec<_>>(),
        )
        .unwrap();
    let cfg = LaunchConfig {
        shared_bytes: 256 * 4,
        ..LaunchConfig::for_elements(n, 256)
    };
    let blocks = cfg.grid[0] as usize;
    let dout = gpu.alloc_zeroed::<u8>(blocks * 4).unwrap();
    let stream = gpu.stream(StreamFlags::default()).unwrap();
    let args: [&[u8]; 3] = [
        &din.ptr().0.to_le_bytes(),
        &dout.ptr().0.to_le_bytes(),
        &n.to_le_bytes(),
    ];
    // SAFETY: three arguments of block_sum's sizes; `dout` holds one u32 per block.
    unsafe { cuda.launch(&block_sum, &cfg, stream.raw(), &args) }.unwrap();
    stream.synchronize().unwrap();
    let sums = bytes_u32(&dout.to_vec().unwrap());
    for (blk, s) in sums.iter().enumerate() {
        let lo = blk * 256;
        let hi = ((blk + 1) * 256).min(n as usize);
        let want: u32 = input[lo..hi].iter().sum();
        assert_eq!(*s, want, "block {blk}");
    }

    // Too many threads per block: an error, nothing launched.
    let err = unsafe {
        // SAFETY: the launch is refused by the driver before running (block too large);
        // the arguments match anyway.
        cuda.launch(
            &block_sum,
            &LaunchConfig::linear(1, 4096),
            &Stream::DEFAULT,
            &args,
        )
    }
    .unwrap_err();
    assert_eq!(err.cuda_name(), Some("CUDA_ERROR_INVALID_VALUE"), "{err}");
    let err = cuda
        .module_get_function(&module, "no_such_kernel")
        .unwrap_err();
    assert_eq!(err.cuda_name(), Some("CUDA_ERROR_NOT_FOUND"), "{err}");
    assert!(err.to_string().contains("no_such_kernel"), "{err}");
    // SAFETY: every launch of the module's functions has completed (synchronised above).
    unsafe { cuda.module_unload(module) }.unwrap();
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored)"]
fn invalid_ptx_reports_the_jit_log() {
    let (_native, gpu) = native_gpu();
    let bad = ".version 7.0\n.target sm_52\n.address_size 64\n\n.visible .entry broken()\n{\n    \
               .reg .b32 %r<2>;\n    mov.u32 %r1, %undefined_register;\n    ret;\n}\n";
    let err = gpu.backend().module_load_ptx(bad).unwrap_err();
    let cuda = err.as_cuda().expect("a CUDA error");
    assert_eq!(cuda.name, "CUDA_ERROR_INVALID_PTX", "{err}");
    let log = cuda.jit_log.as_deref().unwrap_or("");
    assert!(
        log.contains("undefined_register") || log.contains("line 8"),
        "log: {log}"
    );
    let msg = err.to_string();
    assert!(msg.contains("JIT log"), "{msg}");
    assert!(msg.contains("hint"), "{msg}");
    println!("{msg}");
    // A PTX ISA newer than the driver's JIT.
    let future =
        ".version 99.9\n.target sm_52\n.address_size 64\n.visible .entry e()\n{\n    ret;\n}\n";
    let err = gpu.backend().module_load_ptx(future).unwrap_err();
    println!("{err}");
    assert!(
        matches!(
            err.cuda_name(),
            Some("CUDA_ERROR_UNSUPPORTED_PTX_VERSION") | Some("CUDA_ERROR_INVALID_PTX")
        ),
        "{err}"
    );
    // A NUL byte in the text is refused before the driver.
    assert!(gpu.backend().module_load_ptx("ab\0c").is_err());
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored)"]
fn streams_and_events_order_work_and_time_it() {
    let (_native, gpu) = native_gpu();
    let cuda = gpu.backend().clone();
    let module = cuda.module_load_ptx(KERNELS_PTX).unwrap();
    let spin = cuda.module_get_function(&module, "spin").unwrap();
    let clock_khz = cuda
        .device_attribute(Device::new(0), DeviceAttribute::ClockRate)
        .unwrap() as i64;
    let cycles: i64 = clock_khz * 100; // about 100 ms at the reported clock
    let flag = gpu.alloc_zeroed::<u8>(4).unwrap();
    let mut copy = gpu.alloc_zeroed::<u8>(4).unwrap();
    let a = gpu.stream(StreamFlags { non_blocking: true }).unwrap();
    let b = gpu.stream(StreamFlags { non_blocking: true }).unwrap();
    let start = gpu.event(EventFlags::default()).unwrap();
    let done = gpu.event(EventFlags::default()).unwrap();
    start.record(&a).unwrap();
    let value: u32 = 0x5eed;
    let args: [&[u8]; 3] = [
        &cycles.to_le_bytes(),
        &flag.ptr().0.to_le_bytes(),
        &value.to_le_bytes(),
    ];
    let t0 = Instant::now();
    // SAFETY: spin(long long, unsigned*, unsigned) with `flag` a 4-byte device buffer.
    unsafe { cuda.launch(&spin, &LaunchConfig::linear(1, 32), a.raw(), &args) }.unwrap();
    done.record(&a).unwrap();
    // Stream b waits for `done`, then copies the flag: it must see the kernel's write.
    b.wait(&done).unwrap();
    copy.copy_from_device_async(&flag, &b).unwrap();
    assert!(!a.query().unwrap(), "stream a is still spinning");
    assert!(!done.query().unwrap(), "event not reached yet");
    assert!(!b.query().unwrap(), "stream b waits for a");
    b.synchronize().unwrap();
    let waited = t0.elapsed();
    assert!(done.query().unwrap());
    assert!(a.query().unwrap());
    assert_eq!(bytes_u32(&copy.to_vec().unwrap()), vec![value]);
    let ms = done.elapsed_since(&start).unwrap();
    println!("spin kernel: {ms:.2} ms by events, host waited {waited:?}");
    assert!(ms > 20.0 && ms < 5000.0, "{ms} ms");
    assert!(waited.as_secs_f64() * 1000.0 >= ms as f64 * 0.5);
    // Timing-disabled events cannot be measured.
    let untimed = gpu
        .event(EventFlags {
            disable_timing: true,
            ..EventFlags::default()
        })
        .unwrap();
    untimed.record(&a).unwrap();
    untimed.synchronize().unwrap();
    assert!(untimed.elapsed_since(&start).is_err());
    drop((a, b));
    // SAFETY: all launches completed (stream a was passed by b's wait and synchronised).
    unsafe { cuda.module_unload(module) }.unwrap();
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored)"]
fn errors_name_the_failure_and_give_hints() {
    let (_native, gpu) = native_gpu();
    let cuda = gpu.backend().clone();
    // Out of memory: far more than any GPU has.
    let err = cuda.mem_alloc(1 << 50).unwrap_err();
    let e = err.as_cuda().expect("a CUDA error");
    assert_eq!(e.name, "CUDA_ERROR_OUT_OF_MEMORY");
    assert_eq!(e.description, "out of memory");
    assert_eq!(e.device, Some(0));
    assert!(e.operation.contains("cuMemAlloc_v2"));
    assert!(
        err.to_string().contains("hint: device memory is exhausted"),
        "{err}"
    );
    // Freeing what was never allocated.
    let err = cuda.mem_free(DevicePtr(0x1234)).unwrap_err();
    assert!(err.code().is_some(), "{err}");
    // No context current on a new thread.
    let c2 = cuda.clone();
    let err = std::thread::spawn(move || c2.mem_alloc(16).unwrap_err())
        .join()
        .unwrap();
    assert_eq!(err.cuda_name(), Some("CUDA_ERROR_INVALID_CONTEXT"), "{err}");
    assert!(err.to_string().contains("make it current"), "{err}");
    // Handles of another backend instance are refused before the driver.
    let other: Arc<dyn Backend> = Arc::new(NativeBackend::new().unwrap());
    let ctx = other.primary_context_retain(Device::new(0)).unwrap();
    other.context_set_current(&ctx).unwrap();
    let s = other.stream_create(StreamFlags::default()).unwrap();
    let err = cuda.stream_synchronize(&s).unwrap_err();
    assert!(
        err.to_string().contains("belongs to backend instance"),
        "{err}"
    );
    other.stream_destroy(s).unwrap();
    assert!(cuda.stream_destroy(Stream::DEFAULT).is_err());
    other.primary_context_release(ctx).unwrap();
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored)"]
fn launch_out_of_resources_has_its_hint() {
    let (_native, gpu) = native_gpu();
    let cuda = gpu.backend().clone();
    let module = cuda.module_load_ptx(KERNELS_PTX).unwrap();
    let hog = cuda.module_get_function(&module, "register_hog").unwrap();
    let buf = gpu.alloc_zeroed::<u8>(1024 * 4).unwrap();
    let n: i32 = 1;
    let args: [&[u8]; 2] = [&buf.ptr().0.to_le_bytes(), &n.to_le_bytes()];
    // SAFETY: register_hog(float*, int) with a buffer of 1024 floats (it touches at most
    // p[0..1024]).
    let err = unsafe {
        cuda.launch(
            &hog,
            &LaunchConfig::linear(1, 1024),
            &Stream::DEFAULT,
            &args,
        )
    }
    .unwrap_err();
    println!("{err}");
    assert_eq!(
        err.cuda_name(),
        Some("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"),
        "{err}"
    );
    assert!(
        err.to_string().contains("hint: too many registers"),
        "{err}"
    );
    // Not sticky: a smaller block runs.
    // SAFETY: as above.
    unsafe { cuda.launch(&hog, &LaunchConfig::linear(1, 64), &Stream::DEFAULT, &args) }.unwrap();
    gpu.synchronize().unwrap();
    // SAFETY: every launch completed.
    unsafe { cuda.module_unload(module) }.unwrap();
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --ignored)"]
fn threads_bind_the_context_and_copy_on_their_own_streams() {
    let (_native, gpu) = native_gpu();
    std::thread::scope(|scope| {
        for t in 0..4u8 {
            let gpu = gpu.clone();
            scope.spawn(move || {
                // Every safe-layer call makes the context current on this thread.
                let data: Vec<u8> = (0..(1 << 20)).map(|i: u32| (i as u8) ^ t).collect();
                let src = gpu.htod(&data).unwrap();
                let mut dst = gpu.alloc_zeroed::<u8>(data.len()).unwrap();
                let stream = gpu.stream(StreamFlags { non_blocking: true }).unwrap();
                for _ in 0..10 {
                    dst.copy_from_device_async(&src, &stream).unwrap();
                }
                stream.synchronize().unwrap();
                assert_eq!(dst.to_vec().unwrap(), data, "thread {t}");
            });
        }
    });
}
